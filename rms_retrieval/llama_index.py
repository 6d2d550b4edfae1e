"""LlamaIndex integration: `RmsRetriever`, a `BaseRetriever` over an rms-retrieval store.

Needs the [llama-index] extra (`pip install 'rms-retrieval[llama-index]'`). Each call is one
`retrieve()`: one `NodeWithScore` per bundle item, in bundle order (pinned first, then by tier
and score, as packed), with the item's score and the same metadata as the LangChain documents
(rms_retrieval/integration.py). The metadata is kept out of the text LlamaIndex gives an LLM or
an embedding model, so a node reads as the memory itself. `aretrieve` runs the call in a thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as error:  # the integration is optional; say which extra brings it
    raise ModuleNotFoundError("RmsRetriever needs llama-index-core, part of the [llama-index] extra: "
                              "pip install 'rms-retrieval[llama-index]'", name=error.name) from error

from rms_retrieval.dataflows.retrieval import RetrievalResult
from rms_retrieval.integration import RetrieverFields, bundle_items
from rms_retrieval.nodes.bundle import MemoryBundle


class RmsRetriever(BaseRetriever):
    """Memories relevant to a question, as LlamaIndex `NodeWithScore`s in bundle order.

    The keyword arguments are `RetrieverFields`' (rms_retrieval/integration.py): `store` (an
    open store or a path), `namespaces`, `token_budget`, `reference_time`, `request_options`,
    `settings`, `encoder`, checked here; `callback_manager` and `verbose` are LlamaIndex's.
    """

    def __init__(self, *, callback_manager: CallbackManager | None = None, verbose: bool = False,
                 **fields: Any) -> None:
        self.fields = RetrieverFields(**fields)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(self.fields.retrieve(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def bundle(self, query: str) -> MemoryBundle:
        """The whole Memory Bundle for `query`; `.context` is the packed text."""
        return self.fields.bundle(query)

    def close(self) -> None:
        """Close the store (for a retriever built from a path)."""
        self.fields.close()


def nodes(result: RetrievalResult) -> list[NodeWithScore]:
    """One NodeWithScore per bundle item, in bundle order, each with its place in the bundle."""
    return [
        NodeWithScore(node=TextNode(id_=str(item.id), text=item.content, metadata=metadata,
                                    excluded_llm_metadata_keys=list(metadata),
                                    excluded_embed_metadata_keys=list(metadata)),
                      score=item.score)
        for item, metadata in bundle_items(result)
    ]
