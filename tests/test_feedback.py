"""dataflows/bench/feedback.py, the benchmark's RM3-style feedback for BM25: the terms its top hits vote for, the interpolated second search."""

from __future__ import annotations

from rms_retrieval.dataflows.bench import arm_nodes
from rms_retrieval.dataflows.bench.arm_settings import ArmCandidates, ArmSettings
from rms_retrieval.dataflows.bench.feedback import feedback_terms, interpolated_hits
from rms_retrieval.nodes.pools import CandidateLimits
from rms_retrieval.stores.protocols import LexicalHit
from tests.factories import FakeStore, make_object, make_request, oid

LIMITS = CandidateLimits(vector_k=10, lexical_k=10, graph_max_candidates=10)


def test_terms_are_weighted_by_hit_score_and_share_and_skip_stopwords_speakers_and_the_query():
    documents = [("Ann: we adopted a puppy, puppy training", 1.0), ("Bob: the puppy loves the beach", 0.5)]
    terms = feedback_terms("when did Ann get a dog?", documents, 3)
    # puppy: 2/4 * 1.0 + 1/3 * 0.5; adopted and training 1/4; the speaker label "Ann:" is not a word of the turn
    assert terms == ["puppy", "adopted", "training"]
    assert feedback_terms("puppy?", documents, 2) == ["adopted", "training"]
    assert feedback_terms("x", documents, 0) == []
    assert feedback_terms("x", [("Ann: yes, really great", 1.0)], 5) == []


def test_interpolation_adds_the_weighted_feedback_score_and_keeps_the_limit():
    a, b, c = oid("a"), oid("b"), oid("c")
    original = [LexicalHit(a, 4.0, 1.0), LexicalHit(b, 2.0, 0.0)]
    feedback = [LexicalHit(c, 10.0, 1.0), LexicalHit(b, 5.0, 0.0)]
    hits = interpolated_hits(original, feedback, 0.5, 2)
    assert [(hit.object_id, hit.bm25) for hit in hits] == [(c, 5.0), (b, 4.5)]
    assert [hit.score for hit in hits] == [1.0, 0.0]
    tied = interpolated_hits([LexicalHit(b, 1.0, 1.0), LexicalHit(a, 1.0, 1.0)], [], 0.3, 5)
    assert [hit.object_id for hit in tied] == sorted([a, b], key=lambda u: u.int)
    assert interpolated_hits([], [], 0.3, 5) == []


def test_lexical_candidates_with_feedback_find_the_turn_that_shares_only_the_topic():
    store = FakeStore([
        make_object("q", "Ann: my dog Rex loves his lighthouse walks"),
        make_object("topic", "Bob: Rex barked at the lighthouse keeper"),
        make_object("other", "Cy: pottery class tonight"),
    ])
    off = ArmSettings(candidates=ArmCandidates(lexical_feedback_terms=0))
    plain = arm_nodes.lexical_candidates(store, LIMITS, make_request("dog"), off)
    assert [hit.object_id for hit in plain.hits] == [oid("q")]
    settings = ArmSettings(candidates=ArmCandidates(lexical_feedback_terms=3, lexical_feedback_docs=1))
    widened = arm_nodes.lexical_candidates(store, LIMITS, make_request("dog"), settings)
    assert [hit.object_id for hit in widened.hits] == [oid("q"), oid("topic")]
    assert widened.hits[0].score == 1.0 and widened.hits[1].score == 0.0
