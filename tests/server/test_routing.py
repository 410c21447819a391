"""Where a swapped kernel serves: the pure plan from a verdict's timings (services.server.routing), and a real swap on
the tiny model whose verdict says it is slower host-inclusive at prefill: prefill keeps the module's own forward,
decode steps run the kernel, the tokens are the eager model's."""

from __future__ import annotations

import pytest
import torch
from server_fixtures import QWEN_NORM, as_log, swap_run, timed

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.server import domain, routing
from services.server.hotswap import graph_lane
from services.server.service import ServerService
from services.server.shadow import check_swap

SOURCE = "def rmsnorm_forward(hidden_states, weight, eps):\n    ...\n"

# The judge's shapes for a norm whose live call had 16 rows: a decode row, the live prefill, the anchors. Faster on
# the GPU everywhere; host-inclusive faster at the decode row only (a Triton launch costs more than eager's whole
# call at prefill shapes, as measured on the H200 in issue 27).
PREFILL_SLOWER = timed(
    ("1x1536", 2.0, 3.0, 30.0, 40.0),
    ("16x1536", 2.5, 3.5, 60.0, 40.0),
    ("4096x1536", 20.0, 30.0, 90.0, 45.0),
    ("32768x1536", 150.0, 240.0, 200.0, 250.0),
)


def _verdict(timing: pb.TimingEvidence | None = None, capabilities=(routing.CUDA_GRAPH,)) -> pb.CandidateJudged:
    judged = pb.CandidateJudged(candidate_id="c", reward=2, capabilities=capabilities)
    if timing is not None:
        judged.observed.timing.CopyFrom(timing)
    return judged


def test_prefill_slower_host_inclusive_keeps_the_modules_forward_in_eager_prefill_and_decode_takes_the_kernel():
    plan = routing.plan_for(_verdict(PREFILL_SLOWER), "row_reduction")
    assert plan.graph.everywhere  # GPU time: faster at every row, and graph replays pay only that
    eager = plan.eager
    # 1 and 16 rows meet at 4 (their geometric mean); 4096 and 32768 at 11585, where it is faster again
    assert eager.spans == ((4, True), (11585, False), (None, True))
    assert [eager.serves(n) for n in (0, 1, 4, 5, 16, 4096, 11585, 11586, 10**6)] == [
        True, True, True, False, False, False, False, True, True,
    ]  # fmt: skip
    said = plan.describe()
    assert "graph: kernel at every row count" in said
    assert "eager: rows 0-4 kernel, rows 5-11585 own forward, rows 11586+ kernel" in said
    assert "16 rows slower" in said and "1 rows not slower" in said
    assert plan.describe(graphs=False).startswith("eager:")


def test_slower_on_the_gpu_at_decode_keeps_the_modules_forward_in_the_graph_lane_there():
    timing = timed(("1x1536", 4.0, 3.0, 30.0, 40.0), ("4096x1536", 20.0, 30.0, 40.0, 45.0))
    plan = routing.plan_for(_verdict(timing), "row_reduction")
    assert plan.graph.spans == ((64, False), (None, True))
    assert plan.eager.everywhere


def test_within_the_judges_margin_is_not_slower():
    """5% is the judge's noise margin, as the eager server's refusal before routing counted it (host_problem)."""
    timing = timed(("1x64", 3.1, 3.0, 41.0, 40.0))
    assert routing.plan_for(_verdict(timing), "row_reduction").everywhere
    timing = timed(("1x64", 3.2, 3.0, 43.0, 40.0))
    plan = routing.plan_for(_verdict(timing), "row_reduction")
    assert plan.graph.nowhere and plan.eager.nowhere


def test_untimed_or_unbelieved_serves_everywhere_and_says_so():
    cpu = routing.plan_for(_verdict(capabilities=()), "row_reduction")  # judged on a CPU: no timing at all
    assert cpu.everywhere and "untimed" in cpu.describe()
    judged = _verdict(PREFILL_SLOWER)
    judged.observed.timing_check.believed = False
    plan = routing.plan_for(judged, "row_reduction")
    assert plan.everywhere and "did not believe" in plan.eager.basis
    assert routing.plan_for(None, "row_reduction").everywhere


