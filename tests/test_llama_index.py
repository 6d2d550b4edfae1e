"""RmsRetriever with the real llama-index-core: NodeWithScore in bundle order, sync and async."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore
from pydantic import ValidationError

from rms_retrieval.langchain import RmsRetriever as LangChainRetriever
from rms_retrieval.llama_index import RmsRetriever
from tests.factories import DEMO_QUESTION as QUESTION, demo_bundle, demo_retriever_fields


@pytest.fixture
def retriever(demo_store, demo_copy):
    built = RmsRetriever(**demo_retriever_fields(demo_store, str(demo_copy)))
    yield built
    built.close()


def test_nodes_follow_the_bundle_with_the_langchain_metadata(retriever, demo_store):
    found = retriever.retrieve(QUESTION)
    bundle = demo_bundle(retriever.fields.store, demo_store)
    assert isinstance(retriever, BaseRetriever) and all(isinstance(n, NodeWithScore) for n in found)
    assert [n.node.node_id for n in found] == [str(item.id) for item in bundle.items]
    assert [n.score for n in found] == [item.score for item in bundle.items]
    assert [n.node.get_content(MetadataMode.LLM) for n in found] == [item.content for item in bundle.items]
    documents = LangChainRetriever(**demo_retriever_fields(demo_store, retriever.fields.store)).invoke(QUESTION)
    without_request = [{k: v for k, v in n.node.metadata.items() if k != "request_id"} for n in found]
    assert without_request == [{k: v for k, v in d.metadata.items() if k != "request_id"} for d in documents]
    assert len({n.node.metadata["request_id"] for n in found}) == 1
    assert retriever.bundle(QUESTION).context == bundle.context


def test_aretrieve_gives_the_same_nodes(retriever):
    synchronous = retriever.retrieve(QUESTION)
    asynchronous = asyncio.run(retriever.aretrieve(QUESTION))
    assert [(n.node.node_id, n.score) for n in asynchronous] == [(n.node.node_id, n.score) for n in synchronous]


def test_a_query_engine_reads_the_memories(retriever):
    """A LlamaIndex query engine over the retriever. Its MockLLM answers with the prompt it was
    given, so the answer shows the memories' text reached the LLM, without their metadata."""
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(QUESTION)
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in retriever.retrieve(QUESTION)]
    assert "Northwind Analytics" in str(response) and "request_id" not in str(response)


def test_bad_request_fields_fail_when_the_retriever_is_built(demo_store, demo_copy):
    with pytest.raises(ValidationError, match="token_budget"):
        RmsRetriever(store=str(demo_copy), namespaces=[demo_store.namespace], token_budget=0)
    with pytest.raises(ValidationError, match="no_such_field"):
        RmsRetriever(store=str(demo_copy), namespaces=[demo_store.namespace], request_options={"no_such_field": 1})
