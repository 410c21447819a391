"""The coder's decisions, pure: what kernel to propose next, and when a target is concluded.

Who writes the kernels is the run's author (`RunRequested.author`, services.coder.authors): the templates' search
(the default) decides every event from the run's log alone; an LLM author's step is an `authors.Ask`, which the
service answers by asking the model, and the event is then a pure function of the log and that recorded answer
(`observed`, services.coder.llm_answer). So `REDERIVE` re-runs `decide`, feeds an Ask the recorded observation,
and replay must get the same bytes without calling anything.
"""

from __future__ import annotations

from google.protobuf.message import Message

from services import ops
from services.coder import authors, llm_answer
from services.core import events as ev
from services.core import policies, run_state
from services.core.events import Recorded
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.core.replay import Rederive
from services.core.shapes import leading_rows

DEFAULT_MAX_CANDIDATES = 3
# Proposals made at once (a search step): judged as one batch, the next batch is chosen from their verdicts.
# Two, so that a step compares configs on one judge's GPU in one sitting without spending a small budget.
FAN_OUT = 2
TOP_REWARD = 3  # faster than the best baseline ...
COPY_TARGET = 0.85  # ... at this fraction of copy bandwidth on the largest timed shape: the search stops
DEFAULT_POLICY = policies.UNREQUESTED


def fold(prior: list[Recorded], target_class: str) -> run_state.TargetView:
    """What the run's log says about one target: proposals, their first judgements, whether it is concluded."""
    return run_state.fold(prior).target(target_class)


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
    return ops.UNRANKED  # unranked: the family's contract decides whether it fits


def _table(template, variant: str, prior: list[Recorded], target_class: str) -> list[pb.TemplateConfig]:
    """The template's search table for the target's live input (its row width, the last dimension, and its
    shape; none when unknown), in the order tried."""
    profile = _profile(prior, target_class)
    shape = tuple(int(d) for d in profile.input_shape) if profile is not None else ()
    return template.search_configs(variant, shape[-1] if shape else 0, live_shape=shape)


def _run_request(prior: list[Recorded]) -> pb.RunRequested:
    rec = ev.first(prior, "RunRequested")
    return rec.msg if rec is not None else pb.RunRequested()


def _config_key(config: pb.TemplateConfig) -> tuple:
    return (config.template, *_launch_shape(config))


def _launch_shape(config: pb.TemplateConfig) -> tuple:
    """What a config launches, whichever template renders it: warps, rows per program, parameters."""
    return (config.num_warps, config.rows_per_program, tuple(sorted(config.params.items())))


def copy_fraction(judged: pb.CandidateJudged) -> float:
    """The candidate's share of copy bandwidth at its largest timed shape (0 when it was not timed)."""
    rows = [r for r in judged.observed.timing.rows if r.candidate_us > 0]
    if not rows:
        return 0.0
    largest = max(rows, key=lambda r: r.bytes_moved)
    return largest.floor_us / largest.candidate_us


def _log2(n: int) -> int:
    return max(0, int(n).bit_length() - 1)


def refine(untried: list[pb.TemplateConfig], verdicts: list[tuple[pb.TemplateConfig, pb.CandidateJudged]]):
    """The untried configs in the order the verdicts so far suggest (pure; ties keep the table's order).

    Nearest first to the best candidate that passed (steps of warps, rows per program and a template's own
    parameters such as a block size, all powers of two): a search that found a good launch shape looks around
    it. Configs sharing the rows per program of a rejected candidate go last: a kernel wrong on ragged rows is
    wrong for that row blocking.
    """
    passed = [(c, j) for c, j in verdicts if j.reward >= 1]
    best = max(passed, key=lambda cj: (cj[1].reward, cj[1].speedup_vs_eager), default=None)
    failed_rows = {c.rows_per_program for c, j in verdicts if j.reward < 0}

    def key(item: tuple[int, pb.TemplateConfig]):
        index, config = item
        distance = 0
        if best is not None:
            b = best[0]
            distance = abs(_log2(config.num_warps) - _log2(b.num_warps)) + abs(
                _log2(config.rows_per_program) - _log2(b.rows_per_program)
            )
            distance += sum(abs(_log2(v) - _log2(b.params.get(k, 0))) for k, v in config.params.items())
        return (config.rows_per_program in failed_rows, distance, index)

    return [c for _, c in sorted(enumerate(untried), key=key)]


