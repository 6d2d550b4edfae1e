from __future__ import annotations

import gc
import weakref
from datetime import datetime, timedelta, timezone
from uuid import UUID

import duckdb
import numpy as np
import pytest

from rms_retrieval.stores.engine import segment_writing, writer
from rms_retrieval.stores.indexes.entity_graph import entity_id
from rms_retrieval.stores.analysis.expansion import PRESETS
from rms_retrieval.stores.indexes.postings import FTS_EXTENSION
from rms_retrieval.stores.engine.segment_layout import SEGMENT_FILES
from rms_retrieval.stores.errors import EmbeddingMismatchError, StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import LifecycleState, MemoryObject, NodeType
from rms_retrieval.stores.protocols import EmbeddingIdentity, GraphIndex, LexicalIndex, ObjectStore, RetrievalLog, VectorIndex

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def _memory(number: int, content: str, namespace: str = "a", **extra) -> MemoryObject:
    extra.setdefault("created_at", T0 + timedelta(minutes=number))
    return MemoryObject(id=UUID(int=number), namespace=namespace, content=content, **extra)


THREE_DOCUMENTS = [
    _memory(1, "the cat sat on the mat"),
    _memory(2, "the dog chased the cat and another cat"),
    _memory(3, "a bird sang in the garden"),
]


