"""Stage 2 nodes on the in-memory fake store: limits, namespace scope, failures, the graph walk."""

from __future__ import annotations

import numpy as np
import pytest

from rms_retrieval.nodes import candidate_generation as cg
from rms_retrieval.nodes import query_analysis as qa
from rms_retrieval.nodes.models import QueryAnalysis, QueryEmbedding, QueryEntity
from rms_retrieval.nodes.pools import CandidateLimits, ChannelHit, ChannelResult, PathType
from rms_retrieval.nodes.candidate_settings import CandidateSettings
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.errors import EmbeddingError, EmbeddingMismatchError
from rms_retrieval.stores.models import NodeType
from rms_retrieval.stores.protocols import Edge, EmbeddingIdentity
from tests.factories import BASE_TIME, FakeEncoder, FakeStore, make_object, make_request, oid

LIMITS = CandidateLimits(vector_k=5, lexical_k=5, graph_max_candidates=50)


def _analysis(*entity_names: str, store: FakeStore | None = None) -> QueryAnalysis:
    entities = tuple(QueryEntity(name=n, confidence=0.9, matched_ids=(oid(n),)) for n in entity_names)
    return QueryAnalysis(raw_query="q", entities=entities, namespace_scope=("ns",), reference_time=BASE_TIME)


def _entity(name: str, namespace: str = "ns"):
    return make_object(name, name, node_type=NodeType.ENTITY, entity_canonical_name=name, namespace=namespace)


def _graph(settings: RetrievalSettings, store: FakeStore, *names: str, limit: int = 50):
    request = make_request()
    limits = CandidateLimits(5, 5, limit)
    return cg.graph_candidates(
        query_analysis=_analysis(*names), entity_catalog=qa.entity_catalog(store, request),
        store_snapshot=store, candidate_limits=limits, request=request, settings=settings,
    )


