"""Recorded event logs for the TUI tests: real protobuf events of whole runs, as the services emit them.

Built with `services.core.events.make_envelope` and ids derived from causes, like the runner does.
Times are fixed (no clock), so every screen drawn from these logs is the same on every machine.
Real logs recorded from runs of the loop live in tests/tui/data/*.jsonl and are tested alongside.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from services.core import events as ev
from services.core.events import Envelope, Recorded
from services.core.pb import events_pb2 as pb
from tui.figures import speedup_over

DATA_DIR = Path(__file__).parent / "data"
T0 = 1_793_534_400 * 10**9  # 2026-11-01 12:00:00 UTC
S = 10**9
RMSNORM = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
MLP = "transformers.models.qwen2.modeling_qwen2.Qwen2MLP"
ATTN = "transformers.models.qwen2.modeling_qwen2.Qwen2Attention"
ROTARY = "transformers.models.qwen2.modeling_qwen2.Qwen2RotaryEmbedding"
SWAPPED_RUN = "20261101-120000-a1b2c3"
ROLLBACK_RUN = "20261101-121000-d4e5f6"
UNKNOWN_RUN = "20261101-122000-0a0b0c"
SERVER = "server-h200-0"

SOURCE = '''\
"""RMSNorm forward as in HF Qwen2RMSNorm (gpuyantra template row_reduction_onepass).

Config: num_warps=@W@, rows per program=@R@.
"""

import torch
import triton
import triton.language as tl

NUM_WARPS = @W@
ROWS_PER_PROGRAM = @R@


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, stride, n_rows, n_cols, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + r
        mask = cols < tl.where(row < n_rows, n_cols, 0)
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        normed = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        y = w * normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states, weight, eps):
    n_cols = weight.shape[0]
    x2d = hidden_states.reshape(-1, n_cols).contiguous()
    y2d = torch.empty_like(x2d)
    grid = (triton.cdiv(x2d.shape[0], ROWS_PER_PROGRAM),)
    _rmsnorm_fwd_kernel[grid](
        x2d, weight, y2d, x2d.stride(0), x2d.shape[0], n_cols, float(eps),
        BLOCK=triton.next_power_of_2(n_cols), ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )
    return y2d.reshape(hidden_states.shape)
'''


def source(warps: int, rows: int) -> str:
    return SOURCE.replace("@W@", str(warps)).replace("@R@", str(rows))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class RunLog:
    """Appends a run's events with ids derived from their causes, like services.core.runner does."""

    def __init__(self, run_id: str, start_ns: int):
        self.run_id = run_id
        self.t = start_ns
        self.envs: list[Envelope] = []

    def add(self, msg, producer: str, after_s: float, cause: Envelope | None = None, ordinal: int = 0) -> Envelope:
        self.t += round(after_s * S)
        kw = {"event_id": f"req-{self.run_id}"} if cause is None else {"causation_id": cause.event_id}
        env = ev.make_envelope(self.run_id, msg, producer=producer, time_ns=self.t, ordinal=ordinal, **kw)
        self.envs.append(env)
        return env


def _policy(min_reward: int = 2) -> pb.SwapPolicy:
    return pb.SwapPolicy(
        min_reward=min_reward, name="gpu-default", reason="swap only kernels measured > 5% faster than eager"
    )


def _introspection() -> pb.ModuleIntrospection:
    return pb.ModuleIntrospection(
        class_path=RMSNORM,
        attributes=[
            pb.ModuleAttribute(name="weight", kind="parameter", shape=[1536], dtype="bfloat16"),
            pb.ModuleAttribute(name="variance_epsilon", kind="float", value=1e-6),
        ],
        forward_params=["hidden_states"],
        leaf=True,
    )


def _fingerprint(family: str, memory_bound: bool, ai: float, achieved: float) -> pb.Fingerprint:
    return pb.Fingerprint(
        op_family=family, memory_bound=memory_bound, arithmetic_intensity=ai, row_width=1536, rows=16,
        dtype_bytes=2, achieved_fraction=achieved, vector=[0.1, 0.9, 0.3],
    )  # fmt: skip


