"""The engine: the one place the model runs. Every forward pass and every swap goes through one lock and one
worker thread, so a swap always lands between forward passes, never inside one.

Requests are served by continuous batching (services.server.batching): they join one running batch over a
slot cache and are stepped together, one forward per step for all of them; on a GPU each step is a
CUDA graph (services.server.batch_decode). The lock is released between steps, so a waiting swap gets
the model at the next step boundary, and a swap makes the next step capture again. A request longer than
the slot cache decodes alone, step by step over a dynamic cache (the solo lane). Profiling, parity and
canaries use the eager lane (`decode`), where module hooks fire and forwards can be compared; what is
served, and measured as served, is the batched lane.

Work on the engine thread stops when its caller gives up: a thread cannot be cancelled, so when the coroutine
awaiting `exclusive` is cancelled (a gRPC client's deadline passed, or it cancelled the call) a flag is set that
the decode loops check between steps (`check_cancelled`), and the model is handed on once the work has stopped.
Without it a MeasureDecode whose caller had long gone kept the model, and every Generate queued behind it.

Over 400 lines, one file: it is the one place the model runs, and every lane (batched, solo, eager), profile,
measure and swap shares its lock and its worker thread; the lanes' own work lives apart (batching, batch_decode,
slot_cache, profiling, parity).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from services.core.pb import events_pb2 as pb
from services.server.batch_decode import PREFILL_GROUPS, SlotDecoder, lane_refusal
from services.server.batching import END, Batcher, Request
from services.server.calibrate import calibrate
from services.server.functions import function_state
from services.server.hotswap import SwapHandle, apply_swap, first_forward
from services.server.introspection import dtype_name, instances_of, introspect_module
from services.server.latency_parts import CAPTURE, FIRST_HANDOFF, HANDOFF, PREFILL, QUEUE, TICK
from services.server.models import LoadedModel, error_line
from services.server.profiling import ModuleProfiler
from services.server.sampling import GREEDY, Sampling, choose, generator
from services.server.slot_cache import slot_cache_problem
from services.server.stats import RequestStats

log = logging.getLogger(__name__)

MAX_NEW_TOKENS = 4096
MAX_ACTIVE = 64  # requests generated at once; more are refused (RESOURCE_EXHAUSTED) rather than queued unbounded
# Slots of the batched lane (requests stepped together) and tokens per slot. Every step attends over the
# whole slot, so the length is what a request may use, not free: 2048 tokens of the 1.5B shape are 56 MB
# per slot in bf16. Requests longer than a slot decode in the solo lane.
BATCH_SLOTS = {"cuda": 64, "cpu": 8}
TICKS_PER_HOLD = 256  # decode steps the batch loop runs per hold of the model while nobody else waits
SLOT_TOKENS = 2048
# The idle engine captures stale graphs one at a time, this long apart: a request arriving meanwhile waits for
# one capture at most (~0.1-0.7 s on the H200), never for all of them.
FILL_PAUSE_S = 0.05
# Under traffic that never pauses the engine is never idle, and a kernel committed then would never serve in the
# graphs the steps replay. So between holds of the batch loop, at most once this often, the graph the running
# requests step through next is captured with the kernels serving now: every stream waits for that one capture.
CAPTURE_UNDER_LOAD_S = 5.0


class BadRequest(ValueError):
    """A request the model cannot serve (empty, out-of-vocabulary ids, too long); the message says why."""


_MORE = object()  # take_ready: the request goes on


def capture_due(since_last_s: float, every_s: float) -> bool:
    """Whether the batch loop may stall its streams for a capture now: none in the last `every_s` seconds."""
    return since_last_s >= every_s


def take_ready(first, queue: asyncio.Queue) -> tuple[list[int], object]:
    """The tokens a request's queue holds now, from `first` on, as one chunk, and how it ends: END, an exception,
    or _MORE. A stream whose reader fell behind the engine (the event loop busy with many streams) gets what piled
    up in one message instead of one each, so the cost of handing tokens over does not grow per token with the
    number of streams."""
    tokens: list[int] = []
    item = first
    while True:
        if item is END or isinstance(item, BaseException):
            return tokens, item
        tokens.extend(item)
        if queue.empty():
            return tokens, _MORE
        item = queue.get_nowait()


class WorkCancelled(Exception):
    """Raised on the engine thread at a check point once the caller of `exclusive` has been cancelled."""


@dataclass
class DecodeState:
    cache: object
    keep_logits: bool = False
    logits: list[torch.Tensor] = field(default_factory=list)
    sampling: Sampling = GREEDY
    gen: torch.Generator | None = None


@dataclass(frozen=True)
class DecodeMeasurement:
    tokens_per_s: float
    tokens: int
    seconds: float


class ModelNotServable(ValueError):
    """The model loaded but cannot decode here (it wants a cache of its own, say): refused at load, never served."""


class Engine:
    def __init__(
        self,
        loaded: LoadedModel,
        *,
        hardware: pb.HardwareFigures | None = None,
        max_active: int = MAX_ACTIVE,
        graphs: bool | None = None,
        slots: int | None = None,
        slot_tokens: int = SLOT_TOKENS,
        prefill_groups: int = PREFILL_GROUPS,
    ):
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.cuda = loaded.device.startswith("cuda")
        self.dtype = dtype_name(loaded.dtype)
        self.hardware = hardware if hardware is not None else calibrate(loaded.device)
        self.stats = RequestStats()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._lock = asyncio.Lock()
        self.waiting = 0  # callers waiting for the model
        self.active = 0  # requests being generated
        self.working = ""  # the name of the work on the engine thread now ("" when none)
        self.works_cancelled = 0  # works stopped part-way because their caller gave up
        self._stop: threading.Event | None = None  # the flag of the work on the engine thread
        self.max_active = max_active
        self.live_inputs: dict = {}  # class path -> real calls recorded at the last profile (parity replays them)
        params = inspect.signature(self.model.forward).parameters
        # transformers 5.24 renamed past_key_values to cache; the GPU machine runs 5.17.
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.keeps_last = "logits_to_keep" in params  # the forward can compute the last position's logits alone
        # The batched lane: slots stepped together, each step a CUDA graph on a GPU unless graphs=False.
        slots = BATCH_SLOTS["cuda" if self.cuda else "cpu"] if slots is None else slots
        length = min(slot_tokens, loaded.max_positions)
        self.lane_problem = "no slots (batching off)" if slots < 1 else slot_cache_problem(self.model, length)
        self.decoder: SlotDecoder | None = None
        self.batcher: Batcher | None = None
        if self.lane_problem is None:
            self.decoder = SlotDecoder(
                self.model,
                loaded.device,
                loaded.dtype,
                slots,
                length,
                self._cache_kw,
                graphs=graphs is not False,
                prefill_groups=prefill_groups,
            )
            self.lane_problem = lane_refusal(self.decoder)
            if self.lane_problem:
                log.warning("batched lane off, requests decode alone: %s", self.lane_problem)
                self.decoder = None
            else:
                self.batcher = Batcher(self.decoder)
        self.graphs = self.decoder is not None and self.decoder.graphs
        self._batches: asyncio.Task | None = None
        self._filler: asyncio.Task | None = None
        self._captured_under_load = -math.inf  # when the batch loop last captured a graph (`_capture_under_load`)
        problem = self._solo_refusal()
        if problem:
            self.close()
            raise ModelNotServable(problem)
        if self.graphs:  # every step's graph before the first request: none is captured on the request path
            count, seconds = self.decoder.capture_all()
            log.info("captured %d CUDA graphs of the batched lane in %.1f s", count, seconds)

    def close(self) -> None:
        if self._filler is not None:
            self._filler.cancel()
        self._pool.shutdown(wait=True)

    def _solo_refusal(self) -> str | None:
        """Why the model cannot decode alone over a dynamic cache, found by trying two steps; None when it can. The
        lane every request falls back to: a model that raises there (MiniMax and xLSTM want caches of their own)
        would fail every request, so it is refused at load with its own error."""
        try:
            self.decode([0, 0], 2)
        except Exception as exc:  # any architecture's own error
            return f"{self.loaded.name} does not decode over a dynamic cache here ({error_line(exc, 200)})"
        return None

    # ------------------------------------------------------------------ exclusive access

    async def exclusive(self, fn: Callable, *args):
        """Run fn(*args) on the engine thread with the model to itself (swaps, profiles, canaries).

        If the caller is cancelled meanwhile, the work is told to stop (it raises WorkCancelled at its next
        `check_cancelled`: the decode loops check every step) and the model is held until it has stopped, so the
        next caller is not queued behind work nobody waits for; then CancelledError goes on to the caller.
        """
        self.waiting += 1  # the queue depth: callers waiting for the model (one event loop: no lock needed)
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        try:
            stop = threading.Event()
            work = asyncio.wrap_future(self._pool.submit(self._run_work, stop, fn, args))
            try:
                return await asyncio.shield(work)  # shielded: cancelling the caller must not orphan the thread's work
            except asyncio.CancelledError:
                stop.set()
                await _settled(work)
                raise
        finally:
            self._lock.release()
            self._fill_graphs_soon()

    def _fill_graphs_soon(self) -> None:
        """After any work on the model (a swap, a revert, a batch of requests): graphs no longer of the kernels
        serving now are captured again in the background, one at a time while the engine is idle."""
        if self.graphs and (self._filler is None or self._filler.done()):
            self._filler = asyncio.get_running_loop().create_task(self._fill_graphs())

    def graphs_stale(self) -> int:
        """Graphs of the batched lane not yet captured with the kernels serving now (0 without graphs)."""
        return len(self.decoder.stale_keys()) if self.graphs else 0

    def _idle(self) -> bool:
        return not self.waiting and not self.active and (self.batcher is None or self.batcher.idle())

    async def _fill_graphs(self) -> None:
        while self.decoder.stale_keys():
            await asyncio.sleep(FILL_PAUSE_S)  # traffic first: a request arriving now does not wait for a capture
            if self._idle() and not self._lock.locked():
                try:
                    await self.exclusive(self.decoder.capture_stale)
                except Exception:  # the steps it would serve run eagerly meanwhile; the next work on the model retries
                    log.exception("capturing a CUDA graph of the batched lane failed")
                    return

    def _run_work(self, stop: threading.Event, fn: Callable, args: tuple):
        self._stop, self.working = stop, getattr(fn, "__name__", "work")
        try:
            return fn(*args)
        except WorkCancelled:
            self.works_cancelled += 1  # written on the engine thread only
            log.info("%s stopped part-way: its caller gave up", self.working)
            raise
        finally:
            self._stop, self.working = None, ""

    def check_cancelled(self) -> None:
        """Between units of work on the engine thread (a decode step, a repeat): raise WorkCancelled once the
        caller of `exclusive` has been cancelled. Outside `exclusive` (loading, a bench) there is no caller: no-op."""
        stop = self._stop
        if stop is not None and stop.is_set():
            raise WorkCancelled(f"{self.working}: its caller gave up")

    # ------------------------------------------------------------------ requests

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt)

    def check(self, ids: list[int], max_new: int, sampling: Sampling = GREEDY) -> None:
        if not ids:
            raise BadRequest("the prompt is empty: give a prompt or token ids")
        if not 1 <= max_new <= MAX_NEW_TOKENS:
            raise BadRequest(f"max_new_tokens must be 1..{MAX_NEW_TOKENS}, got {max_new}")
        vocab = self.loaded.vocab_size
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise BadRequest(f"token ids {bad[:5]} are outside the vocabulary 0..{vocab - 1}")
        if len(ids) + max_new > self.loaded.max_positions:
            raise BadRequest(
                f"{len(ids)} prompt tokens + {max_new} new tokens exceed the model's "
                f"{self.loaded.max_positions} positions"
            )
        problem = sampling.problem()
        if problem:
            raise BadRequest(problem)

    def batched(self, ids: list[int], max_new: int) -> bool:
        """Whether a request is served by the batched lane (it fits a slot) or alone."""
        return self.decoder is not None and self.decoder.fits(len(ids) + max_new)

    async def generate(
        self,
        ids: list[int],
        max_new: int,
        stop_at_eos: bool = True,
        sampling: Sampling = GREEDY,
        answered: asyncio.Event | None = None,
    ) -> AsyncIterator[list[int]]:
        """Tokens as they are produced: each chunk holds what was produced since the caller last took one (one token
        when it keeps up). Closing the iterator cancels the request; a caller that set `answered` before closing it
        had what it asked for (a stop string): the request counts as ok."""
        try:
            self.check(ids, max_new, sampling)
        except BadRequest:
            self.stats.finished("bad_request")
            raise
        eos = self.tokenizer.eos_token_id if stop_at_eos else None
        t0 = time.perf_counter()
        outcome = "cancelled"  # a consumer that stops iterating (a client gone) ends the generator here
        self.active += 1
        last = None
        try:
            lane = self._batched if self.batched(ids, max_new) else self._solo
            async for chunk in lane(ids, max_new, eos, sampling):
                now = time.perf_counter()
                self.stats.tokens(len(chunk))
                if last is None:
                    self.stats.first_token(now - t0)
                else:
                    self.stats.next_token(now - last)
                last = now
                yield chunk
            outcome = "ok"
        except Exception:
            outcome = "error"
            raise
        finally:
            if outcome == "cancelled" and answered is not None and answered.is_set():
                outcome = "ok"
            self.active -= 1
            self.stats.request_done(time.perf_counter() - t0)
            self.stats.finished(outcome)

    async def _batched(self, ids, max_new, eos, sampling) -> AsyncIterator[list[int]]:
        request = Request(list(ids), max_new, sampling, eos)
        self.batcher.pending.append(request)
        self._run_batches()
        try:
            while True:
                tokens, end = take_ready(await request.out.get(), request.out)
                if tokens:
                    yield tokens
                if isinstance(end, BaseException):
                    raise end
                if end is not _MORE:
                    return
        finally:
            request.cancelled = True  # ended, failed or abandoned: the next tick frees its slot
            self._run_batches()

    def _run_batches(self) -> None:
        if self._batches is None or self._batches.done():
            self._batches = asyncio.get_running_loop().create_task(self._batch_loop())

    async def _batch_loop(self) -> None:
        """Tick the batcher while anything waits or runs. One hold of the model runs ticks back to back until
        someone else waits for it (a swap, a profile, a solo request: they get it after the current step) —
        taking the lock and handing over to the engine thread per step cost ~0.3 ms of a 4 ms step at batch 1
        on the H200. Each tick's tokens are handed to the event loop as soon as the tick ends."""
        loop = asyncio.get_running_loop()
        stats = self.stats

        def deliver(deliveries, ready: float | None = None) -> None:
            now = time.perf_counter()
            if ready is not None:  # how long the tick's tokens waited for the event loop
                stats.latency(HANDOFF, now - ready)
            for request, item in deliveries:
                if not request.delivered and request.first_ready and isinstance(item, list):
                    request.delivered = True
                    stats.latency(QUEUE, request.admitted - request.arrived)
                    stats.latency(PREFILL, request.first_ready - request.admitted)
                    stats.latency(FIRST_HANDOFF, now - request.first_ready)
                request.out.put_nowait(item)

        def ticks() -> None:
            self._capture_under_load()
            for _ in range(TICKS_PER_HOLD):
                start = time.perf_counter()
                deliveries = self.batcher.tick()
                ready = time.perf_counter()
                stats.latency(TICK, ready - start)
                loop.call_soon_threadsafe(deliver, deliveries, ready)
                if self.waiting or self.batcher.idle():
                    return

        while not self.batcher.idle():
            try:
                await self.exclusive(ticks)
            except Exception as exc:
                deliver(self.batcher.fail_all(exc))

    def _capture_under_load(self) -> None:
        """At the start of a hold of the batch loop (engine thread): the next step's graph captured with the kernels
        serving now when it holds others and none was captured so in the last CAPTURE_UNDER_LOAD_S (the idle
        engine captures the rest, `_fill_graphs`)."""
        if not self.graphs or not capture_due(time.monotonic() - self._captured_under_load, CAPTURE_UNDER_LOAD_S):
            return
        start = time.perf_counter()
        if self.decoder.refresh():
            self._captured_under_load = time.monotonic()
            self.stats.latency(CAPTURE, time.perf_counter() - start)

    async def _solo(self, ids, max_new, eos, sampling) -> AsyncIterator[list[int]]:
        """One request alone over a dynamic cache, the lock taken per step (requests longer than a slot)."""
        state, token = await self.exclusive(self._start, ids, False, sampling)
        produced = 1
        yield [token]
        while produced < max_new and token != eos:
            token = await self.exclusive(self._advance, state, token)
            produced += 1
            yield [token]

    # ------------------------------------------------------------------ the decode path (engine thread only)

    def _new_cache(self):
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:
            return DynamicCache()

    def _forward(self, state: DecodeState, ids: list[int]) -> int:
        kwargs = {self._cache_kw: state.cache, "use_cache": True}
        if self.keeps_last:
            kwargs["logits_to_keep"] = 1
        with torch.inference_mode():
            input_ids = torch.tensor([ids], dtype=torch.long, device=self.loaded.device)
            logits = self.model(input_ids=input_ids, **kwargs).logits[0, -1]
            if state.keep_logits:
                state.logits.append(logits.float().cpu())
            return choose(logits, state.sampling, state.gen)

    def _start(self, ids: list[int], keep_logits: bool, sampling: Sampling = GREEDY) -> tuple[DecodeState, int]:
        state = DecodeState(self._new_cache(), keep_logits, sampling=sampling)
        state.gen = generator(sampling, torch.device(self.loaded.device))
        with first_forward():
            return state, self._forward(state, ids)

    def _advance(self, state: DecodeState, feed: int) -> int:
        return self._forward(state, [feed])

    def serve_decode(
        self, ids: list[int], max_new: int, *, forced: list[int] | None = None, keep_logits: bool = False
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy tokens (and per-step logits) of one request on the lane `generate` serves it on, on the
        calling thread: use inside `exclusive`. What decode speed is measured on, and what a swap's canary
        checks after the eager parity (the graphs captured with the kernel in them). Other requests' slots
        stay as they are; with no free slot, the solo lane."""
        self.check_cancelled()  # before each request's prefill and each step: a measure is many of both
        decoder = self.decoder
        slot = decoder.free_slot() if self.batched(ids, max_new) else None
        if slot is None:
            return self.decode(ids, max_new, forced=forced, keep_logits=keep_logits)
        tokens: list[int] = []
        kept: list[torch.Tensor] = []
        try:
            logits = decoder.prefill(slot, ids)
            while True:
                if keep_logits:
                    kept.append(logits.float().cpu())
                tokens.append(int(logits.argmax()))
                if len(tokens) >= max_new:
                    return tokens, kept
                self.check_cancelled()
                feed = forced[len(tokens) - 1] if forced is not None else tokens[-1]
                logits = decoder.step({slot: feed})[slot]
        finally:
            decoder.release(slot)

    def decode(
        self, ids: list[int], max_new: int, *, forced: list[int] | None = None, keep_logits: bool = False
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy tokens (and per-step logits) of one request on the eager lane, on the calling thread: use
        inside `exclusive`. Module hooks fire here (profiles, parity).

        With `forced`, step i+1 is fed forced[i] instead of the model's own choice (teacher forcing), so
        two runs compare logits over the same prefixes even where their greedy choices differ.
        """
        self.check_cancelled()  # before each request's prefill and each step: a profile is many of both
        state, token = self._start(ids, keep_logits)
        tokens = [token]
        while len(tokens) < max_new:
            self.check_cancelled()
            feed = forced[len(tokens) - 1] if forced is not None else token
            token = self._advance(state, feed)
            tokens.append(token)
        return tokens, state.logits

    def forward_without_cache(self, ids: list[int]) -> None:
        """One forward of `ids` with no KV cache, on the calling thread: use inside `exclusive`. A decoder layer's
        calls then carry no cache object, so parity can record and replay them (a replayed call with a cache
        would append to it)."""
        with torch.inference_mode():
            self.model(input_ids=torch.tensor([ids], dtype=torch.long, device=self.loaded.device), use_cache=False)

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    # ------------------------------------------------------------------ measurement

    def _warm_up(self, id_lists: list[list[int]], max_new: int, lane: str = "served") -> None:
        # The longest prompt for the full length, every other prompt's prefill once: each KV-cache length
        # and prefill shape meets its first-call costs (allocator growth, cuBLAS heuristics) here, not in
        # the timing. Measured on the H200 with the 1.5B shape: without it the first measurement after
        # loading read 16 tok/s against 40-58 for the next ones.
        run = self.serve_decode if lane == "served" else self.decode
        longest = max(id_lists, key=len)
        run(longest, max_new)
        for ids in id_lists:
            if ids is not longest:
                run(ids, 1)

    def _measure(self, id_lists: list[list[int]], max_new: int, repeats: int) -> DecodeMeasurement:
        """Median over repeats of each repeat's tokens/s: batch-1 decode is host-bound, and one host hiccup
        (seen: ±20 % between back-to-back runs on the H200 box) should not decide the figure."""
        self._warm_up(id_lists, max_new)
        rates, tokens, seconds = [], 0, 0.0
        for _ in range(repeats):
            self._sync()
            t0 = time.perf_counter()
            n = sum(len(self.serve_decode(ids, max_new)[0]) for ids in id_lists)
            self._sync()
            dt = time.perf_counter() - t0
            rates.append(n / dt if dt > 0 else 0.0)
            tokens, seconds = tokens + n, seconds + dt
        return DecodeMeasurement(statistics.median(rates), tokens, seconds)

    def _encode_all(self, prompts: list[str], max_new: int) -> list[list[int]]:
        if not prompts:
            raise BadRequest("no prompts given")
        id_lists = [self.encode(p) for p in prompts]
        for ids in id_lists:
            self.check(ids, max_new)
        return id_lists

    async def measure_decode(self, prompts: list[str], max_new: int, repeats: int = 1) -> DecodeMeasurement:
        """Tokens per second of greedy requests (prefill included), timed with the device synchronised."""
        id_lists = self._encode_all(prompts, max_new)
        if repeats < 1:
            raise BadRequest(f"repeats must be at least 1, got {repeats}")
        return await self.exclusive(self._measure, id_lists, max_new, repeats)

    async def capture_profile(self, prompts: list[str], max_new: int, repeats: int = 1) -> pb.ProfileObservation:
        """Per-class times of real requests on the decode path, then their decode speed measured without hooks."""
        id_lists = self._encode_all(prompts, max_new)
        if repeats < 1:
            raise BadRequest(f"repeats must be at least 1, got {repeats}")
        return await self.exclusive(self._capture_profile, id_lists, max_new, repeats)

    def _capture_profile(self, id_lists: list[list[int]], max_new: int, repeats: int) -> pb.ProfileObservation:
        self._warm_up(id_lists, max_new, lane="eager")  # the profile hooks the eager lane: warm that one
        self._sync()
        t0 = time.perf_counter()
        with ModuleProfiler(self.model, self.cuda) as prof:
            tokens = sum(len(self.decode(ids, max_new)[0]) for ids in id_lists)
        self._sync()
        captured_us = (time.perf_counter() - t0) * 1e6
        modules = prof.results()
        # Real inputs of every class, taken apart from the timed pass (cloning them there would cost time):
        # parity replays a target's kernel on them (services.server.parity).
        from services.server.parity import record_live_inputs

        self.live_inputs = record_live_inputs(self, id_lists[0], max_new)
        speed = self._measure(id_lists, max_new, repeats=repeats)
        return pb.ProfileObservation(
            model=self.loaded.name,
            dtype=self.dtype,
            hardware=self.hardware,
            modules=modules,
            captured_time_us=captured_us,
            decode_tokens_per_s=speed.tokens_per_s,
            tokens_generated=tokens,
            requests=len(id_lists),
            time_source="cuda_events" if self.cuda else "host_clock",
            **self.input_domain(),
        )

    def input_domain(self) -> dict[str, int]:
        """What one forward of the served model can carry, from the server's limits: the most token rows (a batched
        prefill of every slot at its longest, or one request of the model's maximum positions), the longest
        sequence, the most sequences stepped together (pb.ProfileObservation's fields)."""
        batch, slot_rows = (self.decoder.slots, self.decoder.slots * self.decoder.max_len) if self.decoder else (1, 0)
        positions = int(self.loaded.max_positions)
        return {"max_rows_per_call": max(slot_rows, positions), "max_positions": positions, "max_batch": batch}

    # ------------------------------------------------------------------ changing the model (engine thread only)

    def apply(self, contract: pb.Contract, entry: Callable) -> SwapHandle:
        """Patch the live model — the one way it changes. Call inside `exclusive` (between steps): the graphs
        captured before keep serving (without the kernel) until fresh ones are captured, by a served-lane canary
        at once or when the engine is idle."""
        return apply_swap(self.model, contract, entry)

    def revert(self, handle: SwapHandle) -> int:
        """Undo a patch, then capture again the graph the running requests step through next, before the lock
        is given back (the rest when the engine is idle: a graph holding the kernel is never replayed again, and
        its steps run eagerly meanwhile). Returns how many graphs were captured."""
        handle.revert()
        return self.decoder.refresh() if self.decoder is not None else 0

    # ------------------------------------------------------------------ module state

    def module_state(self, path: str) -> tuple[pb.ModuleIntrospection, int, int] | None:
        """(introspection, instances, instances patched) of a class in the live model, None if absent. A function
        target (a modeling file's global) is one instance, patched when a kernel holds its name."""
        found = instances_of(self.model, path)
        if not found:
            state = function_state(self.model, path)
            if state is None:
                return None
            params, swapped = state
            return pb.ModuleIntrospection(class_path=path, forward_params=params, leaf=True), 1, int(swapped)
        patched = sum("forward" in m.__dict__ for m in found)
        return introspect_module(found[0]), len(found), patched


async def _settled(work: asyncio.Future) -> None:
    """Wait until `work` (the engine thread's) has ended, whatever cancels the waiter meanwhile; its outcome is
    dropped (retrieved, so asyncio does not log it as never retrieved)."""
    while not work.done():
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(work)
    if not work.cancelled():
        work.exception()
