"""When a run ends and what its RunCompleted says, for every outcome; replay of the profiler's events."""

from __future__ import annotations

import pytest
from runlog import RunLog

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.profiler import domain

NORM = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"


def _norm_profile() -> pb.ModuleClassProfile:
    attrs = [
        pb.ModuleAttribute(name="weight", kind="parameter", shape=[64], dtype="float32"),
        pb.ModuleAttribute(name="variance_epsilon", kind="float", value=1e-6),
    ]
    return pb.ModuleClassProfile(
        introspection=pb.ModuleIntrospection(class_path=NORM, attributes=attrs, leaf=True),
        instances=5,
        calls=50,
        total_time_us=500.0,
        input_shape=[1, 1, 64],
        dtype="float32",
        param_bytes=256,
        input_bytes=256,
        output_bytes=256,
    )


def _profiled(run: RunLog, with_target: bool = True, tps: float = 40.0) -> ev.Recorded:
    """RunRequested, then the profiler's ProfileCaptured for it (derived, as the live handler does)."""
    req = run.add(pb.RunRequested(prompts=["hi"], decode_tokens=8), "client")
    hw = pb.HardwareFigures(device="cpu", peak_bytes_per_s=20e9, peak_flops=2e11)
    observed = pb.ProfileObservation(
        hardware=hw, captured_time_us=5_000.0, decode_tokens_per_s=tps, modules=[_norm_profile()] if with_target else []
    )
    return run.add(domain.derive_profile_captured(run.log, req, observed), "profiler", req)


def _concluded(run: RunLog, cause: ev.Recorded, swap: bool, reward: int) -> ev.Recorded:
    msg = pb.TargetConcluded(target_class=NORM, candidate_id="c1", reward=reward, swap=swap)
    return run.add(msg, "coder", cause)


def _complete(run: RunLog, trigger: ev.Recorded, after: float = 60.0) -> pb.RunCompleted:
    assert domain.completes_run(run.log, trigger)
    observed = pb.RunObservation(decode_tokens_per_s_after=after, tokens_generated=24)
    msg = domain.derive_run_completed(run.log, trigger, observed)
    run.add(msg, "profiler", trigger)
    return msg


def test_swapped():
    run = RunLog()
    concluded = _concluded(run, _profiled(run), swap=True, reward=2)
    assert not domain.completes_run(run.log, concluded)  # the server answers a swap=true conclusion
    committed = run.add(pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=NORM), "server", concluded)
    done = _complete(run, committed, after=60.0)
    assert (done.outcome, done.swapped, done.target_class, done.reward) == ("swapped", True, NORM, 2)
    assert (done.tokens_per_s_before, done.tokens_per_s_after, done.speedup) == (40.0, 60.0, 1.5)
    assert done.observed.tokens_generated == 24


def test_rejected():
    run = RunLog()
    concluded = _concluded(run, _profiled(run), swap=True, reward=2)
    rejected = run.add(pb.SwapRejected(candidate_id="c1", target_class=NORM, reason="parity"), "server", concluded)
    done = _complete(run, rejected, after=39.0)
    assert (done.outcome, done.swapped, done.target_class, done.reward) == ("rejected", False, NORM, 2)
    assert done.speedup == pytest.approx(39.0 / 40.0)


def test_a_rollback_never_ends_a_run():
    """The server answers a swapping conclusion with SwapCommitted or SwapRejected (a parity or canary failure
    while committing is a rejection); a SwapRolledBack answers a RollbackRequested after the commit that
    ended the run, so it is never the end, even where no commit is in sight."""
    run = RunLog()
    concluded = _concluded(run, _profiled(run), swap=True, reward=3)
    rolled = run.add(pb.SwapRolledBack(swap_id="s1", candidate_id="c1", reason="canary"), "server", concluded)
    assert not domain.completes_run(run.log, rolled)
    with pytest.raises(ValueError, match="does not end a run"):
        domain.derive_run_completed(run.log, rolled, pb.RunObservation())


def test_a_later_rollback_does_not_complete_the_run_again():
    run = RunLog()
    concluded = _concluded(run, _profiled(run), swap=True, reward=2)
    committed = run.add(pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=NORM), "server", concluded)
    asked = run.add(pb.RollbackRequested(swap_id="s1", reason="operator"), "client")
    rolled = run.add(pb.SwapRolledBack(swap_id="s1", candidate_id="c1", reason="asked"), "server", asked)
    # even before the commit's RunCompleted is in the log (the two raced), the rollback is not the end
    assert not domain.completes_run(run.log, rolled)
    _complete(run, committed)
    assert not domain.completes_run(run.log, rolled)


def test_no_swap():
    run = RunLog()
    concluded = _concluded(run, _profiled(run), swap=False, reward=-1)
    done = _complete(run, concluded, after=41.0)
    assert (done.outcome, done.swapped, done.target_class, done.reward) == ("no_swap", False, NORM, -1)


def test_no_target():
    run = RunLog()
    profiled = _profiled(run, with_target=False)
    done = _complete(run, profiled, after=40.0)
    assert (done.outcome, done.swapped, done.target_class, done.reward, done.speedup) == (
        "no_target",
        False,
        "",
        0,
        1.0,
    )


def test_events_that_do_not_end_a_run():
    run = RunLog()
    profiled = _profiled(run)
    assert not domain.completes_run(run.log, profiled)  # it has a target: the loop goes on
    assert not domain.completes_run(run.log, run.log[0])
    with pytest.raises(ValueError, match="does not end a run"):
        domain.derive_run_completed(run.log, run.log[0], pb.RunObservation())
    done = _complete(run, _concluded(run, profiled, swap=False, reward=1))
    assert done.outcome == "no_swap"
    late = _concluded(run, profiled, swap=False, reward=1)
    assert not domain.completes_run(run.log, late)  # a run completes once


def test_measurement_plan_defaults():
    assert domain.measurement_plan([]) == (list(domain.DEFAULT_PROMPTS), domain.DEFAULT_DECODE_TOKENS)
    run = RunLog()
    run.add(pb.RunRequested(prompts=["a", "b"], decode_tokens=5), "client")
    assert domain.measurement_plan(run.log) == (["a", "b"], 5)


def test_replay_reproduces_and_catches_tampering():
    run = RunLog()
    concluded = _concluded(run, _profiled(run), swap=True, reward=2)
    committed = run.add(pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=NORM), "server", concluded)
    _complete(run, committed)
    injected = ("TargetConcluded", "SwapCommitted")
    as_recorded = {t: (lambda prior, trigger, recorded, ordinal=0: recorded) for t in injected}
    rederivers = {**domain.REDERIVE, **as_recorded}
    assert verify(run.log, rederivers) == []

    done = run.log[-1]
    forged = done.msg
    forged.speedup = 3.0  # a claim the measurements do not support
    env = ev.Envelope()
    env.CopyFrom(done.env)
    env.payload = forged.SerializeToString(deterministic=True)
    problems = verify([*run.log[:-1], ev.Recorded(done.seq, env)], rederivers)
    assert len(problems) == 1 and problems[0].type == "RunCompleted" and "speedup" in problems[0].problem
