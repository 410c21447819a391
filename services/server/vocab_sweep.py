"""Parity's sweep of the vocabulary, before the patch: the served model's own activations.

Why: the judge draws its inputs, so a kernel keyed to values only the served model produces is beyond it (red-team
kernels carried fingerprints, Σx and Σx², of a few tokens' rows and scaled only a matching row, through arithmetic
on their loads). Those values are a finite set where they depend on one token: layer 0's input at any position is
an embedding row, and every layer's state at position 0 depends on the first token alone. So every token of the
vocabulary is run alone (one row each) through the model's own forward, with no cache, and each call of the target
is answered twice: by the module (what the model carries on with) and by the candidate on clones of the same
inputs; a row the candidate gets wrong names its token. The tokens go in an order drawn from the swap's seed, in
calls of 1, 2, 4, ... rows up to CHUNK (the row counts of decode steps too), each call in a short hold of its own
(requests are served between them). Where a lone token's states do not depend on its position (a rotary model:
with one key, attention is its own value), each token is given a position drawn over the served range, so a rotation
meets real angles: at position 0 it is the identity, and a RoPE kernel keyed to a token's q and wrong only where it
rotates would pass. Then a prompt whose tokens recur at every distance up to its length (`recurring_prompt`, as long
as the model's longest sequence up to RECURRING; the judge's nested ruler: services.core.recurrence) through the same
forward: a prefill's layer-0 rows (a norm's, a residual's beside an attention output that does not repeat, RoPE's q
and k at positions apart) equal at every distance, where kernels keyed to equal rows farther apart than the judge's
cases are wrong. What it does not reach: a later layer's state at a later position (it depends on the prefix), a
kernel keyed to one token at one row count, or one position, it happened not to meet, and equal rows of two
sequences of a batched prefill farther apart than one sequence is long.

Every candidate call is timed against the judge's per-call limit (services.server.call_watch, the server's one
clock): the prompt can be far longer than anything the judge ran, and a kernel whose loops grow with the rows (the
dataflow check bounds them by shapes, not by how fast they grow) would hold the model for minutes before the patch.
A call that returns past its limit ends the sweep with the limit's line (`OverLimit`); one still running at its
deadline ends it at once (`StillRunning`, the model left held by the call that cannot be stopped): the service
records the refusal, then exits for its supervisor to restart it, as a live call that does not return does.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import torch

from services.core.call_limits import call_bytes
from services.core.pb import events_pb2 as pb
from services.core.recurrence import repeated_sources
from services.core.tolerances import within
from services.server.call_watch import LiveClock
from services.server.engine import Engine
from services.server.functions import site_of, wrapped
from services.server.hotswap import is_patched, module_bytes
from services.server.introspection import instances_of
from services.server.parity import call_recorder, clone_values, tensors_in

CHUNK = {"cuda": 4096, "cpu": 128}  # the most rows one call holds (a 1.5B-shaped forward of 4096 rows: tens of ms)
WRONG_KEPT = 8  # wrong tokens recorded (the first ones met)
PROBE_TOKENS = 8  # tokens run at position 0 and at drawn positions, to learn whether positions move the states
# The recurring prompt's most tokens: the model's longest sequence up to these. Its distances must reach what one
# call's rows can be apart: a persistent program looking 128 rows ahead passed a prompt of 128 (red-team round 12).
# Rows of two sequences of a batched prefill can stand farther apart than one sequence is long: not reached.
RECURRING = {"cuda": 32768, "cpu": 1024}
WHAT = "a sweep call of "  # how a sweep call's limit line begins


class OverLimit(Exception):
    """A candidate's sweep call came back past its per-call limit: its message is the limit's line."""


class StillRunning(OverLimit):
    """A candidate's sweep call was still running at its deadline: it holds the engine thread, which nothing frees."""


def chunks(vocab: int, seed: int, largest: int) -> list[list[int]]:
    """Every token id once, in an order drawn from `seed`, cut into calls of 1, 2, 4, ... rows, then `largest`."""
    order = list(range(vocab))
    random.Random(seed).shuffle(order)
    out, start, size = [], 0, 1
    while start < vocab:
        out.append(order[start : start + size])
        start, size = start + size, min(2 * size, largest)
    return out