def profile_captured(tokens_per_s: float = 14.2) -> pb.ProfileCaptured:
    hw = pb.HardwareFigures(
        device="cuda", device_name="NVIDIA H200", peak_bytes_per_s=4.275e12, peak_flops=7.9e14, calibrated=True
    )
    modules = [
        pb.ModuleClassProfile(
            introspection=_introspection(), instances=57, calls=5472, total_time_us=412_000.0, input_shape=[1, 1, 1536],
            dtype="bfloat16", param_bytes=3072, input_bytes=3072, output_bytes=3072,
        )
    ]  # fmt: skip
    ranking = [
        pb.RankedTarget(
            class_path=RMSNORM, time_share=0.31, floor_us=2_300.0, recoverable_us=410_000.0,
            fingerprint=_fingerprint("row_reduction", True, 0.75, 0.07), supported=True,
            note="57 instances, launch-bound at decode shapes",
        ),
        pb.RankedTarget(
            class_path=MLP, time_share=0.28, floor_us=180_000.0, recoverable_us=190_000.0,
            fingerprint=_fingerprint("matmul", True, 1.9, 0.48), supported=False, note="no template for matmul yet",
        ),
        pb.RankedTarget(
            class_path=ATTN, time_share=0.22, floor_us=120_000.0, recoverable_us=170_000.0,
            fingerprint=_fingerprint("other", True, 2.4, 0.41), supported=False, note="no template",
        ),
        pb.RankedTarget(
            class_path=ROTARY, time_share=0.04, floor_us=900.0, recoverable_us=52_000.0,
            fingerprint=_fingerprint("elementwise", True, 0.3, 0.02), supported=False, note="no template",
        ),
    ]  # fmt: skip
    observed = pb.ProfileObservation(
        model="qwen2.5-1.5b-shape", dtype="bfloat16", hardware=hw, modules=modules, captured_time_us=1_330_000.0,
        decode_tokens_per_s=tokens_per_s, tokens_generated=48, requests=3, time_source="cuda_events",
    )  # fmt: skip
    return pb.ProfileCaptured(
        observed=observed,
        ranking=ranking,
        target_class=RMSNORM,
        reason="Qwen2RMSNorm: 31% of the step, 410 ms recoverable, a row_reduction template exists",
    )


def _contract() -> pb.Contract:
    return pb.Contract(
        kind="module_class",
        target=RMSNORM,
        entrypoint="rmsnorm_forward",
        inputs=["hidden_states"],
        bindings=[
            pb.Binding(param="weight", attr="weight", kind="tensor"),
            pb.Binding(param="eps", attr="variance_epsilon", kind="float"),
        ],
    )


def proposed(cid: str, warps: int, rows: int, origin: str, attempt: int, skill: str = "") -> pb.CandidateProposed:
    src = source(warps, rows)
    config = pb.TemplateConfig(template="row_reduction_onepass", num_warps=warps, rows_per_program=rows)
    return pb.CandidateProposed(
        candidate_id=cid, target_class=RMSNORM, source=src, source_sha256=sha(src), contract=_contract(),
        config=config, origin=origin, skill_id=skill, attempt=attempt,
    )  # fmt: skip


def _timing(factor: float) -> pb.TimingEvidence:
    rows = [
        pb.TimingRow(shape="1x1536", candidate_us=1.5 / factor * 3.1, eager_us=10.6, compile_us=4.1, native_us=2.5,
                     candidate_host_us=38.0, eager_host_us=71.0),
        pb.TimingRow(shape="8192x1536", candidate_us=18.2 / factor * 3.1, eager_us=180.0, compile_us=46.5,
                     native_us=20.6),
        pb.TimingRow(shape="32768x1536", candidate_us=65.0 / factor * 3.1, eager_us=820.0, compile_us=86.0,
                     native_us=79.0),
    ]  # fmt: skip
    return pb.TimingEvidence(measured=True, rows=rows, device_name="NVIDIA H200")


