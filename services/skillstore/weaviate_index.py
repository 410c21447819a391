"""The skill index in Weaviate (WEAVIATE_URL): the embedded library's fold, kept in three collections.

- `<prefix>Skill`: one object per skill (a UUID derived from its id) holding the fold's state of it
  (`domain.Skill`: config, the physics it worked on, pulls, rewards) and the stream sequence of the last event
  applied to it.
- `<prefix>SkillVector`: one object per physics a skill worked on, its vector ours (the event's
  `Fingerprint.vector`, no vectorizer) in a flat index (exact, brute force) with l2-squared distance, and the
  same vector again as a float64 property.
- `<prefix>SkillIndex`: one object, the index's position: the stream sequence applied last and the vectors'
  dimension.

Weaviate finds the candidates; `domain.nearest` ranks them (Euclidean distance in float64, ties by skill id),
so this backend answers exactly what the embedded one answers for the same events: the contract suite
(tests/skillstore/test_index_contract.py) runs both.

Writes are ordered so that an apply cut short anywhere is finished by applying the same event again (the
projector does, from the position): vectors first (their UUIDs are derived, so writing one twice is a no-op),
then the skill with the sequence it has applied (so a second apply does not count it twice), then the position.

One writer: the skill store's projector, one replica. Weaviate has no compare-and-set, so two replicas folding
into the same collections could lose each other's updates; a second replica needs another `prefix`.

Over 400 lines, one file: the three collections, their schema and the fold applied to them form one adapter behind
one port.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from google.protobuf import json_format

from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.core.settings import redact_url
from services.skillstore import domain
from services.skillstore.domain import INDEX_EVENTS, Skill
from services.skillstore.library import IndexUnavailable, refused_vector

log = logging.getLogger(__name__)

COLLECTION_PREFIX = "Yantra"
# What the collections hold; a change of it names the collections to drop (they are rebuilt from the stream).
WEAVIATE_FORMAT = 1
DEFAULT_GRPC_PORT = 50051  # the Weaviate image's own
VECTOR_NAME = "physics"
# Weaviate answers at most QUERY_MAXIMUM_RESULTS objects a query (10,000 unless configured).
MAX_QUERY = 10_000
# Weaviate compares float32 copies of the vectors: the farthest vector it returned bounds the ones it did not
# only up to this relative error (float32 rounding over a sum of ~11 squares is ~1e-6).
FLOAT32_SLACK = 1e-4
_NAMESPACE = uuid.UUID("6b1d5f3e-2f0c-5a8e-9d5b-7a9f3c1e2d40")  # UUIDs of our objects: uuid5(this, a name)
_POSITION_ID = uuid.uuid5(_NAMESPACE, "position")


class IncompatibleIndex(IndexUnavailable):
    """Collections written in another format than this code reads: waiting will not help."""


def _skill_uuid(skill_id: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"skill/{skill_id}")


def _vector_uuid(skill_id: str, ordinal: int) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"vector/{skill_id}/{ordinal}")


def one_line(exc: BaseException) -> str:
    """`exc` in one line, with the root cause the client wraps (its own message may say only "failed")."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    root = exc
    while (root.__cause__ or root.__context__) is not None and root is not (root.__cause__ or root.__context__):
        root = root.__cause__ or root.__context__
    cause = " ".join(str(root).split())
    if root is not exc and cause and cause not in text:
        text = f"{text.rstrip(' .:')}: {cause}"
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass(frozen=True)
class Endpoint:
    """Where Weaviate listens: REST at `http(s)://host:http_port`, gRPC at `host:grpc_port`."""

    host: str
    http_port: int
    secure: bool
    grpc_port: int


def endpoint(url: str) -> Endpoint:
    """`http(s)://HOST[:PORT][?grpc_port=N]` (gRPC on 50051 unless given); ValueError naming WEAVIATE_URL."""
    bad = f"WEAVIATE_URL={redact_url(url)}: not an http(s)://HOST:PORT URL (e.g. http://weaviate:8080)"
    try:
        parts = urlsplit(url)
        http_port = parts.port
    except ValueError:
        raise ValueError(bad) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or http_port == 0:
        raise ValueError(bad)
    secure = parts.scheme == "https"
    grpc = parse_qs(parts.query).get("grpc_port", [str(DEFAULT_GRPC_PORT)])[-1]
    if not grpc.isdigit() or not 1 <= int(grpc) <= 65535:
        raise ValueError(f"WEAVIATE_URL={redact_url(url)}: grpc_port={grpc} is not a port (1..65535)")
    return Endpoint(parts.hostname, http_port or (443 if secure else 80), secure, int(grpc))