def dispatch_config(template, verdicts: list[tuple[pb.TemplateConfig, pb.CandidateJudged]]):
    """A config dispatching by size (pure), when the verdicts so far show one plain config fastest on
    decode-sized calls (at most the template's DISPATCH_ROWS, in the template's measure of a timed shape:
    `dispatch_size`, rows by default, RoPE's positions) and another beyond: the template's `combine` of the two.
    Speed is GPU time over eager's at each timed shape, so candidates judged in different children compare;
    untimed verdicts (CPU) show nothing. None where the template does not dispatch, or one config leads both
    sides."""
    combine = getattr(template, "combine", None)
    if combine is None:
        return None
    limit = template.DISPATCH_ROWS
    size = getattr(template, "dispatch_size", leading_rows)
    plain = getattr(template, "plain", lambda config: not config.params)
    sides = []  # (config, mean candidate/eager at decode-sized calls, beyond), for passed plain configs
    for config, judged in verdicts:
        if judged.reward < 1 or not plain(config):
            continue
        small, large = [], []
        for row in judged.observed.timing.rows:
            if row.candidate_us > 0 and row.eager_us > 0:
                (small if size(row.shape) <= limit else large).append(row.candidate_us / row.eager_us)
        if small and large:
            sides.append((config, sum(small) / len(small), sum(large) / len(large)))
    if len(sides) < 2:
        return None
    best_small = min(sides, key=lambda side: side[1])[0]
    best_large = min(sides, key=lambda side: side[2])[0]
    if _config_key(best_small) == _config_key(best_large):
        return None
    return combine(best_small, best_large, limit)


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
    """A candidate rendered from `template` (a family's, services.ops.template) with `config`: kernel
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


def conclude(target_class: str, state: run_state.TargetView, run: pb.RunRequested, why: str = "") -> pb.TargetConcluded:
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


def _setup(prior: list[Recorded], target: str, state: run_state.TargetView, run: pb.RunRequested):
    """(family, contract, template, variant) of a target about to be searched, or its TargetConcluded saying why
    the run's author cannot write it. The template author writes what the family's template renders; an LLM author
    also what no template renders, when the family recognises it (template.variant_for answers the template's
    variant first: a target a template writes is asked about as it always was)."""
    profile = _profile(prior, target)
    computes = profile.computes if profile is not None else ""  # what the server saw it compute ("" before it looked)
    family = ops.family_of(computes) or _op_family(prior, target)
    if family not in ops.FAMILIES:  # a roofline class no family writes (every family has a template)
        return conclude(target, state, run, f"no template for op family {family!r}")
    intro = _introspection(prior, target)
    if intro is None:
        return conclude(target, state, run, f"ProfileCaptured holds no introspection of {target}")
    template = ops.template(family)
    try:  # a module class's attributes, a layer's children by their roles, a function's parameters
        contract = template.contract_for(intro, profile)
    except ops.ContractRefused as refused:
        return conclude(target, state, run, str(refused))
    variant = template.variant_for(computes)
    if variant is None and authors.is_llm(run.author) and computes in ops.family(family).VARIANTS:
        # an LLM writes its own source: any variant the family's op runs and its judging holds the oracle of
        # (the contract above is the family's, whoever writes); the variant is what the module was seen computing
        variant = computes
    if variant is None:
        return conclude(target, state, run, f"the template does not write {computes}")
    return family, contract, template, variant


def _on_skills(prior: list[Recorded], skills: pb.SkillsRetrieved, *, siblings: bool = True) -> list:
    target = skills.target_class
    if not target:
        return []  # the profiler found nothing worth optimising; there is nothing to conclude
    state = fold(prior, target)
    if state.proposals or state.concluded is not None:
        return []  # this target is already being worked on
    run = _run_request(prior)
    setup = _setup(prior, target, state, run)
    if isinstance(setup, pb.TargetConcluded):
        return [setup]
    family, contract, template, variant = setup
    if authors.is_llm(run.author):  # one question a step; a retrieved skill's launch shape is the template's
        return [authors.ask(prior, run.author, target, family, variant, contract, attempt=1)]
    table = _table(template, variant, prior, target)
    config, origin, skill_id = _seed(template, table, skills, variant, siblings)
    # The first search step: the skill's (or the table's first) config and the next of the table beside it.
    budget = run.max_candidates or DEFAULT_MAX_CANDIDATES
    others = [c for c in table if _config_key(c) != _config_key(config)]
    out = [propose(template, target, contract, config, attempt=1, origin=origin, skill_id=skill_id)]
    for attempt, more in enumerate(others[: min(FAN_OUT, budget) - 1], start=2):
        out.append(propose(template, target, contract, more, attempt=attempt, origin="template"))
    return out


def _seed(template, table: list, skills: pb.SkillsRetrieved, variant: str, siblings: bool) -> tuple:
    """(config, origin, skill id) the search starts from: the retrieved recipe when this template renders it (a
    skill learned on another norm keeps its launch shape, not its arithmetic); with `siblings`, a recipe of another
    template of the same physics (a residual norm's for a norm, a gated MLP's for a plain one) by its launch shape —
    warps, rows per program, parameters — where this template's own table holds that shape; else the table's first
    entry, a cold start."""
    if template.valid(skills.config):
        config = pb.TemplateConfig()
        config.CopyFrom(skills.config)
        config.variant = variant
        return (config, "skill", skills.chosen_skill_id) if skills.chosen_skill_id else (config, "template", "")
    if siblings and skills.chosen_skill_id:
        shape = _launch_shape(skills.config)
        for config in table:
            if _launch_shape(config) == shape:
                return config, "skill", skills.chosen_skill_id
    return table[0], "template", ""


def _on_judged(prior: list[Recorded], judged: pb.CandidateJudged, dispatch: bool = True) -> list[Message]:
    whole = run_state.fold(prior)
    proposed = whole.proposal(judged.candidate_id)
    if proposed is None:
        return []  # not a candidate of this run
    target = proposed.target_class
    state = whole.target(target)
    if state.concluded is not None:
        return []
    if state.pending:
        return []  # the rest of this search step is still being judged: its last verdict decides the next
    run = _run_request(prior)
    max_candidates = run.max_candidates or DEFAULT_MAX_CANDIDATES
    best = _best(state.judged)
    if best is not None and best.reward >= TOP_REWARD and copy_fraction(best) >= COPY_TARGET:
        share = f"{copy_fraction(best):.0%}"
        return [conclude(target, state, run, f"reward +{best.reward} at {share} of copy bandwidth: search stopped")]
    if len(state.judged) >= max_candidates:
        return [conclude(target, state, run, f"candidate budget of {max_candidates} spent")]
    if authors.is_llm(run.author):  # the model's next answer, told the verdicts so far
        setup = _setup(prior, target, state, run)
        if isinstance(setup, pb.TargetConcluded):
            return [setup]
        family, contract, _, variant = setup
        attempt = len(state.proposals) + 1
        return [authors.ask(prior, run.author, target, family, variant, contract, attempt=attempt)]
    named = ops.template_family(proposed.config.template)  # None for an LLM author's candidate: no config
    template = ops.template(named) if named else None
    tried = {_config_key(p.config) for p in state.proposals}
    table = _table(template, proposed.config.variant, prior, target) if template else []
    untried = [c for c in table if _config_key(c) not in tried]
    configs = {p.candidate_id: p.config for p in state.proposals}
    verdicts = [(configs[j.candidate_id], j) for j in state.judged]
    combined = dispatch_config(template, verdicts) if dispatch and template else None
    if combined is not None and _config_key(combined) not in tried:
        untried = [combined, *refine(untried, verdicts)]  # the two best launch shapes, each where it leads
    else:
        untried = refine(untried, verdicts)
    if not untried:
        return [conclude(target, state, run, "no untried config is left in the search table")]
    step = untried[: min(FAN_OUT, max_candidates - len(state.proposals))]
    first = len(state.proposals) + 1
    return [
        propose(template, target, proposed.contract, config, attempt=first + i, origin="template")
        for i, config in enumerate(step)
    ]


def decide(prior: list[Recorded], trigger: Recorded) -> list:
    """The coder's answer to `trigger` given the run's log up to and including it: events, and for an LLM author
    `authors.Ask`s, each of which becomes an event once the model's answer is observed (`answered`)."""
    if trigger.type == "SkillsRetrieved":
        # a sibling template's recipe seeds the search since schema 12; a run recorded before re-derives a cold start
        return _on_skills(prior, trigger.msg, siblings=trigger.env.schema_version >= 12)
    if trigger.type == "CandidateJudged":
        # a dispatch by row count is proposed since schema 7; a run recorded before re-derives its own search
        return _on_judged(prior, trigger.msg, dispatch=trigger.env.schema_version >= 7)
    return []