def judged(p: pb.CandidateProposed, reward: int, *, wrong: bool = False, factor: float = 3.1):
    """The judge's verdict on `p`; `factor` scales how much faster than the one-shot anchor it ran."""
    static = pb.StaticEvidence(passed=True, rules_checked=["no-imports-outside-allowlist", "no-io", "no-exec"])
    contract = pb.ContractEvidence(passed=True, checks=["entrypoint exists", "bindings resolve", "inputs match"])
    shapes = ["1x1536", "7x1536", "8192x1536", "3x1531"]
    if wrong:
        correctness = pb.CorrectnessEvidence(
            passed=False, checks_run=12, checks_passed=9, max_abs_err=0.43, max_rel_err=0.81, dtype="bfloat16",
            shapes=shapes, seeds=3, error="3x1531 seed 1: max abs err 0.43 > tolerance 0.016 (bfloat16)",
        )  # fmt: skip
        timing = pb.TimingEvidence(measured=False, reason="not timed: incorrect")
        vs_eager = vs_best = 0.0
        reason = "wrong: 3 of 12 checks failed"
    else:
        correctness = pb.CorrectnessEvidence(
            passed=True, checks_run=12, checks_passed=12, max_abs_err=0.0078, max_rel_err=0.0039, dtype="bfloat16",
            shapes=shapes, seeds=3,
        )  # fmt: skip
        timing = _timing(factor)
        vs_eager = speedup_over(timing.rows, "eager_us")
        vs_best = min(speedup_over(timing.rows, b) for b in ("eager_us", "compile_us", "native_us"))
        reason = f"correct; x{vs_eager:.2f} vs eager, x{vs_best:.2f} vs the best baseline"
    observed = pb.JudgeObservation(
        static_check=static, contract=contract, correctness=correctness, timing=timing, wall_s=4.2
    )
    return pb.CandidateJudged(
        candidate_id=p.candidate_id, source_sha256=p.source_sha256, observed=observed, reward=reward, reason=reason,
        speedup_vs_eager=vs_eager, speedup_vs_best=vs_best,
    )  # fmt: skip


def _parity(err: float = 0.0039) -> pb.ParityObservation:
    return pb.ParityObservation(
        modules_matched=57, activations_checked=228, activations_passed=228, max_abs_err=err, tolerance=0.016,
        static_ok=True, judged_ok=True, canary_tokens_before=[791, 3974, 13876], canary_tokens_after=[791, 3974, 13876],
        canary_logit_max_diff=0.031, canary_logit_tolerance=0.25, dtype="bfloat16",
    )  # fmt: skip


def swapped_run(start_ns: int = T0, run_id: str = SWAPPED_RUN) -> list[Envelope]:
    """A run that swaps a Triton RMSNorm in: three candidates (skill, template, LLM), one rejected."""
    r = RunLog(run_id, start_ns)
    req = r.add(
        pb.RunRequested(
            model="qwen2.5-1.5b-shape", policy=_policy(), max_candidates=3,
            prompts=["The quick brown fox", "Once upon a time", "In a distant galaxy"], decode_tokens=16,
            requested_by="yantra-cli",
        ),
        "cli", 0,
    )  # fmt: skip
    prof = r.add(profile_captured(), "profiler", 6.4, req)
    skills = r.add(
        pb.SkillsRetrieved(
            observed=pb.SkillsObservation(
                neighbours=[
                    pb.SkillCandidate(skill_id="skill-rr-7f3a", distance=0.04, pulls=3, reward_sum=8.0,
                                      config=pb.TemplateConfig(template="row_reduction_onepass", num_warps=4,
                                                               rows_per_program=1)),
                    pb.SkillCandidate(skill_id="skill-rr-19c2", distance=0.11, pulls=1, reward_sum=2.0,
                                      config=pb.TemplateConfig(template="row_reduction_onepass", num_warps=8,
                                                               rows_per_program=2)),
                ],
                library_size=5,
            ),
            target_class=RMSNORM, chosen_skill_id="skill-rr-7f3a",
            config=pb.TemplateConfig(template="row_reduction_onepass", num_warps=4, rows_per_program=1),
            ucb_scores=[3.41, 2.87], reason="skill-rr-7f3a: nearest fingerprint (0.04), best UCB 3.41",
        ),
        "skillstore", 0.2, prof,
    )  # fmt: skip
    p1 = proposed("c-5e1a0b", 4, 1, "skill", 1, "skill-rr-7f3a")
    e1 = r.add(p1, "coder", 0.1, skills)
    j1 = r.add(judged(p1, 3), "judge", 4.3, e1)
    p2 = proposed("c-9d33f1", 8, 2, "template", 2)
    e2 = r.add(p2, "coder", 0.1, j1)
    j2 = r.add(judged(p2, -1, wrong=True), "judge", 3.9, e2)
    p3 = proposed("c-41be07", 4, 2, "llm", 3)
    e3 = r.add(p3, "coder", 2.2, j2)
    j3 = r.add(judged(p3, 2, factor=2.2), "judge", 4.1, e3)
    concl = r.add(
        pb.TargetConcluded(
            target_class=RMSNORM, candidate_id="c-5e1a0b", source_sha256=p1.source_sha256, reward=3,
            policy=_policy(), swap=True, candidates_judged=3,
            reason="best of 3: c-5e1a0b reward +3 >= policy 2",
        ),
        "coder", 0.1, j3,
    )  # fmt: skip
    swap = r.add(
        pb.SwapCommitted(
            swap_id="swap-3c1f", candidate_id="c-5e1a0b", target_class=RMSNORM, modules_patched=57,
            source_sha256=p1.source_sha256, observed=_parity(), tokens_equal=True,
        ),
        "server", 1.8, concl,
    )  # fmt: skip
    r.add(
        pb.SkillPublished(
            skill_id="skill-rr-7f3a", fingerprint=_fingerprint("row_reduction", True, 0.75, 0.07),
            config=p1.config, reward=3, candidate_id="c-5e1a0b", source_sha256=p1.source_sha256,
        ),
        "skillstore", 0.1, swap,
    )  # fmt: skip
    r.add(pb.SkillCredited(skill_id="skill-rr-7f3a", reward=3, reason="swapped live"), "skillstore", 0.0, swap, 1)
    r.add(
        pb.RunCompleted(
            observed=pb.RunObservation(decode_tokens_per_s_after=36.9, tokens_generated=48),
            tokens_per_s_before=14.2, tokens_per_s_after=36.9, speedup=36.9 / 14.2, swapped=True, outcome="swapped",
            target_class=RMSNORM, reward=3,
        ),
        "profiler", 5.6, swap,
    )  # fmt: skip
    return r.envs


