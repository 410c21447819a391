"""The skill store's decisions: which skill to try (UCB1 over fingerprint neighbours), what to publish, whom to credit;
and the library every index backend holds, as a fold of SkillPublished / SkillCredited.

Pure functions of (the run's log up to the trigger, the trigger, what was observed). The live handler and `yantra
replay --verify` call the same functions, so they cannot disagree. Likewise every backend of the skill index
(library.py, weaviate_index.py) folds events with `evolve_skill` and ranks with `nearest`: the same pulls and rewards.

A skill is a recipe (template config) for an op family; its id is a hash of the two, so the same
recipe proven on two models is one skill that remembers both fingerprints.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from google.protobuf.message import Message

from services.core import events as ev
from services.core import run_state
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.core.replay import Rederive, from_observed

NEIGHBOURS_K = 5
# Fingerprint distance within which a skill counts as the same physics. Two op families are 2·√2 apart (see
# profiler.roofline.FAMILY_WEIGHT); one family's ops differ by well under 1 unless intensity, width, rows, dtype all do.
DISTANCE_THRESHOLD = 1.0
# Judge rewards run from -1 to +3; UCB1 wants means in [0, 1].
REWARD_MIN, REWARD_MAX = -1.0, 3.0
PUBLISH_MIN_REWARD = 1


class BadTrigger(ValueError):
    """A trigger whose run log lacks what it refers to; the message names what is missing."""


def skill_id_for(op_family: str, config: pb.TemplateConfig) -> str:
    """Deterministic: the same recipe for the same op family is always the same skill."""
    digest = hashlib.sha256(op_family.encode() + b"\0" + config.SerializeToString(deterministic=True)).hexdigest()
    return f"sk-{digest[:16]}"


def describe_config(config: pb.TemplateConfig) -> str:
    return f"{config.template}, {config.num_warps} warps, {config.rows_per_program} rows/program"


# ---------------------------------------------------------------- the bandit


def _normalised(mean_reward: float) -> float:
    return min(max((mean_reward - REWARD_MIN) / (REWARD_MAX - REWARD_MIN), 0.0), 1.0)


def ucb1(candidates: list[pb.SkillCandidate], c: float = math.sqrt(2)) -> list[float]:
    """UCB1 score per candidate, same order: mean reward (scaled to [0, 1]) + c·√(ln N / n).

    An arm never pulled scores +inf, so every neighbour is tried once before any is exploited;
    the caller breaks ties (several +inf) by distance, then skill id.
    """
    total = sum(k.pulls for k in candidates)
    log_total = math.log(total) if total > 1 else 0.0
    scores = []
    for k in candidates:
        if k.pulls == 0:
            scores.append(math.inf)
        else:
            scores.append(_normalised(k.reward_sum / k.pulls) + c * math.sqrt(log_total / k.pulls))
    return scores


def target_fingerprint(profile: pb.ProfileCaptured, target_class: str | None = None) -> pb.Fingerprint:
    wanted = profile.target_class if target_class is None else target_class
    target = next((t for t in profile.ranking if t.class_path == wanted), None)
    if target is None:
        raise BadTrigger(f"ProfileCaptured names target {wanted!r} but its ranking does not hold it")
    return target.fingerprint


def target_starting(prior: list[Recorded], trigger: Recorded) -> str:
    """The target whose search `trigger` starts: the profile's first, or the next one once the one before ended
    (services.core.run_state.next_target); "" when it starts none."""
    if trigger.type == "ProfileCaptured":
        return trigger.msg.target_class
    return run_state.next_target(run_state.fold(prior), trigger)


def derive_skills_retrieved(
    prior: list[Recorded], trigger: Recorded, observed: pb.SkillsObservation
) -> pb.SkillsRetrieved:
    """Pick a skill among the near neighbours by UCB1 (ties: nearer physics, then id); none near: a cold start."""
    profile = pb.ProfileCaptured(target_class=target_starting(prior, trigger))
    near = [i for i, k in enumerate(observed.neighbours) if k.distance <= DISTANCE_THRESHOLD]
    near_scores = ucb1([observed.neighbours[i] for i in near])
    scores = [-math.inf] * len(observed.neighbours)  # too far to be considered: never chosen
    for i, score in zip(near, near_scores, strict=True):
        scores[i] = score
    out = pb.SkillsRetrieved(target_class=profile.target_class, ucb_scores=scores)
    out.observed.CopyFrom(observed)
    if not near:
        if not observed.neighbours:
            out.reason = f"cold start: the library holds {observed.library_size} skills and none is comparable"
        else:
            out.reason = (
                f"cold start: the nearest of {observed.library_size} skills lies at distance "
                f"{observed.neighbours[0].distance:.2f}, beyond {DISTANCE_THRESHOLD}; the coder uses its default"
            )
        return out
    # Equal scores go to the nearest physics, then the id (by id alone, a hash, bench/transfer.py saw a farther recipe
    # chosen over a nearer one the target could use: services/skillstore/README.md, "Transfer").
    best = min(near, key=lambda i: (-scores[i], observed.neighbours[i].distance, observed.neighbours[i].skill_id))
    chosen = observed.neighbours[best]
    out.chosen_skill_id = chosen.skill_id
    out.config.CopyFrom(chosen.config)
    if chosen.pulls == 0:
        why = "never tried, so explored first"
    else:
        why = f"score {scores[best]:.3f}: mean reward {chosen.reward_sum / chosen.pulls:+.2f} over {chosen.pulls} pulls"
    out.reason = (
        f"chose {chosen.skill_id} ({describe_config(chosen.config)}) by UCB1 among {len(near)} skills within "
        f"distance {DISTANCE_THRESHOLD} (it lies at {chosen.distance:.3f}); {why}"
    )
    return out


# ---------------------------------------------------------------- publishing and credit


def _proposal(prior: list[Recorded], candidate_id: str) -> pb.CandidateProposed | None:
    return run_state.fold(prior).proposal(candidate_id)


def _judged(prior: list[Recorded], candidate_id: str) -> pb.CandidateJudged | None:
    return run_state.fold(prior).judged.get(candidate_id)


def _fingerprint_of(prior: list[Recorded], target_class: str) -> pb.Fingerprint | None:
    for rec in reversed(ev.all_of(prior, "ProfileCaptured")):
        for t in rec.msg.ranking:
            if t.class_path == target_class:
                return t.fingerprint
    return None


def decide_publish(prior: list[Recorded], trigger: Recorded) -> list[pb.SkillPublished]:
    """A candidate judged at reward >= 1 makes its recipe a skill, filed under the target's fingerprint."""
    judged: pb.CandidateJudged = trigger.msg
    if judged.reward < PUBLISH_MIN_REWARD:
        return []
    proposal = _proposal(prior, judged.candidate_id)
    if proposal is None or not proposal.config.template:
        return []  # no recipe to remember (a hand-written or LLM source has no template config)
    fingerprint = _fingerprint_of(prior, proposal.target_class)
    if fingerprint is None:
        return []
    published = pb.SkillPublished(
        skill_id=skill_id_for(fingerprint.op_family, proposal.config),
        reward=judged.reward,
        candidate_id=judged.candidate_id,
        source_sha256=judged.source_sha256,
    )
    published.fingerprint.CopyFrom(fingerprint)
    published.config.CopyFrom(proposal.config)
    return [published]


