"""The sandbox child: `python -m services.judge.sandbox_child` (started by sandbox.py, job on stdin).

Reads the job from stdin (there is no job file to find), raises its walls (services.judge.
sandbox_walls), imports what the judge needs, snapshots what the candidate must not patch, then
imports the candidate, checks correctness against the module's own forward, times it on a GPU (or
stresses it on CPU), checks that nothing was patched, checks it again, and writes its answer to
an inherited, already unlinked file descriptor. Whatever happens, it writes an answer.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from services.judge.sandbox import JUDGE_CACHE
from services.judge.sandbox_walls import (
    AuditWall,
    WallReport,
    drop_root,
    enter_network_namespace,
    install_audit_wall,
    processes_allowed,
    set_limits,
)

CPU_STRESS_CALLS = 48  # CPU stands in for the GPU's timing calls with this many calls before the re-check


def _dtype(name: str):
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{name!r} is not a floating torch dtype")
    return dtype


def _rows(shape: tuple[int, ...]) -> int:
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows


def _shapes(job: dict, width: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(shapes for the live-width module, shapes for the odd-width module): live, odd rows, odd width."""
    live = tuple(int(d) for d in job["live_shape"]) or (4, width)
    if live[-1] != width:
        live = (4, width)
    if job["max_rows"] and _rows(live) > job["max_rows"]:
        live = (job["max_rows"], width)
    odd_width = job["odd_width"]
    if job["device"] == "cuda":
        more = [(1, 37, width), (4099, width), (1, width)]
        odd = [(3, odd_width), (1, 37, odd_width)]
    else:  # the interpreter runs one program per row at ~13 ms each: few rows, still odd counts
        more = [(1, 3, width), (5, width), (2, width)]
        odd = [(3, odd_width), (1, 2, odd_width)]
    main = list(dict.fromkeys([live, *more]))[:3]  # three distinct shapes, the live one first
    return main, odd


def _timing_shapes(job: dict, width: int) -> list[tuple[int, ...]]:
    """The live shape first, then one decode row and the GPU.md anchor sizes; one shape per row count."""
    live = tuple(int(d) for d in job["live_shape"]) or (1, width)
    if live[-1] != width:
        live = (1, width)
    by_rows: dict[int, tuple[int, ...]] = {}
    for shape in [live, (1, width), (4096, width), (32768, width)]:
        by_rows.setdefault(_rows(shape), shape)
    return list(by_rows.values())


def _oracle(cls, job: dict, width: int, device, seed: int):
    """A real instance of the live class: live dtype, live eps, random weights around 1 (not all ones)."""
    import torch

    from services.judge.module_factory import build

    module = build(cls, width, job["eps"], job["eps_attr"], device)
    module = module.to(dtype=_dtype(job["param_dtype"])).eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            noise = torch.randn(param.shape, generator=gen).to(device=param.device, dtype=param.dtype)
            param.copy_(1 + 0.1 * noise)
    return module


def _prepare(job: dict):
    """Everything imported before the audit wall goes up (after it, the judge's own files are unreadable)."""
    import numpy  # noqa: F401  (the interpreter's, imported before the wall)
    import torch
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from services.core import kernels, tolerances  # noqa: F401
    from services.core.pb import events_pb2 as pb  # noqa: F401
    from services.judge import correctness, module_factory, poison, tamper  # noqa: F401

    if job["device"] == "cuda":
        import triton.testing  # noqa: F401

        from services.judge import timing  # noqa: F401
    torch.set_grad_enabled(False)
    return module_factory.import_class(job["class_path"])


def _checks_text(job: dict, width: int, odd_width: int, seeds: int, cls) -> list[str]:
    return [
        f"oracle: {cls.__qualname__}.forward (its own casting), weights 1 + 0.1*N(0,1) from seed {job['seed_base']}",
        f"{seeds} fresh seeds from base {job['seed_base']} x 3 shapes at width {width} + 2 at odd width {odd_width}",
        "every buffer the candidate allocates (and freed blocks of the output's size) filled with NaN first",
        "candidate first on even seeds, reference first on odd seeds, each on its own clone",
        "input and module parameters unmodified; output a plain tensor, own memory, module's dtype/shape/device",
        "same input twice, fresh memory full of NaN then of a finite pattern: same answer",
        "NaN/Inf never pass",
    ]