def rollback_run(start_ns: int = T0 + 600 * S, run_id: str = ROLLBACK_RUN) -> list[Envelope]:
    """A run whose swap commits and is then rolled back on request."""
    r = RunLog(run_id, start_ns)
    req = r.add(pb.RunRequested(model="tiny-llama", policy=_policy(), max_candidates=1, decode_tokens=16), "cli", 0)
    prof = r.add(profile_captured(22.5), "profiler", 3.1, req)
    skills = r.add(
        pb.SkillsRetrieved(
            observed=pb.SkillsObservation(library_size=0), target_class=RMSNORM,
            config=pb.TemplateConfig(template="row_reduction_onepass", num_warps=4, rows_per_program=1),
            reason="cold start: the library is empty",
        ),
        "skillstore", 0.1, prof,
    )  # fmt: skip
    p1 = proposed("c-77aa01", 4, 1, "template", 1)
    e1 = r.add(p1, "coder", 0.1, skills)
    j1 = r.add(judged(p1, 2, factor=1.6), "judge", 3.7, e1)
    concl = r.add(
        pb.TargetConcluded(
            target_class=RMSNORM, candidate_id="c-77aa01", source_sha256=p1.source_sha256, reward=2,
            policy=_policy(), swap=True, candidates_judged=1, reason="best of 1: c-77aa01 reward +2 >= policy 2",
        ),
        "coder", 0.1, j1,
    )  # fmt: skip
    swap = r.add(
        pb.SwapCommitted(
            swap_id="swap-8e20", candidate_id="c-77aa01", target_class=RMSNORM, modules_patched=22,
            source_sha256=p1.source_sha256, observed=_parity(), tokens_equal=True,
        ),
        "server", 1.2, concl,
    )  # fmt: skip
    rb = r.add(pb.RollbackRequested(swap_id="swap-8e20", reason="operator: p95 latency regressed"), "cli", 4.0, swap)
    r.add(
        pb.SwapRolledBack(
            swap_id="swap-8e20", candidate_id="c-77aa01", reason="rollback requested: p95 latency regressed",
            observed=_parity(),
        ),
        "server", 0.3, rb,
    )  # fmt: skip
    r.add(
        pb.RunCompleted(
            observed=pb.RunObservation(decode_tokens_per_s_after=22.1, tokens_generated=48), tokens_per_s_before=22.5,
            tokens_per_s_after=22.1, speedup=22.1 / 22.5, swapped=False, outcome="rolled_back", target_class=RMSNORM,
            reward=2,
        ),
        "profiler", 4.2, swap,
    )  # fmt: skip
    return r.envs