def test_a_lane_never_measured_keeps_the_modules_forward_and_says_why():
    plan = routing.plan_for(_verdict(PREFILL_SLOWER, capabilities=()), "row_reduction")
    assert plan.graph.nowhere and "never captured in a CUDA graph" in plan.graph.basis
    no_host = timed(("1x1536", 2.0, 3.0, 0.0, 0.0), ("4096x1536", 20.0, 30.0, 0.0, 0.0))
    plan = routing.plan_for(_verdict(no_host), "row_reduction")
    assert plan.graph.everywhere
    assert plan.eager.nowhere and "no host-inclusive time measured" in plan.eager.basis


@pytest.mark.parametrize(
    ("family", "shape", "rows"),
    [
        ("row_reduction", "4096x1536", 4096),
        ("row_reduction", "1x1x1536", 1),
        ("plain_mlp", "16x8960", 16),
        ("gated_mlp", "2x4096x8960", 4096),  # act(gate) * up: the pair stacked first
        ("residual_norm", "2x1x16x1536", 16),
        ("rotary", "1x4096x18x128", 4096),  # (batch, seq, q + k heads + cos + sin, head_dim): positions
    ],
)
def test_the_judges_shapes_read_as_the_rows_a_live_call_has(family, shape, rows):
    assert routing.timed_rows(family, shape) == rows


def test_a_live_calls_rows():
    hidden = torch.zeros(2, 3, 8)
    assert routing.call_rows("module_class", (hidden,), {}) == 6
    assert routing.call_rows("layer", (), {"hidden_states": hidden}) == 6
    q, k = torch.zeros(1, 4, 5, 8), torch.zeros(1, 2, 5, 8)  # heads-major, as attention passes them
    cos = sin = torch.zeros(1, 5, 8)
    positions = torch.zeros(1, 5, dtype=torch.long)  # an integer tensor is no operand's rows
    assert routing.call_rows("function", (q, k, cos, sin), {"position_ids": positions}) == 5


def test_the_plan_is_derived_from_the_runs_log_and_read_back_for_a_committed_swap():
    log = as_log(swap_run("r1", SOURCE, capabilities=(routing.CUDA_GRAPH,), timing=PREFILL_SLOWER))
    trigger = log[-1]
    plan = domain.serving_plan(log[:-1], trigger.msg)
    assert plan == routing.plan_for(_verdict(PREFILL_SLOWER), "row_reduction")
    committed = domain.swap_outcome(log[:-1], trigger, _observed())
    env = ev.make_envelope("r1", committed, producer="server", time_ns=9, causation_id=trigger.env.event_id)
    recorded = ev.Recorded(len(log) + 1, env)
    assert domain.committed_plan([*log, recorded], recorded) == plan
    assert domain.committed_plan([recorded], recorded) is None  # the log lacks its conclusion


def _observed() -> pb.ParityObservation:
    from server_fixtures import good_observation

    return good_observation()


# ------------------------------------------------------------------ a real swap, routed


async def _generate(engine, ids: list[int], max_new: int) -> list[int]:
    out = []
    async for chunk in engine.generate(ids, max_new, stop_at_eos=False):
        out.extend(chunk)
    return out


