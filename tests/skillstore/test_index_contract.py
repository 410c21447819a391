"""The SkillIndex port's contract, one suite for every backend: the embedded JSON library always; Weaviate when
WEAVIATE_URL names one that answers (otherwise its cases are skipped, saying why: `pytest -rs` shows it).

The events are real ones: run logs built as the runner builds them, the skill store's own decisions over them
(domain.decide: SkillPublished, SkillCredited), in one stream with its sequence numbers. What a backend holds and
answers is compared with the pure fold (domain.fold_library, domain.nearest), never with a mock.
"""

from __future__ import annotations

import math
import os
import uuid

import pytest

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.profiler.roofline import FINGERPRINT_DIM
from services.skillstore import domain
from services.skillstore.domain import INDEX_EVENTS, WrongDimension
from services.skillstore.library import IndexUnavailable, JsonSkillLibrary

QWEN = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
LLAMA = "transformers.models.llama.modeling_llama.LlamaRMSNorm"
RECIPES = {
    "onepass4": pb.TemplateConfig(template="row_reduction_onepass", num_warps=4, rows_per_program=1),
    "onepass8": pb.TemplateConfig(template="row_reduction_onepass", num_warps=8, rows_per_program=2),
}


# ---------------------------------------------------------------- the backends


@pytest.fixture(scope="module")
def weaviate_url() -> str:
    """WEAVIATE_URL when it names a Weaviate this test can use; otherwise the Weaviate cases skip, saying why."""
    url = os.environ.get("WEAVIATE_URL", "")
    if not url:
        pytest.skip(
            "WEAVIATE_URL is not set: the Weaviate backend is not tested (set it to one, e.g. http://127.0.0.1:8080)"
        )
    from services.skillstore.weaviate_index import connect

    try:
        probe = connect(url, prefix=f"YantraProbe{uuid.uuid4().hex[:12]}")
    except IndexUnavailable as exc:
        pytest.skip(f"the Weaviate backend is not tested: {exc}")
    probe.drop()
    probe.close()
    return url


@pytest.fixture(params=["embedded", "weaviate"])
def open_index(request, tmp_path):
    """A function opening the backend's index at one place: called again, it opens the same index (a restart)."""
    opened = []
    if request.param == "embedded":

        def open_():
            opened.append(JsonSkillLibrary(tmp_path / "skills"))
            return opened[-1]

    else:
        from services.skillstore.weaviate_index import connect

        url, prefix = request.getfixturevalue("weaviate_url"), f"YantraTest{uuid.uuid4().hex[:12]}"

        def open_():
            opened.append(connect(url, prefix=prefix))
            return opened[-1]

    yield open_
    if request.param == "weaviate" and opened:
        opened[-1].drop()
    for index in opened:
        index.close()


# ---------------------------------------------------------------- real events


def _stream(*logs: list[ev.Recorded]) -> list[ev.Recorded]:
    """Run logs as one stream holds them, in order: each event with its stream sequence."""
    return [ev.Recorded(seq, rec.env) for seq, rec in enumerate((r for log in logs for r in log), start=1)]


def _decide(run, trigger: ev.Recorded) -> None:
    for msg in domain.decide(run.log, trigger):
        run.add(msg, "skillstore", trigger)


def _try_recipe(run, cause, recipe: str, reward: int, candidate_id: str, skill_id: str = "") -> ev.Recorded:
    """A candidate of `recipe` for the target `cause` (a ProfileCaptured) names, built from `skill_id` if any, judged at
    `reward`; and the skill store's answer to it."""
    proposal = pb.CandidateProposed(
        candidate_id=candidate_id,
        target_class=cause.msg.target_class,
        source_sha256="ab" * 32,
        config=RECIPES[recipe],
        origin="skill" if skill_id else "template",
        skill_id=skill_id,
    )
    proposed = run.add(proposal, "coder", cause)
    judged = run.add(
        pb.CandidateJudged(candidate_id=candidate_id, source_sha256="ab" * 32, reward=reward), "judge", proposed
    )
    _decide(run, judged)
    return judged