def test_vector_candidates_are_ranked_and_limited_to_the_namespace():
    objects = [make_object(f"a{i}", "cat cat cat") for i in range(8)] + [
        make_object(f"b{i}", "cat cat cat", namespace="other") for i in range(8)]
    store = FakeStore(objects)
    request = make_request("cat")
    embedding = qa.query_embedding(request, FakeEncoder(), RetrievalSettings())
    result = cg.vector_candidates(embedding, store, LIMITS, request, RetrievalSettings())
    assert [h.rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert all(store.objects[h.object_id].namespace == "ns" for h in result.hits)
    assert result.at_limit


def test_embedding_mismatch_empties_the_vector_path_or_raises_on_request():
    store = FakeStore([make_object("a", "cat")], identity=EmbeddingIdentity("other-model", "1" * 16, 4))
    request = make_request("cat")
    embedding = QueryEmbedding(np.ones(4, dtype="float32") / 2, FakeEncoder.identity)
    result = cg.vector_candidates(embedding, store, LIMITS, request, RetrievalSettings())
    assert result.embedding_mismatch and result.hits == () and result.failure == "embedding_mismatch"
    strict = RetrievalSettings(candidates=CandidateSettings(on_embedding_mismatch="error"))
    with pytest.raises(EmbeddingMismatchError, match="EMBEDDING_VERSION_MISMATCH"):
        cg.vector_candidates(embedding, store, LIMITS, request, strict)


def test_a_failing_backend_is_reported_not_raised():
    store = FakeStore([make_object("a", "cat")])
    store.fail.add("lexical")
    result = cg.lexical_candidates(store, LIMITS, make_request("cat"), RetrievalSettings())
    assert result.hits == ()
    assert result.failure.startswith("backend_error: RuntimeError")


@pytest.mark.parametrize("vector, message", [
    ([np.nan, 0.0, 0.0, 1.0], "NaN"), ([1.0, 0.0], "dimension 4"), ([0.0] * 4, "zero vector")])
def test_a_custom_query_encoder_is_checked_before_search(vector, message):
    class Custom(FakeEncoder):
        def encode(self, texts):
            return np.array([vector] * len(texts), dtype=np.float32)

    with pytest.raises(EmbeddingError, match=message):
        qa.query_embedding(make_request("cat"), Custom(), RetrievalSettings())


def test_a_custom_query_encoders_long_vector_is_scaled_to_unit_length():
    class Long(FakeEncoder):
        def encode(self, texts):
            return np.array([[3.0, 0.0, 4.0, 0.0]] * len(texts), dtype=np.float32)

    embedding = qa.query_embedding(make_request("cat"), Long(), RetrievalSettings())
    assert float(np.linalg.norm(embedding.vector)) == pytest.approx(1.0)


def test_disabled_path_returns_nothing_and_skips_the_encoder():
    settings = RetrievalSettings(candidates=CandidateSettings(enabled_paths={PathType.LEXICAL}))
    assert qa.query_embedding(make_request(), encoder_that_fails(), settings) is None


def encoder_that_fails():
    class Boom(FakeEncoder):
        def encode(self, texts):
            raise AssertionError("the encoder must not run when the vector path is off")
    return Boom()


def test_graph_finds_a_three_hop_chain_at_three_hops_and_not_at_two():
    a, b, c = _entity("A"), _entity("B"), _entity("C")
    turn = make_object("turn", "something about C")
    edges = [Edge(1, a.id, b.id, "CO_MENTIONED", 0.9), Edge(2, b.id, c.id, "CO_MENTIONED", 0.9),
             Edge(3, turn.id, c.id, "MENTIONS", 0.9)]
    store = FakeStore([a, b, c, turn], edges)
    three = RetrievalSettings(candidates=CandidateSettings(graph_max_hops=3))
    result = _graph(three, store, "A")
    assert [h.object_id for h in result.hits] == [turn.id]
    assert result.hits[0].detail["hops"] == 3 and result.hits[0].detail["edge_path"] == [1, 2, 3]
    assert _graph(RetrievalSettings(), store, "A").hits == ()


def test_max_hops_above_the_hard_limit_is_rejected():
    with pytest.raises(ValueError, match="graph_max_hops"):
        CandidateSettings(graph_max_hops=4)


def test_a_hub_entity_cannot_exceed_max_candidates_and_shared_mentions_rank_first():
    hub, other = _entity("Hub"), _entity("Other")
    turns = [make_object(f"t{i}", f"turn {i}") for i in range(1000)]
    edges = [Edge(i + 1, t.id, hub.id, "SPOKEN_BY", 1.0) for i, t in enumerate(turns)]
    edges.append(Edge(5000, turns[999].id, other.id, "MENTIONS", 0.9))
    store = FakeStore([hub, other, *turns], edges)
    result = _graph(RetrievalSettings(), store, "Hub", "Other", limit=50)
    assert len(result.hits) == 50
    assert result.hits[0].object_id == turns[999].id and result.hits[0].detail["support"] == 2


def test_an_edge_into_another_namespace_is_not_followed():
    a, foreign = _entity("A"), _entity("F", namespace="secret")
    leak = make_object("leak", "secret turn", namespace="secret")
    edges = [Edge(1, a.id, foreign.id, "CO_MENTIONED", 0.9), Edge(2, leak.id, foreign.id, "MENTIONS", 0.9)]
    store = FakeStore([a, foreign, leak], edges)
    assert _graph(RetrievalSettings(), store, "A").hits == ()


def test_edges_below_min_confidence_are_not_followed():
    a = _entity("A")
    turn = make_object("turn", "x")
    store = FakeStore([a, turn], [Edge(1, turn.id, a.id, "MENTIONS", 0.39)])
    assert _graph(RetrievalSettings(), store, "A").hits == ()


def test_pinned_candidates_hold_pins_active_tasks_and_intents_only():
    pin = make_object("pin", salience=1.0)
    task = make_object("task", node_type=NodeType.TASK)
    done = make_object("done", node_type=NodeType.TASK, lifecycle_state="ARCHIVED")
    plain = make_object("plain")
    store = FakeStore([pin, task, done, plain])
    result = cg.pinned_candidates(store, make_request(), RetrievalSettings())
    assert {h.object_id for h in result.hits} == {pin.id, task.id}
    assert set(result.objects) == {pin.id, task.id}


def test_keyword_scans_run_for_count_questions_only_and_ignore_their_limits():
    from rms_retrieval.nodes.models import AggregationKind

    hikes = [make_object(f"h{i}", f"went hiking on trail {i}") for i in range(30)]
    store = FakeStore(hikes)
    request = make_request("How many times did I go hiking?")
    settings = RetrievalSettings(candidates=CandidateSettings(keyword_scan_hits_per_term=25))
    plain = QueryAnalysis(raw_query=request.query, namespace_scope=("ns",), reference_time=BASE_TIME)
    assert cg.keyword_scan_candidates(plain, store, request, settings).hits == ()
    count = plain.model_copy(update={"aggregation": AggregationKind.COUNT})
    result = cg.keyword_scan_candidates(count, store, request, settings)
    assert len(result.hits) == 25
    assert {h.detail["scan"] for h in result.hits} == {"hiking"}
    assert all(h.path is PathType.KEYWORD_SCAN for h in result.hits)


def _spoken(store: FakeStore, *names: str, boost: float = 1.0) -> frozenset[int]:
    settings = RetrievalSettings(scoring={"speaker_boost": boost})
    return cg.spoken_by_query_entities(_analysis(*names), store, make_request(), settings)


def test_spoken_by_query_entities_are_the_named_persons_own_turns_not_their_mentions():
    ann, bob = _entity("Ann"), _entity("Bob")
    said, about, other = make_object("said", "Ann: hi"), make_object("about", "Bob: Ann is here"), make_object("o", "x")
    edges = [Edge(1, said.id, ann.id, "SPOKEN_BY", 1.0), Edge(2, about.id, bob.id, "SPOKEN_BY", 1.0),
             Edge(3, about.id, ann.id, "MENTIONS", 0.9)]
    store = FakeStore([ann, bob, said, about, other], edges)
    assert _spoken(store, "Ann") == {said.id.int}
    assert _spoken(store, "Ann", "Bob") == {said.id.int, about.id.int}
    assert _spoken(store, "Ann", boost=0.0) == frozenset()  # off: the graph is not read
    store.fail.add("graph")
    assert _spoken(store, "Ann") == frozenset()  # a failed graph backend lifts nothing


def test_objects_of_the_hits_are_the_same_whatever_order_the_paths_ran_in():
    pin, a, b = make_object("pin", salience=1.0), make_object("a", "cat"), make_object("b", "dog")
    store = FakeStore([pin, a, b])
    request = make_request()
    pinned = cg.pinned_candidates(store, request, RetrievalSettings())
    hits = [ChannelHit(o.id, PathType.VECTOR, rank, 1.0, 1.0) for rank, o in enumerate((b, a, pin), start=1)]
    channels = [ChannelResult(path=PathType.VECTOR, hits=tuple(hits)), pinned,
                ChannelResult(path=PathType.LEXICAL, hits=tuple(hit._replace(path=PathType.LEXICAL) for hit in hits[1:]))]
    in_order, reversed_order = (cg.objects_of(order, store, request) for order in (channels, channels[::-1]))
    assert list(in_order.items()) == list(reversed_order.items())
    assert in_order == {pin.id: pin, a.id: a, b.id: b} and list(in_order)[0] == pin.id  # the pinned path's first


class CountingStore(FakeStore):
    """A fake store that records the ids each object read asked for."""

    def __init__(self, objects):
        super().__init__(objects)
        self.asked: list[list] = []

    def get_objects(self, ids, namespaces):
        self.asked.append(list(ids))
        return super().get_objects(self.asked[-1], namespaces)


def test_the_vector_hits_read_only_the_objects_the_text_paths_did_not():
    pin, a, b, c, gone = (make_object("pin", salience=1.0), make_object("a", "cat"), make_object("b", "dog"),
                          make_object("c", "eel"), make_object("gone"))
    store = CountingStore([pin, a, b, c])
    request = make_request()
    pinned = cg.pinned_candidates(store, request, RetrievalSettings())
    lexical = ChannelResult(path=PathType.LEXICAL, hits=tuple(ChannelHit(o.id, PathType.LEXICAL, r, 1.0, 1.0)
                                                               for r, o in enumerate((b, a, gone), start=1)))
    text = cg.text_path_candidates([lexical, pinned, ChannelResult(path=PathType.KEYWORD_SCAN)], store, request)
    assert text.objects == cg.objects_of([lexical, pinned], store, request)
    assert sorted(text.hits) == sorted(o.id.int for o in (pin, a, b, gone))  # hits stay, read or not
    vector = ChannelResult(path=PathType.VECTOR, hits=tuple(ChannelHit(o.id, PathType.VECTOR, r, 1.0, 1.0)
                                                             for r, o in enumerate((c, a, gone), start=1)))
    store.asked.clear()
    objects = cg.candidate_objects(text, vector, store, request)
    assert store.asked == [sorted([c.id, gone.id], key=lambda i: i.int)]  # a was read with the text paths
    assert objects == {pin.id: pin, a.id: a, b.id: b, c.id: c} and list(objects)[-1] == c.id