def answered(prior: list[Recorded], ask: authors.Ask, observed: pb.AuthorObservation) -> Message:
    """The event an LLM author's step becomes once its answer is observed: the candidate, or the target concluded
    with why none could be made (pure: replay feeds it the recorded observation)."""
    result = llm_answer.candidate(ask, observed)
    if isinstance(result, str):  # no candidate: the target ends here, the answer recorded with the reason
        state = fold(prior, ask.target_class)
        why = f"the {ask.provider} author could not propose candidate {ask.attempt}: {result}"
        out = conclude(ask.target_class, state, _run_request(prior), why)
        if why not in out.reason:  # `conclude` names no why beside a rejected best: this one must be read
            out.reason += f"; {why}"
        out.observed.CopyFrom(observed)
        return out
    source, plan = result
    digest = candidate_sha256(source, plan)
    return pb.CandidateProposed(
        candidate_id=f"c{ask.attempt}-{digest[:10]}",
        target_class=ask.target_class,
        source=source,
        source_sha256=digest,
        plan=plan,
        contract=ask.contract,
        origin="llm",
        attempt=ask.attempt,
        observed=observed,
    )


def _name(item) -> str:
    return "an author's answer" if isinstance(item, authors.Ask) else item.DESCRIPTOR.name


def _rederive(prior: list[Recorded], trigger: Recorded, recorded: Message, ordinal: int = 0) -> Message:
    """The coder's answer at `ordinal` (a fan-out of proposals is re-derived in its order); an LLM author's step
    is re-derived from the answer the event recorded, never asked again."""
    name = recorded.DESCRIPTOR.name
    decided = decide(prior, trigger)
    item = decided[ordinal] if ordinal < len(decided) else None
    if isinstance(item, authors.Ask):
        return answered(prior, item, recorded.observed)
    if item is None or item.DESCRIPTOR.name != name:
        raise ValueError(
            f"the coder decides no {name} as answer {ordinal} to {trigger.type} {trigger.env.event_id[:8]} "
            f"(it decides {', '.join(_name(m) for m in decided) or 'nothing'})"
        )
    return item


REDERIVE: dict[str, Rederive] = {"CandidateProposed": _rederive, "TargetConcluded": _rederive}