@pytest.fixture
def stream(new_run, profiled) -> list[ev.Recorded]:
    """Two runs of the loop, as the skill store answers them: recipes published, a failed retrieval penalised, a
    live swap credited, and the first recipe proven again on another model's norm (a second physics)."""
    first = new_run("contract-1")
    captured = profiled(first, QWEN, 1536)
    judged = _try_recipe(first, captured, "onepass4", 2, "c1")
    _try_recipe(first, captured, "onepass8", 3, "c2")
    four = domain.skill_id_for("row_reduction", RECIPES["onepass4"])
    _try_recipe(first, captured, "onepass4", -1, "c3", skill_id=four)  # a retrieval that failed
    concluded = first.add(
        pb.TargetConcluded(target_class=QWEN, candidate_id="c1", reward=2, swap=True), "coder", judged
    )
    swap = first.add(
        pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=QWEN, modules_patched=57), "server", concluded
    )
    _decide(first, swap)
    second = new_run("contract-2")
    _try_recipe(second, profiled(second, LLAMA, 4096), "onepass4", 3, "c4", skill_id=four)
    out = _stream(first.log, second.log)
    kinds = [r.type for r in out if r.type in INDEX_EVENTS]
    assert kinds == ["SkillPublished", "SkillPublished", "SkillCredited", "SkillCredited", "SkillPublished"], kinds
    return out


def _index_events(stream: list[ev.Recorded]) -> list[ev.Recorded]:
    """What the projector hands an index: the index events, at their stream sequences (with gaps between)."""
    return [r for r in stream if r.type in INDEX_EVENTS]


def _fingerprints(stream: list[ev.Recorded]) -> list[list[float]]:
    return [list(t.fingerprint.vector) for r in stream if r.type == "ProfileCaptured" for t in r.msg.ranking]


def _published(run, skill_id: str, vector: list[float], reward: int = 1) -> ev.Recorded:
    fingerprint = pb.Fingerprint(op_family="row_reduction", vector=vector)
    msg = pb.SkillPublished(skill_id=skill_id, fingerprint=fingerprint, config=RECIPES["onepass4"], reward=reward)
    return run.add(msg, "skillstore")


def _unit(i: int, length: float, base: list[float] | None = None) -> list[float]:
    v = list(base or [0.0] * FINGERPRINT_DIM)
    v[i] += length
    return v


def assert_holds(index, library: domain.Library) -> None:
    """`index` holds exactly `library`: its position, its size, every skill as the fold has it."""
    assert (index.last_seq(), index.size()) == (library.last_seq, len(library.skills))
    for skill_id, skill in library.skills.items():
        assert index.skill(skill_id) == skill, skill_id


# ---------------------------------------------------------------- the contract


def test_an_empty_index_holds_nothing_and_answers_nothing(open_index, new_run):
    index = open_index()
    assert (index.size(), index.last_seq(), index.skill("sk-none")) == (0, 0, None)
    assert index.neighbours([0.5] * FINGERPRINT_DIM, 5) == []
    assert index.neighbours([0.5] * 3, 5) == []  # no dimension yet: nothing to compare with, nothing refused
    run = new_run("empty")
    run.add(pb.RunRequested(prompts=["hi"]), "client")
    credit = run.add(pb.SkillCredited(skill_id="sk-none", reward=3, reason="no such skill"), "skillstore")
    assert not index.apply(credit)  # a credit for a skill it never held: only the position moves
    assert (index.size(), index.last_seq()) == (0, credit.seq)
    assert open_index().last_seq() == credit.seq


def test_applying_an_event_again_is_a_no_op(open_index, stream):
    index = open_index()
    library = domain.Library()
    for rec in _index_events(stream):
        after = domain.evolve_library(library, rec)
        assert index.apply(rec) is (after.skills is not library.skills), rec.seq
        assert not index.apply(rec), rec.seq  # the same sequence twice
        library = after
    for rec in _index_events(stream):  # a redelivery of everything: nothing counts twice
        assert not index.apply(rec)
    assert_holds(index, library)
    assert library == domain.fold_library(stream)


def test_a_reopened_index_resumes_from_the_sequence_it_recorded(open_index, stream):
    events = _index_events(stream)
    half = events[:3]
    index = open_index()
    for rec in half:
        index.apply(rec)
    again = open_index()  # a restart: the projector reads from last_seq() + 1
    assert_holds(again, domain.fold_library(half))
    assert again.last_seq() == half[-1].seq
    assert [again.apply(rec) for rec in events if rec.seq <= again.last_seq()] == [False] * len(half)
    for rec in events:
        if rec.seq > again.last_seq():
            assert again.apply(rec)
    assert_holds(again, domain.fold_library(stream))