def decide_penalty(prior: list[Recorded], trigger: Recorded) -> list[pb.SkillCredited]:
    """A candidate built from a retrieved skill that failed (reward < 1) is a losing pull of that skill."""
    judged: pb.CandidateJudged = trigger.msg
    if judged.reward >= PUBLISH_MIN_REWARD:
        return []
    proposal = _proposal(prior, judged.candidate_id)
    if proposal is None or not proposal.skill_id:
        return []
    reason = f"candidate {judged.candidate_id[:12]} built from this skill was judged {judged.reward:+d}"
    return [pb.SkillCredited(skill_id=proposal.skill_id, reward=judged.reward, reason=reason)]


def _skill_behind(prior: list[Recorded], candidate_id: str) -> str:
    """The skill a served candidate stands for: its own recipe once published, else the skill it was built from."""
    proposal = _proposal(prior, candidate_id)
    if proposal is None:
        return ""
    fingerprint = _fingerprint_of(prior, proposal.target_class)
    if fingerprint is not None and proposal.config.template:
        recipe = skill_id_for(fingerprint.op_family, proposal.config)
        if any(r.msg.skill_id == recipe for r in ev.all_of(prior, "SkillPublished")):
            return recipe
    return proposal.skill_id


def _swap_name(trigger: Recorded, swap_id: str) -> str:
    # Schema 1 swap ids were short enough to cut; unique ids (run + candidate) are named whole. Events
    # written at schema 1 keep their old wording so their runs still replay byte for byte.
    return swap_id[:12] if trigger.env.schema_version < 2 else swap_id


