"""The sandbox child: `python -m services.judge.sandbox_child <scratch>/job.json` (started by sandbox.py).

Reads the job and deletes it (the candidate must not read the nonce), imports the candidate,
builds the oracle modules from the live class, checks correctness, times it on a GPU, checks it
again, and writes `result.json` beside the job. Whatever happens, it writes a result.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

RESULT_NAME = "result.json"


def _dtype(name: str):
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{name!r} is not a floating torch dtype")
    return dtype


def _shapes(job: dict, width: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(shapes for the live-width module, shapes for the odd-width module): live, odd rows, odd width."""
    live = tuple(int(d) for d in job["live_shape"]) or (4, width)
    if live[-1] != width:
        live = (4, width)
    rows = 1
    for d in live[:-1]:
        rows *= d
    if job["max_rows"] and rows > job["max_rows"]:
        live = (job["max_rows"], width)
    if job["device"] == "cuda":
        more = [(1, 37, width), (4099, width), (1, width)]
    else:
        more = [(1, 5, width), (7, width), (3, width)]
    main = list(dict.fromkeys([live, *more]))[:3]  # three distinct shapes, the live one first
    odd = [(3, job["odd_width"]), (1, 5, job["odd_width"])]
    return main, odd


def _timing_shapes(job: dict, width: int) -> list[tuple[int, ...]]:
    """The live shape first, then one decode row and the GPU.md anchor sizes; one shape per row count."""
    live = tuple(int(d) for d in job["live_shape"]) or (1, width)
    if live[-1] != width:
        live = (1, width)
    by_rows: dict[int, tuple[int, ...]] = {}
    for shape in [live, (1, width), (4096, width), (32768, width)]:
        rows = 1
        for d in shape[:-1]:
            rows *= d
        by_rows.setdefault(rows, shape)
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


def judge(job: dict):
    """(CorrectnessEvidence, TimingEvidence) for the job's candidate."""
    import torch

    from services.core import kernels
    from services.core.pb import events_pb2 as pb
    from services.judge import correctness
    from services.judge.module_factory import import_class

    contract = pb.Contract()
    contract.ParseFromString(base64.b64decode(job["contract"]))
    device = torch.device(job["device"])
    dtype = _dtype(job["input_dtype"])
    seeds = list(range(job["seeds"]))
    width = int(job["width"])
    odd_width = int(job["odd_width"]) if int(job["odd_width"]) != width else 2 * width + 1
    job = {**job, "odd_width": odd_width}

    tally = correctness.Tally()
    # The candidate is imported first so a broken one fails fast; being in this process either way,
    # it could touch the oracle whenever it runs: the static check is what keeps it from that.
    try:
        entry = kernels.load_entrypoint(kernels.write_source(Path.cwd() / "kernel", job["source"]), contract.entrypoint)
    except kernels.KernelLoadError as exc:
        tally.error = str(exc)
        return tally.evidence(dtype, len(seeds)), pb.TimingEvidence(measured=False, reason="the candidate did not load")
    cls = import_class(job["class_path"])
    main = _oracle(cls, job, width, device, seed=0)
    odd = _oracle(cls, job, odd_width, device, seed=1)
    main_shapes, odd_shapes = _shapes(job, width)
    cases = [
        correctness.Case(main, kernels.bound_forward(main, entry, contract), main_shapes),
        correctness.Case(odd, kernels.bound_forward(odd, entry, contract), odd_shapes),
    ]
    correctness.check(cases, dtype, device, seeds, tally)
    if tally.error:
        return tally.evidence(dtype, len(seeds)), pb.TimingEvidence(measured=False, reason="incorrect: not timed")

    if device.type == "cuda":
        from services.judge.timing import time_candidate

        try:
            timing = time_candidate(main, cases[0].candidate, _timing_shapes(job, width), dtype, job["eps"])
        except Exception as exc:  # no figures, but the re-check below still judges the candidate
            timing = pb.TimingEvidence(measured=False, reason=f"timing failed: {type(exc).__name__}: {exc}")
    else:
        timing = pb.TimingEvidence(measured=False, reason="no GPU: correctness only under TRITON_INTERPRET=1")
    # Checked again after timing: a kernel that is only right the first few times is wrong.
    correctness.check(cases, dtype, device, [len(seeds) + 1000], tally)
    if tally.error:
        tally.error = f"after timing: {tally.error}"
    return tally.evidence(dtype, len(seeds)), timing


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m services.judge.sandbox_child <scratch>/job.json", file=sys.stderr)
        return 2
    job_path = Path(argv[1])
    job = json.loads(job_path.read_text())
    job_path.unlink()
    nonce = job.pop("nonce")
    from google.protobuf import json_format

    from services.core.pb import events_pb2 as pb

    try:
        correctness, timing = judge(job)
    except BaseException as exc:  # whatever the candidate raised (even SystemExit) is the verdict
        correctness = pb.CorrectnessEvidence(passed=False, error=f"{type(exc).__name__}: {exc}")
        timing = pb.TimingEvidence(measured=False, reason="the sandbox child failed")
    result = {
        "nonce": nonce,
        "correctness": json_format.MessageToDict(correctness, preserving_proto_field_name=True),
        "timing": json_format.MessageToDict(timing, preserving_proto_field_name=True),
    }
    (job_path.parent / RESULT_NAME).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