def test_counts_rewards_and_neighbours_equal_the_pure_fold(open_index, stream):
    index = open_index()
    for rec in _index_events(stream):
        index.apply(rec)
    library = domain.fold_library(stream)
    assert_holds(index, library)
    four = library.skills[domain.skill_id_for("row_reduction", RECIPES["onepass4"])]
    # published at +2, a failed retrieval at -1, a live swap at +2, proven again on Llama at +3
    assert (four.pulls, four.reward_sum, len(four.vectors)) == (4, 6.0, 2)
    for vector in _fingerprints(stream):
        for k in (1, 2, 5):
            assert index.neighbours(vector, k) == domain.nearest(library.skills.values(), vector, k, library.dimension)
    (near,) = index.neighbours(_fingerprints(stream)[-1], 1)  # Llama's norm: the recipe proven on it, at 0
    assert (near.skill_id, near.distance, near.pulls, near.reward_sum) == (four.skill_id, 0.0, 4, 6.0)


def test_nearest_by_euclidean_distance_ties_broken_by_skill_id(open_index, new_run):
    run = new_run("ties")
    query = _unit(0, 2.0)  # a row reduction's one-hot, nothing else
    events = [
        _published(run, "sk-far", _unit(5, 3.0, query)),
        _published(run, "sk-c", _unit(7, 0.5, query)),  # three at exactly 0.5: ordered by id
        _published(run, "sk-a", _unit(6, -0.5, query)),
        _published(run, "sk-b", _unit(5, 0.5, query)),
        _published(run, "sk-near", _unit(8, 0.25, query)),
        _published(run, "sk-two", _unit(9, 2.0, query)),
        _published(run, "sk-two", _unit(9, 0.375, query)),  # a second physics, nearer: it counts
        # The query scaled: cosine distance 0, Euclidean 2. Retrieval is Euclidean (DISTANCE_THRESHOLD is).
        _published(run, "sk-scaled", [2 * x for x in query]),
    ]
    index = open_index()
    for rec in events:
        index.apply(rec)
    got = index.neighbours(query, 10)
    assert [(n.skill_id, n.distance) for n in got] == [
        ("sk-near", 0.25),
        ("sk-two", 0.375),
        ("sk-a", 0.5),
        ("sk-b", 0.5),
        ("sk-c", 0.5),
        ("sk-scaled", 2.0),
        ("sk-far", 3.0),
    ]
    assert [n.skill_id for n in index.neighbours(query, 4)] == ["sk-near", "sk-two", "sk-a", "sk-b"]  # cut in a tie
    assert [n.skill_id for n in index.neighbours(query, 1)] == ["sk-near"]
    assert index.neighbours(query, 0) == []
    library = domain.fold_library(events)
    assert got == domain.nearest(library.skills.values(), query, 10, library.dimension)
    two = got[1]
    assert (two.pulls, two.reward_sum, two.config) == (2, 2.0, RECIPES["onepass4"])


def test_a_vector_of_another_dimension_is_refused_clearly(open_index, new_run):
    run = new_run("dims")
    index = open_index()
    index.apply(_published(run, "sk-a", _unit(0, 2.0)))
    with pytest.raises(WrongDimension, match=f"3 dimensions; the library holds {FINGERPRINT_DIM}-dimensional"):
        index.neighbours([0.0, 0.0, 0.0], 5)
    short = _published(run, "sk-short", [1.0, 2.0, 3.0], reward=2)
    assert index.apply(short)  # the trial counts; its physics cannot be indexed beside the others
    known = _published(run, "sk-a", [1.0, 2.0, 3.0], reward=3)
    assert index.apply(known)
    library = domain.fold_library(run.log)
    assert library.skills["sk-short"].vectors == () and library.skills["sk-a"].vectors == (tuple(_unit(0, 2.0)),)
    assert_holds(index, library)
    assert [n.skill_id for n in index.neighbours(_unit(0, 2.0), 5)] == ["sk-a"]  # never the one with no physics
    assert index.neighbours(_unit(0, 2.0), 5)[0].pulls == 2


def test_the_contracts_events_carry_the_profilers_fingerprints(stream):
    """The stream's vectors are what the profiler derived for two norms: of FINGERPRINT_DIM, finite, distinct."""
    vectors = _fingerprints(stream)
    assert len(vectors) == 4 and len({tuple(v) for v in vectors}) == 4  # norm and matmul, twice
    assert all(len(v) == FINGERPRINT_DIM and all(math.isfinite(x) for x in v) for v in vectors)