def decide_credit(prior: list[Recorded], trigger: Recorded) -> list[pb.SkillCredited]:
    """A committed swap confirms the skill behind it: one more pull at its judged reward.

    The mean stays the judged reward while the confidence grows, so a skill that served live is
    explored less and exploited more.
    """
    swap: pb.SwapCommitted = trigger.msg
    judged = _judged(prior, swap.candidate_id)
    skill_id = _skill_behind(prior, swap.candidate_id)
    if judged is None or not skill_id:
        return []
    reason = (
        f"swap {_swap_name(trigger, swap.swap_id)} serves candidate {swap.candidate_id[:12]} live on "
        f"{swap.modules_patched} modules; one more pull at its judged reward {judged.reward:+d}"
    )
    return [pb.SkillCredited(skill_id=skill_id, reward=judged.reward, reason=reason)]


SERVED_DEBIT_SCHEMA = 13  # since then the run's own served verdict counts against a skill (services.core.events)


def decide_debit(prior: list[Recorded], trigger: Recorded) -> list[pb.SkillCredited]:
    """A swap rolled back for what it did live, a losing pull (-1) of the skill behind it: the server's request (the
    kernel raised while serving) or the profiler's (the run's served load worse after its swaps: every live swap
    goes back, and each skill behind one pays). An operator's rollback says nothing about the kernel: no debit."""
    rolled: pb.SwapRolledBack = trigger.msg
    asked = next((r for r in prior if r.env.event_id == trigger.env.causation_id), None)
    if asked is None or asked.type != "RollbackRequested":
        return []
    if asked.msg.failure:
        why = f"failed while serving ({asked.msg.failure[:120]})"
    elif asked.env.producer == "profiler" and trigger.env.schema_version >= SERVED_DEBIT_SCHEMA:
        why = f"rolled back by its run's served verdict ({asked.msg.reason[:160]})"
    else:
        return []
    skill_id = _skill_behind(prior, rolled.candidate_id)
    reason = f"swap {_swap_name(trigger, rolled.swap_id)} {why}; a losing pull"
    return [pb.SkillCredited(skill_id=skill_id, reward=-1, reason=reason)] if skill_id else []


def decide(prior: list[Recorded], trigger: Recorded) -> list[Message]:
    """The skill store's answer to a CandidateJudged, a SwapCommitted or a SwapRolledBack (its credits; the next
    target's SkillsRetrieved, which needs the index, is the service's)."""
    if trigger.type == "CandidateJudged":
        return [*decide_publish(prior, trigger), *decide_penalty(prior, trigger)]
    if trigger.type == "SwapCommitted":
        return list(decide_credit(prior, trigger))
    if trigger.type == "SwapRolledBack":
        return list(decide_debit(prior, trigger))
    return []


# ---------------------------------------------------------------- the library: a fold of SkillPublished / SkillCredited

INDEX_EVENTS = ("SkillPublished", "SkillCredited")
# Fingerprints kept per skill: every physics it worked on, up to this many (oldest kept).
MAX_VECTORS_PER_SKILL = 32


class WrongDimension(ValueError):
    """A fingerprint vector whose length is not the library's: it compares with no skill; the message says both."""


@dataclass(frozen=True)
class Skill:
    """A recipe as the library knows it. `pulls` counts judged trials of it and `reward_sum` their rewards (the
    bandit's arm); `vectors` are the fingerprints of the physics it worked on."""

    skill_id: str
    op_family: str
    config: pb.TemplateConfig
    vectors: tuple[tuple[float, ...], ...] = ()
    pulls: int = 0
    reward_sum: float = 0.0
    candidate_id: str = ""
    source_sha256: str = ""

    def distance(self, vector: Sequence[float]) -> float:
        """Euclidean distance to the nearest physics this skill worked on (inf when none is comparable)."""
        return min((math.dist(v, vector) for v in self.vectors if len(v) == len(vector)), default=math.inf)


def dimension_problem(vector: Sequence[float], dimension: int | None) -> str | None:
    """Why `vector` cannot be compared with a library of `dimension` (None: holds no vector yet); None when it can."""
    if dimension is None or len(vector) == dimension:
        return None
    return f"a fingerprint vector of {len(vector)} dimensions; the library holds {dimension}-dimensional ones"


