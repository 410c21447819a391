"""The served range on a CPU: launches up to the most rows one call carries, of which the interpreter runs a sample.

The Triton interpreter runs ~10 ms a program: the 131,072 rows a served 1.5B model can send in one call would take
twenty minutes a case, so a CPU judging drew at most a few hundred rows, and a kernel that is wrong only past them
(rows past 32,768 left unwritten behind `row * row < 32768 * row`, a read past the weight from 4,097 rows on behind
a tile count's loop) passed it. The served range is drawn as a GPU draws it (services.judge.cases.domain_rows: a
spread of odd counts past the rows run whole, up to the maximum), each case a sample. A program's work depends on
its id, the launch's sizes and what it loads, never on which other programs ran: under `only`, every launch gets the
real sizes and runs the programs `picked` names (the first, the last, both sides of each power of two from 4,096, a
few drawn from the judging's seed), each as it would run in the whole launch. A cap below the maximum always meets
the last program.

After each program, whether it wrote anything is recorded (outputs are poisoned, so a write changes an element's
bits): an honest program at the maximum writes its rows, or has none to write, past all the others' (a persistent
grid's spare programs); the call's last element must be written. The parent (services.judge.verdict) holds the rows the
sampled programs wrote to the reference, and each written row whole (an MLP's programs write blocks of elements:
each element). A persistent grid ("sms") gets a program a row meanwhile, so that each walks one; a grid whose
programs still walk thousands of rows (more than SAMPLED_MAX_PER_PROGRAM elements each) is not sampled: its loops
are the dataflow check's.

The interpreter's grid loop is replaced for the duration (Triton's own `GridExecutor.__call__`, with the loop over
the picked programs): `available()` says whether this Triton has the parts it uses.
"""

from __future__ import annotations

import inspect
import math
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from services.judge.poison import NAN_BYTE
from services.judge.run_cases import CaseRun
from services.ops.launch import INTERPRETER_SMS_ENV

SAMPLED_CASE = "sampled-domain"  # the case kind (services.judge.cases) whose launches run a sample of programs
SAMPLED_ELEMENTS_CASE = "sampled-domain-elements"  # the same, of an op whose programs write blocks of elements (MLPs)
SAMPLED_HEADS_CASE = "sampled-domain-heads"  # RoPE's: a program of q's heads and one of k's write unequal shares
SHARE_SLACK_WORDS = 2  # a program's share may differ by a word at each end (a row's bytes need not end at a word)
# more elements a program than this (of the call's largest tensor): a grid whose programs each walk thousands of
# rows, which the interpreter cannot run at the maximum even one at a time
SAMPLED_MAX_PER_PROGRAM = 2**17
SAMPLED_ELEMENTS = 16 * 2**20  # the case's elements at most (32 MiB of bf16): the rows at the live width within
FIRST_POWER = 12  # both sides of 2**k from 4,096 on: where a size boundary of a kernel most likely sits
DRAWN = 4  # programs drawn from the judging's seed besides


