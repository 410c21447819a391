"""The skill store over a real nats-server: cold retrieval, publishing, the index projection, warm retrieval."""

from __future__ import annotations

import asyncio
import time

import pytest
from runlog import publish, wait_for_events

from services.core import events as ev
from services.core.bus import Bus
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.core.runner import answer
from services.profiler import domain as profiler_domain
from services.skillstore import domain
from services.skillstore.library import JsonSkillLibrary
from services.skillstore.service import SkillstoreService, run_index_projector

QWEN = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
LLAMA = "transformers.models.llama.modeling_llama.LlamaRMSNorm"
INJECTED = ("CandidateProposed", "CandidateJudged", "TargetConcluded", "SwapCommitted")
REDERIVERS = {
    **domain.REDERIVE,
    **profiler_domain.REDERIVE,
    **{t: (lambda prior, trigger, recorded, ordinal=0: recorded) for t in INJECTED},
}


@pytest.fixture
async def skillstore(nats_server, run_id, tmp_path):
    """Service and index projector for this test's runs only, on a connection of their own."""
    library = JsonSkillLibrary(tmp_path / "skills")
    service = SkillstoreService(library)
    runs = [run_id, run_id + "b"]
    stop = asyncio.Event()
    service_bus = await Bus.connect(nats_server.url, name="skillstore-test")

    async def on_message(rec: ev.Recorded) -> None:
        await answer(service_bus, service, rec)

    subjects = [ev.run_filter(r, t) for r in runs for t in service.consumes]
    tasks = [
        asyncio.create_task(service_bus.consume(f"skillstore-{run_id}", subjects, on_message, stop, ack_wait=10)),
        asyncio.create_task(run_index_projector(service_bus, library, stop, runs=runs)),
    ]
    yield runs, library
    stop.set()
    await asyncio.gather(*tasks)
    await service_bus.nc.close()  # not drain: see tests/profiler/test_profiler_service.py


async def _wait(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await predicate()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def _at(index: JsonSkillLibrary, seq: int) -> bool:
    return index.last_seq() >= seq


async def _event(bus, run_id: str, type_name: str) -> ev.Recorded:
    return (await wait_for_events(bus, run_id, type_name, timeout=20.0))[-1]


async def _profile(bus, run_id: str, class_path: str, width: int, new_run, profiled) -> ev.Recorded:
    """Publish the run's request and the profiler's ProfileCaptured, derived as the profiler derives it."""
    local = new_run(run_id)
    profiled(local, class_path, width)
    req = await publish(bus, run_id, local.log[0].msg, "client")
    return await publish(bus, run_id, local.log[1].msg, "profiler", req)


async def test_cold_then_publish_then_warm(bus, skillstore, new_run, profiled, config):
    (run1, run2), library = skillstore

    # run 1: an empty library, so a cold start
    captured = await _profile(bus, run1, QWEN, 1536, new_run, profiled)
    cold = (await _event(bus, run1, "SkillsRetrieved")).msg
    assert (cold.target_class, cold.chosen_skill_id, cold.config) == (QWEN, "", pb.TemplateConfig())
    assert cold.observed.library_size == 0

    retrieved = ev.last(await bus.read_run(run1), "SkillsRetrieved")
    proposal = pb.CandidateProposed(
        candidate_id="c1", target_class=QWEN, source_sha256="ab" * 32, config=config, origin="template"
    )
    proposed = await publish(bus, run1, proposal, "coder", retrieved)
    judged = await publish(
        bus, run1, pb.CandidateJudged(candidate_id="c1", source_sha256="ab" * 32, reward=2), "judge", proposed
    )
    published = (await _event(bus, run1, "SkillPublished")).msg
    skill_id = domain.skill_id_for("row_reduction", config)
    assert published.skill_id == skill_id and published.reward == 2
    assert published.fingerprint == next(t for t in captured.msg.ranking if t.class_path == QWEN).fingerprint

    async def indexed():
        return library.size() == 1

    await _wait(indexed)
    conclusion = pb.TargetConcluded(target_class=QWEN, candidate_id="c1", reward=2, swap=True)
    concluded = await publish(bus, run1, conclusion, "coder", judged)
    committed = pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=QWEN, modules_patched=57)
    await publish(bus, run1, committed, "server", concluded)
    credited = (await _event(bus, run1, "SkillCredited")).msg
    assert (credited.skill_id, credited.reward) == (skill_id, 2)

    async def credited_in_index():
        return library.skill(skill_id).pulls == 2

    await _wait(credited_in_index)

    # run 2: another model's norm, wider, same physics family: the skill is found and chosen
    await _profile(bus, run2, LLAMA, 4096, new_run, profiled)
    warm = (await _event(bus, run2, "SkillsRetrieved")).msg
    assert (warm.target_class, warm.chosen_skill_id, warm.config) == (LLAMA, skill_id, config)
    (neighbour,) = warm.observed.neighbours
    assert 0 < neighbour.distance < domain.DISTANCE_THRESHOLD and neighbour.pulls == 2
    assert warm.reason.startswith(f"chose {skill_id}")

    # every event re-derives byte for byte
    for run in (run1, run2):
        assert verify(await bus.read_run(run), REDERIVERS) == []

    # the projection survives a restart, and a fresh library rebuilds from the stream
    reopened = JsonSkillLibrary(library.path.parent)
    assert (reopened.size(), reopened.last_seq()) == (1, library.last_seq())
    # ... and a second replica (its own library, its own projector, no durable to share) folds every
    # event too, not a share of them
    rebuilt = JsonSkillLibrary(library.path.parent.parent / "rebuilt")
    stop = asyncio.Event()
    replica = asyncio.create_task(run_index_projector(bus, rebuilt, stop, runs=[run1, run2]))
    try:
        await _wait(lambda: _at(rebuilt, library.last_seq()))
    finally:
        stop.set()
        await replica
    assert rebuilt.neighbours(list(published.fingerprint.vector), 1) == library.neighbours(
        list(published.fingerprint.vector), 1
    )


