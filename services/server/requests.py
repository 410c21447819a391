"""One generation path for both public APIs (gRPC `Inference.Generate`, the OpenAI-compatible HTTP API): the checks a
request passes before the engine takes it, the refusal of a full server, and the text it streams.

A refusal is a `BadArgument` (an `engine.BadRequest`) naming the argument at fault in the caller's own words
("max_new_tokens" over gRPC, "max_tokens" over HTTP), so each API answers it with its own status and field name.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from services.core import limits
from services.server.engine import MAX_NEW_TOKENS, BadRequest, Engine
from services.server.sampling import Sampling
from services.server.stops import StopScanner, stops_problem
from services.server.tokenizer import IncrementalText


class BadArgument(BadRequest):
    """A request the server refuses; `param` names the argument at fault (None: the request as a whole)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def room(engine: Engine, prompt_tokens: int) -> int:
    """The most new tokens a prompt of `prompt_tokens` may ask for: it and they fit the model's positions."""
    return min(MAX_NEW_TOKENS, engine.loaded.max_positions - prompt_tokens)


def check_new_tokens(engine: Engine, prompt_tokens: int, max_new_tokens: int, param: str = "max_new_tokens") -> None:
    """BadArgument naming the model's real bound unless a prompt of `prompt_tokens` may ask for this many new tokens:
    prompt + new tokens must fit the model's positions (and new tokens stay within MAX_NEW_TOKENS)."""
    positions = engine.loaded.max_positions
    bound = room(engine, prompt_tokens)
    if bound < 1:
        raise BadArgument(
            f"the prompt's {prompt_tokens} tokens leave no room in the model's {positions} positions", "prompt"
        )
    if not 1 <= max_new_tokens <= bound:
        raise BadArgument(
            f"{param} must be 1..{bound} for a prompt of {prompt_tokens} tokens (prompt + new tokens must fit "
            f"the model's {positions} positions), got {max_new_tokens}",
            param,
        )


@dataclass(frozen=True)
class Checked:
    ids: list[int]
    max_new_tokens: int


def check_request(
    engine: Engine,
    *,
    prompt: str = "",
    token_ids: Sequence[int] = (),
    max_new_tokens: int | None,
    sampling: Sampling,
    stop: Sequence[str] = (),
    tokens_param: str = "max_new_tokens",
    encode: Callable[[str], list[int]] | None = None,
) -> Checked:
    """The prompt's token ids (`token_ids`, else `prompt` encoded) and the new tokens to generate (None: as many as
    fit) after every check a request must pass; BadArgument says what is wrong. The prompt is bounded before it is
    encoded (encoding runs on the event loop); `encode` is the engine's unless given (a chat template's text)."""
    problem = limits.generate_problem(len(prompt), len(token_ids))
    if problem:
        raise BadArgument(problem, "prompt")
    ids = list(token_ids) if token_ids else (encode or engine.encode)(prompt) if prompt else []
    if max_new_tokens is None:
        max_new_tokens = max(room(engine, len(ids)), 1)  # no room: check_new_tokens says so
    if ids:  # an empty prompt is engine.check's to refuse
        check_new_tokens(engine, len(ids), max_new_tokens, tokens_param)
    try:
        engine.check(ids, max_new_tokens, sampling)
    except BadRequest as exc:
        raise BadArgument(str(exc), _sampling_param(sampling) if str(exc) == sampling.problem() else "prompt") from None
    problem = stops_problem(list(stop))
    if problem:
        raise BadArgument(problem, "stop")
    return Checked(ids, max_new_tokens)


def _sampling_param(sampling: Sampling) -> str:
    return "temperature" if Sampling(temperature=sampling.temperature).problem() else "top_p"


def busy_problem(engine: Engine) -> str:
    """Why the server takes no more requests now ("" when it does). Check it with no await before the request starts
    (iterating `generate_text`), so the count it reads is exact."""
    if engine.active < engine.max_active:
        return ""
    return (
        f"{engine.active} requests are being generated, the most this server takes at once "
        "(YANTRA_MAX_REQUESTS); retry later"
    )


@dataclass(frozen=True)
class Piece:
    """One step's tokens and the text that may be sent for them (held back near a stop string or a split
    character)."""

    token_ids: list[int]
    text: str


@dataclass(frozen=True)
class Ended:
    """The end of a request: the text still held, why it ended (length | eos | stop), what it took."""

    text: str
    finish_reason: str
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


async def generate_text(
    engine: Engine,
    ids: list[int],
    max_new_tokens: int,
    *,
    sampling: Sampling,
    stop: Sequence[str] = (),
    ignore_eos: bool = False,
) -> AsyncIterator[Piece | Ended]:
    """A Piece per step, then one Ended. The engine counts the request active within the first step of iteration,
    with no await before it. Closing the iterator early cancels the request; a stop string ends it as answered."""
    text = IncrementalText(engine.tokenizer)
    stops = StopScanner(list(stop))
    eos = None if ignore_eos else engine.tokenizer.eos_token_id
    produced, finish = 0, "length"
    t0 = time.perf_counter()
    answered = asyncio.Event()  # set at a stop string: the request ends early, answered, not cancelled
    chunks = engine.generate(ids, max_new_tokens, stop_at_eos=not ignore_eos, sampling=sampling, answered=answered)
    async with contextlib.aclosing(chunks):  # leaving early (a stop string, a caller gone) cancels the request
        async for chunk in chunks:
            produced += len(chunk)
            yield Piece(chunk, stops.push(text.push(chunk)))
            if stops.stopped:
                finish = "stop"
                answered.set()
                break
            if eos is not None and eos in chunk:
                finish = "eos"
    rest = "" if stops.stopped else stops.flush(text.flush())
    yield Ended(rest, finish, produced, time.perf_counter() - t0)
