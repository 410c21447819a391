"""Where a live kernel came from: who wrote it, what the judge said of it, in which run (pure).

A swap's lineage is a function of its run's log alone: the run's first CandidateProposed and first
CandidateJudged of the swapped candidate (services.core.run_state, where the first fact counts). `yantra swaps`
and the TUI show the same words from the same events; how often the kernel was called is the live server's to
say (ListSwaps), not the log's.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.core.run_state import fold

UNKNOWN = "-"  # a fact the run's log does not hold (an older log, a forged swap)


@dataclass(frozen=True)
class Lineage:
    run_id: str
    swap_id: str
    candidate_id: str
    origin: str  # "template" | "skill" | "llm" | "" when the log holds no proposal of the candidate
    author: str  # one line: the template config, the skill id, or the LLM and its request hash
    verdict: str  # one line: reward and speedups, "-" when the log holds no verdict on the candidate
    reward: int | None = None
    speedup_vs_eager: float = 0.0  # geometric mean over the judge's shapes, 0 when untimed
    speedup_vs_best: float = 0.0
    template: str = ""  # origin "template": the family, e.g. "row_reduction_onepass"
    skill_id: str = ""  # origin "skill"
    provider: str = ""  # origin "llm": as AuthorObservation names them
    model: str = ""
    request_sha256: str = ""


def ratio(x: float) -> str:
    return f"{x:.3g}x"


def author_of(proposed: pb.CandidateProposed | None) -> str:
    """Who wrote a candidate, in one line: "template row_reduction_onepass w4 r1", "skill sk-1",
    "llm gemini/gemini-2.5-flash req 0123abcd4567"."""
    if proposed is None:
        return UNKNOWN
    if proposed.origin == "llm" or proposed.HasField("observed"):
        o = proposed.observed
        who = "/".join(x for x in (o.provider, o.model) if x) or "unnamed"
        return f"llm {who} req {o.request_sha256[:12] or '?'}"
    if proposed.origin == "skill" or proposed.skill_id:
        return f"skill {proposed.skill_id or '?'}"
    if proposed.HasField("config"):
        c = proposed.config
        variant = f" {c.variant}" if c.variant else ""
        return f"{proposed.origin or 'template'} {c.template or '?'}{variant} w{c.num_warps} r{c.rows_per_program}"
    return proposed.origin or UNKNOWN


def verdict_of(judged: pb.CandidateJudged | None) -> str:
    """The judge's word on a candidate, in one line: "+3 10.5x eager 1.2x best", "+1 untimed"."""
    if judged is None:
        return UNKNOWN
    if not judged.speedup_vs_eager:
        return f"{judged.reward:+d} untimed"
    best = f" {ratio(judged.speedup_vs_best)} best" if judged.speedup_vs_best else ""
    return f"{judged.reward:+d} {ratio(judged.speedup_vs_eager)} eager{best}"


def lineage(log: list[Recorded], committed: pb.SwapCommitted) -> Lineage:
    """The lineage of a swap its run committed, from that run's log (`bus.read_run`)."""
    state = fold(log)
    cid = committed.candidate_id
    proposed, judged = state.proposal(cid), state.judged.get(cid)
    run_id = log[0].env.run_id if log else ""
    p = proposed or pb.CandidateProposed()  # its unset fields read as ""
    return Lineage(
        run_id=run_id,
        swap_id=committed.swap_id,
        candidate_id=cid,
        origin=p.origin,
        author=author_of(proposed),
        verdict=verdict_of(judged),
        reward=judged.reward if judged is not None else None,
        speedup_vs_eager=judged.speedup_vs_eager if judged is not None else 0.0,
        speedup_vs_best=judged.speedup_vs_best if judged is not None else 0.0,
        template=p.config.template,
        skill_id=p.skill_id,
        provider=p.observed.provider,
        model=p.observed.model,
        request_sha256=p.observed.request_sha256,
    )
