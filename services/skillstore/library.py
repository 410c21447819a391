"""The skill library: a projection of SkillPublished / SkillCredited, with nearest-neighbour lookup.

`SkillIndex` is the port; `JsonSkillLibrary` is the embedded default, one JSON file under
`<data_dir>/skills/` written atomically (temp file + os.replace). The file records the last stream
sequence it applied, so re-applying an event is a no-op and a restart resumes where it stopped.

Accounting (the bandit reads it): a skill's `pulls` counts judged trials of its recipe and
`reward_sum` their rewards. SkillPublished adds a trial (creating the skill the first time);
SkillCredited adds one too: a failed trial of a retrieved skill, or a live swap that confirmed it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from google.protobuf import json_format

from services.core.events import Recorded
from services.core.pb import events_pb2 as pb

log = logging.getLogger(__name__)

LIBRARY_FILE = "library.json"
FORMAT_VERSION = 1
# Fingerprints kept per skill: every physics it worked on, up to this many (oldest kept).
MAX_VECTORS_PER_SKILL = 32
INDEX_EVENTS = ("SkillPublished", "SkillCredited")


class SkillIndex(Protocol):
    """What the skill store needs from a library backend (embedded JSON now, Weaviate later)."""

    def apply(self, rec: Recorded) -> bool:
        """Fold one SkillPublished/SkillCredited in; False when it changed nothing (already applied, unknown)."""
        ...

    def neighbours(self, vector: Sequence[float], k: int) -> list[pb.SkillCandidate]:
        """The k skills nearest to `vector`, nearest first (ties by skill id)."""
        ...

    def size(self) -> int: ...

    def last_seq(self) -> int: ...


@dataclass
class Skill:
    skill_id: str
    op_family: str
    config: pb.TemplateConfig
    vectors: list[list[float]] = field(default_factory=list)
    pulls: int = 0
    reward_sum: float = 0.0
    candidate_id: str = ""
    source_sha256: str = ""

    def distance(self, vector: Sequence[float]) -> float:
        """Euclidean distance to the nearest physics this skill worked on (inf when none comparable)."""
        best = math.inf
        for v in self.vectors:
            if len(v) == len(vector):
                best = min(best, math.dist(v, vector))
        return best

    def to_json(self) -> dict:
        return {
            "skill_id": self.skill_id,
            "op_family": self.op_family,
            "config": json_format.MessageToDict(self.config, preserving_proto_field_name=True),
            "vectors": self.vectors,
            "pulls": self.pulls,
            "reward_sum": self.reward_sum,
            "candidate_id": self.candidate_id,
            "source_sha256": self.source_sha256,
        }

    @classmethod
    def from_json(cls, d: dict) -> Skill:
        return cls(
            skill_id=d["skill_id"],
            op_family=d.get("op_family", ""),
            config=json_format.ParseDict(d.get("config", {}), pb.TemplateConfig(), ignore_unknown_fields=True),
            vectors=[[float(x) for x in v] for v in d.get("vectors", [])],
            pulls=int(d.get("pulls", 0)),
            reward_sum=float(d.get("reward_sum", 0.0)),
            candidate_id=d.get("candidate_id", ""),
            source_sha256=d.get("source_sha256", ""),
        )


class JsonSkillLibrary:
    """The embedded skill library: everything in memory, persisted to one JSON file after each change."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LIBRARY_FILE
        self._lock = threading.RLock()  # the projector applies in a worker thread while lookups run
        self._skills: dict[str, Skill] = {}
        self._last_seq = 0
        self._load()

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        try:
            data = json.loads(text)
            skills = {d["skill_id"]: Skill.from_json(d) for d in data.get("skills", [])}
            last_seq = int(data.get("last_seq", 0))
        except (ValueError, KeyError, TypeError, json_format.ParseError) as exc:
            # A projection can always be rebuilt from the stream: keep the bad file for a human, start empty.
            aside = self.path.with_suffix(".corrupt")
            os.replace(self.path, aside)
            log.error("skill library %s is unreadable (%s); moved to %s, rebuilding from events", self.path, exc, aside)
            return
        self._skills, self._last_seq = skills, last_seq

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": FORMAT_VERSION,
            "last_seq": self._last_seq,
            "skills": [s.to_json() for s in sorted(self._skills.values(), key=lambda s: s.skill_id)],
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
            if rec.seq <= self._last_seq:
                return False
            changed = False
            if rec.type == "SkillPublished":
                changed = self._publish(rec.msg)
            elif rec.type == "SkillCredited":
                changed = self._credit(rec.msg)
            previous = self._last_seq
            self._last_seq = rec.seq
            try:
                self._save()
            except OSError:
                self._last_seq = previous  # not durable, so not applied: a redelivery applies it again
                raise
            return changed

    def _publish(self, msg: pb.SkillPublished) -> bool:
        skill = self._skills.get(msg.skill_id)
        if skill is None:
            skill = Skill(
                skill_id=msg.skill_id,
                op_family=msg.fingerprint.op_family,
                config=pb.TemplateConfig(),
                candidate_id=msg.candidate_id,
                source_sha256=msg.source_sha256,
            )
            skill.config.CopyFrom(msg.config)
            self._skills[msg.skill_id] = skill
        vector = list(msg.fingerprint.vector)
        if vector and vector not in skill.vectors and len(skill.vectors) < MAX_VECTORS_PER_SKILL:
            skill.vectors.append(vector)
        skill.pulls += 1
        skill.reward_sum += msg.reward
        return True

    def _credit(self, msg: pb.SkillCredited) -> bool:
        skill = self._skills.get(msg.skill_id)
        if skill is None:
            log.warning("credit for unknown skill %s ignored", msg.skill_id)
            return False
        skill.pulls += 1
        skill.reward_sum += msg.reward
        return True

    def neighbours(self, vector: Sequence[float], k: int) -> list[pb.SkillCandidate]:
        vector = [float(x) for x in vector]
        with self._lock:
            ranked = sorted(((s.distance(vector), s.skill_id, s) for s in self._skills.values()), key=lambda t: t[:2])
            return [
                pb.SkillCandidate(skill_id=sid, distance=d, pulls=s.pulls, reward_sum=s.reward_sum, config=s.config)
                for d, sid, s in ranked[:k]
                if math.isfinite(d)
            ]

    def size(self) -> int:
        with self._lock:
            return len(self._skills)

    def last_seq(self) -> int:
        with self._lock:
            return self._last_seq

    def skill(self, skill_id: str) -> Skill | None:
        with self._lock:
            return self._skills.get(skill_id)
