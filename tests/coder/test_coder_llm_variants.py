"""What a run may write depends on its author: the templates write their variants; an LLM author every variant a
family's op runs and its judging holds the oracle of, such as GPT-NeoX's exact GELU between its MLP's maps
(plain_mlp's `mlp_gelu`), which no template writes.

On a real GPTNeoXMLP (transformers, recognised by running it): the profile's catalogue is the run's author's, so the
ranking offers the MLP to an LLM run only; the coder asks the LLM author for `mlp_gelu` (the family's contract, its
source in the prompt, a sibling's template kernel as the format's example) where the template author concludes as it
always did; the committed answer of the local endpoint is a candidate the real judge accepts (interpreted Triton),
one that copies the sibling's example is refused, and the coder's events replay from the log alone.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from coder_testkit import Log
from llm_endpoint import answer_text
from transformers import GPTNeoXConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXMLP

from services import ops
from services.coder import authors, domain, llm_answer
from services.core.candidate_check import check_candidate
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.judge.service import JudgeService
from services.profiler import catalogue
from services.profiler import domain as profiler_domain
from services.server.introspection import introspect_module

HIDDEN, INTERMEDIATE = 32, 128
MLP = "transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXMLP"
POLICY = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test")


def _mlp() -> torch.nn.Module:
    config = GPTNeoXConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=4, hidden_act="gelu")
    return GPTNeoXMLP(config).eval()


def _observed(author: str) -> pb.ProfileObservation:
    """The server's record of the MLP (what it computes and its maps' roles found by running it), timed as a CPU
    profile times it, with the catalogue the profiler records for a run by `author`."""
    mlp = _mlp()
    fam = ops.family("plain_mlp")
    roles = fam.roles_of(mlp)
    profile = pb.ModuleClassProfile(
        introspection=introspect_module(mlp), instances=2, calls=8, total_time_us=900.0, input_shape=[1, 5, HIDDEN],
        dtype="float32", computes=fam.recognise(mlp), probed=True, roles=roles,
        child_time_us={roles["fc"]: 200.0, roles["proj"]: 200.0},
    )  # fmt: skip
    observed = pb.ProfileObservation(
        model="tiny-gptneox", dtype="float32", hardware=pb.HardwareFigures(device="cpu"), modules=[profile],
        captured_time_us=2000.0, catalogue=catalogue.live(author),
    )  # fmt: skip
    return observed


def _run(author: str) -> tuple[Log, pb.ProfileCaptured]:
    """A run's log up to its profile: the profiler's own ProfileCaptured of the MLP."""
    log = Log()
    request = log.append(pb.RunRequested(model="tiny-gptneox", policy=POLICY, max_candidates=2, author=author))
    captured = profiler_domain.derive_profile_captured(log.records, request, _observed(author))
    log.append(captured)
    return log, captured


# ---------------------------------------------------------------- (1) the catalogue is the author's


def test_the_template_authors_catalogue_is_the_templates_as_before_and_an_llm_authors_every_judged_variant():
    before = [pb.FamilyCatalogue(family=n, writable=list(f.WRITABLE)) for n, f in ops.FAMILIES.items()]
    for author in ("", authors.TEMPLATE):  # byte for byte what every template run recorded
        assert [c.SerializeToString() for c in catalogue.live(author)] == [c.SerializeToString() for c in before]
    for author in authors.LLM_AUTHORS:
        assert {c.family: tuple(c.writable) for c in catalogue.live(author)} == {
            n: f.VARIANTS for n, f in ops.FAMILIES.items()
        }
    assert all(catalogue.live(a) != before for a in authors.AUTHORS if authors.is_llm(a))
    plain = dict((c.family, list(c.writable)) for c in catalogue.live(authors.GEMINI))["plain_mlp"]
    assert {"mlp_gelu", "mlp_silu", "mlp_relu"} <= set(plain) and "mlp_gelu" not in ops.family("plain_mlp").WRITABLE


@pytest.mark.parametrize("name", [n for n in ops.FAMILIES if hasattr(ops.family(n), "reference")])
def test_every_variant_an_llm_is_offered_has_the_judges_oracle(name):
    """The judge's oracle of a family with a formula is its `reference(variant)`: it must exist for every variant
    the LLM catalogue offers (a norm's oracle is the live module itself, whatever it computes)."""
    fam = ops.family(name)
    [offered] = [c.writable for c in catalogue.live(authors.GEMINI) if c.family == name]
    assert offered and all(callable(fam.reference(v)) for v in offered)
    with pytest.raises((KeyError, ValueError)):  # the check bites: a variant a family does not know has none
        fam.reference("no_such_variant")


def test_the_profile_offers_the_mlp_to_an_llm_run_only():
    _, template_run = _run("")
    [ranked] = template_run.ranking
    assert not ranked.supported and "no template for mlp_gelu" in ranked.note
    assert not template_run.targets and not template_run.target_class, template_run.reason
    _, llm_run = _run(authors.GEMINI)
    [ranked] = llm_run.ranking
    assert ranked.supported and ranked.recoverable_us > 0, ranked.note
    assert list(llm_run.targets) == [MLP] and llm_run.target_class == MLP


# ---------------------------------------------------------------- (2) the coder asks the LLM for it


def test_the_template_author_concludes_as_it_always_did():
    log, _ = _run("")
    skills = log.append(pb.SkillsRetrieved(target_class=MLP))
    [concluded] = domain.decide(log.records, skills)
    assert concluded.reason == "no candidate was judged: the template does not write mlp_gelu"


def _asked() -> tuple[Log, object, authors.Ask]:
    log, _ = _run(authors.GEMINI)
    skills = log.append(pb.SkillsRetrieved(target_class=MLP))
    [ask] = domain.decide(log.records, skills)
    return log, skills, ask


def test_an_llm_author_is_asked_for_the_variant_with_the_familys_source_and_a_siblings_example():
    _, _, ask = _asked()
    assert isinstance(ask, authors.Ask)
    assert (ask.family, ask.variant, ask.attempt) == ("plain_mlp", "mlp_gelu", 1)
    assert ask.contract == ops.template("plain_mlp").contract_for(_mlp_intro(), _observed("gemini").modules[0])
    assert [(b.param, b.attr) for b in ask.contract.bindings] == [("fc", "dense_h_to_4h"), ("proj", "dense_4h_to_h")]
    prompt = ask.prompt
    for part in (
        "(op family plain_mlp, variant mlp_gelu)",
        '"computes": "mlp_gelu"',
        '"mlp_gelu": F.gelu',  # the oracle's formula, in the family's source
        "def make_op(",  # the wrapper that runs the launches
        'ARGS: ["x", "y", "n"]',
        "sibling variant mlp_gelu_tanh",
        "_gelu_tanh_kernel",  # the sibling's template kernel, in the answer format
        "NOT mlp_gelu",
    ):
        assert part in prompt, part
    assert "the family's template for this variant" not in prompt


def _mlp_intro() -> pb.ModuleIntrospection:
    return introspect_module(_mlp())


def _observation(text: str) -> pb.AuthorObservation:
    return pb.AuthorObservation(provider="gemini", model="m", answer=text, finish_reason="STOP", attempts=1)


def _sibling_copied(ask: authors.Ask) -> str:
    """The sibling's example answered back: a model that copies what it was shown."""
    start = ask.prompt.index("## Example")
    return ask.prompt[ask.prompt.index("\n", start) + 1 : ask.prompt.index("\n\n## Earlier", start)]


def _judge(log: Log, proposed: pb.CandidateProposed) -> pb.CandidateJudged:
    log.append(proposed)
    [judged] = asyncio.run(JudgeService(device="cpu", examples=8).handle(log.records[-1], log.records))
    log.append(judged)
    return judged


def test_the_endpoints_answer_is_judged_correct_a_copy_of_the_siblings_is_not_and_both_replay():
    log, skills, ask = _asked()
    good = domain.answered(log.records, ask, _observation(answer_text("good_plain_mlp_gelu.json")))
    assert isinstance(good, pb.CandidateProposed) and good.origin == "llm" and good.plan.family == "plain_mlp"
    assert "tl.erf(" in good.source and good.contract == ask.contract
    assert check_candidate(good.source, good.plan).passed
    judged = _judge(log, good)
    assert judged.reward == 1 and judged.observed.correctness.checks_passed > 20, judged.reason

    [again] = domain.decide(log.records, log.records[-1])  # the second candidate: asked again, told the verdict
    assert isinstance(again, authors.Ask) and again.variant == "mlp_gelu" and again.attempt == 2
    assert "attempt 1 (llm)" in again.prompt and "passed, reward +1" in again.prompt
    copied = llm_answer.candidate(again, _observation(_sibling_copied(again)))
    assert not isinstance(copied, str), copied
    wrong = domain.answered(log.records, again, _observation(_sibling_copied(again)))
    judged = _judge(log, wrong)
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason

    [concluded] = domain.decide(log.records, log.records[-1])
    assert concluded.swap and concluded.candidate_id == good.candidate_id, concluded.reason
    log.append(concluded)
    problems = [m for m in verify(log.records, domain.REDERIVE) if m.type in domain.REDERIVE]
    assert problems == []
