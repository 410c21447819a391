"""The served model's own values (pb.LiveParameters: a norm's weight and bias, a RoPE's inverse frequencies, recorded
by the profile, services.server.live_parameters) as the judge's cases read them.

Every other case draws its own weights, so a kernel keyed to the live ones (off only where its weight sums to the
served sum, or its bias is exactly zero, as a preset's init is) would pass them all and be wrong on every served
call. A `live-values` case runs the candidate on one recorded set, on rows of every regime, for every set recorded; a
CPU judging (the interpreter is slow) gives rows of every regime to `CPU_SETS` sets drawn from its seed (which, an
author cannot know) and `BRIEF_ROWS` rows to each of the others.
"""

from __future__ import annotations

import math
import random

import torch

from services.core.pb import events_pb2 as pb
from services.judge.module_factory import ModuleBuildError, torch_dtype

CASE = "live-values"
CPU_SETS = 4
BRIEF_ROWS = 2  # a CPU's other sets: two rows, of two regimes


def decoded(tensor: pb.LiveTensor) -> torch.Tensor:
    """The recorded tensor, bit for bit, on the CPU; ModuleBuildError where its bytes do not fill its shape and dtype
    (the judging then fails as the judge's own, not as the candidate's)."""
    try:
        dtype, shape = torch_dtype(tensor.dtype), tuple(int(d) for d in tensor.shape)
    except ModuleBuildError as exc:
        raise ModuleBuildError(f"the profile's live tensor {tensor.name!r}: {exc}") from exc
    need = math.prod(shape) * dtype.itemsize
    if any(d < 0 for d in shape) or len(tensor.data) != need:
        raise ModuleBuildError(
            f"the profile's live tensor {tensor.name!r} holds {len(tensor.data)} bytes; {tensor.dtype} of shape "
            f"{list(shape)} is {need}"
        )
    if not need:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(tensor.data), dtype=torch.uint8).view(dtype).reshape(shape).clone()


def chosen(recorded, gpu: bool, seed: int) -> list[tuple[int, dict[str, torch.Tensor], bool]]:
    """(index of the recorded set, its tensors by name, whether it meets rows of every regime) of every recorded set,
    in recorded order: all of them full on a GPU, `CPU_SETS` drawn from `seed` on a CPU."""
    indices = range(len(recorded))
    full = set(indices) if gpu or len(recorded) <= CPU_SETS else set(random.Random(seed).sample(indices, CPU_SETS))
    return [(i, {t.name: decoded(t) for t in recorded[i].tensors}, i in full) for i in indices]


def name(index: int, total: int, shape: tuple[int, ...], what: str = "mixed") -> str:
    """A live case's name: which recorded set of how many the model holds, its shape and what its rows are."""
    return f"{CASE} set {index + 1} of {total} {'x'.join(map(str, shape))} {what}"


def norm_states(target, weight_attr: str, bias_attr: str | None, gpu: bool, seed: int) -> tuple:
    """((set index, weight, bias or None, full), ...) of a norm's live sets for this judging, by the module's attribute
    names (`full`: rows of every regime, else `BRIEF_ROWS`); sets without the weight are skipped."""
    out = []
    for i, state, full in chosen(target.live, gpu, seed):
        if weight_attr in state and state[weight_attr].dim() == 1:
            out.append((i, state[weight_attr], state.get(bias_attr) if bias_attr else None, full))
    return tuple(out)


def live_bias(bias: torch.Tensor | None, weight: torch.Tensor, dtype: torch.dtype, biased: bool) -> torch.Tensor | None:
    """A live case's bias in `dtype`: the recorded one; zeros (a norm's init) where the module has a bias the set does
    not hold; None for a module without one."""
    if not biased:
        return None
    return (bias if bias is not None else torch.zeros_like(weight)).to(dtype)


def rows(full: bool, gpu: bool, regimes: int) -> int:
    """A live case's rows: two of each of `regimes` on a GPU, one of each on a CPU, `BRIEF_ROWS` for a brief one."""
    if not full:
        return BRIEF_ROWS
    return 2 * regimes if gpu else regimes


def rotaries(target, width: int, gpu: bool, seed: int) -> tuple:
    """((set index, inverse frequencies, attention factor), ...) of a RoPE's live rotaries for this judging: those of
    the live rotary width (a model's other rotaries, of other widths, serve other calls)."""
    out = []
    for i, state, _ in chosen(target.live, gpu, seed):  # a model has one or two: every one in full
        inv, factor = state.get("inv_freq"), state.get("attention_scaling")
        if inv is not None and inv.dim() == 1 and 2 * inv.numel() == width:
            out.append((i, inv, float(factor.reshape(-1)[0]) if factor is not None and factor.numel() else 1.0))
    return tuple(out)
