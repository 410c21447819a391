"""The coder's decisions, pure: what kernel to propose next, and when a target is concluded.

Every event the coder emits is a function of the run's log up to its trigger (no observed
fields), so `REDERIVE` re-runs `decide` and replay must get the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from services.coder.contract import ContractError, derive_contract
from services.coder.templates import BY_FAMILY, BY_TEMPLATE, rmsnorm
from services.core import events as ev
from services.core import policies
from services.core.events import Recorded
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.core.replay import Rederive

DEFAULT_MAX_CANDIDATES = 3
TOP_REWARD = 3  # nothing beats "faster than the best baseline": stop searching
DEFAULT_POLICY = policies.UNREQUESTED


@dataclass(frozen=True)
class TargetState:
    """What the run's log says about one target: proposals, their judgements, whether it is concluded."""

    proposals: tuple[pb.CandidateProposed, ...]
    judged: tuple[pb.CandidateJudged, ...]  # the first judgement of each proposal, in log order
    concluded: bool


def fold(prior: list[Recorded], target_class: str) -> TargetState:
    proposals = tuple(r.msg for r in ev.all_of(prior, "CandidateProposed") if r.msg.target_class == target_class)
    ids = {p.candidate_id for p in proposals}
    judged: dict[str, pb.CandidateJudged] = {}
    for rec in ev.all_of(prior, "CandidateJudged"):
        msg = rec.msg
        if msg.candidate_id in ids:
            judged.setdefault(msg.candidate_id, msg)
    concluded = any(r.msg.target_class == target_class for r in ev.all_of(prior, "TargetConcluded"))
    return TargetState(proposals, tuple(judged.values()), concluded)


def _profile(prior: list[Recorded], target_class: str) -> pb.ModuleClassProfile | None:
    captured = ev.last(prior, "ProfileCaptured")
    if captured is None:
        return None
    return next((m for m in captured.msg.observed.modules if m.introspection.class_path == target_class), None)


def _introspection(prior: list[Recorded], target_class: str) -> pb.ModuleIntrospection | None:
    profile = _profile(prior, target_class)
    return profile.introspection if profile is not None else None


def _op_family(prior: list[Recorded], target_class: str) -> str:
    captured = ev.last(prior, "ProfileCaptured")
    if captured is not None:
        for ranked in captured.msg.ranking:
            if ranked.class_path == target_class and ranked.fingerprint.op_family:
                return ranked.fingerprint.op_family
    return rmsnorm.OP_FAMILY  # unranked: the contract derivation decides whether it fits


def _run_request(prior: list[Recorded]) -> pb.RunRequested:
    rec = ev.first(prior, "RunRequested")
    return rec.msg if rec is not None else pb.RunRequested()


def _config_key(config: pb.TemplateConfig) -> tuple[str, int, int]:
    return (config.template, config.num_warps, config.rows_per_program)


def propose(
    template,
    target_class: str,
    contract: pb.Contract,
    config: pb.TemplateConfig,
    *,
    attempt: int,
    origin: str,
    skill_id: str = "",
) -> pb.CandidateProposed:
    """A candidate rendered from `template` (a module of services.coder.templates) with `config`: kernel
    source plus its launch plan, identified by both."""
    source, plan = template.render(config), template.plan(config)
    digest = candidate_sha256(source, plan)
    return pb.CandidateProposed(
        candidate_id=f"c{attempt}-{digest[:10]}",
        target_class=target_class,
        source=source,
        source_sha256=digest,
        plan=plan,
        contract=contract,
        config=config,
        origin=origin,
        skill_id=skill_id,
        attempt=attempt,
    )


def _best(judged: tuple[pb.CandidateJudged, ...]) -> pb.CandidateJudged | None:
    # highest reward, then highest speedup over eager, then the earliest
    ranked = sorted(enumerate(judged), key=lambda ij: (-ij[1].reward, -ij[1].speedup_vs_eager, ij[0]))
    return ranked[0][1] if ranked else None


