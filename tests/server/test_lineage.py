"""A swap's lineage (services.core.lineage): its author and the judge's verdict, from its run's log alone."""

from __future__ import annotations

from server_fixtures import as_log, swap_run

from services.core import events as ev
from services.core.lineage import UNKNOWN, author_of, lineage, verdict_of
from services.core.pb import events_pb2 as pb

REQUEST_SHA = "0123abcd4567" + "e" * 52


def _changed(envelopes: list[ev.Envelope], type_name: str, change) -> list[ev.Envelope]:
    """The run with its event of `type_name` changed by `change(msg)`, ids and causes kept."""
    out = []
    for env in envelopes:
        if env.type == type_name:
            msg = ev.unpack(env)
            change(msg)
            env = ev.make_envelope(
                env.run_id,
                msg,
                producer=env.producer,
                time_ns=env.time_unix_ns,
                causation_id=env.causation_id,
                event_id=env.event_id,
            )
        out.append(env)
    return out


def _committed(envelopes: list[ev.Envelope], swap_id: str = "swap-1") -> tuple[list[ev.Recorded], pb.SwapCommitted]:
    proposed = ev.unpack(next(e for e in envelopes if e.type == "CandidateProposed"))
    committed = pb.SwapCommitted(
        swap_id=swap_id, candidate_id=proposed.candidate_id, target_class=proposed.target_class, modules_patched=5
    )
    env = ev.make_envelope(
        envelopes[0].run_id, committed, producer="server", time_ns=9, causation_id=envelopes[-1].event_id
    )
    return as_log([*envelopes, env]), committed


def _judged_fast(msg: pb.CandidateJudged) -> None:
    msg.reward, msg.speedup_vs_eager, msg.speedup_vs_best = 3, 10.5, 1.2


def _by_llm(msg: pb.CandidateProposed) -> None:
    msg.origin = "llm"
    msg.observed.CopyFrom(
        pb.AuthorObservation(
            provider="gemini",
            model="gemini-2.5-flash",
            request_sha256=REQUEST_SHA,
            answer="```python\n...\n```",
            finish_reason="STOP",
            prompt_tokens=900,
            answer_tokens=400,
            http_status=200,
            attempts=1,
        )
    )


def test_an_llm_authored_swap_names_its_model_request_and_verdict(good_source):
    run = _changed(
        _changed(swap_run("lineage-llm", good_source, reward=3), "CandidateProposed", _by_llm),
        "CandidateJudged",
        _judged_fast,
    )
    log, committed = _committed(run)
    got = lineage(log, committed)
    assert (got.run_id, got.swap_id, got.candidate_id) == ("lineage-llm", "swap-1", committed.candidate_id)
    assert got.origin == "llm" and (got.provider, got.model, got.request_sha256) == (
        "gemini",
        "gemini-2.5-flash",
        REQUEST_SHA,
    )
    assert got.author == "llm gemini/gemini-2.5-flash req 0123abcd4567"
    assert (got.reward, got.speedup_vs_eager, got.speedup_vs_best) == (3, 10.5, 1.2)
    assert got.verdict == "+3 10.5x eager 1.2x best"


def test_a_template_swap_names_its_config_and_an_untimed_verdict_says_so(good_source):
    def configured(msg: pb.CandidateProposed) -> None:
        msg.config.CopyFrom(pb.TemplateConfig(template="row_reduction_onepass", num_warps=4, rows_per_program=1))

    log, committed = _committed(_changed(swap_run("lineage-tpl", good_source), "CandidateProposed", configured))
    got = lineage(log, committed)
    assert (got.origin, got.template, got.provider) == ("template", "row_reduction_onepass", "")
    assert got.author == "template row_reduction_onepass w4 r1"
    assert got.verdict == "+1 untimed" and got.reward == 1


def test_a_skill_swap_names_its_skill():
    proposed = pb.CandidateProposed(candidate_id="c", origin="skill", skill_id="skill-rr-7f3a")
    assert author_of(proposed) == "skill skill-rr-7f3a"


def test_the_first_verdict_counts_and_a_log_without_the_candidate_says_so(good_source):
    run = _changed(swap_run("lineage-twice", good_source, reward=3), "CandidateJudged", _judged_fast)
    judged = next(e for e in run if e.type == "CandidateJudged")
    forged = ev.unpack(judged)
    forged.reward, forged.speedup_vs_eager = -1, 0.0
    again = ev.make_envelope(run[0].run_id, forged, producer="judge", time_ns=8, causation_id=judged.causation_id)
    log, committed = _committed([*run, again])
    assert lineage(log, committed).verdict == "+3 10.5x eager 1.2x best"

    stranger = pb.SwapCommitted(swap_id="swap-x", candidate_id="cand-not-in-this-run")
    got = lineage(log, stranger)
    assert (got.author, got.verdict, got.reward, got.origin) == (UNKNOWN, UNKNOWN, None, "")
    assert (author_of(None), verdict_of(None)) == (UNKNOWN, UNKNOWN)