async def test_no_target_is_not_answered(tmp_path, new_run, profiled):
    run = new_run("r0")
    req = run.add(pb.RunRequested(), "client")
    none = run.add(profiler_domain.derive_profile_captured(run.log, req, pb.ProfileObservation()), "profiler", req)
    service = SkillstoreService(JsonSkillLibrary(tmp_path))
    assert await service.handle(none, run.log) == []
    broken = pb.ProfileCaptured(target_class="x.Y")  # names a target its ranking lacks: logged, not answered
    assert await service.handle(run.add(broken, "profiler", req), run.log) == []


async def test_an_index_that_cannot_be_written_stops_its_projector(bus, run_id, tmp_path):
    """A write that keeps failing is not skipped (a later event must not land before it): the projector
    raises, the service exits, and its restart resumes from the last sequence the index applied."""
    library = JsonSkillLibrary(tmp_path / "skills")
    assert not (tmp_path / "skills").exists()  # the library writes its directory on its first save
    (tmp_path / "skills").write_text("a file where the library's directory should be")
    fingerprint = pb.Fingerprint(op_family="row_reduction", row_width=64, vector=[0.0, 1.0])
    config = pb.TemplateConfig(template="row_reduction_onepass", num_warps=4, rows_per_program=1)
    published = pb.SkillPublished(skill_id="sk-x", fingerprint=fingerprint, config=config, reward=1)
    await publish(bus, run_id, published, "test")
    with pytest.raises(OSError):
        await asyncio.wait_for(run_index_projector(bus, library, asyncio.Event(), runs=[run_id]), timeout=30)
    assert library.last_seq() == 0


async def test_a_fingerprint_of_another_dimension_is_answered_with_a_cold_start(tmp_path, new_run, profiled, caplog):
    """An index of other fingerprints (another profiler version) cannot compare them: no neighbour, said in the
    log, and the run goes on from the coder's default."""
    library = JsonSkillLibrary(tmp_path)
    fingerprint = pb.Fingerprint(op_family="row_reduction", vector=[0.0, 1.0, 2.0])
    config = pb.TemplateConfig(template="row_reduction_onepass", num_warps=4, rows_per_program=1)
    old = new_run("old")
    old.add(pb.SkillPublished(skill_id="sk-old", fingerprint=fingerprint, config=config, reward=2), "skillstore")
    library.apply(old.log[0])
    run = new_run("r1")
    captured = profiled(run, QWEN, 1536)
    [retrieved] = await SkillstoreService(library).handle(captured, run.log)
    assert (retrieved.chosen_skill_id, list(retrieved.observed.neighbours), retrieved.observed.library_size) == (
        "",
        [],
        1,
    )
    assert "the library holds 3-dimensional ones" in caplog.text and "starts cold" in caplog.text
