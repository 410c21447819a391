"""The figures a person reads off a run: the profile's top list and target, and the before/after decode
ratio against the measure's noise band (describe.py, and `yantra demo`'s summary)."""

from __future__ import annotations

from services.cli.stack_cmds import _outcome_lines
from services.core import events as ev
from services.core.describe import DECODE_NOISE_BAND, decode_ratio, describe, outside_noise
from services.core.pb import events_pb2 as pb

_T0 = 1_700_000_000_000_000_000


def _rec(run_id: str, msg, seq: int = 1) -> ev.Recorded:
    env = ev.make_envelope(run_id, msg, producer="profiler", time_ns=_T0 + seq, event_id=f"{run_id}-{seq}")
    return ev.Recorded(seq, env)


def _target(path: str, share: float, recoverable: float, family: str, supported: bool) -> pb.RankedTarget:
    return pb.RankedTarget(
        class_path=path,
        time_share=share,
        recoverable_us=recoverable,
        supported=supported,
        fingerprint=pb.Fingerprint(op_family=family),
    )


def _profiled(device: str, target: str = "m.Qwen2RMSNorm") -> pb.ProfileCaptured:
    # the stored ranking is by recoverable time (roofline.rank), not by share of the time
    ranking = [
        _target("m.Linear", 0.30, 900.0, "matmul", False),
        _target("m.Qwen2RMSNorm", 0.16, 700.0, "row_reduction", True),
        _target("m.SiLU", 0.04, 300.0, "elementwise", False),
        _target("m.Embedding", 0.35, 100.0, "gather", False),
    ]
    msg = pb.ProfileCaptured(ranking=ranking, target_class=target, reason="chose row_reduction class Qwen2RMSNorm")
    msg.observed.hardware.device = device
    msg.observed.hardware.device_name = "H200" if device == "cuda" else ""
    msg.observed.dtype = "bfloat16"
    msg.observed.decode_tokens_per_s = 40.0
    return msg


def _completed(speedup: float, outcome: str = "no_swap", device: str = "") -> pb.RunCompleted:
    return pb.RunCompleted(
        observed=pb.RunObservation(device=device),
        tokens_per_s_before=100.0,
        tokens_per_s_after=100.0 * speedup,
        speedup=speedup,
        outcome=outcome,
        target_class="m.Qwen2RMSNorm",
    )


def test_the_top_list_is_by_share_of_the_time_and_says_why_the_target_is_not_first():
    line = describe(_rec("r-top", _profiled("cuda")))
    assert "top by time: Embedding 35%, Linear 30%, Qwen2RMSNorm 16%" in line, line
    assert "target=Qwen2RMSNorm 16% (Embedding 35% has no template (gather); Linear 30% has no template (matmul))" in (
        line
    ), line


def test_a_class_seen_computing_what_no_template_writes_is_named_with_it():
    msg = _profiled("cuda")
    linear = msg.ranking[0]
    linear.class_path, linear.fingerprint.op_family = "m.GPTNeoXMLP", "elementwise"
    linear.note = "elementwise, memory-bound; computes mlp_gelu (seen running it); no template for mlp_gelu"
    line = describe(_rec("r-computes", msg))
    assert "GPTNeoXMLP 30% has no template for mlp_gelu" in line, line


def test_a_target_first_by_time_needs_no_why_and_no_target_gives_the_reason():
    msg = _profiled("cuda")
    for t in msg.ranking:
        if t.class_path != "m.Qwen2RMSNorm":
            t.time_share = 0.01
    line = describe(_rec("r-first", msg))
    assert line.endswith("target=Qwen2RMSNorm"), line
    none = _profiled("cuda", target="")
    none.reason = "no leaf class is of a family with a template (row_reduction)"
    line = describe(_rec("r-none", none))
    assert line.endswith("target=- (no leaf class is of a family with a template (row_reduction))"), line


def test_a_supported_class_above_the_target_says_why_it_lost():
    msg = _profiled("cuda")
    msg.ranking.append(_target("m.OtherNorm", 0.20, 0.0, "row_reduction", True))
    line = describe(_rec("r-floor", msg))
    assert "OtherNorm 20% is already at its roofline floor" in line, line


def test_a_ratio_inside_the_noise_band_is_no_speed_claim():
    assert DECODE_NOISE_BAND["cuda"] < DECODE_NOISE_BAND["cpu"]
    cpu = decode_ratio(0.72, "cpu")
    assert cpu.startswith("x0.72, within the ±50% noise band of a CPU decode measure: no speed claim"), cpu
    assert not outside_noise(0.72, "cpu") and outside_noise(0.30, "cpu")
    assert decode_ratio(1.62, "cuda") == "x1.62 faster, outside the ±30% noise band of a GPU decode measure"
    assert decode_ratio(1.16, "cuda").startswith("x1.16, within the ±30%")
    assert decode_ratio(0.0, "cuda") == "no ratio (no 'before' figure)"


def test_run_completed_reads_its_ratio_against_the_band_of_the_device_it_was_measured_on():
    line = describe(_rec("r-cpu", _completed(0.72, device="cpu"), seq=2))
    assert "100.0 -> 72.0 tok/s (x0.72, within the ±50% noise band of a CPU decode measure: no speed claim)" in line
    line = describe(_rec("r-gpu", _completed(1.62, "swapped", device="cuda"), seq=2))
    assert "(x1.62 faster, outside the ±30% noise band of a GPU decode measure)" in line, line
    # a run recorded before the device was: the wider band, so noise is never a claim
    line = describe(_rec("r-unseen", _completed(1.4, "swapped"), seq=2))
    assert "x1.40, within the ±50% noise band" in line, line


def test_the_demo_summary_headlines_the_ratio_only_outside_the_band():
    noise = [_rec("r1", _profiled("cpu"), 1), _rec("r1", _completed(0.72, device="cpu"), 2)]
    outcome, decode = _outcome_lines(noise)
    assert outcome == "outcome: no_swap, target m.Qwen2RMSNorm, reward +0"
    assert decode == (
        "decode: 100.0 -> 72.0 tok/s: x0.72, within the ±50% noise band of a CPU decode measure: no speed claim"
    )
    real = [_rec("r2", _profiled("cuda"), 1), _rec("r2", _completed(1.62, "swapped", device="cuda"), 2)]
    outcome, decode = _outcome_lines(real)
    assert outcome == "outcome: swapped, decode x1.62 faster, target m.Qwen2RMSNorm, reward +0"
    assert decode.endswith("x1.62 faster, outside the ±30% noise band of a GPU decode measure")


def test_the_demo_summary_of_a_run_that_did_not_complete_says_how_it_ended():
    failed = pb.RunFailed(reason="profiler could not answer RunRequested (refused it): prompt 1 of 1 is empty")
    log = [_rec("r3", _profiled("cpu"), 1), _rec("r3", failed, 2)]
    assert _outcome_lines(log) == [f"outcome: failed: {failed.reason}"]
