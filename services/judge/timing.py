"""Honest GPU timing of a candidate against its baselines (runs inside the sandbox child, CUDA only).

Baselines at their best: the eager module, torch.compile(module, dynamic=False) and the native
fused op (F.rms_norm) where torch has one, with TF32 on and deterministic algorithms off
(restored after). They are built and run at every timing shape first (`prepare_baselines`, in the
child's judge phase), so nothing compiles inside the timed region.

Three figures per function and shape, candidate and baselines interleaved over rounds in this one
process, inputs rotated through more than the L2 so the cache is not what is timed:
- GPU time per call, the one the reward compares: a CUDA graph of several rotated calls, replayed
  (median of replays). Measured on the H200, do_bench's figure is not that: it flushes the cache
  between calls and hides the host's launch work behind the flush only while the host is the faster
  of the two, so for a kernel whose Python launch costs ~40 us it read 10.6, 98.6, 40.0, 65.7 and
  16.4 us in five runs of one process each, where the graph read 1.3 us every time.
- host-inclusive: wall time per call of back-to-back calls, what an eager caller waits;
- do_bench's median, kept as the cross-check.
A speedup over 10x, or a time below what the measured copy ceiling allows for the bytes moved, is
flagged and measured again from a second graph; a time still below the ceiling is not believed.

Nothing timed can be a cached answer: every timed input buffer holds its own contents, drawn from a nonce
of this judging (never clones of one tensor, never torch's default seed); after the rounds the graph's
outputs are poisoned (NaN) before replays whose outputs are checked and whose time must match the others
(a kernel that computed once and skips while its output looks done is wrong there, or much slower), the
inputs are compared bit for bit with their copies, and the graph is replayed once more on fresh contents,
every captured call's output checked (a skipped call returns the last contents' answer).

The clocks are bound here, at import, before the candidate is imported: a candidate that patches
time.perf_counter or Event.elapsed_time afterwards does not change what this module calls (and
services.judge.tamper names it).

Over 400 lines, one file: the timing protocol's parts (baselines built first, rotated inputs, graphs of several
calls, a poisoned replay, the timed inputs checked after) check each other and run in one child in one order.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from triton.testing import do_bench

from services.core.pb import events_pb2 as pb
from services.core.shapes import shape_text
from services.core.tolerances import comparable, within

ROUNDS = 3  # A/B interleaved: each round times every function once
GRAPH_CALLS = 20  # calls captured in one CUDA graph (fewer where their outputs would not fit GRAPH_BYTES)
GRAPH_BYTES = 4 << 30  # the captured calls' outputs are kept (they are checked), so they are bounded
GRAPH_REPLAYS = 10  # per round: the median of these replays is the round's figure
HOST_CALLS = 200
# A slow function gets fewer graph replays and host calls (never under these), so a correct but slow
# kernel is timed in seconds, not minutes, and is judged (+1) rather than killed by the sandbox's timeout.
FIGURE_BUDGET_US = 250_000.0  # per function, figure and round
MIN_REPLAYS, MIN_HOST_CALLS = 3, 10
MAX_BUFFERS = 32
SUSPICIOUS = 10.0  # a speedup this large on a memory-bound op is measured again before it is believed
CEILING_SLACK = 0.95  # a time below 95% of the copy-ceiling floor cannot be real
# The replays with outputs poisoned must take what the others took: within 1.5x either way, plus 2 us a call for the
# jitter of a graph of tiny calls. A kernel that skips its work where its output looks done saves at least the
# input's read and the output's write (2/3 of its bytes, when it reads the whole output to decide): 3x or more.
POISONED_REPLAYS = 3  # each after its own poisoning; their median is compared
POISON_BAND = 1.5
POISON_SLACK_US = 2.0
_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_CUDAGraph = torch.cuda.CUDAGraph
_graph = torch.cuda.graph
_Stream = torch.cuda.Stream
_stream = torch.cuda.stream
_current_stream = torch.cuda.current_stream


class ReplayMismatch(Exception):
    """The candidate's captured graph computed something else than its direct calls: it is not believed."""