@contextmanager
def _weaviate_errors(what: str) -> Iterator[None]:
    """Any failure of Weaviate (or of the way to it) as IndexUnavailable, one line: an OSError the projector
    retries, then stops on."""
    from weaviate.exceptions import WeaviateBaseError

    try:
        yield
    except (WeaviateBaseError, OSError) as exc:
        if isinstance(exc, IndexUnavailable):
            raise
        raise IndexUnavailable(f"Weaviate: {what}: {one_line(exc)}") from exc


def _skill_properties(skill: Skill, applied_seq: int) -> dict[str, Any]:
    return {
        "skill_id": skill.skill_id,
        "op_family": skill.op_family,
        "config_json": json.dumps(
            json_format.MessageToDict(skill.config, preserving_proto_field_name=True), sort_keys=True
        ),
        "physics_json": json.dumps([list(v) for v in skill.vectors]),
        "pulls": skill.pulls,
        "reward_sum": skill.reward_sum,
        "candidate_id": skill.candidate_id,
        "source_sha256": skill.source_sha256,
        "applied_seq": applied_seq,
    }


def _skill_of(props: dict[str, Any]) -> tuple[Skill, int]:
    skill = Skill(
        skill_id=props["skill_id"],
        op_family=props.get("op_family") or "",
        config=json_format.ParseDict(
            json.loads(props.get("config_json") or "{}"), pb.TemplateConfig(), ignore_unknown_fields=True
        ),
        vectors=tuple(tuple(float(x) for x in v) for v in json.loads(props.get("physics_json") or "[]")),
        pulls=int(props.get("pulls") or 0),
        reward_sum=float(props.get("reward_sum") or 0.0),
        candidate_id=props.get("candidate_id") or "",
        source_sha256=props.get("source_sha256") or "",
    )
    return skill, int(props.get("applied_seq") or 0)


