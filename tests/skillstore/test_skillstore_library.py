"""The embedded skill library: persistence, idempotent apply, neighbours by distance."""

from __future__ import annotations

import json
import math

import pytest

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.skillstore.library import JsonSkillLibrary


def _fp(*vector: float) -> pb.Fingerprint:
    return pb.Fingerprint(op_family="row_reduction", vector=list(vector))


def _rec(seq: int, msg) -> ev.Recorded:
    env = ev.make_envelope("run1", msg, producer="skillstore", time_ns=0, event_id=f"e{seq}")
    return ev.Recorded(seq, env)


def _published(seq: int, skill_id: str, vector, reward: int = 1, warps: int = 4) -> ev.Recorded:
    cfg = pb.TemplateConfig(template="row_reduction_onepass", num_warps=warps, rows_per_program=1)
    msg = pb.SkillPublished(skill_id=skill_id, fingerprint=_fp(*vector), config=cfg, reward=reward, candidate_id="c")
    return _rec(seq, msg)


def test_persists_across_reopen_and_ignores_reapplied_sequences(tmp_path):
    lib = JsonSkillLibrary(tmp_path / "skills")
    assert (lib.size(), lib.last_seq(), lib.neighbours([0.0, 0.0], 5)) == (0, 0, [])
    assert lib.apply(_published(5, "sk-a", [0.0, 0.0], reward=2))
    assert lib.apply(_rec(7, pb.SkillCredited(skill_id="sk-a", reward=3)))
    assert not lib.apply(_published(5, "sk-a", [0.0, 0.0], reward=2))  # redelivered: already in
    assert not lib.apply(_published(6, "sk-b", [1.0, 0.0]))  # behind the position: already folded in
    assert [p.name for p in (tmp_path / "skills").iterdir()] == ["library.json"]  # no temp files left

    again = JsonSkillLibrary(tmp_path / "skills")
    assert (again.size(), again.last_seq()) == (1, 7)
    (a,) = again.neighbours([0.0, 0.0], 5)
    assert (a.skill_id, a.pulls, a.reward_sum, a.distance, a.config.num_warps) == ("sk-a", 2, 5.0, 0.0, 4)
    assert not again.apply(_rec(7, pb.SkillCredited(skill_id="sk-a", reward=3)))
    assert again.neighbours([0.0, 0.0], 5)[0].pulls == 2


def test_neighbours_by_distance_nearest_first(tmp_path):
    lib = JsonSkillLibrary(tmp_path)
    lib.apply(_published(1, "sk-far", [3.0, 4.0]))
    lib.apply(_published(2, "sk-near", [0.3, 0.4]))
    lib.apply(_published(3, "sk-b", [0.0, 1.0]))
    lib.apply(_published(4, "sk-a", [1.0, 0.0]))
    lib.apply(_published(5, "sk-odd", [1.0, 2.0, 3.0]))  # another vector length: never comparable
    got = lib.neighbours([0.0, 0.0], 3)
    assert [(n.skill_id, n.distance) for n in got] == [("sk-near", 0.5), ("sk-a", 1.0), ("sk-b", 1.0)]
    assert [n.skill_id for n in lib.neighbours([0.0, 0.0], 10)] == ["sk-near", "sk-a", "sk-b", "sk-far"]


def test_a_skill_remembers_every_physics_it_worked_on(tmp_path):
    lib = JsonSkillLibrary(tmp_path)
    lib.apply(_published(1, "sk-a", [0.0, 0.0], reward=1))
    lib.apply(_published(2, "sk-a", [5.0, 0.0], reward=3))  # the same recipe proven on another model
    (near_second,) = lib.neighbours([5.0, 1.0], 1)
    assert (near_second.distance, near_second.pulls, near_second.reward_sum) == (1.0, 2, 4.0)
    assert lib.size() == 1


def test_credit_for_an_unknown_skill_moves_the_position_only(tmp_path):
    lib = JsonSkillLibrary(tmp_path)
    assert not lib.apply(_rec(3, pb.SkillCredited(skill_id="sk-nobody", reward=1)))
    assert (lib.size(), lib.last_seq()) == (0, 3)


def test_an_unreadable_file_is_moved_aside_and_the_library_starts_empty(tmp_path):
    (tmp_path / "library.json").write_text("{not json")
    lib = JsonSkillLibrary(tmp_path)
    assert (lib.size(), lib.last_seq()) == (0, 0)
    assert (tmp_path / "library.corrupt").read_text() == "{not json"
    lib.apply(_published(1, "sk-a", [0.0]))
    data = json.loads((tmp_path / "library.json").read_text())
    assert data["last_seq"] == 1 and data["skills"][0]["skill_id"] == "sk-a"
    assert math.isclose(data["skills"][0]["reward_sum"], 1.0)


def test_a_write_that_failed_leaves_nothing_applied_so_its_retry_counts_once(tmp_path):
    """The projector retries a failed write (service._apply): the library used to keep the pull it had counted in
    memory before the write failed, and counted it again on the retry."""
    lib = JsonSkillLibrary(tmp_path / "skills")
    (tmp_path / "skills").write_text("a file where the library's directory should be")
    published = _published(1, "sk-a", [0.0, 1.0], reward=2)
    with pytest.raises(OSError):
        lib.apply(published)
    assert (lib.size(), lib.last_seq(), lib.skill("sk-a")) == (0, 0, None)
    (tmp_path / "skills").unlink()
    assert lib.apply(published)
    assert (lib.skill("sk-a").pulls, lib.skill("sk-a").reward_sum) == (1, 2.0)
    assert JsonSkillLibrary(tmp_path / "skills").skill("sk-a") == lib.skill("sk-a")


def test_the_file_format_is_unchanged(tmp_path):
    """Version 1, as libraries already on disk hold it: they load, and are written back the same."""
    written = {
        "version": 1,
        "last_seq": 9,
        "skills": [
            {
                "skill_id": "sk-a",
                "op_family": "row_reduction",
                "config": {"template": "row_reduction_onepass", "num_warps": 4, "rows_per_program": 1},
                "vectors": [[0.0, 1.0], [0.5, 0.25]],
                "pulls": 3,
                "reward_sum": 5.0,
                "candidate_id": "c",
                "source_sha256": "ab",
            }
        ],
    }
    (tmp_path / "library.json").write_text(json.dumps(written, indent=1))
    lib = JsonSkillLibrary(tmp_path)
    skill = lib.skill("sk-a")
    assert (skill.pulls, skill.reward_sum, skill.vectors, skill.config.num_warps) == (
        3,
        5.0,
        ((0.0, 1.0), (0.5, 0.25)),
        4,
    )
    assert lib.apply(_rec(10, pb.SkillCredited(skill_id="sk-a", reward=1)))
    written["last_seq"], written["skills"][0]["pulls"], written["skills"][0]["reward_sum"] = 10, 4, 6.0
    assert json.loads((tmp_path / "library.json").read_text()) == written
