"""Cross-scope hints (RFC-0005 amendment): their own pass, rules, pool, floor and cap, kept out of the context."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest
from pydantic import ValidationError

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.cross_scope import (cross_scope_candidates, cross_scope_hints, cross_scope_pool,
                                             cross_scope_scores__rrf, cross_scope_scores__weighted)
from rms_retrieval.nodes.models import QueryAnalysis, QueryEmbedding
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject
from tests.factories import BASE_TIME, FakeEncoder, FakeStore, make_object, make_request


def test_a_request_naming_no_other_namespace_gets_no_hints_and_reads_no_store():
    store = FakeStore([make_object("a", "cat")])
    store.fail.add("vector")  # a search would report a backend failure
    request = make_request("cat")
    embedding = QueryEmbedding(np.ones(4, dtype="float32") / 2, FakeEncoder.identity)
    found = cross_scope_candidates(embedding, store, request)
    assert found.result.hits == () and found.result.failure is None
    hinted = cross_scope_candidates(embedding, store, make_request("cat", cross_scope_namespaces=["other"]))
    assert hinted.result.failure.startswith("backend_error")  # the same store is searched once hints are asked
    pool = cross_scope_pool(found, request, RetrievalSettings())
    analysis = QueryAnalysis(raw_query="cat", namespace_scope=("ns",), reference_time=BASE_TIME)
    for scores in (cross_scope_scores__rrf(pool, analysis, request, RetrievalSettings()),
                   cross_scope_scores__weighted(pool, analysis, request, RetrievalSettings(scoring={"fusion": "weighted"}))):
        assert scores.pool is None and cross_scope_hints(scores, request) is None


def test_cross_scope_hints_come_from_the_named_namespaces_alone_with_their_own_pass_floor_and_cap(tmp_path, encoder):
    """RFC-0005 amendment: hints have their own vector pass (2 x cross_scope_top_n), the same
    floor and rules, their own cap, are fused within their own pool and stay out of the context."""
    when = datetime(2025, 1, 1, tzinfo=timezone.utc)

    def memory(namespace, content, **fields):
        return MemoryObject(namespace=namespace, content=content, created_at=when, updated_at=when, **fields)

    with MemoryStore.open(tmp_path / "store", encoder=encoder) as store:
        store.add([memory("work", "Tomas works at the bakery on Mill Road."),
                   memory("home", "Tomas's bakery job starts at five in the morning."),
                   memory("home", "Tomas used to work at the bakery in York.", epistemic_type="DEPRECATED"),
                   memory("home", "Tomas bakes bread at the bakery every weekday."),
                   memory("home", "The cat sleeps on the windowsill."),
                   memory("private", "Tomas's bakery salary is confidential.")])
        ask = dict(namespaces=["work"], reference_time=when, log=False)
        plain = retrieve(store, "Where does Tomas work?", **ask)
        hinted = retrieve(store, "Where does Tomas work?", cross_scope_namespaces=["home"], cross_scope_top_n=2,
                          extra_nodes=["cross_scope_candidates"], **ask)
        floored = retrieve(store, "Where does Tomas work?", cross_scope_namespaces=["home"], min_score=0.3, **ask)
        weighted = retrieve(store, "Where does Tomas work?", cross_scope_namespaces=["home"],
                            settings=RetrievalSettings(scoring={"fusion": "weighted"}), **ask)
        logged = retrieve(store, "Where does Tomas work?", namespaces=["work"], cross_scope_namespaces=["home"],
                          reference_time=when)
        # the log shows a request only to a reader of every namespace it read, its hints' included
        assert str(logged.request_id) not in {r["request_id"] for r in store.retrieval_log(namespaces=["work"])}
        assert str(logged.request_id) in {r["request_id"] for r in store.retrieval_log(namespaces=["work", "home"])}
        with pytest.raises(ValidationError, match="cross_scope_namespaces repeats 'work'"):
            retrieve(store, "Where does Tomas work?", cross_scope_namespaces=["work", "home"], **ask)
    assert plain.bundle.cross_scope_hints is None and "cross_scope_hints" not in plain.bundle.to_json()
    hints = hinted.bundle.cross_scope_hints
    assert len(hints) == 2 and {h.namespace for h in hints} == {"home"}
    assert all("bakery" in h.content and "York" not in h.content for h in hints)  # the DEPRECATED one is filtered
    assert [h.score for h in hints] == sorted((h.score for h in hints), reverse=True)
    assert hinted.nodes["cross_scope_candidates"].result.limit == 4  # 2 x cross_scope_top_n
    assert hinted.bundle.context == plain.bundle.context and hinted.bundle.items == plain.bundle.items
    assert "confidential" not in hinted.bundle.to_json()  # a namespace nobody named never appears
    assert all(h.semantic_relevance >= 0.3 for h in floored.bundle.cross_scope_hints)
    assert "windowsill" not in {h.content for h in floored.bundle.cross_scope_hints}
    assert weighted.bundle.cross_scope_hints and all(h.semantic_relevance is None for h in weighted.bundle.cross_scope_hints)