class WeaviateSkillIndex:
    """A `SkillIndex` over a connected Weaviate client (see `connect`), used by one thread at a time; `close()`
    closes the client."""

    def __init__(self, client, prefix: str = COLLECTION_PREFIX):
        self._client = client
        self.names = (f"{prefix}Skill", f"{prefix}SkillVector", f"{prefix}SkillIndex")
        self._lock = threading.RLock()  # the projector applies in a worker thread while lookups run
        with _weaviate_errors("creating the collections"):
            self._create_collections()
            skills, vectors, position = (client.collections.use(name) for name in self.names)
        self._skills, self._vectors, self._position = skills, vectors, position
        with _weaviate_errors("reading the index's position"):
            self._last_seq, self._dimension = self._read_position()

    # ------------------------------------------------------------------ schema and position

    def _create_collections(self) -> None:
        from weaviate.classes.config import Configure, DataType, Property, VectorDistances

        no_vectors = Configure.Vectors.self_provided(vector_index_config=Configure.VectorIndex.flat())
        text, whole = DataType.TEXT, DataType.INT
        specs = {
            self.names[0]: (
                [Property(name=n, data_type=text) for n in ("skill_id", "op_family", "config_json", "physics_json")]
                + [
                    Property(name="pulls", data_type=whole),
                    Property(name="reward_sum", data_type=DataType.NUMBER),
                    Property(name="candidate_id", data_type=text),
                    Property(name="source_sha256", data_type=text),
                    Property(name="applied_seq", data_type=whole),
                ],
                no_vectors,
            ),
            self.names[1]: (
                [
                    Property(name="skill_id", data_type=text),
                    Property(name="ordinal", data_type=whole),
                    Property(name="coords", data_type=DataType.NUMBER_ARRAY),
                ],
                Configure.Vectors.self_provided(
                    name=VECTOR_NAME,
                    vector_index_config=Configure.VectorIndex.flat(distance_metric=VectorDistances.L2_SQUARED),
                ),
            ),
            self.names[2]: (
                [Property(name=n, data_type=whole) for n in ("format", "last_seq", "dimension")],
                no_vectors,
            ),
        }
        for name, (properties, vector_config) in specs.items():
            if not self._client.collections.exists(name):
                self._client.collections.create(name, properties=properties, vector_config=vector_config)

    def _read_position(self) -> tuple[int, int | None]:
        obj = self._position.query.fetch_object_by_id(_POSITION_ID)
        if obj is None:
            return 0, None
        fmt = int(obj.properties.get("format") or 0)
        if fmt != WEAVIATE_FORMAT:
            raise IncompatibleIndex(
                f"Weaviate holds the skill index in format {fmt}, this code reads {WEAVIATE_FORMAT}: delete the "
                f"collections {', '.join(self.names)} and the skill store rebuilds them from the stream"
            )
        dimension = int(obj.properties.get("dimension") or 0)
        return int(obj.properties.get("last_seq") or 0), dimension or None

    def _upsert(self, collection, objects: list) -> None:
        """Write whole objects, replacing any of the same UUID (a batch write replaces; a replace of a missing
        object fails)."""
        if not objects:
            return
        result = collection.data.insert_many(objects)
        if result.errors:
            first = next(iter(result.errors.values()))
            raise IndexUnavailable(f"Weaviate refused a write to {collection.name}: {one_line(first.message)}")

    # ------------------------------------------------------------------ SkillIndex

    def apply(self, rec: Recorded) -> bool:
        from weaviate.classes.data import DataObject

        with self._lock, _weaviate_errors(f"applying seq {rec.seq}"):
            if rec.seq <= self._last_seq:
                return False
            dimension, changed = self._dimension, False
            if rec.type in INDEX_EVENTS:
                msg = rec.msg
                stored = self._read_skill(msg.skill_id)
                before, applied = stored if stored else (None, 0)
                if applied >= rec.seq:
                    # Applied before the position was written (an apply cut short): finish it, count nothing again.
                    after, new_vectors, changed = before, before.vectors, True
                else:
                    after = domain.evolve_skill(before, msg, dimension)
                    changed = after is not before and after is not None
                    new_vectors = after.vectors[len(before.vectors) if before else 0 :] if changed else ()
                    refused = refused_vector(rec, dimension)
                    if refused:
                        log.warning("skill index: %s", refused)
                if changed:
                    first = len(after.vectors) - len(new_vectors)
                    vectors = [
                        DataObject(
                            properties={"skill_id": after.skill_id, "ordinal": first + i, "coords": list(v)},
                            uuid=_vector_uuid(after.skill_id, first + i),
                            vector={VECTOR_NAME: list(v)},
                        )
                        for i, v in enumerate(new_vectors)
                    ]
                    self._upsert(self._vectors, vectors)
                    skill = DataObject(properties=_skill_properties(after, rec.seq), uuid=_skill_uuid(after.skill_id))
                    self._upsert(self._skills, [skill])
                    if dimension is None and after.vectors:
                        dimension = len(after.vectors[0])
            position = {"format": WEAVIATE_FORMAT, "last_seq": rec.seq, "dimension": dimension or 0}
            self._upsert(self._position, [DataObject(properties=position, uuid=_POSITION_ID)])
            self._last_seq, self._dimension = rec.seq, dimension
            return changed

    def _read_skill(self, skill_id: str) -> tuple[Skill, int] | None:
        obj = self._skills.query.fetch_object_by_id(_skill_uuid(skill_id))
        return None if obj is None else _skill_of(obj.properties)

    def neighbours(self, vector: Sequence[float], k: int) -> list[pb.SkillCandidate]:
        vector = [float(x) for x in vector]
        # One call at a time with the projector's writes: the index as it stands between two events.
        with self._lock:
            dimension = self._dimension
            # A vector of another dimension is refused here, in the domain's words, before Weaviate does in its own.
            if dimension is None or k <= 0 or domain.dimension_problem(vector, dimension):
                return domain.nearest([], vector, k, dimension)
            with _weaviate_errors("looking up neighbours"):
                skills = self._read_skills(self._candidates(vector, k))
        return domain.nearest(skills, vector, k, dimension)

    def _candidates(self, vector: list[float], k: int) -> set[str]:
        """The ids of every skill that can be among the k nearest to `vector`: Weaviate's nearest vectors, asked
        for more until the farthest it returned is beyond the k-th nearest skill (so no tie is cut off)."""
        from weaviate.classes.query import MetadataQuery

        limit = min(max(4 * k, 16), MAX_QUERY)
        while True:
            found = self._vectors.query.near_vector(
                near_vector=vector,
                target_vector=VECTOR_NAME,
                limit=limit,
                return_properties=["skill_id", "coords"],
                return_metadata=MetadataQuery(distance=True),
            ).objects
            best: dict[str, float] = {}
            for obj in found:
                d = sum((a - b) ** 2 for a, b in zip(obj.properties["coords"], vector, strict=True))
                best[obj.properties["skill_id"]] = min(d, best.get(obj.properties["skill_id"], d))
            if len(found) < limit:
                return set(best)  # every vector Weaviate holds
            kth = sorted(best.values())[k - 1] if len(best) >= k else None
            if kth is not None and found[-1].metadata.distance > kth * (1 + FLOAT32_SLACK) + 1e-9:
                return set(best)
            if limit >= MAX_QUERY:
                log.warning("skill index: %d vectors tie or crowd the %d nearest; ranking the first ones", limit, k)
                return set(best)
            limit = min(limit * 4, MAX_QUERY)

    def _read_skills(self, skill_ids: set[str]) -> list[Skill]:
        from weaviate.classes.query import Filter

        if not skill_ids:
            return []
        ids = [_skill_uuid(s) for s in sorted(skill_ids)]
        found = self._skills.query.fetch_objects(filters=Filter.by_id().contains_any(ids), limit=len(ids)).objects
        return [_skill_of(obj.properties)[0] for obj in found]

    def size(self) -> int:
        with self._lock, _weaviate_errors("counting skills"):
            return int(self._skills.aggregate.over_all(total_count=True).total_count or 0)

    def last_seq(self) -> int:
        with self._lock:
            return self._last_seq

    def skill(self, skill_id: str) -> Skill | None:
        with self._lock, _weaviate_errors(f"reading skill {skill_id}"):
            stored = self._read_skill(skill_id)
        return None if stored is None else stored[0]

    def drop(self) -> None:
        """Delete the collections (tests; an operator rebuilding the index from the stream)."""
        with self._lock, _weaviate_errors("deleting the collections"):
            for name in self.names:
                self._client.collections.delete(name)

    def close(self) -> None:
        self._client.close()