def conclude(target_class: str, state: TargetState, run: pb.RunRequested, why: str = "") -> pb.TargetConcluded:
    policy = run.policy if run.HasField("policy") else DEFAULT_POLICY
    best = _best(state.judged)
    n = len(state.judged)
    out = pb.TargetConcluded(target_class=target_class, reward=-1, policy=policy, candidates_judged=n)
    if best is None:
        out.reason = f"no candidate was judged: {why or 'nothing to propose'}"
        return out
    out.reward = best.reward
    if best.reward < 1:  # rejected or wrong: never a swap, whatever the policy says
        out.reason = f"none of {n} judged candidates passed the judge; the best was rejected: {best.reason}"
        return out
    out.candidate_id = best.candidate_id
    out.source_sha256 = best.source_sha256
    out.swap = best.reward >= policy.min_reward
    speed = f", {best.speedup_vs_eager:.2f}x vs eager" if best.speedup_vs_eager else ""
    verdict = "swap" if out.swap else "no swap"
    out.reason = (
        f"best of {n} judged: {best.candidate_id} (reward {best.reward:+d}{speed}); "
        f"policy {policy.name or '(unnamed)'} swaps at reward >= {policy.min_reward:+d}: {verdict}"
    )
    if why:
        out.reason += f"; {why}"
    return out


def _on_skills(prior: list[Recorded], skills: pb.SkillsRetrieved) -> list[Message]:
    target = skills.target_class
    if not target:
        return []  # the profiler found nothing worth optimising; there is nothing to conclude
    state = fold(prior, target)
    if state.proposals or state.concluded:
        return []  # this target is already being worked on
    run = _run_request(prior)
    family = _op_family(prior, target)
    if family not in BY_FAMILY:
        return [conclude(target, state, run, f"no template for op family {family!r}")]
    intro = _introspection(prior, target)
    if intro is None:
        return [conclude(target, state, run, f"ProfileCaptured holds no introspection of {target}")]
    try:
        contract = derive_contract(intro)
    except ContractError as exc:
        return [conclude(target, state, run, f"the module does not fit the template: {exc}")]
    template = BY_FAMILY[family]
    computes = _profile(prior, target).computes  # what the server saw it compute ("" before it looked)
    variant = template.variant_for(computes)
    if variant is None:
        return [conclude(target, state, run, f"the template does not write {computes}")]
    if template.valid(skills.config):
        config = pb.TemplateConfig()
        config.CopyFrom(skills.config)
        config.variant = variant  # a skill learned on another norm keeps its launch shape, not its arithmetic
        origin, skill_id = ("skill", skills.chosen_skill_id) if skills.chosen_skill_id else ("template", "")
    else:  # cold start (or a config this coder cannot render): the search table's first entry
        config, origin, skill_id = template.search_configs(variant)[0], "template", ""
    return [propose(template, target, contract, config, attempt=1, origin=origin, skill_id=skill_id)]


def _on_judged(prior: list[Recorded], judged: pb.CandidateJudged) -> list[Message]:
    proposed = next(
        (r.msg for r in ev.all_of(prior, "CandidateProposed") if r.msg.candidate_id == judged.candidate_id), None
    )
    if proposed is None:
        return []  # not a candidate of this run
    target = proposed.target_class
    state = fold(prior, target)
    if state.concluded:
        return []
    run = _run_request(prior)
    max_candidates = run.max_candidates or DEFAULT_MAX_CANDIDATES
    template = BY_TEMPLATE.get(proposed.config.template)
    tried = {_config_key(p.config) for p in state.proposals}
    untried = (
        [c for c in template.search_configs(proposed.config.variant) if _config_key(c) not in tried] if template else []
    )
    if judged.reward >= TOP_REWARD:
        return [conclude(target, state, run, "faster than every baseline: search stopped")]
    if len(state.judged) >= max_candidates:
        return [conclude(target, state, run, f"candidate budget of {max_candidates} spent")]
    if not untried:
        return [conclude(target, state, run, "no untried config is left in the search table")]
    attempt = len(state.proposals) + 1
    return [propose(template, target, proposed.contract, untried[0], attempt=attempt, origin="template")]


def decide(prior: list[Recorded], trigger: Recorded) -> list[Message]:
    """The coder's answer to `trigger` given the run's log up to and including it."""
    if trigger.type == "SkillsRetrieved":
        return _on_skills(prior, trigger.msg)
    if trigger.type == "CandidateJudged":
        return _on_judged(prior, trigger.msg)
    return []


def _rederive(prior: list[Recorded], trigger: Recorded, recorded: Message) -> Message:
    name = recorded.DESCRIPTOR.name
    for msg in decide(prior, trigger):
        if msg.DESCRIPTOR.name == name:
            return msg
    raise ValueError(f"the coder decides no {name} in answer to {trigger.type} {trigger.env.event_id[:8]}")


REDERIVE: dict[str, Rederive] = {"CandidateProposed": _rederive, "TargetConcluded": _rederive}
