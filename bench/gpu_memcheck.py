"""The GPU half of the judge's memory defence: compute-sanitizer's memcheck over the families' honest kernels and
the corpus's hostile over-reads and over-writes.

    python bench/gpu_memcheck.py                     # every entry -> bench/results/gpu_memcheck_<gpu>.json
    python bench/gpu_memcheck.py --only probe rotary gated_mlp --merge   # some entries, kept beside the file's others
    python bench/gpu_memcheck.py --list              # the entries
    python bench/gpu_memcheck.py --inner rotary      # one entry's calls, no checker (what the checker runs)

On a CPU the judge places every tensor against an inaccessible page (services/judge/fence.py): a read past a tensor's
end faults the child (`memory-fault`). A GPU judge has no such fence: this is its counterpart. For each entry the
outer mode runs a child

    compute-sanitizer --tool memcheck --error-exitcode 97 --target-processes all [--padding 512 ...] \\
        python bench/gpu_memcheck.py --inner NAME

with PYTORCH_NO_CUDA_MEMORY_CACHING=1, and reads the checker's report ("Invalid __global__ read of size 2 bytes",
"ERROR SUMMARY: N errors"). An entry is one family's template kernels (its first config and one other of its search
space, a third for a row family where neither has several rows a program), loaded from source as the judge loads them
and called through the family's own wrapper (`make_op`, or the norm's `make_forward`: the code the judge's child and
the server run) at decode rows (1, 2, 4), prefill rows (37, 512, 2048), a live width and a ragged one, in bf16 and
fp32, each shape twice (the first call through Triton's launch, the second through the wrapper's direct launch), each
answer checked against the family's reference. Or every honest kernel of the judge corpus (tests/adversarial/honest,
RMSNorms) at the norm's shapes. Or a hostile file of tests/adversarial/candidates that reads or writes outside a
tensor, run through the same wrapper: it must be flagged.

First a probe (the norm template on one row of 64, fp32) runs without the checker, then under it: where the checker
answers "Device not supported" (seen on gVisor machines, then error 999 at the first allocation), the file records
`tool_works: false` with its output and nothing else is run. Writes the JSON after every entry.

Exit 0: every honest entry clean (its calls completed, no memory error) and every hostile entry flagged (an invalid
access reported), or the checker does not work on this machine (recorded, and said). 1: anything else. 2: no
compute-sanitizer found or no CUDA GPU here (one line, nothing run). `--inner` runs on a CPU too (the interpreter,
TRITON_INTERPRET=1): what the tests do to check the kernels and inputs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
CORPUS = ROOT / "tests" / "adversarial"  # candidates/ (hostile) and honest/
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

ERROR_EXITCODE = 97  # the checker's exit when it found an error (the inner's own failures exit 1)
DONE = "gpu_memcheck-inner-done"  # the inner's last line: its calls all ran (a clean summary alone proves nothing)
EPS = 1e-6
CALLS_PER_SHAPE = 2  # the first through Triton's launch, the second through the Launcher's direct one
DTYPES = ("bfloat16", "float32")
ROWS = (1, 2, 4, 37, 512, 2048)  # decode batches, then prefill sequences
QUICK_ROWS = (2, 37)  # a decode batch, a prefill: the CPU tests (the interpreter is slow)
PADDING = 512  # bytes the checker leaves unallocated after every allocation (where it knows the option)

# ----------------------------------------------------------------------------------------- the entries


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # probe | honest | hostile
    family: str
    variant: str = ""  # the template's variant (honest), or the one the hostile kernel computes
    file: str = ""  # a file of tests/adversarial ("candidates/NAME"), or a glob of them ("honest/*")
    access: str = ""  # hostile: the access the checker must flag, "read" or "write"
    note: str = ""
    quick_geometries: tuple = ()  # --quick: these instead of the family's (the interpreter is slow on narrow blocks)


# Extra variants tried beside a family's default (its template's first config's); the row norm also writes LayerNorm,
# whose bias is one more pointer.
EXTRA_VARIANTS = {"row_reduction": ("layernorm",)}

HOSTILE = (
    Entry("memory_overread_unmasked", "hostile", "row_reduction", file="candidates/memory_overread_unmasked",
          access="read",
          note="the weight loaded with no mask: past the width it reads beyond the weight's end (on a CPU the "
               "judge's fence faults it: memory-fault; a GPU judge passes it without this checker)"),
    Entry("guard_store_past_output_end", "hostile", "row_reduction", file="candidates/guard_store_past_output_end",
          access="write", note="one element stored past the output's end (a GPU judge: guard-bytes)"),
    Entry("guard_store_before_input_start", "hostile", "row_reduction",
          file="candidates/guard_store_before_input_start",
          access="write", note="one element stored before the input's start (the dataflow check's writes-input "
                               "refuses it before anything runs; here a control that the checker sees it too)"),
    Entry("canary_aware_reads_guards", "hostile", "row_reduction", file="candidates/canary_aware_reads_guards",
          access="read",
          note="reads the 4 bytes before the weight (the dataflow check's reads-output refuses it first; a control)"),
)  # fmt: skip

PROBE = Entry("probe", "probe", "row_reduction", note="the norm template's first config on one row of 64, fp32")
# The judge corpus's honest RMSNorms (one row a program, two-pass chunks, a 2-D tile, a persistent grid, a dispatch by
# rows, a constexpr no-mask path, row strides, ...): every file of tests/adversarial/honest, at the norm's inputs.
HONEST_CORPUS = Entry("honest_corpus", "honest", "row_reduction", file="honest/*", quick_geometries=(96, 97),
                      note="every kernel of tests/adversarial/honest, an RMSNorm each")  # fmt: skip


def families() -> list[str]:
    from services.ops import FAMILIES

    return list(FAMILIES)


def default_variant(fam: str) -> str:
    from services.ops import template

    return template(fam).search_configs()[0].variant


def honest_entries() -> list[Entry]:
    """One entry per variant tried of every registered family (a family with no inputs written here fails its
    entry, saying so: a new family must be added to INPUTS)."""
    out = []
    for fam in families():
        variants = (default_variant(fam), *EXTRA_VARIANTS.get(fam, ()))
        for variant in variants:
            name = f"{fam}_{variant or 'rmsnorm'}" if len(variants) > 1 else fam
            out.append(Entry(name, "honest", fam, variant, note=f"the {fam} template, variant {variant or 'rmsnorm'}"))
    return out


def entries() -> list[Entry]:
    """The probe, the hostile files (quick: a compile and a fault each), then the honest entries."""
    return [PROBE, *HOSTILE, *honest_entries(), HONEST_CORPUS]


def entry_named(name: str) -> Entry:
    for entry in entries():
        if entry.name == name:
            return entry
    raise KeyError(f"no entry {name!r} (entries: {', '.join(e.name for e in entries())})")


def config_label(config) -> str:
    params = " ".join(f"{k}={v}" for k, v in sorted(config.params.items()))
    rows = f" rows={config.rows_per_program}" if config.rows_per_program else ""
    return f"warps={config.num_warps}{rows}{' ' + params if params else ''}"


def template_configs(fam: str, variant: str) -> list:
    """The template's first config, its last (the furthest in its table: a persistent grid, the widest block, the
    most positions a program), and for a row family the first with several rows a program where neither has."""
    from services.ops import template

    configs = template(fam).search_configs(variant=variant)
    chosen = [configs[0]] + ([configs[-1]] if len(configs) > 1 else [])
    if not any(c.rows_per_program > 1 and not c.params for c in chosen):
        chosen += [c for c in configs if c.rows_per_program > 1 and not c.params][:1]
    return chosen


def candidates(entry: Entry) -> list[tuple[str, str, object]]:
    """(label, kernel source, launch plan) of each kernel the entry runs."""
    from services.ops import template

    if entry.file:
        from candidate_files import load

        paths = sorted(CORPUS.glob(f"{entry.file}.py"))
        return [(path.stem, *load(path)) for path in paths]
    tmpl = template(entry.family)
    configs = template_configs(entry.family, entry.variant)
    if entry.kind == "probe":
        configs = configs[:1]
    return [(config_label(c), tmpl.render(c), tmpl.plan(c)) for c in configs]


# ----------------------------------------------------------------------------------------- inputs per family


@dataclass(frozen=True)
class Built:
    call: Callable  # op -> the outputs, as a list
    reference: Callable  # () -> the reference outputs (CPU, the live dtype)
    shape: str


def _row_shape(rows: int, width: int) -> tuple[int, int, int]:
    """Decode: a batch of `rows` sequences of one token; prefill: one sequence of `rows` tokens."""
    return (rows, 1, width) if rows <= 4 else (1, rows, width)


class Draw:
    """Inputs drawn on the CPU and moved to the device: each a fresh allocation of exactly its size."""

    def __init__(self, device, dtype, seed: int):
        import torch

        self.torch, self.device, self.dtype = torch, device, dtype
        self.gen = torch.Generator().manual_seed(seed)

    def randn(self, *shape, scale: float = 1.0, shift: float = 0.0):
        t = self.torch.randn(*shape, generator=self.gen) * scale + shift
        return t.to(self.dtype).to(self.device)


def _cpu(*tensors):
    return [None if t is None else t.cpu() for t in tensors]


def _norm(entry: Entry, width: int, rows: int, draw: Draw) -> Built:
    from services.ops import parallel_norm, row_reduction

    variant = entry.variant or "rmsnorm"
    x = draw.randn(*_row_shape(rows, width), scale=2.0, shift=0.5)
    w = draw.randn(width, scale=0.1, shift=1.0)
    b = draw.randn(width, scale=0.1) if variant in row_reduction.BIASED else None
    ref = parallel_norm.reference("dual_" + variant)  # the family's own oracle of every norm variant
    return Built(
        call=lambda op: [op(x, w, EPS) if b is None else op(x, w, EPS, b)],
        reference=lambda: [ref(*_cpu(x, w, b), EPS)],
        shape=f"x {tuple(x.shape)}",
    )


def _residual(entry: Entry, width: int, rows: int, draw: Draw) -> Built:
    from services.ops import residual_norm, row_reduction

    a = draw.randn(*_row_shape(rows, width))
    x = draw.randn(*_row_shape(rows, width), scale=2.0)
    w = draw.randn(width, scale=0.1, shift=1.0)
    b = draw.randn(width, scale=0.1) if residual_norm.norm_variant(entry.variant) in row_reduction.BIASED else None
    ref = residual_norm.reference(entry.variant)
    return Built(
        call=lambda op: list(op(a, x, w, EPS, b)),
        reference=lambda: list(ref(*_cpu(a, x, w), EPS, *_cpu(b))),
        shape=f"a, x {tuple(a.shape)}",
    )


def _parallel(entry: Entry, width: int, rows: int, draw: Draw) -> Built:
    from services.ops import parallel_norm, row_reduction

    biased = parallel_norm.norm_variant(entry.variant) in row_reduction.BIASED
    x = draw.randn(*_row_shape(rows, width), scale=2.0, shift=0.5)
    w1, w2 = draw.randn(width, scale=0.1, shift=1.0), draw.randn(width, scale=0.1, shift=1.0)
    b1, b2 = (draw.randn(width, scale=0.1), draw.randn(width, scale=0.1)) if biased else (None, None)
    ref = parallel_norm.reference(entry.variant)

    def reference():
        xc, w1c, b1c, w2c, b2c = _cpu(x, w1, b1, w2, b2)
        return [ref(xc, w1c, b1c, EPS), ref(xc, w2c, b2c, EPS)]

    return Built(call=lambda op: list(op(x, w1, b1, w2, b2, EPS)), reference=reference, shape=f"x {tuple(x.shape)}")


def _rotary(entry: Entry, heads: tuple[int, int, int], rows: int, draw: Draw) -> Built:
    """q and k as attention hands them: (batch, heads, seq, head_dim) views of (batch, seq, heads, head_dim)
    projections; cos and sin of (batch, seq, head_dim) from real angles."""
    import torch

    from services.ops import rotary

    hq, hk, d = heads
    b, s = (rows, 1) if rows <= 4 else (1, rows)
    q = draw.randn(b, s, hq, d).transpose(1, 2)
    k = draw.randn(b, s, hk, d).transpose(1, 2)
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    positions = torch.arange(s, dtype=torch.float32)[None, :] + 7.0 * torch.arange(b, dtype=torch.float32)[:, None]
    angles = positions[..., None] * inv
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(draw.dtype).to(draw.device), angles.sin().to(draw.dtype).to(draw.device)
    ref = rotary.reference(entry.variant)
    return Built(
        call=lambda op: list(op(q, k, cos, sin)),
        reference=lambda: list(ref(*_cpu(q, k, cos, sin))),
        shape=f"q {tuple(q.shape)} k {tuple(k.shape)}",
    )


def _gated(entry: Entry, width: int, rows: int, draw: Draw) -> Built:
    from services.ops import gated_mlp

    g = draw.randn(*_row_shape(rows, width), scale=3.0)
    u = draw.randn(*_row_shape(rows, width))
    ref = gated_mlp.reference(entry.variant)
    return Built(call=lambda op: [op(g, u)], reference=lambda: [ref(*_cpu(g, u))], shape=f"g, u {tuple(g.shape)}")


def _plain(entry: Entry, width: int, rows: int, draw: Draw) -> Built:
    from services.ops import plain_mlp

    x = draw.randn(*_row_shape(rows, width), scale=3.0)
    ref = plain_mlp.reference(entry.variant)
    return Built(call=lambda op: [op(x)], reference=lambda: [ref(*_cpu(x))], shape=f"x {tuple(x.shape)}")


# family -> (how a case is built, the geometries: a live width and a ragged one (RoPE: q heads, kv heads, head dim))
# Row norms: Qwen2.5-1.5B's hidden 1536 (a block of 2048: masked lanes), 4097 (odd, a block of 8192). RoPE: Qwen's
# 12/2 heads of 128, and 16/4 of 80 (GPT-NeoX's head: half 40 in a block of 64). MLPs: Qwen's intermediate 8960 and
# GPT-2's 3072 (neither a multiple of the blocks at one row), and 4097 (never one).
INPUTS: dict[str, tuple[Callable, tuple]] = {
    "row_reduction": (_norm, (1536, 4097)),
    "residual_norm": (_residual, (1536, 4097)),
    "parallel_norm": (_parallel, (1536, 4097)),
    "rotary": (_rotary, ((12, 2, 128), (16, 4, 80))),
    "gated_mlp": (_gated, (8960, 4097)),
    "plain_mlp": (_plain, (3072, 4097)),
}


def plan_of_entry(entry: Entry, quick: bool = False) -> dict:
    """What the entry runs, as the result file records it."""
    if entry.kind == "probe":
        return {"configs": [c[0] for c in candidates(entry)], "dtypes": ["float32"], "geometries": [64], "rows": [1],
                "calls_per_shape": 1}  # fmt: skip
    _, geometries = INPUTS.get(entry.family, (None, ()))
    geometries = (quick and entry.quick_geometries) or geometries
    return {
        "configs": [c[0] for c in candidates(entry)],
        "dtypes": list(DTYPES),
        "geometries": [list(g) if isinstance(g, tuple) else g for g in geometries],
        "rows": list(QUICK_ROWS if quick else ROWS),
        "every_dtype_at_every_geometry": not quick,  # quick: bf16 at the first geometry, fp32 at the second
        "shapes": "norms and MLPs: (rows, 1, width) for rows <= 4 (decode), (1, rows, width) beyond (prefill); "
        "RoPE: q (batch, heads, seq, head_dim) as a transposed (batch, seq, heads, head_dim), batch = rows <= 4 "
        "at seq 1, else seq = rows",
        "calls_per_shape": CALLS_PER_SHAPE,
    }


# ----------------------------------------------------------------------------------------- the inner mode


def _op(plan, kernels):
    from services.ops import family

    fam = family(plan.family)
    make = getattr(fam, "make_op", None) or fam.make_forward  # the norm's op is its wrapper
    return make(plan, kernels)


def _check(outs, refs, dtype) -> float:
    """Largest difference from the reference; raises where it is past a loose bound (the judge holds kernels to a
    rounding bound: this only catches wrong inputs, unwritten outputs and NaN)."""
    import torch

    tol = 1e-3 if dtype == torch.float32 else 0.1
    worst = 0.0
    for out, ref in zip(outs, refs, strict=True):
        got, want = out.detach().cpu().float(), ref.float()
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
        worst = max(worst, float((got - want).abs().max()) if got.numel() else 0.0)
    return worst


def run_inner(name: str, quick: bool = False, out=print) -> int:
    """Build the entry's kernels and inputs on the device here (CUDA, else the CPU under the interpreter) and call
    them at every shape; prints DONE last. Raises on a failure (the caller reports it)."""
    import torch

    from services.core import kernels

    entry = entry_named(name)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    hostile = entry.kind == "hostile"
    if entry.kind == "probe":
        build, geometries, rows_list, dtypes, per_shape = _norm, (64,), (1,), ("float32",), 1
    else:
        if entry.family not in INPUTS:
            raise LookupError(f"no inputs written for family {entry.family!r}: add it to INPUTS in {SCRIPT.name}")
        build, geometries = INPUTS[entry.family]
        geometries = (quick and entry.quick_geometries) or geometries
        rows_list, dtypes = (QUICK_ROWS if quick else ROWS), DTYPES
        per_shape = CALLS_PER_SHAPE if device.type == "cuda" else 1  # the interpreter has no direct launch
    calls = 0
    with tempfile.TemporaryDirectory(prefix="gpu_memcheck_") as scratch:
        for label, source, plan in candidates(entry):
            names = sorted({launch.kernel for launch in plan.launches})
            op = _op(plan, kernels.load_kernels(kernels.write_source(Path(scratch), source), names))
            # every dtype at every geometry; quick: bf16 at the live one, fp32 at the ragged one (each seen once)
            pairs = [(d, g) for d in dtypes for g in geometries]
            if quick:
                pairs = list(zip(dtypes, geometries, strict=True))
            for dtype_name, geometry in pairs:
                dtype = getattr(torch, dtype_name)
                worst, shapes = 0.0, []
                for rows in rows_list:
                    draw = Draw(device, dtype, seed=rows * 7919 + calls)
                    built = build(entry, geometry, rows, draw)
                    shapes.append(built.shape)
                    for _ in range(per_shape):
                        outs = built.call(op)
                        if device.type == "cuda":
                            torch.cuda.synchronize()  # an error is the kernel's own, at this shape
                        calls += 1
                    if not hostile:
                        worst = max(worst, _check(outs, built.reference(), dtype))
                seen = "not checked (hostile)" if hostile else f"max abs err {worst:.3g}"
                out(f"  {entry.name} [{label}] {dtype_name} {geometry}: {', '.join(shapes)} x{per_shape} "
                    f"ok, {seen}", flush=True)  # fmt: skip
    out(f"{DONE} {entry.name} calls={calls} device={device.type}", flush=True)
    return calls


def inner_main(name: str, quick: bool) -> int:
    # Exact sizes: with PyTorch's caching allocator a tensor is a slice of a larger block, and a read past its end
    # lands in memory the checker sees as allocated. Without the cache every tensor is its own cudaMalloc of its own
    # size, so the checker knows where each ends (the outer mode sets this in the child's environment too).
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (the kernels' sources import it)
    try:
        run_inner(name, quick=quick)
    except Exception as exc:
        traceback.print_exc(limit=4)
        print(f"gpu_memcheck inner: {name} failed: {type(exc).__name__}: {str(exc)[:400]}", flush=True)
        return 1
    return 0


# ----------------------------------------------------------------------------------------- finding the checker

SEARCHED = "PATH, $CUDA_HOME/bin, /usr/local/cuda*/bin, /opt/nvidia, the nvidia pip packages"
CUDA_GLOBS = ("/usr/local/cuda/bin", "/usr/local/cuda-*/bin", "/usr/local/cuda*/compute-sanitizer")
WALK_ROOTS = ("/opt/nvidia",)
NAME = "compute-sanitizer"
# where the nvidia pip packages (nvidia-cuda-sanitizer-api and the toolkit's wheels) put it under site-packages
PIP_GLOBS = tuple(f"nvidia/{d}/{NAME}" for d in (f"*/{NAME}", "*/bin", "*/*/bin", f"*/*/{NAME}"))


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _walk(root: str, depth: int = 5) -> str | None:
    base = root.rstrip(os.sep).count(os.sep)
    for here, dirs, files in os.walk(root):
        if NAME in files and _executable(os.path.join(here, NAME)):
            return os.path.join(here, NAME)
        if here.count(os.sep) - base >= depth:
            dirs[:] = []
        dirs.sort()
    return None


def find_sanitizer(path_env: str | None = None, cuda_home: str | None = None, cuda_globs=CUDA_GLOBS,
                   walk_roots=WALK_ROOTS, site_dirs=None) -> tuple[str, str] | None:  # fmt: skip
    """(path, where it was found) of compute-sanitizer, or None: PATH, $CUDA_HOME (or $CUDA_PATH)/bin, the CUDA
    toolkits under /usr/local (newest version first), /opt/nvidia, then the nvidia pip packages of this Python."""
    path_env = os.environ.get("PATH", "") if path_env is None else path_env
    found = shutil.which(NAME, path=path_env) if path_env else None
    if found:
        return found, "PATH"
    home = (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH", "")) if cuda_home is None else cuda_home
    for sub in ("bin", "compute-sanitizer"):
        if home and _executable(os.path.join(home, sub, NAME)):
            return os.path.join(home, sub, NAME), "$CUDA_HOME"
    for pattern in cuda_globs:
        for folder in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if _executable(os.path.join(folder, NAME)):
                return os.path.join(folder, NAME), pattern.replace("/" + NAME, "")
    for root in walk_roots:
        found = _walk(root) if os.path.isdir(root) else None
        if found:
            return found, root
    for site in sys.path if site_dirs is None else site_dirs:
        for pattern in PIP_GLOBS:
            for path in sorted(glob.glob(os.path.join(site, pattern))):
                if _executable(path):
                    return path, "an nvidia pip package"
    return None


def _version_key(folder: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", folder)) or (1 << 30,)  # the unversioned /usr/local/cuda first


def sanitizer_info(path: str) -> tuple[str, str]:
    """(its version line, its --help text)."""

    def ask(*args) -> str:
        try:
            done = subprocess.run([path, *args], capture_output=True, text=True, errors="replace", timeout=60)
            return done.stdout + done.stderr
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{type(exc).__name__}: {exc}"

    version = ask("--version")
    line = next((ln.strip() for ln in version.splitlines() if ln.strip().lower().startswith("version")), "")
    return line or version.strip()[-200:], ask("--help")


def sanitizer_options(help_text: str) -> list[str]:
    """The options beyond the fixed ones, each only where this checker's --help lists it: padding after every
    allocation (a read or write just past a tensor's end, or just before the next one's start, lands in memory
    no allocation owns, even where two allocations would touch), no API-error reports (PyTorch's own probing calls
    would count in the summary: the summary then counts memory errors alone), device backtraces only (a Python
    host backtrace is hundreds of frames), and at most 20 errors printed (an over-read by a block is one a lane)."""
    options = []
    wanted = (("--padding", str(PADDING)), ("--report-api-errors", "no"), ("--show-backtrace", "device"),
              ("--print-limit", "20"))  # fmt: skip
    for flag, value in wanted:
        if re.search(rf"(^|\s){re.escape(flag)}\b", help_text):
            options += [flag, value]
    return options


# ----------------------------------------------------------------------------------------- reading its report

_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_INVALID = re.compile(r"Invalid __(\w+)__ (read|write) of size (\d+) bytes?")
# hardware exceptions memcheck reports beside the invalid accesses (Warp Illegal Address, Warp Misaligned Address, ...)
_OTHER_DEVICE = re.compile(r"^=+\s+(?:Warp |Lane )?(?:Illegal|Misaligned|Out-of-range|Malformed)\b[^\n]*"
                           r"(?:Address|Instruction)", re.M)  # fmt: skip
_API = re.compile(r"Program hit (\w+) \(error (\d+)\)")
_REFUSED = re.compile(r"Device not supported|error 999\b|cudaErrorUnknown|CUDA error: unknown error", re.I)
_NOISE = ("Host Frame", "Device Frame", "Saved host backtrace", "Backtrace", "=========     at ", "by thread")


def parse_report(text: str) -> dict:
    """The counts of a compute-sanitizer memcheck report (its lines start with '========='), and its first lines
    that say what went wrong."""
    summary = _SUMMARY.findall(text)
    invalid = _INVALID.findall(text)
    other = _OTHER_DEVICE.findall(text)
    api = _API.findall(text)
    lines = [ln.strip() for ln in text.splitlines() if ln.startswith("=========")]
    wrong = [ln for ln in lines if ln.strip("= ") and not any(n in ln for n in _NOISE) and "COMPUTE-SANITIZER" not in ln
             and "ERROR SUMMARY" not in ln]  # fmt: skip
    return {
        "banner": "COMPUTE-SANITIZER" in text,
        "errors": sum(int(n) for n in summary) if summary else None,  # every target process's summary
        "memory_errors": len(invalid) + len(other),
        "invalid_reads": sum(1 for _, kind, _ in invalid if kind == "read"),
        "invalid_writes": sum(1 for _, kind, _ in invalid if kind == "write"),
        "invalid_spaces": sorted({space for space, _, _ in invalid}),
        "api_errors": len(api),
        "refused": bool(_REFUSED.search(text)),
        "error_lines": wrong[:12],
    }


def inner_done(text: str) -> int | None:
    match = re.search(rf"^{DONE} \S+ calls=(\d+)", text, re.M)
    return int(match.group(1)) if match else None


# ----------------------------------------------------------------------------------------- the outer mode


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"  # exact allocations: see inner_main
    env.pop("TRITON_INTERPRET", None)  # compiled kernels, on the GPU
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_child(command: list[str], timeout_s: float) -> tuple[int | None, str, float, bool]:
    """(exit code or None when killed, output, seconds, timed out): `command` in a process group of its own, the
    group killed at the timeout."""
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            cwd=ROOT, env=child_env(), start_new_session=True)  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this call started (the checker, python, its compilers)
        output, _ = proc.communicate()
        timed_out = True
    return (None if timed_out else proc.returncode), output, time.monotonic() - started, timed_out


def judge_entry(entry: Entry, report: dict, done: int | None, code: int | None, timed_out: bool) -> tuple[bool, str]:
    """(ok, verdict) of one entry under the checker."""
    if timed_out:
        return False, "timed out"
    if entry.kind == "hostile":
        if report["memory_errors"]:
            kinds = [k for k, n in (("read", report["invalid_reads"]), ("write", report["invalid_writes"])) if n]
            seen = "/".join(kinds) or "device error"
            return True, f"flagged ({report['memory_errors']} invalid {seen} reported; expected a {entry.access})"
        ran = " (every call ran)" if done is not None else f" (the program stopped, exit {code}: see tail)"
        return False, "missed: the checker reported no invalid access" + ran
    if report["errors"] is None:
        return False, "no error summary: the checker did not run the program"
    if report["memory_errors"] or report["errors"] - report["api_errors"] > 0:
        return False, f"errors on an honest kernel: {report['memory_errors']} memory, summary {report['errors']}"
    if done is None:
        return False, f"did not complete (exit {code}): see tail"
    return True, f"clean ({done} calls, 0 memory errors)"


def device_tag(torch) -> tuple[str, str]:
    name = torch.cuda.get_device_name()
    tag = "h200" if "H200" in name else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return name, tag


def summary(results: dict) -> dict:
    honest = {n: r for n, r in results.items() if r["kind"] in ("probe", "honest")}
    hostile = {n: r for n, r in results.items() if r["kind"] == "hostile"}
    return {
        "honest_clean": f"{sum(r['ok'] for r in honest.values())}/{len(honest)}",
        "hostile_flagged": f"{sum(r['ok'] for r in hostile.values())}/{len(hostile)}",
        "failures": sorted(n for n, r in results.items() if not r["ok"]),
    }


def write(path: Path, meta: dict, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**meta, "summary": summary(results), "entries": results}
    path.write_text(json.dumps(data, indent=1) + "\n")


def _tail(text: str, lines: int = 25) -> list[str]:
    return [ln.rstrip()[:300] for ln in text.splitlines()[-lines:]]


def outer_main(args) -> int:
    if args.sanitizer:
        found = (args.sanitizer, "--sanitizer") if _executable(args.sanitizer) else None
        if found is None:
            print(f"gpu_memcheck: no compute-sanitizer at {args.sanitizer}: nothing checked", file=sys.stderr)
            return 2
    else:
        found = find_sanitizer()
        if found is None:
            print(f"gpu_memcheck: no compute-sanitizer found (searched {SEARCHED}): nothing checked", file=sys.stderr)
            return 2
    import torch

    if not torch.cuda.is_available():
        print(f"gpu_memcheck: no CUDA GPU here (torch {torch.__version__} sees none): the memory checker runs on a "
              f"GPU machine; nothing checked", file=sys.stderr)  # fmt: skip
        return 2
    import triton

    path, where = found
    version, help_text = sanitizer_info(path)
    options = sanitizer_options(help_text)
    fixed = ["--tool", "memcheck", "--error-exitcode", str(ERROR_EXITCODE), "--target-processes", "all"]
    inner = ["bench/gpu_memcheck.py", *(["--quick"] if args.quick else []), "--inner"]  # then the entry's name
    gpu, tag = device_tag(torch)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"gpu_memcheck_{tag}.json"
    chosen = [e for e in entries() if not args.only or e.name in args.only or e.kind == "probe"]
    unknown = sorted(set(args.only or ()) - {e.name for e in entries()})
    if unknown:
        print(f"gpu_memcheck: no entries {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    results: dict = {}
    commands = [" ".join(["python", "bench/gpu_memcheck.py", *sys.argv[1:]])]
    if args.merge and out.exists():
        previous = json.loads(out.read_text())
        results = previous.get("entries", {})
        commands = previous.get("commands", []) + commands
    meta = {
        "device": gpu,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cuda_runtime": torch.version.cuda,
        },
        "sanitizer": {"path": path, "found_in": where, "version": version, "options": fixed + options},
        "child_command": " ".join(["compute-sanitizer", *fixed, *options, "python", *inner, "NAME"]),
        "child_environment": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
        "tool_works": None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commands": commands,
    }
    shown = " ".join(options) or "(none beyond the fixed)"
    print(f"gpu_memcheck: {path} (found in {where}), {version}; {gpu}; torch {torch.__version__}, "
          f"triton {triton.__version__}; options {shown}", flush=True)  # fmt: skip

    # The probe without the checker first: a failure there is this script's or the machine's, not the checker's.
    code, output, seconds, timed_out = run_child([sys.executable, *inner, PROBE.name], args.timeout)
    if inner_done(output) is None:
        meta["probe_without_checker"] = {"exit": code, "timed_out": timed_out, "tail": _tail(output)}
        write(out, meta, results)
        tail = "\n".join(_tail(output))
        print(f"gpu_memcheck: the probe fails without the checker (exit {code}); wrote {out}\n{tail}")
        return 1
    meta["probe_without_checker"] = {"exit": code, "seconds": round(seconds, 1)}

    total = len(chosen)
    for index, entry in enumerate(chosen, start=1):
        command = [path, *fixed, *options, sys.executable, *inner, entry.name]
        code, output, seconds, timed_out = run_child(command, args.timeout)
        report = parse_report(output)
        done = inner_done(output)
        ok, verdict = judge_entry(entry, report, done, code, timed_out)
        result = {
            "kind": entry.kind,
            "family": entry.family,
            "variant": entry.variant,
            "source": f"tests/adversarial/{entry.file}.py" if entry.file else f"template of {entry.family}",
            "note": entry.note,
            "expect": f"flagged: an invalid {entry.access}" if entry.kind == "hostile" else "clean",
            "runs": plan_of_entry(entry, args.quick),
            "sanitizer_exit": code,
            "timed_out": timed_out,
            **{k: report[k] for k in ("errors", "memory_errors", "invalid_reads", "invalid_writes", "api_errors")},
            "error_lines": report["error_lines"][:8],
            "calls_completed": done,
            "ok": ok,
            "verdict": verdict,
            "seconds": round(seconds, 1),
        }
        if not ok or entry.kind == "hostile":
            result["tail"] = _tail(output)
        if entry.kind == "probe" and (report["refused"] or done is None or report["errors"] is None):
            meta["tool_works"] = False
            why = "Device not supported / error 999" if report["refused"] else "the probe did not complete under it"
            meta["tool_refusal"] = {"why": why, "exit": code, "output": _tail(output, 40)}
            results[entry.name] = result
            write(out, meta, results)
            print(f"gpu_memcheck: the checker does not work on this machine ({why}): nothing else was checked; "
                  f"recorded tool_works: false in {out}\n" + "\n".join(_tail(output, 12)), flush=True)  # fmt: skip
            return 0 if report["refused"] else 1
        if entry.kind == "probe":
            meta["tool_works"] = True
        results[entry.name] = result
        write(out, meta, results)
        first = f"  | {report['error_lines'][0][:100]}" if report["error_lines"] else ""
        print(f"[{index}/{total}] {'ok ' if ok else 'BAD'} {entry.kind:7} {entry.name:32} exit {code!s:4} "
              f"errors {report['errors']!s:4} {seconds:6.1f}s  {verdict}{first}", flush=True)  # fmt: skip

    s = summary({n: results[n] for n in (e.name for e in chosen)})
    print(f"\ngpu_memcheck on {gpu}: honest clean {s['honest_clean']}, hostile flagged {s['hostile_flagged']}; "
          f"wrote {out}")  # fmt: skip
    if s["failures"]:
        print(f"not as expected: {', '.join(s['failures'])}")
    return 0 if not s["failures"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--inner", metavar="NAME", help="run one entry's calls here, without the checker")
    parser.add_argument("--quick", action="store_true", help=f"rows {QUICK_ROWS} only (the CPU tests, a smoke run)")
    parser.add_argument("--only", nargs="*", metavar="NAME", help="only these entries (the probe always runs)")
    parser.add_argument("--merge", action="store_true", help="keep the other entries of an existing result file")
    parser.add_argument("--out", default="", help="the result file (default bench/results/gpu_memcheck_<gpu>.json)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each entry's child (default 300)")
    parser.add_argument("--sanitizer", default="", help="this compute-sanitizer, not the one searched for")
    parser.add_argument("--list", action="store_true", help="print the entries and exit")
    args = parser.parse_args(argv)
    if args.list:
        for entry in entries():
            print(f"{entry.name:32} {entry.kind:7} {entry.family:14} {entry.note}")
        return 0
    if args.inner:
        return inner_main(args.inner, args.quick)
    return outer_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
