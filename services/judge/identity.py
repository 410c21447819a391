"""Who a judge is and where it judges: recorded in every verdict (`JudgeObservation.judge_id`, `.device`).

Many judges share one durable consumer (`yantra up --judges N`, compose replicas), so which of them judged a
candidate, and on which GPU, is a fact of the run: a verdict that looks odd is traced to its judge and device.
Pure: the environment and the GPU's name are read by the caller.
"""

from __future__ import annotations

import re

JUDGE_ID_VAR = "YANTRA_JUDGE_ID"
# Letters, digits and . _ - @ : (a host name, a pid, an index): safe in a log line, a file name and an event.
_JUDGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}")


class BadJudgeId(ValueError):
    pass


def judge_id(given: str, host: str, pid: int) -> str:
    """The judge's id: YANTRA_JUDGE_ID when given (`yantra up` names its judges judge-1 .. judge-N), else its host
    and pid (a compose replica's host name is its container's, so replicas differ). BadJudgeId, in one line,
    for a given id that is not a short word."""
    given = given.strip()
    if not given:
        return f"{host or 'judge'}:{pid}"
    if not _JUDGE_ID.fullmatch(given):
        raise BadJudgeId(
            f"{JUDGE_ID_VAR}={given[:80]!r} is not a judge id: up to 64 letters, digits and . _ - @ :, "
            "starting with a letter or digit"
        )
    return given


def device_label(use_gpu: bool, visible_devices: str | None, gpu_name: str = "") -> str:
    """Where the judge runs its candidates: "cpu", or "cuda:<index> <name>" of the GPU it uses (the process's
    first visible one: the judge runs on "cuda"), indexed as the host numbers it. A judge pinned by
    CUDA_VISIBLE_DEVICES=2 sees that GPU as its device 0, so its host index is the first entry of the list
    (an index, or a GPU-/MIG- UUID as given); unpinned, device 0 is the host's 0."""
    if not use_gpu:
        return "cpu"
    entries = [e.strip() for e in (visible_devices or "").split(",") if e.strip()]
    index = entries[0] if entries else "0"
    return f"cuda:{index} {gpu_name}".strip()