def unknown_event_run(start_ns: int = T0 + 1200 * S, run_id: str = UNKNOWN_RUN) -> list[Envelope]:
    """A run with an event of a type this TUI does not know (a newer writer), between known ones."""
    r = RunLog(run_id, start_ns)
    req = r.add(pb.RunRequested(model="tiny-qwen2", policy=_policy(1), max_candidates=1), "cli", 0)
    r.t += 2 * S
    alien = Envelope(
        event_id=ev.derived_event_id(run_id, req.event_id, "KernelAutotuned", 0), run_id=run_id,
        type="KernelAutotuned", time_unix_ns=r.t, producer="autotuner", causation_id=req.event_id,
        correlation_id=run_id, payload=b"\x0a\x05hello\x10\x2a", schema_version=2,
    )  # fmt: skip
    r.envs.append(alien)
    r.add(profile_captured(30.0), "profiler", 1.0, req)
    return r.envs


def no_target_run(start_ns: int = T0 + 1800 * S, run_id: str = "20261101-123000-feed01") -> list[Envelope]:
    """A run whose profile finds nothing worth a kernel: every later step is skipped."""
    r = RunLog(run_id, start_ns)
    req = r.add(pb.RunRequested(model="tiny-qwen2", policy=_policy(), max_candidates=1), "cli", 0)
    prof = profile_captured(31.0)
    prof.target_class, prof.reason = "", "no supported target above 5% of the step"
    cap = r.add(prof, "profiler", 2.0, req)
    r.add(
        pb.RunCompleted(
            observed=pb.RunObservation(decode_tokens_per_s_after=31.0), tokens_per_s_before=31.0,
            tokens_per_s_after=31.0, speedup=1.0, outcome="no_target",
        ),
        "profiler", 0.1, cap,
    )  # fmt: skip
    return r.envs


def server_metrics(start_ns: int, seconds: int, swap_at_s: float | None, before: float, after: float) -> list[Envelope]:
    """ServerMetrics every second; tokens/s steps up at the swap (the metrics stream, not a run's)."""
    out = []
    for k in range(seconds):
        swapped = swap_at_s is not None and k >= swap_at_s
        tps = (after if swapped else before) * (1 + 0.03 * ((k * 7) % 5 - 2) / 2)
        msg = pb.ServerMetrics(
            server_id=SERVER, model="qwen2.5-1.5b-shape", tokens_per_s=tps, p50_latency_ms=1000 / tps,
            p95_latency_ms=1300 / tps, requests=3, active_swaps=int(swapped), window_s=1.0, device="cuda",
        )  # fmt: skip
        out.append(ev.make_envelope(SERVER, msg, producer="server", time_ns=start_ns + k * S, ordinal=k))
    return out


def _recorded(envs: list[Envelope]) -> list[Recorded]:
    """In time order with stream sequences from 1, as an export of the stream would number them."""
    ordered = sorted(envs, key=lambda e: e.time_unix_ns)
    return [Recorded(i + 1, e) for i, e in enumerate(ordered)]


def swapped_log(with_metrics: bool = True) -> list[Recorded]:
    envs = swapped_run()
    if with_metrics:
        swap_s = (envs[-4].time_unix_ns - T0) / S  # the SwapCommitted
        envs = envs + server_metrics(T0, 40, swap_s, 14.2, 36.9)
    return _recorded(envs)


def rollback_log() -> list[Recorded]:
    envs = rollback_run()
    start = envs[0].time_unix_ns
    swap_s = (envs[-4].time_unix_ns - start) / S
    back_s = (envs[-2].time_unix_ns - start) / S
    metrics = [m for m in server_metrics(start, 24, swap_s, 22.5, 30.1)]
    for m in metrics:  # after the rollback the server is back to where it was
        if (m.time_unix_ns - start) / S >= back_s:
            msg = pb.ServerMetrics.FromString(m.payload)
            msg.tokens_per_s, msg.active_swaps = 22.3, 0
            m.payload = msg.SerializeToString(deterministic=True)
    return _recorded(envs + metrics)


def unknown_log() -> list[Recorded]:
    return _recorded(unknown_event_run())


def all_runs_log() -> list[Recorded]:
    return _recorded(swapped_run() + rollback_run() + unknown_event_run())


BUILT_LOGS = {
    "empty": list,
    "swapped": swapped_log,
    "rollback": rollback_log,
    "unknown": unknown_log,
    "all_runs": all_runs_log,
}


def data_files() -> list[Path]:
    """Logs recorded from real runs of the loop (`yantra replay RUN --export FILE`), if any are committed."""
    return sorted(DATA_DIR.glob("*.jsonl")) if DATA_DIR.is_dir() else []