@dataclass
class Tally:
    """What the sweep found so far."""

    tokens: int = 0
    checked: int = 0
    passed: int = 0
    max_abs: float = 0.0
    wrong: list[int] = field(default_factory=list)
    seconds: float = 0.0
    max_position: int = 0
    recurring: int = 0  # the recurring prompt's tokens

    def record(self, observed: pb.ParityObservation) -> None:
        observed.sweep_tokens, observed.sweep_calls_checked = self.tokens, self.checked
        observed.sweep_calls_passed, observed.sweep_max_abs_err = self.passed, self.max_abs
        observed.sweep_wrong_tokens.extend(self.wrong[:WRONG_KEPT])
        observed.sweep_s, observed.sweep_max_position = self.seconds, self.max_position
        observed.sweep_recurring_tokens = self.recurring

    def compare(self, got: object, want: object, tokens: list[int]) -> None:
        """One call: the candidate's outputs against the module's, row by row where rows are the tokens (only while
        fewer than WRONG_KEPT wrong tokens are known: past them the rows are not named, and a kernel wrong everywhere
        is not checked row by row over the whole vocabulary)."""
        gots, wants = tensors_in(got), tensors_in(want)
        ok = len(gots) == len(wants) > 0
        naming = len(self.wrong) < WRONG_KEPT
        wrong: set[int] = set()
        for g, w in zip(gots, wants, strict=False):
            close, abs_err, _ = within(g, w)
            self.max_abs = max(self.max_abs, abs_err)
            if close:
                continue
            ok = False
            if not naming:
                continue
            along = [d for d in range(g.dim() - 1) if g.shape[d] == len(tokens)] if g.shape == w.shape else []
            if along:  # a row per token (a lone token's call, or a position of the prompt's): name the wrong ones
                d = along[-1]
                wrong.update(t for i, t in enumerate(tokens) if not within(g.select(d, i), w.select(d, i))[0])
            else:
                wrong.add(tokens[0])
        self.checked += 1
        self.passed += ok
        self.wrong.extend(t for t in sorted(wrong) if t not in self.wrong)


def recurring_prompt(vocab: int, length: int, seed: int) -> list[int]:
    """`length` tokens, a few drawn from the vocabulary, recurring at every distance up to `length` - 1: the token at
    the nested ruler's marks of each of two halves one token (services.core.recurrence.repeated_sources)."""
    src = repeated_sources(length, torch.Generator().manual_seed(seed)).tolist()
    chosen = random.Random(seed).sample(range(vocab), min(vocab, max(src) + 1))
    return [chosen[i % len(chosen)] for i in src]


def _forward(engine: Engine, tokens: list[int], positions: list[int] | None, sequence: bool = False):
    """One forward of `tokens`, each a sequence of one at its position (0 where `positions` is None), or all of them
    one sequence (`sequence`: only its last position's logits, where the model can say so; a 32,768-token prompt's
    whole logits would be 10 GB on a vocabulary of 152k): the logits."""
    device = engine.loaded.device
    ids = torch.tensor(tokens, dtype=torch.long, device=device).view((1, -1) if sequence else (-1, 1))
    where = {} if positions is None else {"position_ids": torch.tensor(positions, device=device).view(-1, 1)}
    if sequence and engine.keeps_last:
        where["logits_to_keep"] = 1
    with torch.inference_mode():
        return engine.model(input_ids=ids, use_cache=False, **where).logits


def positions_stay(engine: Engine, seed: int) -> bool:
    """On the engine thread: whether a few lone tokens give the same logits at position 0 and at positions drawn over
    the served range (a rotary model's do: one key, attention is its own value; absolute position embeddings move
    them, as may a model that takes no position ids)."""
    rng = random.Random(seed)
    tokens = [rng.randrange(engine.loaded.vocab_size) for _ in range(PROBE_TOKENS)]
    positions = [1 + rng.randrange(max(1, engine.loaded.max_positions - 1)) for _ in tokens]
    try:
        return bool(within(_forward(engine, tokens, positions), _forward(engine, tokens, None))[0])
    except (TypeError, ValueError, RuntimeError, IndexError):  # position ids it cannot take: position 0 alone
        return False


