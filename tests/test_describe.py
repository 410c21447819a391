"""One line per event, as `yantra events`, `optimize` and `rollback` print them."""

from __future__ import annotations

from services.core import events as ev
from services.core.describe import describe
from services.core.pb import events_pb2 as pb


def _line(msg, producer: str = "server") -> str:
    env = ev.make_envelope("r1", msg, producer=producer, time_ns=1_700_000_000_000_000_000, event_id="e1")
    return describe(ev.Recorded(1, env))


def test_a_rollback_request_and_its_answer_name_the_swap_and_why():
    asked = _line(pb.RollbackRequested(swap_id="swap-c1", reason="the kernel raised while serving: ValueError: x"))
    assert "server" in asked and "RollbackRequested" in asked
    assert asked.endswith("swap-c1: the kernel raised while serving: ValueError: x")
    done = _line(pb.SwapRolledBack(swap_id="swap-c1", candidate_id="c1", reason="rolled back 5 modules: operator"))
    assert done.endswith("c1: rolled back 5 modules: operator")


def test_an_llm_authors_candidate_and_a_failed_answer_name_the_model_and_what_it_cost():
    answer = pb.AuthorObservation(
        provider="gemini", model="gemini-x", request_sha256="ab" * 32, finish_reason="STOP", prompt_tokens=1200,
        answer_tokens=800, attempts=2,
    )  # fmt: skip
    proposed = pb.CandidateProposed(candidate_id="c1-llm", attempt=1, origin="llm", observed=answer)
    assert _line(proposed, "coder").endswith(
        "c1-llm attempt 1 origin=llm gemini/gemini-x request ababababab finish STOP, 1200+800 tokens, 2 attempt(s)"
    )
    failed = pb.AuthorObservation(provider="openai-compatible", model="m", error="HTTP 500", attempts=3)
    why = "no candidate: the model answered HTTP 500"
    line = _line(pb.TargetConcluded(target_class="a.B", reason=why, observed=failed), "coder")
    assert "B best=- reward=+0 swap=False: no candidate" in line
    assert "; author openai-compatible/m request  error: HTTP 500" in line
    plain = pb.CandidateProposed(candidate_id="c2", attempt=2, origin="template", config=pb.TemplateConfig(num_warps=4))
    assert "warps=4" in _line(plain, "coder") and "tokens" not in _line(plain, "coder")


def test_a_commit_says_how_long_its_hold_and_its_vocabulary_sweep_took():
    observed = pb.ParityObservation(
        max_abs_err=0.0, hold_s=1.5, sweep_tokens=512, sweep_recurring_tokens=512, sweep_calls_checked=60, sweep_s=7.12
    )
    line = _line(pb.SwapCommitted(swap_id="swap-c1", modules_patched=5, tokens_equal=True, observed=observed))
    assert line.endswith("held the model 1.50 s; swept 512 tokens + a 512-token prompt, 60 calls, in 7.1 s"), line
    unswept = _line(pb.SwapCommitted(swap_id="swap-c1", observed=pb.ParityObservation(hold_s=1.5)))
    assert "swept" not in unswept
