"""The server on the bus: TargetConcluded -> SwapCommitted | SwapRejected, RollbackRequested -> SwapRolledBack.

Order of trust: the log must allow the candidate (judged at or above the policy, same source hash)
before its source is even imported; then the judge's static check runs again here; only then is the
kernel imported, patched in and parity-checked on the live model, all under the engine's lock. The
decision is `domain.swap_outcome`, and anything but a commit is reverted before the lock is released.

A committed kernel that raises while serving falls back to the eager forward at once (services.server.
hotswap); `request_rollbacks` then records that as a RollbackRequested in the swap's own run, answered
like an operator's with a SwapRolledBack, so the log, not process memory, says the kernel is gone.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from services.core import events as ev
from services.core.bus import Bus
from services.core.candidate_check import check_candidate
from services.core.events import Recorded, first
from services.core.kernels import KernelLoadError, bind, candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.core.runner import answers_given
from services.core.settings import Settings
from services.server import call_watch, domain, shadow
from services.server.call_watch import EXIT_HUNG, HUNG_GRACE_S, LiveClock
from services.server.engine import Engine
from services.server.hotswap import SwapRefused, planned
from services.server.models import error_line
from services.server.parity import CANARY_TOKENS, Before, hold_part, record_before, swap_with_parity, warm_kernel
from services.server.swaps import SwapRegistry
from services.server.vocab_sweep import OverLimit, StillRunning, sweep

log = logging.getLogger(__name__)

DEFAULT_CANARY = "The quick brown fox jumps over the lazy dog."
StaticCheck = Callable[[str, pb.LaunchPlan], pb.StaticEvidence]


@dataclass(frozen=True)
class LiveFailure:
    """A committed kernel raised while serving (and the eager forward answered that call instead)."""

    run_id: str
    swap_id: str
    committed_event_id: str
    error: str


class ServerService:
    name = "server"
    consumes = ("TargetConcluded", "RollbackRequested")

    def __init__(
        self,
        engine: Engine,
        data_dir: Path,
        static_check: StaticCheck | None = None,
        swaps: SwapRegistry | None = None,
        shadow_calls: int | None = None,
        vocab_sweep: bool = True,
    ):
        self.engine = engine
        # Every token alone through the candidate before the patch (services.server.vocab_sweep); off only
        # where a test shows what the layers after it catch
        self.vocab_sweep = vocab_sweep
        # Live calls of each committed swap checked inline against the module's own forward (services.server.shadow)
        self.shadow_calls = Settings.from_env().shadow_calls if shadow_calls is None else shadow_calls
        # What this process has swapped, and in what state: the swap handling's own bookkeeping (the engine
        # only runs and changes the model). gRPC, metrics and the shadow check read the same registry.
        self.swaps = swaps if swaps is not None else SwapRegistry()
        self.kernel_dir = Path(data_dir) / "kernels"
        self.static_check = static_check or check_candidate
        self.live_failures: asyncio.Queue[LiveFailure] = asyncio.Queue()
        # TargetConcluded triggers whose sweep left a candidate's call holding the engine (`exit_after_hung_sweeps`)
        self.hung_sweeps: asyncio.Queue[Recorded] = asyncio.Queue()
        # Committed kernels' live calls held to the judge's per-call limit (services.server.call_watch)
        self.clock = LiveClock()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        if trigger.type == "TargetConcluded":
            return await self._on_concluded(trigger, prior)
        if trigger.type == "RollbackRequested":
            return [await self._on_rollback(trigger, prior)]
        return []

    # ------------------------------------------------------------------ swaps

    async def _on_concluded(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        concluded: pb.TargetConcluded = trigger.msg
        if not concluded.swap:
            return []
        existing = self.swaps.get(domain.swap_id_for(trigger))
        if existing is not None and existing.state == "committed":
            # Redelivered after the swap went live but before the answer was published: answer again.
            return [existing.committed]
        outcome = await self._attempt(prior, trigger)
        log.info("%s %s: %s", type(outcome).__name__, concluded.candidate_id, getattr(outcome, "reason", "live"))
        return [outcome]

    async def _attempt(self, prior: list[Recorded], trigger: Recorded) -> pb.SwapCommitted | pb.SwapRejected:
        """Answer a TargetConcluded: the log vouches, the static check passes, parity holds live, or no swap."""
        concluded: pb.TargetConcluded = trigger.msg
        self._loop = asyncio.get_running_loop()  # where the engine thread reports a live failure
        observed = pb.ParityObservation(
            dtype=self.engine.dtype,
            judged_ok=domain.judged_ok(prior, concluded),
            graphs=self.engine.graphs,
            routed=True,
        )
        # never import code the log does not vouch for, nor capture in a graph one never shown to run in one, nor one
        # that would serve no call here (hotswap.serve routes each call by the plan)
        mode = domain.lane_problem(prior, concluded, observed, ev.SCHEMA_VERSION)
        if domain.log_problems(prior, concluded) or mode:
            return domain.swap_outcome(prior, trigger, observed)
        proposed = domain.find_proposed(prior, concluded.candidate_id)
        assert proposed is not None  # log_problems checked it
        entry = await self._static_check_and_load(proposed, observed)
        if entry is None:
            return domain.swap_outcome(prior, trigger, observed)
        canary = self._canary_ids(prior)
        await asyncio.to_thread(warm_kernel, self.engine, proposed.contract, entry)  # compiles outside the hold
        if not await self._swept(proposed.contract, entry, trigger, observed):
            return domain.swap_outcome(prior, trigger, observed)
        # the canary before the patch in a hold of its own: requests run between it and the patch's hold
        before = await self.engine.exclusive(self._record_before, proposed.contract, canary, observed)
        return await self.engine.exclusive(
            self._swap, prior, trigger, proposed.contract, entry, canary, observed, before
        )

    async def _swept(self, contract: pb.Contract, entry, trigger: Recorded, observed: pb.ParityObservation) -> bool:
        """The vocabulary (each token alone) through the candidate, in short holds, before anything is patched; False
        when it found a wrong row, the candidate raised or a call ran past its per-call limit (recorded in
        `observed`; one still running holds the engine: `exit_after_hung_sweeps`). Skipped where the target is
        served by a kernel already (the patch's hold refuses that) or the sweep is off."""
        if not self.vocab_sweep or self.swaps.active_for(contract.target) is not None:
            return True
        swap_id = domain.swap_id_for(trigger)
        seed = int.from_bytes(hashlib.blake2b(swap_id.encode(), digest_size=8).digest(), "little")
        try:
            await sweep(self.engine, contract, bind(contract, entry), seed, observed, self.clock)
        except OverLimit as exc:
            observed.error = f"vocabulary sweep: {exc}"
            if isinstance(exc, StillRunning):
                self.hung_sweeps.put_nowait(trigger)
            return False
        except Exception as exc:  # a kernel that crashes on a token's row is a rejection, never a crashed server
            observed.error = f"vocabulary sweep: {type(exc).__name__}: {error_line(exc, 300)}"
            return False
        return observed.sweep_calls_passed == observed.sweep_calls_checked

    def _record_before(self, contract: pb.Contract, canary: list[int], observed: pb.ParityObservation) -> Before | None:
        """Parity's step 1 on the engine thread; None when it cannot be recorded (the patch's hold then tries again
        and records why)."""
        with hold_part(observed, "record_apart"):
            try:
                return record_before(self.engine, contract, canary)
            except (SwapRefused, TypeError):
                return None

    async def _static_check_and_load(self, proposed: pb.CandidateProposed, observed: pb.ParityObservation):
        try:
            evidence = await asyncio.to_thread(self.static_check, proposed.source, proposed.plan)
        except Exception as exc:  # a checker that crashes is a failed check, not a crashed server
            observed.error = f"static check raised {type(exc).__name__}: {exc}"
            return None
        observed.static_ok = bool(evidence.passed)
        if not evidence.passed:
            return None
        try:
            return await asyncio.to_thread(candidate_wrapper, self.kernel_dir, proposed.source, proposed.plan)
        except (KernelLoadError, OSError) as exc:
            observed.error = str(exc)
            return None

    def _swap(
        self,
        prior,
        trigger,
        contract: pb.Contract,
        entry,
        canary: list[int],
        observed: pb.ParityObservation,
        before: Before | None = None,
    ):
        """On the engine thread, under the lock: patch, check, decide, and revert unless committed."""
        active = self.swaps.active_for(contract.target)
        if active is not None:
            observed.error = f"{contract.target} is already served by {active.swap_id}; roll it back first"
            return domain.swap_outcome(prior, trigger, observed)
        started = time.perf_counter()
        with planned(domain.serving_plan(prior, trigger.msg)):  # the kernel checked and captured where it serves
            handle = swap_with_parity(self.engine, contract, entry, canary, observed, before)
        observed.hold_s = time.perf_counter() - started  # apply + parity; a revert is dropping one attribute each
        self.engine.stats.swap_held(observed.hold_s)
        outcome = domain.swap_outcome(prior, trigger, observed)
        if isinstance(outcome, pb.SwapCommitted) and handle is not None:
            self.swaps.add(outcome, handle)
            handle.commit(self._reporter(trigger, outcome), self.shadow_calls, self.clock)
        elif handle is not None:
            self.engine.revert(handle)
        return outcome

    def _reporter(self, trigger: Recorded, committed: pb.SwapCommitted) -> Callable[[str], None]:
        """What the engine thread calls when the committed kernel raises live: queue it for the bus."""
        loop, queue = self._loop, self.live_failures
        # The SwapCommitted this returns is published as the only answer to `trigger` (ordinal 0).
        committed_id = ev.derived_event_id(trigger.env.run_id, trigger.env.event_id, "SwapCommitted", 0)

        def report(error: str) -> None:
            log.error("swap %s: eager forward restored: %s", committed.swap_id, error)
            failure = LiveFailure(trigger.env.run_id, committed.swap_id, committed_id, error)
            try:
                if loop is not None:
                    loop.call_soon_threadsafe(queue.put_nowait, failure)
            except RuntimeError:  # the loop is closing (shutdown): the request still gets its answer
                log.error("swap %s: rollback request not queued, the server is stopping", committed.swap_id)

        return report

    def _canary_ids(self, prior: list[Recorded]) -> list[int]:
        """The run's first prompt (real traffic) when it fits the model, else a fixed sentence."""
        request = first(prior, "RunRequested")
        prompts = [p for p in (request.msg.prompts if request else []) if p]
        for text in prompts[:1] + [DEFAULT_CANARY]:
            ids = self.engine.encode(text)
            try:
                self.engine.check(ids, CANARY_TOKENS)
                return ids
            except ValueError:
                continue
        return [0]

    async def shadow_check(self) -> list[str]:
        """Replay every committed kernel on live inputs it served against the module's own forward (services.server
        .shadow); a kernel found off is reverted and reported, as a live error is."""
        return await self.engine.exclusive(shadow.shadow_pass, self.engine, self.swaps)

    # ------------------------------------------------------------------ restart

    async def reapply(self, committed: Recorded, run_log: list[Recorded]) -> pb.ParityObservation:
        """Re-apply a swap the log holds as committed, through the checks of its first commit; returns what
        was observed (`domain.reapply_outcome` reads it). Whatever does not pass is reverted."""
        msg: pb.SwapCommitted = committed.msg
        trigger = next((r for r in run_log if r.env.event_id == committed.env.causation_id), None)
        proposed = domain.find_proposed(run_log, msg.candidate_id)
        if trigger is None or proposed is None or proposed.source_sha256 != msg.source_sha256:
            return pb.ParityObservation(
                dtype=self.engine.dtype, error="the log no longer holds its conclusion or its candidate"
            )
        outcome = await self._attempt([r for r in run_log if r.seq <= trigger.seq], trigger)
        return outcome.observed

    # ------------------------------------------------------------------ rollback

    async def _on_rollback(self, trigger: Recorded, prior: list[Recorded]) -> pb.SwapRolledBack:
        request: pb.RollbackRequested = trigger.msg
        observed = await self.engine.exclusive(self._rollback, request.swap_id, self._canary_ids(prior))
        outcome = domain.rollback_outcome(prior, trigger, observed)
        log.info("SwapRolledBack %s: %s", request.swap_id, outcome.reason)
        return outcome

    def _rollback(self, swap_id: str, canary: list[int]) -> pb.ParityObservation:
        observed = pb.ParityObservation(dtype=self.engine.dtype)
        entry = self.swaps.get(swap_id)
        if entry is None or entry.state != "committed":
            state = "unknown to" if entry is None else "already rolled back on"
            observed.error = f"swap {swap_id!r} is {state} this server"
            return observed
        observed.graphs_captured = self.engine.revert(entry.handle)  # graphs drop the kernel before the lock goes
        self.swaps.mark_rolled_back(swap_id)
        observed.modules_matched = len(entry.handle.patched)
        tokens, _ = self.engine.decode(canary, CANARY_TOKENS)
        observed.canary_tokens_after.extend(tokens)
        return observed


def rollback_request(failure: LiveFailure, time_ns: int) -> ev.Envelope:
    """The RollbackRequested that records a live failure, caused by the swap's SwapCommitted (one per swap)."""
    said = failure.error.startswith((shadow.PREFIX, call_watch.PREFIX))  # a check's report says what it found
    reason = failure.error if said else f"the kernel raised while serving: {failure.error}"
    request = pb.RollbackRequested(swap_id=failure.swap_id, reason=reason, failure=failure.error)
    return ev.make_envelope(
        failure.run_id, request, producer="server", time_ns=time_ns, causation_id=failure.committed_event_id
    )


async def shadow_loop(service: ServerService, stop: asyncio.Event, every_s: float = shadow.SHADOW_EVERY_S) -> None:
    """The shadow check every `every_s` seconds while the server runs."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=every_s)
        except TimeoutError:
            try:
                problems = await service.shadow_check()
            except Exception:  # a check that cannot run is logged: it must not end the server (a task failure does)
                log.exception("shadow check failed to run; the next pass tries again")
                continue
            for problem in problems:
                log.error("shadow check: %s", problem)


async def request_rollbacks(
    bus: Bus,
    service: ServerService,
    stop: asyncio.Event,
    retry_s: float = 1.0,
    grace_s: float = HUNG_GRACE_S,
    exit: Callable[[int], None] = os._exit,
) -> None:
    """Publish each live failure as a RollbackRequested; kept and retried while the bus is unreachable.

    A kernel call still running past its limit (services.server.call_watch) holds the engine thread, which nothing
    can free: once its RollbackRequested is on the log, the call gets `grace_s` to come back, and if it has not,
    the process `exit`s with EXIT_HUNG for its supervisor to restart it (the restart does not re-apply the swap).
    """
    while not stop.is_set():
        try:
            failure = await asyncio.wait_for(service.live_failures.get(), timeout=0.5)
        except TimeoutError:
            continue
        env = rollback_request(failure, time.time_ns())
        while True:
            try:
                await bus.publish(env)
                break
            except Exception as exc:  # NATS away: the kernel is already out; the record must still land
                log.warning("RollbackRequested for %s not published yet (%s); retrying", failure.swap_id, exc)
                if stop.is_set():
                    return
                await asyncio.sleep(retry_s)
        log.info("RollbackRequested %s: %s", failure.swap_id, failure.error)
        if service.clock.stuck():
            await _exit_if_still_stuck(service.clock, f"swap {failure.swap_id}", "RollbackRequested", grace_s, exit)


async def exit_after_hung_sweeps(
    bus: Bus,
    service: ServerService,
    stop: asyncio.Event,
    poll_s: float = 0.2,
    grace_s: float = HUNG_GRACE_S,
    exit: Callable[[int], None] = os._exit,
) -> None:
    """A candidate's sweep call still running past its limit (services.server.vocab_sweep.StillRunning) holds the
    engine thread, as a live call that does not return does: once the refusal that names it is on the log (the
    runner publishes the handler's answer), the call gets `grace_s` to come back, then the process exits with
    EXIT_HUNG. The refusal answers the trigger, so the restarted server does not sweep the candidate again."""
    while not stop.is_set():
        try:
            trigger = await asyncio.wait_for(service.hung_sweeps.get(), timeout=0.5)
        except TimeoutError:
            continue
        while not stop.is_set():
            try:
                if answers_given(await bus.read_run(trigger.env.run_id), trigger, service.name)[1]:
                    break
            except Exception as exc:  # NATS away: the refusal is not on the log yet, nor readable
                log.warning("run %s not readable yet (%s); retrying", trigger.env.run_id, exc)
            await asyncio.sleep(poll_s)
        else:
            return
        swap = f"swap {domain.swap_id_for(trigger)}"
        await _exit_if_still_stuck(service.clock, swap, "refusal (its vocabulary sweep)", grace_s, exit)


async def _exit_if_still_stuck(clock: LiveClock, swap: str, record: str, grace_s: float, exit) -> None:
    waited = 0.0
    while clock.stuck() and waited < grace_s:
        await asyncio.sleep(0.1)
        waited += 0.1
    if clock.stuck():
        log.critical(
            "%s: a kernel call is still running %.0f s past its limit and holds the model; exiting (status %d) "
            "for the supervisor to restart the server without it (the log holds its %s)",
            swap, grace_s, EXIT_HUNG, record,
        )  # fmt: skip
        logging.shutdown()
        exit(EXIT_HUNG)