@contextmanager
def _judge_phase(wall: AuditWall | None, scratch: Path) -> Iterator[None]:
    """The judge's own work (compiling baselines): its caches open, Triton writing into them."""
    saved = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(scratch / JUDGE_CACHE / "triton")
    try:
        with wall.judge_phase() if wall is not None else nullcontext():
            yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved


def _time(main, candidate, job: dict, width: int, dtype, wall: AuditWall | None, tampered, namespaces, tally):
    """Prepare the baselines in a judge phase, snapshot again, then time with the poisoning lifted."""
    from services.core.pb import events_pb2 as pb
    from services.judge import tamper
    from services.judge.poison import POISON
    from services.judge.timing import ReplayMismatch, prepare_baselines, time_candidate

    shapes = _timing_shapes(job, width)
    try:
        with _judge_phase(wall, Path.cwd()):
            baselines = prepare_baselines(main, shapes, dtype, job["eps"])
        # torch.compile installs global hooks the first time it runs (dynamo patches nn.Module.__init__):
        # the snapshot the timing is checked against is taken after that, and after the candidate was
        # found untampered against the first one.
        before = tamper.snapshot(namespaces)
        with POISON.lifted():  # timing pays nothing for the poisoning
            timing = time_candidate(main, candidate, shapes, dtype, baselines)
    except ReplayMismatch as exc:  # drifted once timing began, or fast only while captured: wrong, not slow
        tally.fail("drift", f"right in the checks, wrong in the CUDA graph that was timed: {exc}")
        return pb.TimingEvidence(measured=False, reason="drift: the timed graph's answer was wrong")
    except Exception as exc:  # no figures, but the re-check still judges the candidate
        return pb.TimingEvidence(measured=False, reason=f"timing failed: {type(exc).__name__}: {exc}")
    if tampered("during timing", before):
        return pb.TimingEvidence(measured=False, reason="tampered: not believed")
    return timing


def judge(job: dict, cls, report: WallReport, wall: AuditWall | None = None):
    """(CorrectnessEvidence, TimingEvidence) for the job's candidate."""
    import torch

    from services.core import kernels
    from services.core.pb import events_pb2 as pb
    from services.judge import correctness, tamper
    from services.judge.poison import POISON

    contract = pb.Contract()
    contract.ParseFromString(base64.b64decode(job["contract"]))
    device = torch.device(job["device"])
    gpu = device.type == "cuda"
    dtype = _dtype(job["input_dtype"])
    base = int(job["seed_base"])
    seeds = [base + 2 + i for i in range(job["seeds"])]
    width = int(job["width"])
    odd_width = int(job["odd_width"]) if int(job["odd_width"]) != width else 2 * width + 1
    job = {**job, "odd_width": odd_width}
    tally = correctness.Tally(seed_base=base)
    tally.checks.extend(_checks_text(job, width, odd_width, len(seeds), cls))

    POISON.install()  # before the snapshot and the import: `from torch import empty` gets the wrapper too
    namespaces = tamper.watched(cls, gpu=gpu)
    before = tamper.snapshot(namespaces)
    untimed = pb.TimingEvidence(measured=False, reason="the candidate did not load")
    try:
        entry = kernels.load_entrypoint(kernels.write_source(Path.cwd() / "kernel", job["source"]), contract.entrypoint)
    except kernels.KernelLoadError as exc:
        tally.fail("load-failed", str(exc))
        return tally.evidence(dtype, len(seeds)), untimed

    def tampered(when: str, snapshot: dict | None = None) -> bool:
        names = tamper.changed(snapshot or before, namespaces)
        if names:
            shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
            tally.fail("tampered", f"{when}, the candidate had replaced {shown}")
        return bool(names)

    if tampered("on import"):
        return tally.evidence(dtype, len(seeds)), pb.TimingEvidence(measured=False, reason="tampered: not timed")
    main = _oracle(cls, job, width, device, seed=base)
    odd = _oracle(cls, job, odd_width, device, seed=base + 1)
    main_shapes, odd_shapes = _shapes(job, width)
    cases = [
        correctness.Case(main, kernels.bound_forward(main, entry, contract), main_shapes),
        correctness.Case(odd, kernels.bound_forward(odd, entry, contract), odd_shapes),
    ]
    correctness.check(cases, dtype, device, seeds, tally)
    if not tally.error:
        tampered("during the checks")
    if tally.error:
        return tally.evidence(dtype, len(seeds)), pb.TimingEvidence(measured=False, reason="incorrect: not timed")

    if gpu:
        timing = _time(main, cases[0].candidate, job, width, dtype, wall, tampered, namespaces, tally)
        tally.checks.append("re-checked after the timing calls with a fresh seed, both orders")
    else:
        timing = pb.TimingEvidence(measured=False, reason="no GPU: correctness only under TRITON_INTERPRET=1")
        tally.stress_calls = correctness.stress(cases[0], (1, width), dtype, device, CPU_STRESS_CALLS, base)
        tally.checks.append(f"re-checked after {CPU_STRESS_CALLS} further calls (CPU: no timing), fresh seed")
        if tampered("during the further calls"):
            return tally.evidence(dtype, len(seeds)), pb.TimingEvidence(measured=False, reason="tampered")
    if tally.error:
        return tally.evidence(dtype, len(seeds)), timing
    # Checked again after timing: a kernel that is only right the first few times is wrong.
    correctness.check(cases, dtype, device, [base + 1000], tally, twice=False)
    if tally.error and tally.rule_id != "tampered":
        after = "the timing calls" if gpu else f"{CPU_STRESS_CALLS} further calls"
        tally.rule_id, tally.error = "drift", f"right at first, wrong after {after}: {tally.error} ({tally.rule_id})"
    return tally.evidence(dtype, len(seeds)), timing


