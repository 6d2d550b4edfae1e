"""RmsRetriever with the real langchain-core: Documents in bundle order, sync and async."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ValidationError

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.langchain import RmsRetriever
from rms_retrieval.stores.log.compaction import LogRetention, compact
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.log.retrieval_log import LOG_DIRECTORY, list_segments
from tests.factories import DEMO_QUESTION as QUESTION, demo_bundle, demo_retriever_fields


@pytest.fixture
def retriever(demo_store, demo_copy):
    built = RmsRetriever(**demo_retriever_fields(demo_store, str(demo_copy)))
    yield built
    built.close()


def test_documents_follow_the_bundle_with_their_metadata(retriever, demo_store):
    documents = retriever.invoke(QUESTION)
    bundle = demo_bundle(retriever.store, demo_store)
    assert isinstance(retriever, BaseRetriever) and all(isinstance(d, Document) for d in documents)
    assert [d.metadata["id"] for d in documents] == [str(item.id) for item in bundle.items]
    for position, (document, item) in enumerate(zip(documents, bundle.items), start=1):
        assert document.page_content == item.content and document.id == str(item.id)
        assert document.metadata == {
            "id": str(item.id), "score": item.score, "paths": [str(p) for p in item.paths], "tier": item.tier,
            "tokens": item.tokens, "event_time": item.event_time.isoformat() if item.event_time else None,
            "namespace": demo_store.namespace, "node_type": item.node_type, "position": position,
            "request_id": document.metadata["request_id"], "min_score_skipped": False,
        }
    assert sum(d.metadata["tokens"] for d in documents) <= 300
    assert retriever.bundle(QUESTION).context == bundle.context


def test_ainvoke_gives_the_same_documents(retriever):
    synchronous = retriever.invoke(QUESTION)
    asynchronous = asyncio.run(retriever.ainvoke(QUESTION))
    strip = [(d.page_content, {k: v for k, v in d.metadata.items() if k != "request_id"}) for d in synchronous]
    assert [(d.page_content, {k: v for k, v in d.metadata.items() if k != "request_id"}) for d in asynchronous] == strip


def test_every_call_is_logged_like_any_request(retriever):
    before = len(retriever.store.retrieval_log())
    request_id = retriever.invoke(QUESTION)[0].metadata["request_id"]
    log = retriever.store.retrieval_log()
    assert len(log) == before + 1 and log[-1]["request_id"] == request_id


def test_a_store_object_and_optional_request_fields(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        limited = RmsRetriever(store=store, namespaces=[demo_store.namespace],
                               reference_time=demo_store.reference_time, request_options={"limit": 2})
        documents = limited.invoke(QUESTION)
        bundle = retrieve(store, QUESTION, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time,
                          limit=2, log=False).bundle
        unlimited = retrieve(store, QUESTION, namespaces=[demo_store.namespace],
                             reference_time=demo_store.reference_time, log=False).bundle
    assert [d.metadata["id"] for d in documents] == [str(i.id) for i in bundle.items]
    assert len(documents) < len(unlimited.items)


def test_bad_request_fields_fail_when_the_retriever_is_built(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        with pytest.raises(ValidationError, match="token_budget"):
            RmsRetriever(store=store, namespaces=[demo_store.namespace], token_budget=0)
        with pytest.raises(ValidationError, match="no_such_field"):
            RmsRetriever(store=store, namespaces=[demo_store.namespace], request_options={"no_such_field": 1})


def test_every_document_says_when_the_min_score_floor_was_skipped(demo_store, demo_copy):
    """RFC 7.2: the vector search found a model mismatch, so a positive floor fails open."""
    from tests.factories import OtherModelEncoder

    with MemoryStore.open(demo_copy, create=False) as store:
        floored = RmsRetriever(store=store, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time,
                               request_options={"min_score": 0.5}, encoder=OtherModelEncoder())
        documents = floored.invoke(QUESTION)
    assert documents and all(d.metadata["min_score_skipped"] is True for d in documents)


def test_the_retriever_writes_chat_messages_and_reads_them_back(tmp_path, encoder):
    from datetime import datetime, timezone

    from langchain_core.messages import AIMessage, HumanMessage

    when = datetime(2025, 3, 3, 9, 15, tzinfo=timezone.utc)
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        retriever = RmsRetriever(store=store, namespaces="chat", reference_time=when, encoder=encoder)
        retriever.add_messages([HumanMessage("I signed the lease on a flat in Leeds", name="Priya"),
                                AIMessage("Congratulations! When do you move?")], session_id="s1", time=when)
        retriever.add_messages([{"role": "user", "name": "Priya", "content": "On the 20th of March"}],
                               session_id="s1", time=when)
        assert retriever.add_messages([], session_id="s1").objects_added == 0
        documents = retriever.invoke("Where is Priya's new flat?")
        assert documents[0].page_content == "I signed the lease on a flat in Leeds"
        assert "Priya: I signed the lease on a flat in Leeds" in retriever.bundle("Where is Priya's new flat?").context
        with pytest.raises(ValueError, match="say which one"):
            RmsRetriever(store=store, namespaces=["a", "b"]).add_messages([], session_id="s1")


def _log_segments(path) -> set[str]:
    return {segment.name for segment in list_segments(path / LOG_DIRECTORY)[0]}


def test_close_leaves_a_store_the_caller_passed_in_open(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        retriever = RmsRetriever(store=store, namespaces=demo_store.namespace, reference_time=demo_store.reference_time)
        before = _log_segments(demo_copy)
        retriever.invoke(QUESTION)
        store.retrieval_log()  # the queued record is written: the store's log segment is open and locked
        ours = _log_segments(demo_copy) - before
        retriever.close()
        # A closed store would have released its segment's lock, and compaction would merge it away.
        compact(demo_copy / LOG_DIRECTORY, LogRetention())
        assert len(ours) == 1 and ours <= _log_segments(demo_copy)


def test_close_closes_a_store_the_retriever_opened(demo_store, demo_copy):
    before = _log_segments(demo_copy)
    retriever = RmsRetriever(store=str(demo_copy), namespaces=demo_store.namespace,
                             reference_time=demo_store.reference_time)
    retriever.invoke(QUESTION)
    retriever.store.retrieval_log()
    ours = _log_segments(demo_copy) - before
    retriever.close()
    compact(demo_copy / LOG_DIRECTORY, LogRetention())
    assert len(ours) == 1 and not ours & _log_segments(demo_copy)