def evolve_skill(skill: Skill | None, event: Message, dimension: int | None) -> Skill | None:
    """The skill after one SkillPublished or SkillCredited about it (`skill` None: not in the library yet).

    SkillPublished is a judged trial (one pull at its reward), creating the skill the first time and remembering
    the physics it worked on: its vector, unless already held, past MAX_VECTORS_PER_SKILL, or not of the library's
    `dimension` (such a vector is refused, the trial still counts). SkillCredited is a trial too: a failed one of
    a retrieved skill, or a live swap that confirmed it; for a skill the library never held it changes nothing
    (the same object is returned, as for any other event).
    """
    kind = event.DESCRIPTOR.name
    if kind == "SkillPublished":
        if skill is None:
            config = pb.TemplateConfig()
            config.CopyFrom(event.config)
            skill = Skill(
                skill_id=event.skill_id,
                op_family=event.fingerprint.op_family,
                config=config,
                candidate_id=event.candidate_id,
                source_sha256=event.source_sha256,
            )
        vectors = skill.vectors
        vector = tuple(float(x) for x in event.fingerprint.vector)
        fits = dimension_problem(vector, dimension) is None
        if vector and fits and vector not in vectors and len(vectors) < MAX_VECTORS_PER_SKILL:
            vectors = (*vectors, vector)
        return replace(skill, vectors=vectors, pulls=skill.pulls + 1, reward_sum=skill.reward_sum + event.reward)
    if kind == "SkillCredited" and skill is not None:
        return replace(skill, pulls=skill.pulls + 1, reward_sum=skill.reward_sum + event.reward)
    return skill


def library_dimension(skills: Iterable[Skill]) -> int | None:
    """The length of the vectors a library holds (one length: `evolve_skill` refuses others); None when none."""
    return next((len(s.vectors[0]) for s in sorted(skills, key=lambda s: s.skill_id) if s.vectors), None)


@dataclass(frozen=True)
class Library:
    """The whole library as a value: what every backend holds once it has applied the stream up to `last_seq`."""

    skills: Mapping[str, Skill] = field(default_factory=dict)
    last_seq: int = 0
    dimension: int | None = None


def evolve_library(library: Library, rec: Recorded) -> Library:
    """The library after one more event of the stream: the same object for an event at or below its position
    (already folded in); otherwise at the event's position, with a new `skills` mapping only when a skill changed."""
    if rec.seq <= library.last_seq:
        return library
    skills, dimension = library.skills, library.dimension
    if rec.type in INDEX_EVENTS:
        msg = rec.msg
        before = skills.get(msg.skill_id)
        after = evolve_skill(before, msg, dimension)
        if after is not before and after is not None:
            skills = {**skills, msg.skill_id: after}
            if dimension is None and after.vectors:
                dimension = len(after.vectors[0])
    return Library(skills=skills, last_seq=rec.seq, dimension=dimension)


def fold_library(events: Iterable[Recorded], library: Library | None = None) -> Library:
    """Every event folded in, in order: what an index that applied them holds."""
    library = library or Library()
    for rec in events:
        library = evolve_library(library, rec)
    return library


def nearest(skills: Iterable[Skill], vector: Sequence[float], k: int, dimension: int | None) -> list[pb.SkillCandidate]:
    """The k skills nearest to `vector`, nearest first, ties by skill id; a skill's distance is the Euclidean one
    to the nearest physics it worked on, and a skill with none comparable is left out.

    Euclidean, not cosine: DISTANCE_THRESHOLD is calibrated on it (two op families lie 2·√2 apart). A library
    holding no vector answers nothing; a `vector` of another dimension than the library's is WrongDimension.
    """
    if dimension is None or k <= 0:
        return []
    problem = dimension_problem(vector, dimension)
    if problem:
        raise WrongDimension(f"cannot look up {problem}")
    vector = [float(x) for x in vector]
    ranked = sorted(((s.distance(vector), s.skill_id, s) for s in skills), key=lambda t: t[:2])
    return [
        pb.SkillCandidate(skill_id=sid, distance=d, pulls=s.pulls, reward_sum=s.reward_sum, config=s.config)
        for d, sid, s in ranked[:k]
        if math.isfinite(d)
    ]


# ---------------------------------------------------------------- replay


def _matching(out: list[Message], recorded: Message) -> Message:
    name = recorded.DESCRIPTOR.name
    same_type = [m for m in out if m.DESCRIPTOR.name == name]
    if not same_type:
        raise BadTrigger(f"re-deriving produced no {name}")
    return next((m for m in same_type if m.skill_id == recorded.skill_id), same_type[0])


def _rederive_decided(prior: list[Recorded], trigger: Recorded, recorded, ordinal: int = 0) -> Message:
    return _matching(decide(prior, trigger), recorded)


REDERIVE: dict[str, Rederive] = {
    "SkillsRetrieved": from_observed(derive_skills_retrieved),
    "SkillPublished": _rederive_decided,
    "SkillCredited": _rederive_decided,
}