async def test_a_swap_slower_at_prefill_serves_decode_steps_and_leaves_prefill_to_the_modules_forward(
    engine, good_source, tmp_path
):
    ids = engine.encode("Hello there, how are you")  # 24 rows at prefill: past the 4 the verdict's kernel wins at
    assert len(ids) > 4
    before = await _generate(engine, ids, 6)
    service = ServerService(engine, tmp_path)
    log = as_log(swap_run("routed", good_source, timing=PREFILL_SLOWER, capabilities=(routing.CUDA_GRAPH,)))
    (outcome,) = await service.handle(log[-1], log)
    assert isinstance(outcome, pb.SwapCommitted), outcome
    handle = service.swaps.get(outcome.swap_id).handle
    assert handle.plan == domain.serving_plan(log[:-1], log[-1].msg) and handle.plan.eager.spans[0] == (4, True)
    assert outcome.observed.routed and routing.from_lanes(outcome.serving) == handle.plan  # recorded as it serves
    try:
        kernel, own = handle.calls, handle.own_calls
        after = await _generate(engine, ids, 6)
        norms = outcome.modules_patched  # every RMSNorm of the model, called once a forward
        # one prefill of 24 rows: the module's own forward in every norm; five decode steps of one row: the kernel
        assert handle.own_calls - own == norms
        assert handle.calls - kernel == 5 * norms
        (record,) = [r for r in service.swaps.records() if r.swap_id == outcome.swap_id]  # what ListSwaps answers
        assert (record.calls, record.own_calls) == (handle.calls, handle.own_calls)
        assert after == before
        # a graph's capture (here: its lane marked, as batch_decode marks it) takes the kernel at every row count,
        # the verdict's GPU time being faster everywhere
        x = torch.randn(1, 24, engine.model.config.hidden_size)
        norm = handle.modules[0]
        own = handle.own_calls
        with torch.inference_mode(), graph_lane():
            norm(x)
        assert handle.own_calls == own
        with torch.inference_mode():
            norm(x)
        assert handle.own_calls == own + 1
        # the shadow check replays the kernel on the inputs it served, the graph lane's 24 rows too: the module's own
        # forward runs once a sample, for the reference, never for the replay the plan would route in the eager lane
        assert any(args[0].shape == x.shape for _, args, _ in handle.samples)
        references = []
        own_forward = handle.own_forward(norm)
        handle._own[id(norm)] = lambda *a, **k: references.append(1) or own_forward(*a, **k)
        kept = sum(module is norm for module, _, _ in handle.samples)
        assert check_swap(handle) == "" and len(references) == kept
    finally:
        engine.revert(handle)
    assert QWEN_NORM == handle.target


# ------------------------------------------------------------------ the decision recorded, and replayed


def _routed(graphs: bool = False) -> pb.ParityObservation:
    observed = _observed()
    observed.routed, observed.graphs = True, graphs
    return observed


def test_a_routing_eager_server_commits_a_kernel_slower_at_prefill_and_records_where_it_serves():
    log = as_log(swap_run("r1", SOURCE, timing=PREFILL_SLOWER))
    prior, trigger = log[:-1], log[-1]
    # before routing an eager server refused it (the rule its runs replay by)
    refused = domain.swap_outcome(prior, trigger, _observed())
    assert isinstance(refused, pb.SwapRejected) and "slower than eager host-inclusive" in refused.reason
    out = domain.swap_outcome(prior, trigger, _routed())
    assert isinstance(out, pb.SwapCommitted) and [lane.lane for lane in out.serving] == ["graph", "eager"]
    assert routing.from_lanes(out.serving) == domain.serving_plan(prior, trigger.msg)
    assert [(s.last_rows, s.kernel) for s in out.serving[1].spans] == [(4, True), (11585, False), (0, True)]
    again = domain.REDERIVE["SwapCommitted"](prior, trigger, out)
    assert again.SerializeToString(deterministic=True) == out.SerializeToString(deterministic=True)
    # a commit recorded before routing holds no plan (it served every call): read back as none
    assert routing.from_lanes([]) is None


def test_a_kernel_slower_in_every_lane_the_server_serves_is_refused_before_anything_is_imported():
    slower = timed(("1x1536", 2.0, 3.0, 50.0, 40.0), ("4096x1536", 20.0, 30.0, 90.0, 45.0))
    log = as_log(swap_run("r1", SOURCE, timing=slower, capabilities=(routing.CUDA_GRAPH,)))
    prior, trigger = log[:-1], log[-1]
    problem = domain.lane_problem(prior, trigger.msg, _routed(), 11)
    assert "slower than eager in every lane this server serves (eager: the module's own forward" in problem
    out = domain.swap_outcome(prior, trigger, _routed())
    assert isinstance(out, pb.SwapRejected) and out.reason == problem
    # a graph server serves its decode steps through graphs, where the GPU time says the kernel is faster
    served = domain.swap_outcome(prior, trigger, _routed(graphs=True))
    assert isinstance(served, pb.SwapCommitted)
    assert routing.from_lanes(served.serving).graph.everywhere and routing.from_lanes(served.serving).eager.nowhere
