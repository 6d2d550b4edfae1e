"""Tiny builders and an in-memory store for node tests (no DuckDB, no FAISS, no model)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from uuid import UUID, uuid5

import numpy as np

from rms_retrieval.nodes.models import QueryIntent, RetrievalRequest
from rms_retrieval.nodes.bundle import RetrievalMetadata
from rms_retrieval.nodes.pools import Candidate, ChannelHit, PathType
from rms_retrieval.stores.indexes.adjacency import Adjacency
from rms_retrieval.stores.analysis.claims import Assertion, Quantity
from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import (PLAIN_FIELDS, Edge, EmbeddingIdentity, EntityRef, GraphIndex, LexicalHit, LexicalIndex,
                                            ObjectStore, QueryEncoder, RetrievalLog, SessionNeighbour, VectorHit,
                                            VectorIndex)

BASE_TIME = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
_IDS = UUID("5b0f2f4e-8b8a-4c4f-9d4e-3f2f6f0e9a11")


def oid(name: str) -> UUID:
    """A stable object id for a readable test name."""
    return uuid5(_IDS, name)


def make_object(name: str, content: str | None = None, *, days: float = 0, **fields) -> MemoryObject:
    when = BASE_TIME + timedelta(days=days)
    values = {"id": oid(name), "namespace": "ns", "content": content or f"memory {name}",
              "created_at": when, "updated_at": when, "event_time": when}
    values.update(fields)
    return MemoryObject(**values)


def make_request(query: str = "what happened?", **fields) -> RetrievalRequest:
    values = {"query": query, "namespaces": ("ns",), "reference_time": BASE_TIME + timedelta(days=30)}
    values.update(fields)
    return RetrievalRequest(**values)


def make_metadata(**fields) -> RetrievalMetadata:
    """Bundle metadata for a bundle built by hand: an empty pipeline run, with `fields` replaced."""
    empty = dict(
        intent=QueryIntent.SEMANTIC, current_state=False, entities=(), temporal_window=None, reference_time=BASE_TIME,
        retrieval_mode="DEFAULT", formula_version=2, rrf_k=60, configuration_fingerprint="0" * 16,
        candidates_generated=0, candidates_after_filter=0, candidates_ranked=0, candidates_selected=0, cut_by_budget=0,
        paths_at_limit=(), embedding_mismatch=False, backend_failures={}, min_score_skipped=False, excluded={},
        aggregation_coverage=None,
    )
    return RetrievalMetadata(**{**empty, **fields})


def make_candidate(obj: MemoryObject, **ranks: tuple[int, float]) -> Candidate:
    """`make_candidate(obj, VECTOR=(1, 0.8), LEXICAL=(2, 0.5))`: path=(rank, score)."""
    hits = {
        PathType[path]: ChannelHit(obj.id, PathType[path], rank, score, score)
        for path, (rank, score) in ranks.items()
    }
    return Candidate(object=obj, hits=hits)


IDENTITY = EmbeddingIdentity("fake-model", "0" * 16, 4)
# Ids that try 16-byte key columns: three ending in zero bytes, four sharing their first eight bytes.
AWKWARD_IDS = [UUID(int=value << 64) for value in range(1, 4)] + [UUID(int=(1 << 64) | value) for value in range(1, 5)]


class FakeEncoder(QueryEncoder):
    """Deterministic 4-d vectors from word buckets; enough to exercise the vector path."""

    identity = IDENTITY

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 4), dtype="float32")
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(map(ord, word)) % 4] += 1.0
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out


class OtherModelEncoder(QueryEncoder):
    """A 384-d encoder whose identity matches no store: its vector search finds a model mismatch."""

    identity = EmbeddingIdentity("other-model", "f" * 16, 384)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 384), dtype="float32")
        out[:, 0] = 1.0
        return out


class FakeStore(LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog):
    """Implements every store protocol over a list of objects, brute force."""

    def __init__(self, objects: Iterable[MemoryObject], edges: Iterable[Edge] = (), encoder=None,
                 identity: EmbeddingIdentity | None = IDENTITY):
        self.objects = {o.id: o for o in objects}
        self.edges = sorted(edges, key=lambda e: e.edge_id)
        self.encoder = encoder or FakeEncoder()
        self._identity = identity
        self.vectors = {o.id: self.encoder.encode([o.content])[0] for o in self.objects.values()}
        self.log: list[dict] = []
        self.fail: set[str] = set()

    @property
    def embedding_identity(self):
        return self._identity

    def snapshot(self) -> FakeStore:
        """A fake never changes, so it is its own snapshot (as `MemoryStore.snapshot()` is read)."""
        return self

    def _check(self, what: str) -> None:
        if what in self.fail:
            raise RuntimeError(f"{what} backend is down")

    def search_vector(self, vector, namespaces, limit):
        self._check("vector")
        scored = [(float(self.vectors[i] @ vector), i) for i, o in self.objects.items() if o.namespace in namespaces]
        scored.sort(key=lambda t: (-t[0], str(t[1])))
        return [VectorHit(i, s) for s, i in scored[:limit]]

    def search_lexical(self, text, namespaces, limit, fields=PLAIN_FIELDS):
        self._check("lexical")
        words = {w.strip("?.,!").lower() for w in text.split()}

        def matches(field):
            return sum(1 for w in (field or "").lower().split() if w.strip("?.,!:") in words)

        scored = []
        for i, o in self.objects.items():
            if o.namespace in namespaces:
                n = fields.value * matches(o.content) + fields.entity_canonical_name * matches(o.entity_canonical_name)
                if n:
                    scored.append((float(n), i))
        scored.sort(key=lambda t: (-t[0], str(t[1])))
        scored = scored[:limit]
        if not scored:
            return []
        hi, lo = scored[0][0], scored[-1][0]
        return [LexicalHit(i, s, 1.0 if hi == lo else (s - lo) / (hi - lo)) for s, i in scored]

    def entity_catalog(self, namespaces):
        return EntityCatalog(EntityRef(o.id, o.namespace, o.entity_canonical_name, o.entity_canonical_name)
                             for o in self.objects.values() if o.entity_canonical_name and o.namespace in namespaces)

    def adjacency(self, namespaces):
        self._check("graph")

        def inside(n):
            return n in self.objects and self.objects[n].namespace in namespaces
        return Adjacency([e for e in self.edges if inside(e.source) and inside(e.target)])

    def get_objects(self, ids, namespaces):
        return {i: self.objects[i] for i in ids if i in self.objects and self.objects[i].namespace in namespaces}

    def pinned_objects(self, namespaces):
        return sorted((o for o in self.objects.values() if o.namespace in namespaces and o.is_pinned),
                      key=lambda o: str(o.id))

    def session_neighbours(self, triggers, window, namespaces):
        out = []
        for t in triggers:
            trigger = self.objects[t]
            if trigger.namespace not in namespaces:
                continue
            if trigger.session_id is None or trigger.session_seq is None:
                continue
            session = [o for o in self.objects.values() if o.session_seq is not None and
                       (o.namespace, o.owner, o.scope, o.session_id) == (trigger.namespace, trigger.owner, trigger.scope,
                                                                         trigger.session_id)]
            place = {seq: number for number, seq in enumerate(sorted({o.session_seq for o in session}))}
            for o in session:
                offset = place[o.session_seq] - place[trigger.session_seq]
                if o.id != t and abs(offset) <= window:
                    out.append(SessionNeighbour(t, o, offset))
        return out

    def state_fingerprint(self):
        return f"fake-{len(self.objects)}-{len(self.edges)}"

    def log_retrieval(self, record):
        self.log.append(dict(record))


CONVERSATION = [
    "Caroline went to the LGBTQ support group yesterday",
    "Melanie painted a sunrise over the lake",
    "Caroline is researching adoption agencies",
    "Melanie's kids love the beach",
    "Caroline gave a talk at the school about her journey",
    "Melanie signed up for a pottery class",
]


def conversation_store(identity: EmbeddingIdentity | None = IDENTITY) -> FakeStore:
    """One session of six turns, the entity Caroline with MENTIONS edges, a pinned and a DEPRECATED memory."""
    caroline = make_object("Caroline", "Caroline", node_type=NodeType.ENTITY, entity_canonical_name="Caroline")
    turns = [make_object(f"t{i}", text, days=i, session_id="s1", session_seq=i) for i, text in enumerate(CONVERSATION)]
    pin = make_object("pin", "Caroline prefers short answers", salience=1.0, node_type=NodeType.PREFERENCE)
    old = make_object("old", "Caroline used to live in Ohio", epistemic_type="DEPRECATED")
    edges = [Edge(i + 1, t.id, caroline.id, "MENTIONS", 0.9) for i, t in enumerate(turns) if "Caroline" in t.content]
    return FakeStore([caroline, *turns, pin, old], edges, identity=identity)


def claim(name, subject, predicate, object_, *, polarity="positive", value=None, unit=None, source=None,
          evidence=None, **fields) -> MemoryObject:
    """A FACT named `name` (its content is "memory <name>") with a claim, and a quantity when `value` is given."""
    fields.setdefault("node_type", NodeType.FACT)
    fields.setdefault("evidence_refs", (f"dia-{name}",) if evidence is None else evidence)
    assertion = Assertion(subject=subject, predicate=predicate, object=object_, polarity=polarity)
    quantity = None
    if value is not None:
        quantity = Quantity(value=value, unit=unit, source_text=source or f"it came to {value} {unit} in all")
    return make_object(name, f"memory {name}", assertion=assertion, quantity=quantity, **fields)


def log_record(sequence: int, writer: str = "w") -> dict:
    """A minimal retrieval-log record, numbered within its writer."""
    from uuid import uuid4

    return {"request_id": str(uuid4()), "writer": writer, "sequence": sequence, "payload": {"query": f"q{sequence}"}}


def append_around_a_fork(writer) -> None:
    """Record 0 from the parent, record 0 from a forked child (which closes its writer and exits),
    then record 1 from the parent, and close: a fork must give the child a log segment of its own."""
    import os

    writer.append(log_record(0, "parent"))
    child = os.fork()
    if child == 0:
        try:
            writer.append(log_record(0, "child"))
            writer.close()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    writer.append(log_record(1, "parent"))
    writer.close()


def appends_to_a_blocked_log(make_writer, tmp_path) -> tuple[list[bool], list]:
    """Three appends through `make_writer(directory)` where a file stands in the log directory's
    place; what each append returned and the warnings they raised. The writer is closed."""
    import warnings

    blocked = tmp_path / "log"
    blocked.write_text("a file where the log directory should be")
    writer = make_writer(blocked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        appended = [writer.append(log_record(index)) for index in range(3)]
    writer.close()
    return appended, list(caught)


def append_from_threads(writer, threads: int, each: int) -> None:
    """`threads` real threads, started together, each appending records 0..each-1 under its own
    writer name ("t0", "t1", ...); every append must succeed. The writer is closed after."""
    import threading

    start = threading.Barrier(threads)
    appended: list[bool] = []  # list.append is atomic; an assert inside a thread would not fail the test

    def append_many(name: str) -> None:
        start.wait()
        for sequence in range(each):
            appended.append(bool(writer.append(log_record(sequence, name))))

    workers = [threading.Thread(target=append_many, args=(f"t{index}",)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    writer.close()
    assert appended == [True] * (threads * each)



# ----- the framework retrievers over the demo store (tests/test_langchain.py, tests/test_llama_index.py) -----

DEMO_QUESTION = "Where does Tomas work now?"
DEMO_BUDGET = 300


def demo_retriever_fields(demo_store, store) -> dict:
    """The keyword arguments both retrievers are built with in their tests."""
    return {"store": store, "namespaces": demo_store.namespace, "token_budget": DEMO_BUDGET,
            "reference_time": demo_store.reference_time}


def demo_bundle(store, demo_store, **options):
    """The bundle `retrieve()` gives for DEMO_QUESTION with those fields (not logged)."""
    from rms_retrieval.dataflows.retrieval import retrieve

    return retrieve(store, DEMO_QUESTION, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time,
                    token_budget=DEMO_BUDGET, log=False, **options).bundle


class RandomEncoder(QueryEncoder):
    """Random unit vectors, reproducible per text: ingestion without a model, for synthetic stores."""

    def __init__(self, dimension: int = 384) -> None:
        self._identity = EmbeddingIdentity("synthetic-random-unit", "seeded-by-text", dimension)

    @property
    def identity(self) -> EmbeddingIdentity:
        return self._identity

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            rng = np.random.default_rng(seed)
            rows.append(rng.standard_normal(self._identity.dimension))
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self._identity.dimension)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