def connect(url: str, *, prefix: str = COLLECTION_PREFIX, patience_s: float = 0.0) -> WeaviateSkillIndex:
    """The index in the Weaviate at `url`, its collections made if missing; tried again for `patience_s` while it
    does not answer. IndexUnavailable (one line) when it cannot be used: no weaviate-client, a bad URL, no answer."""
    try:
        import weaviate
        from weaviate.classes.init import AdditionalConfig, Timeout
    except ImportError:
        raise IndexUnavailable(
            "WEAVIATE_URL is set but weaviate-client is not installed: pip install 'gpuyantra[weaviate]'"
        ) from None
    try:
        where = endpoint(url)
    except ValueError as exc:
        raise IndexUnavailable(str(exc)) from None
    shown = redact_url(url)
    deadline, said_at = time.monotonic() + patience_s, None
    while True:
        client = None
        try:
            # No init checks: they ask PyPI for the client's latest version; reading the position below checks
            # gRPC, and REST answered get_meta while connecting.
            client = weaviate.connect_to_custom(
                http_host=where.host,
                http_port=where.http_port,
                http_secure=where.secure,
                grpc_host=where.host,
                grpc_port=where.grpc_port,
                grpc_secure=where.secure,
                skip_init_checks=True,
                additional_config=AdditionalConfig(timeout=Timeout(init=5, query=30, insert=30)),
            )
            index = WeaviateSkillIndex(client, prefix)
        except Exception as exc:  # whatever the client raised, said in one line
            if client is not None:
                client.close()
            why = one_line(exc)
            if isinstance(exc, IncompatibleIndex):
                raise  # not a matter of waiting
            if time.monotonic() >= deadline:
                raise IndexUnavailable(f"cannot use Weaviate at {shown}: {why}") from None
            if said_at is None or time.monotonic() - said_at >= 10.0:
                said_at = time.monotonic()
                log.warning("Weaviate at %s does not answer yet (%s); waiting for it", shown, why)
            time.sleep(1.0)
            continue
        log.info("skill index in Weaviate at %s: %d skills, at seq %d", shown, index.size(), index.last_seq())
        return index