def picked(programs: int, seed: int, elements: int = 0) -> list[int]:
    """The program ids a sampled launch of `programs` runs, over a call whose largest tensor has `elements`: [] for a
    grid whose programs each walk thousands of rows (more than SAMPLED_MAX_PER_PROGRAM elements a program)."""
    if programs < 1 or elements > SAMPLED_MAX_PER_PROGRAM * programs:
        return []
    ids = {0, programs // 2, max(0, programs - 2), programs - 1}
    k = FIRST_POWER
    while (1 << k) < programs:
        ids |= {(1 << k) - 1, 1 << k}
        k += 1
    rng = random.Random(seed)
    ids |= {rng.randrange(programs) for _ in range(DRAWN)}
    return sorted(ids)


def available() -> bool:
    """Whether this Triton's interpreter has the parts a sampled launch uses (its grid executor's own steps)."""
    try:
        from triton.runtime import interpreter as interp
    except Exception:
        return False
    executor = getattr(interp, "GridExecutor", None)
    needed = ("_init_args_hst", "_restore_args_dev", "__call__")
    return (
        executor is not None
        and all(hasattr(executor, n) for n in needed)
        and all(hasattr(interp, n) for n in ("_patch_lang", "_implicit_cvt", "interpreter_builder", "InterpreterError"))
    )


def written(tensor: torch.Tensor) -> int:
    """How many 8-byte words of `tensor` (and bytes of a ragged tail) differ from the poison: a program's first write
    into poison raises it (programs of an honest launch write disjoint places). Words, not elements: one pass of a
    few milliseconds over a 32 MiB output, after each program run."""
    raw = tensor.detach().reshape(-1).view(torch.uint8)
    whole = raw.numel() // 8 * 8
    try:
        words = int(torch.count_nonzero(raw[:whole].view(torch.int64).ne(-1)))  # -1: eight NAN_BYTEs
    except RuntimeError:  # not 8-byte aligned: byte by byte
        return int(torch.count_nonzero(raw.ne(NAN_BYTE)))
    return words + int(torch.count_nonzero(raw[whole:].ne(NAN_BYTE)))


@contextmanager
def only(
    seed: int, watched: Callable[[], list[torch.Tensor]] | None, record: list[dict], sms: int = 0
) -> Iterator[None]:
    """Every interpreted launch inside runs the programs `picked(grid, seed)` names; for each launch, `record` gets
    {"kernel", "grid", "ran", "silent", "idle_from"} (`_idle_suffix`), a program having written when an element of
    `watched()` (the call's outputs, poisoned) changed from the poison while it ran (none looked for without
    `watched`).

    `sms`: a persistent grid's program count ("sms", services.ops.launch) meanwhile: the case's rows, so that each
    program walks one row (or one tile), as a grid of one a row does, and a program that skips its rows writes
    nothing. A kernel is right at any program count; the GPU judging runs its own."""
    from triton.runtime import interpreter as interp

    executor = interp.GridExecutor
    original = executor.__call__

    def sampled_call(self, *args_dev, **kwargs):  # Triton's own steps, the grid loop over the picked programs only
        argspec = inspect.getfullargspec(self.fn)
        kwargs = {k: v for k, v in kwargs.items() if k in argspec.args or k in argspec.kwonlyargs}
        args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
        for hook in self.pre_run_hooks:
            hook(*args_hst, **kwargs_hst)
        scope = interp._patch_lang(self.fn)
        try:
            args = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
            args = {n: a if n in self.constexprs else interp._implicit_cvt(a) for n, a in args.items()}
            grid = self.grid(args) if callable(self.grid) else self.grid
            grid = tuple(grid) + (1,) * (3 - len(grid))
            interp.interpreter_builder.set_grid_dim(*grid)
            largest = max((a.numel() for a in args_hst if isinstance(a, torch.Tensor)), default=0)
            wrote: dict[int, int] = {}  # each program run: the words it took out of the poison (1: not watched)

            def run(x: int) -> None:
                before = sum(written(t) for t in watched()) if watched else 0
                for y in range(grid[1]):
                    for z in range(grid[2]):
                        interp.interpreter_builder.set_grid_idx(x, y, z)
                        self.fn(**args)
                wrote[x] = sum(written(t) for t in watched()) - before if watched else 1

            for x in picked(grid[0], seed, largest):
                run(x)
            record.append({"kernel": self.fn.__name__, "grid": grid[0], **_idle_suffix(wrote, run)})
        except Exception as exc:
            raise interp.InterpreterError(repr(exc)) from exc
        finally:
            scope.restore()
        self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    executor.__call__ = sampled_call
    before = os.environ.get(INTERPRETER_SMS_ENV)
    if sms:
        os.environ[INTERPRETER_SMS_ENV] = str(sms)  # read at each launch (services.ops.launch)
    try:
        yield
    finally:
        executor.__call__ = original
        if before is None:
            os.environ.pop(INTERPRETER_SMS_ENV, None)
        else:
            os.environ[INTERPRETER_SMS_ENV] = before


def _idle_suffix(wrote: dict[int, int], run: Callable[[int], None]) -> dict:
    """What the sampled programs of a launch (`wrote`: each program run, the words it wrote) say: {"ran", "silent",
    "idle_from", "shares"}. An honest launch's programs that have no work (a persistent grid's past its tiles) are
    the last ones: where they start is found by bisection (`run` runs a program more), so the program before, which
    writes the call's last rows, runs too. "silent": programs that wrote nothing below one that wrote (skipped their
    rows); "idle_from": the first program of the idle suffix, None when the last program wrote; "shares": the words
    each program wrote."""
    ran = sorted(wrote)
    idle_from = None
    if ran and not wrote[ran[-1]]:
        lo = max((x for x in ran if wrote[x]), default=-1)
        hi = min(x for x in ran if x > lo and not wrote[x])
        while hi - lo > 1:
            mid = (lo + hi) // 2
            run(mid)
            lo, hi = (mid, hi) if wrote[mid] else (lo, mid)
        idle_from = hi
    last = max((x for x, w in wrote.items() if w), default=-1)
    return {"ran": sorted(wrote), "silent": sorted(x for x, w in wrote.items() if not w and x < last),
            "idle_from": idle_from, "shares": dict(sorted(wrote.items()))}  # fmt: skip


def short_share(record: list[dict]) -> tuple[dict, int, int, int] | None:
    """(launch, program, its words, the most a program wrote) for a program that wrote less than the others, the
    last one that wrote excepted (a ragged last tile): it left some of its rows unwritten. An honest launch of rows
    or of blocks of elements gives each program the same share (RoPE's q and k programs excepted: their kind says
    so, and this is not asked)."""
    for launch in record:
        writers = {x: w for x, w in launch["shares"].items() if w}
        writers.pop(max(writers, default=-1), None)  # the last one's share is its own (a ragged tile, a tail's bytes)
        if len(writers) < 2:
            continue
        full = max(writers.values())
        for x, w in writers.items():
            if w < full - SHARE_SLACK_WORDS:
                return launch, x, w, full
    return None


def silent_programs(record: list[dict], shape: tuple[int, ...], outputs: list[torch.Tensor], even: bool = True) -> str:
    """Why a sampled case of input `shape` is wrong ("" when it is not): a program that wrote nothing below one
    that wrote (its rows stay as the output's memory was), or the call's last output left unwritten at its end
    (the programs that should write it wrote nothing: a cap on the row below the maximum). A launch none of whose
    programs ran (a grid too coarse to sample) checks nothing."""
    at = "x".join(map(str, shape))
    for launch in record:
        if launch["silent"]:
            ids = ", ".join(f"{p:,}" for p in launch["silent"][:4])
            return (
                f"at {at}, program(s) {ids} of {launch['grid']:,} of {launch['kernel']} wrote nothing while a later "
                "one wrote: their rows stay unwritten (the output's poison)"
            )
    short = short_share(record) if even else None
    if short:
        launch, x, words, full = short
        return (
            f"at {at}, program {x:,} of {launch['grid']:,} of {launch['kernel']} wrote {words:,} words where others "
            f"wrote {full:,}: some of its rows stay unwritten (the output's poison)"
        )
    if not record or not all(launch["ran"] for launch in record) or not outputs or not outputs[-1].numel():
        return ""
    if bool(written_elements(outputs[-1].reshape(-1)[-1:]).all()):
        return ""
    idle = next((launch for launch in record if launch["idle_from"] is not None), None)
    why = f": programs from {idle['idle_from']:,} of {idle['grid']:,} of {idle['kernel']} wrote nothing" if idle else ""
    return f"at {at}, the call's last element was never written{why} (the output's poison)"


def written_elements(out: torch.Tensor) -> torch.Tensor:
    """Whether each element of `out` holds anything but the poison (a block of elements need not end at a row)."""
    return out.detach().contiguous().view(torch.uint8).view(*out.shape, out.element_size()).ne(NAN_BYTE).any(dim=-1)


def touched_rows(out: torch.Tensor) -> tuple[torch.Tensor, int | None]:
    """(the indices of the rows of `out` (..., width) the sampled programs wrote, a written row left partly poison
    or None)."""
    element = written_elements(out.reshape(-1, out.shape[-1]))
    any_, all_ = element.any(dim=1), element.all(dim=1)
    partial = (any_ & ~all_).nonzero()
    return any_.nonzero().flatten(), (int(partial[0]) if partial.numel() else None)


def kind_of(name: str) -> str:
    """A case's sampled kind, from its name (the longest kind it starts with); "" for a case run whole."""
    kinds = (SAMPLED_ELEMENTS_CASE, SAMPLED_HEADS_CASE, SAMPLED_CASE)
    return next((kind for kind in kinds if name.startswith(kind + " ")), "")


def summary(case: int, record: list[dict]) -> list[dict]:
    """The child's fact of a sampled run: per launch, its kernel, its programs and how many ran (0: too coarse)."""
    return [
        {"case": case, "kernel": launch["kernel"], "grid": launch["grid"], "ran": len(launch["ran"])}
        for launch in record
    ]


def described(facts: list, names: list[str]) -> list[str]:
    """The verdict's words for the child's sampled runs (`facts`, data from the child: read defensively), by case
    name."""
    out = []
    for fact in facts if isinstance(facts, list) else []:
        try:
            case, kernel, grid, ran = int(fact["case"]), str(fact["kernel"])[:80], int(fact["grid"]), int(fact["ran"])
        except (KeyError, TypeError, ValueError):
            continue
        name = names[case] if 0 <= case < len(names) else f"case {case}"
        out.append(
            f"the served range on a CPU ({name}): {ran:,} of {grid:,} programs of {kernel} ran, each as in the whole "
            "launch"
            if ran
            else f"the served range on a CPU ({name}): {kernel}'s {grid:,} programs each walk thousands of rows: "
            "none ran; its loops are the dataflow check's"
        )
    return out


class SampledRun:
    """One run of a sampled case in the sandbox child: the `context` its call runs in, then `finish`, which reads
    what the programs did. `outputs`: the call's outputs as the wrapper allocates them (None: a run only the fences
    need, which looks for no writes). `subject`: the family's (services.ops.protocol.Subject), whose case it is. A
    persistent grid gets a program a row (`only`'s `sms`)."""

    def __init__(self, seed: int, case: int, kind: str, subject, outputs: list[torch.Tensor] | None):
        self.case, self.outputs, self.record = case, outputs, []
        self.shape = tuple(subject.case_tensors(case)[0].shape)  # the case's input: its rows
        self.even = kind != SAMPLED_HEADS_CASE  # whether each program's share must be the same
        watched = (lambda: outputs) if outputs is not None else None
        self.context = only(seed, watched, self.record, sms=math.prod(self.shape[:-1]))

    def finish(self, done: CaseRun, facts: dict, first: bool) -> CaseRun:
        """The run's outcome (`done`, or `nan-output` where a program skipped its rows); a `first` run's sample
        goes into the child's `facts` for the verdict's evidence."""
        if first and self.record:
            facts.setdefault("sampled", []).extend(summary(self.case, self.record))
        why = self.outputs is not None and silent_programs(self.record, self.shape, self.outputs, self.even)
        return CaseRun(problem=("nan-output", why)) if why and not done.problem else done
