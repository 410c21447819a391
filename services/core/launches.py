"""The processes `yantra up` starts: one a service, and N judges on one durable consumer, each on a GPU of its own.

`plan_launches` decides (pure); `visible_gpus` reads what the host has (CUDA_VISIBLE_DEVICES, nvidia-smi).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


class LaunchError(ValueError):
    pass


JUDGE = "judge"
MAX_JUDGES = 64  # far more than a box has GPUs or cores: a bigger number is a typo, not a plan


@dataclass(frozen=True)
class Launch:
    """One process of the stack: its name (its log logs/NAME.log, its pid in stack.json, its restart budget), the
    service it runs (`python -m services.<service>`) and what its environment holds beyond the stack's."""

    name: str
    service: str
    env: tuple[tuple[str, str], ...] = ()


def plan_launches(services: tuple[str, ...], judges: int, gpus: tuple[str, ...]) -> list[Launch]:
    """The processes for `services` with `judges` judges (pure). One judge keeps the name "judge"; several are
    judge-1 .. judge-N. Each judge gets its id (YANTRA_JUDGE_ID, recorded in its verdicts) and, where the host
    has GPUs (`gpus`: their CUDA indices or UUIDs), one of them as its only visible device, round-robin: judge I
    on gpus[(I - 1) % len(gpus)], so N judges on N GPUs time their candidates on a GPU each. They all consume the
    durable consumer "judge": JetStream hands each candidate to one of them."""
    if not 1 <= judges <= MAX_JUDGES:
        raise LaunchError(f"the number of judges must be 1 to {MAX_JUDGES}, not {judges}")
    out = []
    for service in services:
        if service != JUDGE:
            out.append(Launch(service, service))
            continue
        for i in range(judges):
            name = JUDGE if judges == 1 else f"{JUDGE}-{i + 1}"
            env = [("YANTRA_JUDGE_ID", name)]
            if gpus:
                env.append(("CUDA_VISIBLE_DEVICES", gpus[i % len(gpus)]))
            out.append(Launch(name, JUDGE, tuple(env)))
    return out


def judges_notice(launches: list[Launch]) -> str | None:
    """The line `yantra up` says about its judges when there are several: each one's name and GPU."""
    judges = [(launch.name, dict(launch.env).get("CUDA_VISIBLE_DEVICES")) for launch in launches
              if launch.service == JUDGE]  # fmt: skip
    if len(judges) < 2:
        return None
    where = ", ".join(f"{name} on GPU {gpu}" if gpu else name for name, gpu in judges)
    on_cpu = "" if judges[0][1] else " (no GPU: each judges on the CPU)"
    return f"{len(judges)} judges share the durable consumer {JUDGE!r}: {where}{on_cpu}"


def visible_gpus(device: str, env: dict[str, str] | None = None) -> tuple[str, ...]:
    """The GPUs the judges may be pinned to: none when YANTRA_DEVICE is cpu; CUDA_VISIBLE_DEVICES's entries when
    set (the judges share out what the user gave); else 0 .. n-1 for the n GPUs nvidia-smi lists (CUDA's own
    numbering of them: each judge gets another one, whatever the order); none without nvidia-smi."""
    env = os.environ if env is None else env
    if device == "cpu":
        return ()
    given = env.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        entries = tuple(e.strip() for e in given.split(",") if e.strip())
        return () if not entries or entries[0].startswith("-") else entries  # "-1": no GPU at all
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    count = sum(line.startswith("GPU ") for line in listed.stdout.splitlines()) if listed.returncode == 0 else 0
    return tuple(str(i) for i in range(count))