@pytest.fixture
def store(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as opened:
        yield opened


def test_its_snapshots_implement_every_protocol(store):
    for protocol in (LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog):
        assert isinstance(store.snapshot(), protocol)


def test_empty_store(store, encoder):
    assert store.snapshot().embedding_identity is None and store.snapshot().state_fingerprint() == "g0-o0-e0"
    assert store.snapshot().search_lexical("cat", ["a"], 5) == []
    assert store.snapshot().search_vector(encoder.encode(["cat"])[0], ["a"], 5) == []
    assert store.snapshot().count_objects() == 0 and store.snapshot().namespaces() == []


def test_a_replaced_generation_is_freed_without_the_garbage_collector(store):
    """A snapshot, and the segments a merge replaced, go when their last reference does: no
    reference cycle leaves them (their BM25 parts, their record reader) to a full collection."""
    gc.collect()
    gc.disable()
    try:
        seen = {}
        for number in range(12):  # ten one-object segments make a merge due
            store.add([_memory(number + 1, f"the cat number {number} sat in the garden")])
            snapshot = store.snapshot()
            assert snapshot.search_lexical("cat garden", ["a"], 5)  # each segment's BM25 part is made
            assert snapshot.count_objects(["a"]) == number + 1
            seen.update({id(segment): weakref.ref(segment) for segment in snapshot.segments})
        replaced = weakref.ref(snapshot)
        del snapshot
        store.wait_for_merges()
        store.add([_memory(20, "a bird sang in the garden")])
        store.wait_for_merges()
        live = store.snapshot()
        assert live.search_lexical("cat garden", ["a"], 20) and replaced() is None
        assert len(seen) > len(live.segments)  # merges replaced some
        assert [ref for ref in seen.values() if ref() is not None and ref() not in live.segments] == []
    finally:
        gc.enable()


def test_bm25_ranking_on_three_documents(store):
    store.add(THREE_DOCUMENTS)
    hits = store.snapshot().search_lexical("cat", ["a"], 10)
    assert [hit.object_id for hit in hits] == [UUID(int=2), UUID(int=1)]
    assert [hit.score for hit in hits] == [1.0, 0.0] and hits[0].bm25 > hits[1].bm25 > 0
    assert [hit.object_id for hit in store.snapshot().search_lexical("bird's garden!", ["a"], 10)] == [UUID(int=3)]
    assert store.snapshot().search_lexical("the a of ... ?!", ["a"], 10) == []
    assert store.snapshot().search_lexical("cat", ["b"], 10) == []
    [single] = store.snapshot().search_lexical("dog", ["a"], 10)
    assert single.object_id == UUID(int=2) and single.score == 1.0


REFERENCE_BM25 = """
SELECT id, score FROM (SELECT id, fts_main_objects.match_bm25(id, $text) AS score FROM objects)
WHERE score IS NOT NULL ORDER BY score DESC, id
"""


def _duckdb_match_bm25(memories: list[MemoryObject], query: str) -> list[tuple]:
    """DuckDB's own FTS index and match_bm25 over the same rows: the reference scores."""
    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    connection.load_extension(FTS_EXTENSION)
    connection.execute("CREATE TABLE objects (id UUID, content VARCHAR, entity_canonical_name VARCHAR)")
    connection.executemany("INSERT INTO objects VALUES (?, ?, ?)",
                           [[memory.id, memory.content, memory.entity_canonical_name] for memory in memories])
    connection.execute("PRAGMA create_fts_index('objects', 'id', 'content', 'entity_canonical_name')")
    return connection.execute(REFERENCE_BM25, {"text": query}).fetchall()


@pytest.mark.parametrize("query", ["cat", "the cat chased a bird", "garden mat dog", "cats!"])
def test_lexical_scores_equal_duckdbs_own_match_bm25(store, query):
    corpus = THREE_DOCUMENTS + [_memory(4, "cat cat cat", entity_canonical_name="Cat Stevens")]
    store.add(corpus[:2])
    store.add(corpus[2:])
    stored = store.snapshot().get_objects(store.snapshot().segments[0].ids + store.snapshot().segments[1].ids, ["a"])
    reference = _duckdb_match_bm25(list(stored.values()), query)
    hits = store.snapshot().search_lexical(query, ["a"], 10)
    assert [hit.object_id for hit in hits] == [row[0] for row in reference]
    assert [hit.bm25 for hit in hits] == pytest.approx([row[1] for row in reference], abs=1e-8)


def test_round_trip_and_fingerprint(store, encoder):
    rich = _memory(
        9, "Caroline adopted a dog", session_id="s", session_seq=4, event_time=T0 - timedelta(days=2),
        evidence_refs=("D1:3",), metadata={"speaker": "Caroline", "n": [1, 2]}, lifecycle_state=LifecycleState.TENTATIVE,
    )
    report = store.add([rich])
    assert (report.objects_added, report.entities_added) == (1, 1) and report.details["generation"] == 1
    stored = store.snapshot().get_objects([rich.id, UUID(int=12345)], ["a"])
    assert store.snapshot().get_objects([rich.id], ["b"]) == {}  # another namespace's id is unknown there
    assert list(stored) == [rich.id] and stored[rich.id] == rich
    assert stored[rich.id].created_at.tzinfo is timezone.utc and stored[rich.id].node_type is NodeType.TURN
    assert store.snapshot().state_fingerprint() == "g1-o2-e2"  # the turn, the extracted entity; MENTIONS + SPOKEN_BY
    assert store.snapshot().embedding_identity == encoder.identity
    assert [ref.alias for ref in store.snapshot().entity_catalog(["a"])] == ["Caroline"]


def test_the_entity_catalog_reads_names_and_aliases_from_records_as_from_objects(store):
    melanie = _memory(20, "Melanie Brown", node_type=NodeType.ENTITY, entity_canonical_name="Melanie Brown",
                      metadata={"aliases": ["Mel", "Mels"]})
    store.add([melanie])
    snapshot = store.snapshot()
    assert [(ref.alias, ref.canonical_name) for ref in snapshot.entity_catalog(["a"])] == [
        ("Mel", "Melanie Brown"), ("Melanie Brown", "Melanie Brown"), ("Mels", "Melanie Brown")]
    segment = next(s for s in snapshot.segments if s.holds("a", melanie.id))
    names = segment.entity_names("a", [segment.live_row("a", melanie.id)])
    assert names.canonicals.to_pylist() == ["Melanie Brown"] and dict(names.aliases) == {0: ["Mel", "Mels"]}
    assert names.ids.tobytes() == melanie.id.bytes
    # without an aliases key the name column answers, whatever the texts hold ("aliases" in quotes included)
    quoted = _memory(21, 'Her "aliases" list', node_type=NodeType.ENTITY, entity_canonical_name="Ann Lee",
                     metadata={"note": '"aliases"'})
    store.add([quoted])
    segment = next(s for s in store.snapshot().segments if s.holds("a", quoted.id))
    names = segment.entity_names("a", [segment.live_row("a", quoted.id)])
    assert names.canonicals.to_pylist() == ["Ann Lee"] and dict(names.aliases) == {}
    written = list(store.snapshot().entity_catalog(["a"]))
    with MemoryStore.open(store.path, read_only=True) as reopened:  # the records memory-mapped, not just written
        assert list(reopened.snapshot().entity_catalog(["a"])) == written
    assert [ref.alias for ref in written] == ["Ann Lee", "Mel", "Melanie Brown", "Mels"]


def test_namespace_filter_applies_before_top_k(store, encoder):
    crowd = [_memory(i, f"Caroline joined the pottery class, session {i}", namespace="a") for i in range(100, 150)]
    few = [_memory(i, f"Caroline joined the pottery class, group {i}", namespace="b") for i in range(200, 203)]
    store.add(crowd + few)
    expected = {memory.id for memory in few}
    assert {hit.object_id for hit in store.snapshot().search_lexical("pottery class", ["b"], 3)} == expected
    query = encoder.encode(["pottery class"])[0]
    vector_hits = store.snapshot().search_vector(query, ["b"], 3)
    assert {hit.object_id for hit in vector_hits} == expected
    assert [hit.cosine for hit in vector_hits] == sorted((hit.cosine for hit in vector_hits), reverse=True)
    assert store.snapshot().count_objects(["b"]) == 4 and store.snapshot().namespaces() == ["a", "b"]  # 3 turns + entity Caroline


def test_reopen_does_not_re_embed(tmp_path, encoder, monkeypatch):
    path = tmp_path / "store"
    with MemoryStore.open(path, encoder) as store:
        store.add(THREE_DOCUMENTS)
        query = encoder.encode(["a cat on a mat"])[0]
        before = store.snapshot().search_vector(query, ["a"], 3)
    monkeypatch.setattr(type(encoder), "encode", lambda self, texts: pytest.fail("re-embedded on reopen"))
    with MemoryStore.open(path, encoder, create=False) as store:
        assert store.snapshot().search_vector(query, ["a"], 3) == before and before[0].object_id == UUID(int=1)
    with MemoryStore.open(path, read_only=True) as store:
        assert store.snapshot().state_fingerprint() == "g1-o3-e0"
        with pytest.raises(StoreError, match="read-only"):
            store.add([_memory(50, "more")])


def _observable_state(store: MemoryStore, encoder) -> tuple:
    query = encoder.encode(["cat"])[0]
    return (
        store.snapshot().state_fingerprint(),
        store.snapshot().count_objects(),
        store.snapshot().search_lexical("cat bird Caroline", ["a"], 10),
        store.snapshot().search_vector(query, ["a"], 10),
        sorted(str(path.relative_to(store.path)) for path in store.path.rglob("*")),
    )


@pytest.mark.parametrize("failing_step", [(segment_writing, "parquet_bytes"), (writer, "write_manifest"),
                                          (segment_writing, "fsync_path")])
def test_failed_ingest_leaves_the_store_unchanged(store, encoder, monkeypatch, failing_step):
    store.add(THREE_DOCUMENTS)
    before = _observable_state(store, encoder)

    def fail(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(*failing_step, fail)
    with pytest.raises(RuntimeError, match="injected"):
        store.add([_memory(20, "Caroline fed the cat"), _memory(21, "Caroline saw a bird")])
    assert _observable_state(store, encoder) == before
    monkeypatch.undo()
    path = store.path
    store.close()
    with MemoryStore.open(path, encoder) as reopened:
        assert _observable_state(reopened, encoder) == before
        reopened.add([_memory(20, "Caroline fed the cat")])
        assert reopened.snapshot().state_fingerprint() == "g2-o5-e1"


def test_duplicates_and_mismatched_encoders_are_refused(store, encoder):
    store.add(THREE_DOCUMENTS)
    with pytest.raises(StoreError, match=str(UUID(int=1))):
        store.add([_memory(1, "again")])
    with pytest.raises(StoreError, match="twice"):
        store.add([_memory(30, "x"), _memory(30, "y")])

    class OtherModel:
        identity = EmbeddingIdentity("other", "f" * 16, 384)

        def encode(self, texts):
            return encoder.encode(texts)

    with MemoryStore.open(store.path, OtherModel()) as other, pytest.raises(EmbeddingMismatchError):
        other.add([_memory(31, "z")])
    assert store.snapshot().state_fingerprint() == "g1-o3-e0"


@pytest.mark.parametrize("victim", ["manifest.json", *SEGMENT_FILES])
def test_damaged_files_are_named(tmp_path, encoder, victim):
    path = tmp_path / "store"
    with MemoryStore.open(path, encoder) as store:
        store.add(THREE_DOCUMENTS)
        [segment] = store.snapshot().segments
    damaged = path / victim if victim == "manifest.json" else segment.directory / victim
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x55  # one flipped byte, the file otherwise intact
    damaged.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=victim.replace(".", r"\.")) as raised:
        with MemoryStore.open(path, create=False) as store:  # the index file is mapped, and checked on its first read
            store.snapshot().search_vector(np.ones(384, dtype=np.float32), ["a"], 3)
    assert f"rms check --store {path} --repair" in str(raised.value)
    if victim == "index.npz":
        with MemoryStore.open(path, create=False) as store:
            for _ in range(2):  # a failed check is not remembered as passed
                with pytest.raises(StoreError, match=r"index\.npz is damaged"):
                    store.snapshot().search_vector(np.ones(384, dtype=np.float32), ["a"], 3)


def test_missing_store(tmp_path):
    with pytest.raises(StoreError, match="rms ingest"):
        MemoryStore.open(tmp_path / "nowhere", create=False)


def test_edges_never_cross_namespaces(store):
    store.add([_memory(1, "Caroline met Melanie", namespace="a"), _memory(2, "Caroline met Melanie", namespace="b")])
    caroline_a, caroline_b = entity_id("a", "Caroline", UUID(int=1)), entity_id("b", "Caroline", UUID(int=2))
    edges_a = store.snapshot().adjacency(["a"]).touching([caroline_a, caroline_b], 0.4)
    assert {edge.edge_type for edge in edges_a} == {"MENTIONS", "CO_MENTIONED"}
    assert all(store.snapshot().get_objects([edge.source, edge.target], ["a", "b"]).keys() <= {UUID(int=1), caroline_a, entity_id("a", "Melanie", UUID(int=1))}
               for edge in edges_a)
    assert [edge.edge_id for edge in edges_a] == sorted(edge.edge_id for edge in edges_a)
    assert store.snapshot().adjacency(["a"]).touching([UUID(int=2)], 0.0) == []
    assert [edge.confidence for edge in store.snapshot().adjacency(["b"]).touching([caroline_b], 0.5)] == [0.7]
    store.add([_memory(3, "Melanie and Caroline again", namespace="a")])
    co = [edge for edge in store.snapshot().adjacency(["a"]).touching([caroline_a], 0.0) if edge.edge_type == "CO_MENTIONED"]
    assert [edge.confidence for edge in co] == [0.55]


def test_session_neighbours_and_pinned(store):
    session = [_memory(i, f"turn {i}", session_id="s1", session_seq=i) for i in range(1, 6)]
    elsewhere = [
        _memory(10, "turn 10", session_id="s1", session_seq=2, owner="someone-else"),
        _memory(11, "no session"),
        _memory(12, "pinned note", salience=1.0),
        _memory(13, "open task", node_type=NodeType.TASK),
        _memory(14, "done task", node_type=NodeType.TASK, lifecycle_state=LifecycleState.ARCHIVED),
        _memory(15, "other namespace task", namespace="b", node_type=NodeType.TASK),
    ]
    store.add(session + elsewhere)
    found = store.snapshot().session_neighbours([UUID(int=3), UUID(int=11)], 1, ["a"])
    assert store.snapshot().session_neighbours([UUID(int=3)], 1, ["b"]) == []
    assert [(item.trigger.int, item.neighbour.id.int, item.offset) for item in found] == [(3, 2, -1), (3, 4, 1)]
    assert [m.id.int for m in store.snapshot().pinned_objects(["a"])] == [12, 13]
    store.add([_memory(16, "a new pin", salience=1.0)])  # a write refreshes what is pinned
    assert [m.id.int for m in store.snapshot().pinned_objects(["a"])] == [12, 13, 16]


def test_retrieval_log_round_trip(store):
    first = {"request_id": "00000000-0000-0000-0000-000000000001", "scores": {"x": 0.5}}
    second = {"request_id": "00000000-0000-0000-0000-000000000002", "ids": (UUID(int=1),)}
    store.log_retrieval(first)
    store.log_retrieval(second)
    assert store.retrieval_log() == [first, {**second, "ids": [str(UUID(int=1))]}]
    assert store.retrieval_log(limit=1) == [{**second, "ids": [str(UUID(int=1))]}]
    assert list((store.path / "log").iterdir())  # beside the segments, never inside them


def test_a_store_opened_without_an_encoder_writes_with_the_packaged_model(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store") as opened:
        opened.add(THREE_DOCUMENTS[:1])
        assert opened.snapshot().embedding_identity == encoder.identity
    other = EmbeddingIdentity("other-model", "0" * 16, encoder.identity.dimension)

    class _Other(type(encoder)):
        @property
        def identity(self):
            return other

    with MemoryStore.open(tmp_path / "store", _Other()) as reopened, pytest.raises(EmbeddingMismatchError):
        reopened.add(THREE_DOCUMENTS[1:2])


def test_a_grown_store_answers_byte_identically_to_a_loaded_one(tmp_path, encoder):
    """The demo conversation written as plain chat turns with the packaged encoder, one turn per
    add and all in one add: same positions, speakers, vectors and so the same bundles, byte for
    byte (before batch invariance, `semantic_relevance` differed in the last bits)."""
    from rms_retrieval.dataflows.demo import load_demo
    from rms_retrieval.dataflows.ingest import plain_chat_turns
    from rms_retrieval.dataflows.locomo import reference_time
    from rms_retrieval.dataflows.retrieval import retrieve

    corpus = load_demo()
    turns = plain_chat_turns(corpus.dataset)
    questions = [*corpus.sample_questions, *(q.question for q in corpus.dataset.questions)]
    when = reference_time(corpus.dataset.conversations[0])
    bundles = {}
    for name in ("loaded", "grown"):
        with MemoryStore.open(tmp_path / name, encoder) as opened:
            for batch in ([turns] if name == "loaded" else [[turn] for turn in turns]):
                opened.add(batch)
            bundles[name] = [retrieve(opened, question, namespaces=corpus.namespace, reference_time=when,
                                      token_budget=2000, log=False, encoder=encoder).bundle.to_json()
                             for question in questions]
    assert len(bundles["loaded"]) >= 9 and bundles["grown"] == bundles["loaded"]

def _plain_turns(count: int) -> list[MemoryObject]:
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    return [MemoryObject(namespace="pre", node_type=NodeType.TURN, content=f"turn number {i} about gardening",
                         session_id="s", session_seq=i, event_time=when, created_at=when, updated_at=when)
            for i in range(count)]


def test_precomputed_vectors_are_stored_instead_of_embedding(tmp_path):
    from tests.factories import FakeEncoder

    encoder = FakeEncoder()
    objects = _plain_turns(3)
    vectors = np.eye(4, dtype=np.float32)[[2, 0, 3]] * 3.0  # not unit: the store normalises them
    with MemoryStore.open(tmp_path / "store", encoder, expansion=PRESETS["off"]) as store:
        store.add(objects, vectors=vectors, vector_identity=encoder.identity)
        for row, memory in zip((2, 0, 3), objects):
            hit = store.snapshot().search_vector(np.eye(4, dtype=np.float32)[row], ["pre"], 1)[0]
            assert hit.object_id == memory.id and hit.cosine == pytest.approx(1.0)


@pytest.mark.parametrize("vectors, identity, message", [
    (np.ones((3, 4)), None, "need vector_identity"),
    (np.ones((3, 4)), EmbeddingIdentity("another-model", "f" * 16, 4), "come from"),
    (np.ones((2, 4)), "store", "expected 3 vectors"),
    (np.full((3, 4), np.nan), "store", "NaN"),
    (None, "store", "without vectors"),
])
def test_bad_precomputed_vectors_are_refused_and_the_store_is_unchanged(tmp_path, vectors, identity, message):
    from tests.factories import FakeEncoder

    encoder = FakeEncoder()
    with MemoryStore.open(tmp_path / "store", encoder, expansion=PRESETS["off"]) as store:
        before = store.snapshot().state_fingerprint()
        with pytest.raises((StoreError, EmbeddingMismatchError), match=message):
            store.add(_plain_turns(3), vectors=vectors, vector_identity=encoder.identity if identity == "store" else identity)
        assert store.snapshot().state_fingerprint() == before and store.snapshot().count_objects() == 0


def test_precomputed_vectors_are_refused_where_the_store_embeds_expanded_turns(tmp_path):
    from tests.factories import FakeEncoder

    encoder = FakeEncoder()
    with MemoryStore.open(tmp_path / "store", encoder, expansion=PRESETS["previous"]) as store:
        with pytest.raises(StoreError, match="embedded with its neighbouring turns"):
            store.add(_plain_turns(2), vectors=np.ones((2, 4)), vector_identity=encoder.identity)
        assert store.snapshot().count_objects() == 0