def _raise_walls(job: dict, scratch: Path, report: WallReport) -> None:
    walls = job["walls"]
    if walls.get("netns", True):
        enter_network_namespace(report)
    else:
        report.network = "audit-hook"
        report.walls.append("network namespace switched off: sockets refused by the audit hook")
    uid = drop_root(scratch, report, gpu=job["device"] == "cuda") if walls.get("drop_root", True) else None
    if uid is None and not report.user:
        report.user = "same user (root drop switched off)" if os.getuid() == 0 else "same user (not root)"
    set_limits(
        report,
        cpu_s=int(walls["cpu_s"]),
        file_bytes=int(walls["file_bytes"]),
        address_bytes=walls.get("address_bytes"),
        processes=processes_allowed(int(walls["processes"]), uid),
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m services.judge.sandbox_child < job.json (started by the judge)", file=sys.stderr)
        return 2
    job = json.loads(sys.stdin.read())
    nonce = job.pop("nonce")
    result_fd = int(job.pop("result_fd"))
    scratch = Path.cwd()
    report = WallReport()
    from google.protobuf import json_format

    from services.core.pb import events_pb2 as pb

    walls_failed = ""
    try:
        try:
            _raise_walls(job, scratch, report)
        except Exception as exc:  # fail closed: no candidate runs behind walls that did not go up
            walls_failed = f"{type(exc).__name__}: {exc}"
            raise RuntimeError(f"the sandbox could not raise its walls: {walls_failed}") from exc
        cls = _prepare(job)
        wall = None
        if job["walls"].get("audit", True):
            wall = install_audit_wall(scratch, [scratch / JUDGE_CACHE], job["device"] == "cuda", report)
        correctness, timing = judge(job, cls, report, wall)
    except BaseException as exc:  # whatever the candidate raised (even SystemExit) is the verdict
        correctness = pb.CorrectnessEvidence(passed=False, error=f"{type(exc).__name__}: {exc}", rule_id="raised")
        timing = pb.TimingEvidence(measured=False, reason="the sandbox child failed")
    result = {
        "nonce": nonce,
        "correctness": json_format.MessageToDict(correctness, preserving_proto_field_name=True),
        "timing": json_format.MessageToDict(timing, preserving_proto_field_name=True),
        "walls": {
            "network": report.network,
            "user": report.user,
            "walls": report.walls,
            "refused": report.refused,
            "failed": walls_failed,
        },
    }
    data = json.dumps(result).encode()
    os.lseek(result_fd, 0, os.SEEK_SET)
    while data:
        data = data[os.write(result_fd, data) :]
    os.close(result_fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
