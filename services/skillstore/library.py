"""The skill index port, and the embedded library behind it: a projection of SkillPublished / SkillCredited.

`SkillIndex` is the port; `JsonSkillLibrary` is the embedded default, one JSON file under
`<data_dir>/skills/` written atomically (temp file + os.replace); `weaviate_index.WeaviateSkillIndex` is
the other backend (WEAVIATE_URL). Each records the last stream sequence it applied, so re-applying an
event is a no-op and a restart resumes where it stopped.

The accounting (pulls, rewards, the physics a skill remembers) is not here: it is `domain.evolve_skill`,
the fold every backend applies, so backends cannot count differently.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Protocol

from google.protobuf import json_format

from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.skillstore import domain
from services.skillstore.domain import INDEX_EVENTS, MAX_VECTORS_PER_SKILL, Skill, WrongDimension

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT_VERSION",
    "INDEX_EVENTS",
    "LIBRARY_FILE",
    "MAX_VECTORS_PER_SKILL",
    "IndexUnavailable",
    "JsonSkillLibrary",
    "Skill",
    "SkillIndex",
    "WrongDimension",
]

LIBRARY_FILE = "library.json"
FORMAT_VERSION = 1


class IndexUnavailable(OSError):
    """A backend that cannot be reached, read or written; the message is one line. An OSError, so the projector
    retries a write that failed (service._apply) and then stops, as for a full disk."""


class SkillIndex(Protocol):
    """What the skill store needs from a library backend. Its contract (tests/skillstore/test_index_contract.py,
    run against every backend): it holds `domain.fold_library` of the events it applied."""

    def apply(self, rec: Recorded) -> bool:
        """Fold one event of the stream in (domain.evolve_library); False when no skill changed (at or below the
        last sequence applied, a credit for an unknown skill, another type: only the position moves, if at all).
        Raises OSError (IndexUnavailable) when the change is not durable: nothing is applied then."""
        ...

    def neighbours(self, vector: Sequence[float], k: int) -> list[pb.SkillCandidate]:
        """domain.nearest: the k skills nearest to `vector`, nearest first (ties by skill id); WrongDimension for a
        vector of another length than the library's."""
        ...

    def size(self) -> int: ...

    def last_seq(self) -> int: ...

    def skill(self, skill_id: str) -> Skill | None: ...

    def close(self) -> None: ...


def skill_to_json(skill: Skill) -> dict:
    return {
        "skill_id": skill.skill_id,
        "op_family": skill.op_family,
        "config": json_format.MessageToDict(skill.config, preserving_proto_field_name=True),
        "vectors": [list(v) for v in skill.vectors],
        "pulls": skill.pulls,
        "reward_sum": skill.reward_sum,
        "candidate_id": skill.candidate_id,
        "source_sha256": skill.source_sha256,
    }


def skill_from_json(d: dict) -> Skill:
    return Skill(
        skill_id=d["skill_id"],
        op_family=d.get("op_family", ""),
        config=json_format.ParseDict(d.get("config", {}), pb.TemplateConfig(), ignore_unknown_fields=True),
        vectors=tuple(tuple(float(x) for x in v) for v in d.get("vectors", [])),
        pulls=int(d.get("pulls", 0)),
        reward_sum=float(d.get("reward_sum", 0.0)),
        candidate_id=d.get("candidate_id", ""),
        source_sha256=d.get("source_sha256", ""),
    )


def refused_vector(rec: Recorded, dimension: int | None) -> str | None:
    """What a backend logs when `rec` brings a vector the fold refuses (domain.evolve_skill) for a library of
    `dimension`; None otherwise."""
    if rec.type != "SkillPublished":
        return None
    msg = rec.msg
    problem = domain.dimension_problem(msg.fingerprint.vector, dimension) if msg.fingerprint.vector else None
    if problem:
        return f"seq {rec.seq}: {msg.skill_id} brings {problem}; its trial counts, that physics is not indexed"
    return None


class JsonSkillLibrary:
    """The embedded skill library: `domain.Library` in memory, persisted to one JSON file after each change."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LIBRARY_FILE
        self._lock = threading.RLock()  # the projector applies in a worker thread while lookups run
        self._library = domain.Library()
        self._load()

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        try:
            data = json.loads(text)
            skills = {d["skill_id"]: skill_from_json(d) for d in data.get("skills", [])}
            last_seq = int(data.get("last_seq", 0))
        except (ValueError, KeyError, TypeError, json_format.ParseError) as exc:
            # A projection can always be rebuilt from the stream: keep the bad file for a human, start empty.
            aside = self.path.with_suffix(".corrupt")
            os.replace(self.path, aside)
            log.error("skill library %s is unreadable (%s); moved to %s, rebuilding from events", self.path, exc, aside)
            return
        self._library = domain.Library(skills, last_seq, domain.library_dimension(skills.values()))

    def _save(self, library: domain.Library) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": FORMAT_VERSION,
            "last_seq": library.last_seq,
            "skills": [skill_to_json(library.skills[sid]) for sid in sorted(library.skills)],
        }
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".library-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise

    # ------------------------------------------------------------------ SkillIndex

    def apply(self, rec: Recorded) -> bool:
        with self._lock:
            before = self._library
            after = domain.evolve_library(before, rec)
            if after is before:
                return False  # at or below the position: already folded in
            refused = refused_vector(rec, before.dimension)
            # Not durable, so not applied: the state in memory stays as it was, and a redelivery applies it again.
            self._save(after)
            self._library = after
            if refused:
                log.warning("skill library: %s", refused)
            return after.skills is not before.skills

    def neighbours(self, vector: Sequence[float], k: int) -> list[pb.SkillCandidate]:
        with self._lock:
            library = self._library
        return domain.nearest(library.skills.values(), vector, k, library.dimension)

    def size(self) -> int:
        with self._lock:
            return len(self._library.skills)

    def last_seq(self) -> int:
        with self._lock:
            return self._library.last_seq

    def skill(self, skill_id: str) -> Skill | None:
        with self._lock:
            return self._library.skills.get(skill_id)

    def close(self) -> None:
        """Nothing to release: every change is on disk once `apply` returns."""