class TimedInputModified(Exception):
    """An input buffer or the module's state changed during the timing calls: `rule` names which."""

    def __init__(self, rule: str, detail: str):
        super().__init__(detail)
        self.rule = rule


def buffer_seed(nonce: int, shape_index: int, buffer_index: int) -> int:
    """The seed of one timed buffer's contents: distinct per (judging nonce, shape, buffer), unguessable without
    the nonce (never torch's default seed, which every process starts from)."""
    digest = hashlib.blake2b(f"{nonce}:{shape_index}:{buffer_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # a generator takes a seed under 2**63


def fresh_buffers(shape, dtype: torch.dtype, count: int, nonce: int, shape_index: int, device="cuda", first: int = 0):
    """`count` input buffers of `shape`, each with contents of its own drawn from the nonce (buffer `first` on)."""
    out = []
    for i in range(first, first + count):
        gen = torch.Generator(device=device).manual_seed(buffer_seed(nonce, shape_index, i))
        out.append(torch.randn(shape, generator=gen, device=device, dtype=dtype))
    return out


def in_band(poisoned_us: float, others_us: list[float]) -> bool:
    """Whether the poisoned replays' time per call is what the other replays took (POISON_BAND, POISON_SLACK_US)."""
    low, high = min(others_us), max(others_us)
    return low / POISON_BAND - POISON_SLACK_US <= poisoned_us <= high * POISON_BAND + POISON_SLACK_US


def _output_tensors(outputs: list[object]) -> Iterator[torch.Tensor]:
    """Every tensor the captured calls returned (a call of several outputs, RoPE's q and k, gives each)."""
    for out in outputs:
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                yield t


def poison_outputs(outputs: list[object]) -> None:
    """Fill every output tensor a captured graph writes with NaN (non-floating ones with all bits set)."""
    for t in _output_tensors(outputs):
        t.fill_(float("nan") if t.is_floating_point() else -1)


def _bench(fn: Callable[[], object]) -> float:
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1000.0


def _rotating(fn: Callable[[torch.Tensor], object], buffers: list[torch.Tensor]) -> Callable[[], object]:
    cycle = itertools.cycle(buffers)
    return lambda: fn(next(cycle))


def copy_ceiling(reads_per_write: int = 1) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), measured here and now.

    An op that reads two tensors for each one it writes (a gated MLP's gate and up) moves its bytes in another
    mix than a copy, and HBM reads faster than it writes: its ceiling is torch's own binary elementwise op at
    that mix (a * b into c), or a kernel at the op's real floor would read as faster than possible."""
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    if reads_per_write == 2:
        a, b, c = (t.view(torch.bfloat16) for t in (src, dst, torch.empty_like(src)))
        ms = float(do_bench(lambda: torch.mul(a, b, out=c), warmup=25, rep=100, return_mode="median"))
        return 3 * src.numel() / (ms * 1e-3)
    ms = float(do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median"))
    return 2 * src.numel() / (ms * 1e-3)


@dataclass
class Captured:
    """`calls` calls of one function on rotated inputs, captured in one CUDA graph, with their outputs."""

    graph: torch.cuda.CUDAGraph
    calls: int
    inputs: list[torch.Tensor]  # the input of each captured call, in order
    outputs: list[object]  # what each captured call returned (rewritten by every replay)

    def per_call_us(self, replays: int = GRAPH_REPLAYS) -> float:
        """GPU time per call: the median over `replays` replays, each timed by CUDA events."""
        times = []
        for _ in range(replays):
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            start.record()
            self.graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0 / self.calls)
        return statistics.median(times)


@dataclass(frozen=True)
class Counts:
    """How often one function is run for its graph and host-inclusive figures in each round."""

    replays: int = GRAPH_REPLAYS
    host_calls: int = HOST_CALLS


def counts_for(per_call_us: float, calls_per_graph: int) -> Counts:
    """Full counts for a fast function; for a slow one, as many as FIGURE_BUDGET_US allows, at least the minimums.

    Only how many times a figure is sampled shrinks, never how many rotated calls one graph holds:
    a function that looks slow when estimated gains nothing (its graph still rotates every buffer).
    """
    per_call_us = max(per_call_us, 1e-3)
    replays = int(FIGURE_BUDGET_US // (per_call_us * calls_per_graph))
    host_calls = int(FIGURE_BUDGET_US // per_call_us)
    return Counts(
        replays=max(MIN_REPLAYS, min(GRAPH_REPLAYS, replays)),
        host_calls=max(MIN_HOST_CALLS, min(HOST_CALLS, host_calls)),
    )


def graph_calls(bytes_per_call: float, wanted: int = GRAPH_CALLS) -> int:
    """How many calls one graph captures: `wanted`, fewer where their kept outputs would pass GRAPH_BYTES."""
    return max(2, min(wanted, int(GRAPH_BYTES // max(1.0, bytes_per_call))))


def capture(fn: Callable[[torch.Tensor], object], buffers: list[torch.Tensor], calls: int) -> Captured:
    """Warm up on a side stream (the allocator and any lazy set-up), then capture `calls` rotated calls."""
    side = _Stream()
    side.wait_stream(_current_stream())
    with _stream(side):
        for b in buffers[:3]:
            fn(b)
    _current_stream().wait_stream(side)
    _synchronize()
    inputs = [buffers[i % len(buffers)] for i in range(calls)]
    graph = _CUDAGraph()
    with _graph(graph):
        outputs = [fn(x) for x in inputs]
    return Captured(graph, calls, inputs, outputs)


def _host_us(fn: Callable[[torch.Tensor], object], buffers: list[torch.Tensor], calls: int = HOST_CALLS) -> float:
    """Wall time per call of `calls` back-to-back calls, synchronised before and after (launches included)."""
    _synchronize()
    start = _perf_counter()
    for i in range(calls):
        fn(buffers[i % len(buffers)])
    _synchronize()
    return (_perf_counter() - start) / calls * 1e6


def check_replay(
    captured: Captured, reference: Callable[[torch.Tensor], torch.Tensor], every: bool = False, when: str = ""
) -> None:
    """The outputs the timed graph wrote must be what the module computes: no capture-only shortcut, no drift.
    The first and last captured calls are checked, or `every` one."""
    for i in range(captured.calls) if every else sorted({0, captured.calls - 1}):
        out, x = captured.outputs[i], captured.inputs[i]
        expected = reference(x)
        # an op of several outputs (RoPE's q and k) is compared output by output
        outs, wants = (list(v) if isinstance(v, (tuple, list)) else [v] for v in (out, expected))
        for got, want in zip(outs, wants, strict=False):
            ok = len(outs) == len(wants) and isinstance(got, torch.Tensor) and got.shape == want.shape
            close, max_abs, _ = within(*comparable(got, want, x.dtype)) if ok else (False, float("inf"), 0.0)
            if not close:
                raise ReplayMismatch(
                    f"{when}captured call {i + 1} of {captured.calls} is off by {max_abs:.3g} from the module"
                )


def rewrite_outputs(outputs: list[object]) -> None:
    """Write every output tensor a captured graph writes with what it already holds: the bytes a poisoning writes,
    so the replay after it meets the caches a poisoned replay meets (dirty lines of the outputs), with the outputs
    holding their right answer (what a kernel that trusts its output would skip on)."""
    for t in _output_tensors(outputs):
        t.mul_(1) if t.is_floating_point() else t.copy_(t.clone())


def poisoned_replays(captured: Captured, reference: Callable, others_us: list[float], text: str) -> float:
    """Replays of the timed graph, each after its outputs were poisoned (NaN): their outputs must be the module's
    and their median time per call within the band of `others_us` (the candidate's figures of the rounds) and of
    control replays timed just as they are, each after its outputs were rewritten with their own answer. (A large
    output's poisoning leaves the cache full of dirty lines: one replay after it takes up to 1.7x a warm one on an
    H100 for an honest kernel, and a control replay meets the same.) Returns that median; raises ReplayMismatch
    otherwise."""
    figures, controls = [], []
    for _ in range(POISONED_REPLAYS):
        rewrite_outputs(captured.outputs)
        _synchronize()
        controls.append(captured.per_call_us(1))
        poison_outputs(captured.outputs)
        _synchronize()
        figures.append(captured.per_call_us(1))
        check_replay(captured, reference, every=True, when=f"with its outputs poisoned at {text}, ")
    figure, others = statistics.median(figures), others_us + controls
    if not in_band(figure, others):
        raise ReplayMismatch(
            f"with its outputs poisoned at {text} a replay took {figure:.2f} us a call, the others "
            f"{min(others):.2f}-{max(others):.2f} us (replays after its outputs were rewritten with their own answer "
            f"{min(controls):.2f}-{max(controls):.2f}): its work depends on what its outputs held"
        )
    return figure


def unchanged_inputs(now: list[torch.Tensor], before: list[torch.Tensor], what: str) -> None:
    """Raises TimedInputModified where a tensor of `now` differs from its copy in `before`, bit for bit."""
    for i, (tensor, then) in enumerate(zip(now, before, strict=True)):
        if not torch.equal(tensor.reshape(-1).view(torch.uint8), then.reshape(-1).view(torch.uint8)):
            rule = "modified-weights" if what == "state" else "modified-input"
            raise TimedInputModified(rule, f"during the timing calls the kernel wrote to {what} {i}")


@dataclass
class Baselines:
    """The baselines, built and warmed up at every timing shape before the candidate is timed."""

    fns: dict[str, Callable]  # name -> callable on one input (eager, compile, native)
    per_shape: dict[tuple[int, ...], list[str]]  # shape -> the baselines that ran there
    missing: list[str] = field(default_factory=list)  # what could not run, and why


@contextmanager
def timing_settings() -> Iterator[None]:
    """TF32 on and deterministic algorithms off (baselines at their best), restored afterwards."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.are_deterministic_algorithms_enabled(),
    )
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
        torch.use_deterministic_algorithms(saved[2])


def native_op(module: torch.nn.Module, width: int, eps: float | None) -> Callable | None:
    """torch's fused op computing what the oracle `module` computes, as its op family named it on the oracle
    (`module.native_op`: F.rms_norm for an RMSNorm, torch's add then its fused norm for a residual norm, ...), so a
    candidate is held to the fastest thing torch already has for *this* op. None when torch has none."""
    own = getattr(module, "native_op", None)
    return own if callable(own) else None


def prepare_baselines(
    module: torch.nn.Module, shapes: list[tuple[int, ...]], dtype: torch.dtype, eps: float | None
) -> Baselines:
    """Build eager, torch.compile(dynamic=False) and the native fused op, and run each once per shape.

    Run by the judge before the candidate is timed (the sandbox child does it in a trusted phase,
    with the compile caches closed to the candidate), so compiling never happens inside the timing
    and whatever torch.compile installs globally is in place before the tamper snapshot.
    """
    width = shapes[0][-1]
    missing: list[str] = []
    fns: dict[str, Callable] = {"eager": module}
    try:
        fns["compile"] = torch.compile(module, dynamic=False)
    except Exception as exc:  # no compiler here: the rows record 0 and the reason is kept
        missing.append(f"compile: {type(exc).__name__}: {exc}")
    native = native_op(module, width, eps)
    if native is not None:
        fns["native"] = native
    else:
        missing.append("native: torch has no fused op for this module")
    per_shape: dict[tuple[int, ...], list[str]] = {}
    with timing_settings(), torch.no_grad():
        for shape in shapes:
            one = torch.randn(shape, device="cuda", dtype=dtype)
            per_shape[shape] = []
            for name, fn in fns.items():
                try:
                    fn(one)
                    per_shape[shape].append(name)
                except Exception as exc:  # a baseline that cannot run this shape is left out, and said so
                    missing.append(f"{name} at {shape_text(shape)}: {type(exc).__name__}: {str(exc)[:120]}")
        _synchronize()
    return Baselines(fns, per_shape, missing)


def _bytes_moved(module: torch.nn.Module, x: torch.Tensor) -> float:
    counted = getattr(module, "bytes_moved", None)  # an oracle that knows its op's bytes (not a norm's) says so
    if callable(counted):
        return float(counted(x))
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    out_dtype = torch.promote_types(x.dtype, next(module.parameters()).dtype) if params else x.dtype
    return float(x.numel() * x.element_size() + params + x.numel() * out_dtype.itemsize)


def _time_shape(
    module: torch.nn.Module,
    candidate: Callable,
    baselines: Baselines,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    l2: int,
    ceiling: float,
    nonce: int = 0,
    shape_index: int = 0,
) -> pb.TimingRow:
    text = shape_text(shape)
    n = max(1, min(MAX_BUFFERS, -(-4 * l2 // max(1, torch.Size(shape).numel() * dtype.itemsize))))
    buffers = fresh_buffers(shape, dtype, n, nonce, shape_index)  # each its own contents: nothing to cache
    one = buffers[0]
    before = [b.clone() for b in buffers]
    fns: dict[str, Callable] = {"candidate": candidate}
    fns.update((name, baselines.fns[name]) for name in baselines.per_shape.get(shape, []))
    missing = baselines.missing
    row = pb.TimingRow(shape=text, bytes_moved=_bytes_moved(module, one))
    row.floor_us = row.bytes_moved / ceiling * 1e6 if ceiling > 0 else 0.0
    calls = graph_calls(row.bytes_moved)
    graphs: dict[str, Captured] = {}
    for name, fn in fns.items():
        try:
            graphs[name] = capture(fn, buffers, calls)
        except Exception as exc:  # left without a graph: its figure falls back (see below), and the reason is kept
            missing.append(f"{name} graph at {text}: {type(exc).__name__}: {str(exc)[:120]}")
    # capture() ran three calls of each already: compiled, allocated; three more estimate the per-call cost.
    counts = {name: counts_for(_host_us(fn, buffers, 3), calls) for name, fn in fns.items()}
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            samples.setdefault((name, "bench"), []).append(_bench(_rotating(fn, buffers)))
            samples.setdefault((name, "host"), []).append(_host_us(fn, buffers, counts[name].host_calls))
            if name in graphs:
                samples.setdefault((name, "graph"), []).append(graphs[name].per_call_us(counts[name].replays))
    us = {key: statistics.median(values) for key, values in samples.items()}
    for name in fns:
        setattr(row, f"{name}_bench_us", us[(name, "bench")])
        setattr(row, f"{name}_host_us", us[(name, "host")])
        # No graph: a baseline keeps do_bench's figure (its best case), the candidate its host-inclusive one
        # (an upper bound of its GPU time): the doubt goes against the candidate.
        fallback = us[(name, "host")] if name == "candidate" else us[(name, "bench")]
        setattr(row, f"{name}_us", us.get((name, "graph"), fallback))
    if "candidate" in graphs:
        graph = graphs["candidate"]
        check_replay(graph, module)
        poisoned_replays(graph, module, samples[("candidate", "graph")], text)
        unchanged_inputs(buffers, before, "its input buffer")
        # fresh contents in every input buffer, the graph replayed once: each captured call's output must be the
        # module's on them (a call that skipped its work returns the last contents' answer)
        for buffer, fresh in zip(buffers, fresh_buffers(shape, dtype, n, nonce, shape_index, first=n), strict=True):
            buffer.copy_(fresh)
        before = [b.clone() for b in buffers]
        graph.graph.replay()
        _synchronize()
        check_replay(graph, module, every=True, when=f"on fresh inputs at {text}, ")
    del graphs

    def again() -> float:  # a second capture, longer, timed anew: another graph, other inputs in order
        second = capture(candidate, buffers[::-1], graph_calls(row.bytes_moved, 2 * GRAPH_CALLS))
        figure = second.per_call_us(2 * GRAPH_REPLAYS)
        check_replay(second, module)
        return figure

    flag(row, again)
    unchanged_inputs(buffers, before, "its input buffer")
    return row


def flag(row: pb.TimingRow, remeasure: Callable[[], float]) -> None:
    """Speedups over SUSPICIOUS, or times below the copy ceiling, are measured again another way.

    `remeasure` times the candidate again from a second CUDA graph; the slower of the two figures is
    kept, and a time still under the ceiling is marked implausible (not believed). The candidate's
    host-inclusive time, a wall clock no graph trick reaches, must clear the ceiling too.
    """
    best = min((t for t in (row.eager_us, row.compile_us, row.native_us) if t > 0), default=0.0)
    reasons = []
    if row.eager_us > SUSPICIOUS * row.candidate_us:
        reasons.append(f"{row.eager_us / row.candidate_us:.1f}x over eager")
    if best > SUSPICIOUS * row.candidate_us:
        reasons.append(f"{best / row.candidate_us:.1f}x over the best baseline")
    if row.floor_us > 0 and row.candidate_us < row.floor_us:
        reasons.append(f"{row.candidate_us:.2f} us is under the copy-ceiling floor {row.floor_us:.2f} us")
    if not reasons:
        return
    again = remeasure()
    row.remeasured = True
    row.candidate_us = max(row.candidate_us, again)  # the slower of two honest methods
    wall_clock_too_fast = 0 < row.candidate_host_us < CEILING_SLACK * row.floor_us
    if row.floor_us > 0 and (row.candidate_us < CEILING_SLACK * row.floor_us or wall_clock_too_fast):
        under = "host-inclusive time" if wall_clock_too_fast else f"re-measured {again:.2f} us"
        row.flag = f"implausible: {'; '.join(reasons)}; {under} still under the copy ceiling"
    else:
        row.flag = f"checked: {'; '.join(reasons)}; re-measured {again:.2f} us, kept {row.candidate_us:.2f} us"


def time_candidate(
    module: torch.nn.Module,
    candidate: Callable[[torch.Tensor], torch.Tensor],
    shapes: list[tuple[int, ...]],
    dtype: torch.dtype,
    baselines: Baselines,
    state: list[torch.Tensor] = (),
    nonce: int | None = None,
) -> pb.TimingEvidence:
    """One TimingRow per shape against baselines already prepared (prepare_baselines) at these shapes.

    `state`: the tensors the candidate reads besides its input (the module's weight), bit-identical after.
    `nonce`: this judging's, from which every timed input buffer's contents are drawn (fresh when None).
    Raises ReplayMismatch when the graph that was timed computed something else than the module (or took
    another time with its outputs poisoned), TimedInputModified when an input or the state changed.
    """
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    nonce = secrets.randbits(62) if nonce is None else nonce
    kept = [t.detach().clone() for t in state]
    with timing_settings(), torch.no_grad():
        ceiling = copy_ceiling(getattr(module, "reads_per_write", 1))
        rows = [
            _time_shape(module, candidate, baselines, s, dtype, l2, ceiling, nonce, i) for i, s in enumerate(shapes)
        ]
        _synchronize()  # a kernel that faulted the GPU shows here, not as a number
        unchanged_inputs([t.detach() for t in state], kept, "state")
    settings = [
        "TF32 on, deterministic algorithms off for timing (restored after)",
        "baselines built and run at every shape before timing (no compile inside the timed region)",
        f"GPU time per call (decides): a CUDA graph of up to {GRAPH_CALLS} rotated calls, median of "
        f"{GRAPH_REPLAYS} replays; the candidate's captured outputs checked against the module",
        f"host-inclusive: {HOST_CALLS} back-to-back calls, wall clock; do_bench median (25 ms warm-up, 100 ms) "
        "as the cross-check",
        f"a slow function: fewer replays and host calls, {FIGURE_BUDGET_US / 1e3:g} ms per figure and round "
        f"(at least {MIN_REPLAYS} replays, {MIN_HOST_CALLS} host calls)",
        f"{ROUNDS} rounds interleaving candidate and baselines, median of the rounds",
        f"inputs rotated through >= 4x the L2 ({l2 >> 20} MiB), at most {MAX_BUFFERS} buffers",
        f"flagged over {SUSPICIOUS:g}x or under the copy ceiling: re-measured from a second graph",
        "timed inputs drawn from a nonce of this judging, each buffer its own contents; after the rounds "
        f"{POISONED_REPLAYS} replays with the outputs poisoned (NaN), every output checked, their time within "
        f"{POISON_BAND:g}x (+{POISON_SLACK_US:g} us) of the others'; inputs and weights bit-identical after; one "
        "replay on fresh contents, every output checked",
    ]
    return pb.TimingEvidence(
        measured=True,
        rows=rows,
        device_name=props.name,
        copy_bytes_per_s=ceiling,
        settings=settings,
        missing=list(baselines.missing),
    )
