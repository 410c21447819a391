"""Transfer across models, end to end: what a Qwen2 run learned seeds a GPT-2 run's LayerNorm search.

One data dir and one nats-server; the stack is started on tiny-qwen2, which runs (its judged recipes become skills in
the embedded index), stopped, and started again on tiny-gpt2, as `yantra up --model ...` twice would. The GPT-2 run's
LayerNorm must retrieve, by physics alone, a recipe the Qwen2 run proved on its RMSNorm (another model, another
norm), and its first candidate must be that recipe's launch shape with LayerNorm's arithmetic: the mechanism
bench/transfer.py measures (services/skillstore/README.md, "Transfer").

Each run works on one target by name (`only_targets`, `yantra optimize --target`): the Qwen2 run on its RMSNorm, the
GPT-2 run on its LayerNorm, so the index holds the Qwen2 run's recipes alone when the LayerNorm asks, whatever order
the host's clock would rank the targets in (bench/transfer.py measures the runs of every target). Two candidates:
each run publishes a recipe it swapped and one it did not.
"""

from __future__ import annotations

import time
import uuid

import pytest
from e2e_stack import CPU_POLICY, services_alive
from runlog import wait_for_log

from services.core import events as ev
from services.core.nats_launcher import free_port
from services.core.pb import events_pb2 as pb
from services.core.server_client import wait_ready
from services.core.settings import Settings
from services.core.stack import start_stack
from services.registry import SERVICES

pytestmark = pytest.mark.e2e
RUN_TIMEOUT_S = 420
LAYERNORM = "torch.nn.modules.normalization.LayerNorm"
NORM_TEMPLATE = "row_reduction_onepass"


async def _run_on(own_nats, own_bus, tmp_path, model: str, target: str) -> list[ev.Recorded]:
    """Start the stack on `model` (the same data dir and nats-server every time), run `target` with two candidates,
    stop it; the run's log."""
    settings = Settings(
        nats_url=own_nats.url,
        data_dir=tmp_path / "data",
        server_addr=f"127.0.0.1:{free_port()}",
        model=model,
        device="cpu",
        ack_wait_s=4.0,
        log_level="INFO",
        admin_token="e2e-" + uuid.uuid4().hex,
    )
    stack = start_stack(settings, SERVICES)
    try:
        await wait_ready(settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
        run_id = f"e2e-transfer-{model}-{uuid.uuid4().hex[:6]}"
        request = pb.RunRequested(
            model=model, policy=CPU_POLICY, max_candidates=2, only_targets=[target], prompts=["Hello there"],
            decode_tokens=4, served_streams=[1], requested_by="e2e",
        )  # fmt: skip
        env = ev.make_envelope(run_id, request, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")
        await own_bus.publish(env)
        ended = lambda log: any(r.type in ("RunCompleted", "RunFailed") for r in log)  # noqa: E731
        log = await wait_for_log(own_bus, run_id, ended, RUN_TIMEOUT_S, check=services_alive(stack))
        assert ev.last(log, "RunCompleted") is not None, [r.type for r in log]
        return log
    finally:
        stack.stop()
        for name in SERVICES:  # shown by pytest only when the test fails
            print(f"----- {model}: {name} log -----\n{stack.log_tail(name, 25)}")


async def test_a_gpt2_layernorm_search_starts_from_a_recipe_a_qwen2_run_published(own_nats, own_bus, tmp_path):
    qwen = await _run_on(own_nats, own_bus, tmp_path, "tiny-qwen2", "Qwen2RMSNorm")
    learned = {r.msg.skill_id: r.msg for r in qwen if r.type == "SkillPublished"}
    rmsnorm = {sid for sid, p in learned.items() if p.config.template == NORM_TEMPLATE and p.config.variant == ""}
    assert rmsnorm, [(p.config.template, p.config.variant) for p in learned.values()]

    gpt2 = await _run_on(own_nats, own_bus, tmp_path, "tiny-gpt2", LAYERNORM)
    retrieved = next(r.msg for r in gpt2 if r.type == "SkillsRetrieved" and r.msg.target_class == LAYERNORM)
    near = [(n.skill_id, round(n.distance, 4), n.pulls, n.config.template) for n in retrieved.observed.neighbours]
    # The index answered with the Qwen2 run's RMSNorm recipes among the LayerNorm's neighbours; the bandit chose one.
    assert rmsnorm & {n.skill_id for n in retrieved.observed.neighbours}, near
    assert retrieved.chosen_skill_id in rmsnorm, (retrieved.reason, near)

    proposed = [r.msg for r in gpt2 if r.type == "CandidateProposed" and r.msg.target_class == LAYERNORM]
    first = min(proposed, key=lambda p: p.attempt)
    skill = learned[retrieved.chosen_skill_id].config
    assert (first.attempt, first.origin, first.skill_id) == (1, "skill", retrieved.chosen_skill_id), first
    # the recipe's launch shape, with the arithmetic of the module it now runs for (torch's LayerNorm, its bias)
    assert (first.config.template, first.config.num_warps, first.config.rows_per_program, first.config.variant) == (
        NORM_TEMPLATE, skill.num_warps, skill.rows_per_program, "layernorm",
    )  # fmt: skip
    judged = next(r.msg for r in gpt2 if r.type == "CandidateJudged" and r.msg.candidate_id == first.candidate_id)
    assert judged.reward >= CPU_POLICY.min_reward, judged.reason  # the seeded kernel is correct on the new op