def timed_call(call: Callable, what: str, clock: LiveClock, on_hung: Callable[[str], None]) -> Callable:
    """`call(module, args, kwargs)` on `clock` against the per-call limit of the bytes it moves (its tensors, twice,
    and the module's state); one that comes back past the limit raises OverLimit. A GPU call is waited for inside
    the clock (a launch returns before its kernel ends; the comparison reads the output right after anyway)."""

    def timed(module, args, kwargs):
        leaves = tensors_in((args, kwargs))
        if not leaves:
            return call(module, args, kwargs)
        moved = call_bytes(t.numel() * t.element_size() for t in leaves) + module_bytes(module)
        device = leaves[0].device.type
        with clock.call(what, tuple(leaves[0].shape), moved, device, on_hung) as t:
            out = call(module, args, kwargs)
            if device == "cuda":
                torch.cuda.synchronize(leaves[0].device)
        if t.late:
            raise OverLimit(t.late)
        return out

    return timed


def check_chunk(
    engine: Engine,
    contract: pb.Contract,
    call: Callable,
    tokens: list[int],
    tally: Tally,
    positions: list[int] | None = None,
    sequence: bool = False,
) -> None:
    """On the engine thread (inside `exclusive`): one forward of `tokens`, each a sequence of one (at `positions`, or
    0), or all one sequence (`sequence`), with the target's every call answered by the candidate too (`call`:
    kernels.bind of the entry, or `timed_call` of it). Where a kernel answers the module now (a swap serving the
    target), the reference is the module's own forward, called on clones of the inputs."""

    def hook(module, args, kwargs, output):
        if is_patched(module):  # the kernel's output is no reference
            output = type(module).forward(module, *clone_values(args), **clone_values(kwargs))
        tally.compare(call(module, clone_values(args), clone_values(kwargs)), output, tokens)

    with contextlib.ExitStack() as stack:
        if contract.kind == "function":
            site = site_of(contract.target)
            if site is not None:
                stack.enter_context(wrapped(site, call_recorder(site, hook)))
        else:
            for module in instances_of(engine.model, contract.target):
                stack.callback(module.register_forward_hook(hook, with_kwargs=True).remove)
        _forward(engine, tokens, positions, sequence)
    if sequence:
        tally.recurring += len(tokens)
        return
    tally.tokens += len(tokens)
    tally.max_position = max(tally.max_position, *(positions or [0]))


async def sweep(
    engine: Engine,
    contract: pb.Contract,
    call: Callable,
    seed: int,
    observed: pb.ParityObservation,
    clock: LiveClock | None = None,
):
    """The whole vocabulary, a hold per call; its figures into `observed` (an exception: the caller's to record).
    Each token at a position drawn over the served range where positions leave a lone token's states as they are.
    With `clock`, every candidate call is timed against its limit (OverLimit, StillRunning: see the module)."""
    tally, started = Tally(), time.perf_counter()
    rng = random.Random(seed + 1)
    loop = asyncio.get_running_loop()
    hung: asyncio.Future[str] = loop.create_future()
    if clock is not None:
        on_hung = lambda detail: loop.call_soon_threadsafe(_settle, hung, detail)  # noqa: E731 (the watchdog thread)
        call = timed_call(call, WHAT + contract.target, clock, on_hung)
    try:
        device = "cuda" if engine.cuda else "cpu"
        drawn = await engine.exclusive(positions_stay, engine, seed)
        for tokens in chunks(engine.loaded.vocab_size, seed, CHUNK[device]):
            positions = [rng.randrange(engine.loaded.max_positions) for _ in tokens] if drawn else None
            await _unless_hung(engine.exclusive(check_chunk, engine, contract, call, tokens, tally, positions), hung)
        length = min(RECURRING[device], engine.loaded.max_positions)
        prompt = recurring_prompt(engine.loaded.vocab_size, length, seed + 2)
        if prompt:
            await _unless_hung(engine.exclusive(check_chunk, engine, contract, call, prompt, tally, None, True), hung)
    finally:
        tally.seconds = time.perf_counter() - started
        tally.record(observed)


def _settle(future: asyncio.Future, detail: str) -> None:
    if not future.done():
        future.set_result(detail)


async def _unless_hung(work: Awaitable, hung: asyncio.Future):
    """`work`'s result, or StillRunning as soon as `hung` says a call in it is past its deadline: the work is left
    running (cancelling it would wait for the call that does not come back) and the engine stays held."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning if it fails after
    await asyncio.wait({task, hung}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        return task.result()
    raise StillRunning(hung.result())
