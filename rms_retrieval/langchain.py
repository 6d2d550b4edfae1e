"""LangChain integration: `RmsRetriever`, a `BaseRetriever` over an rms-retrieval store, which
also writes chat messages (`add_messages`: LangChain messages or OpenAI-shaped dicts).

Needs the [langchain] extra (`pip install 'rms-retrieval[langchain]'`). Each call is one
`retrieve()`: the documents come in bundle order (pinned first, then by tier and score, as
packed), one per bundle item, and every call is logged in the store like any other request.
Callers that want the packed text ask `bundle()` for the whole Memory Bundle (`.context`).
`ainvoke` runs the same call in LangChain's executor.
"""

from __future__ import annotations

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as error:  # the integration is optional; say which extra brings it
    raise ModuleNotFoundError("RmsRetriever needs langchain-core, part of the [langchain] extra: "
                              "pip install 'rms-retrieval[langchain]'", name=error.name) from error

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rms_retrieval.dataflows.retrieval import RetrievalResult
from rms_retrieval.integration import RetrieverFields, bundle_items
from rms_retrieval.stores.protocols import IngestReport


class RmsRetriever(RetrieverFields, BaseRetriever):
    """Memories relevant to a question, as LangChain `Document`s in bundle order.

    The fields are `RetrieverFields`' (rms_retrieval/integration.py): `store` (an open store or
    a path), `namespaces`, `token_budget`, `reference_time`, `request_options`, `settings`,
    `encoder`, checked when the retriever is built.
    """

    def add_messages(self, messages: Sequence[Any], *, session_id: str, namespace: str | None = None,
                     time: datetime | None = None) -> IngestReport:
        """Write chat messages (`HumanMessage`, `AIMessage`, ... or dicts; stores/analysis/messages.py) as the
        next turns of `session_id` in `namespace`, which may be left out when the retriever reads one."""
        if namespace is None:
            if len(self.namespaces) != 1:
                raise ValueError(f"the retriever reads {len(self.namespaces)} namespaces; say which one the "
                                 "messages go to with namespace=")
            namespace = self.namespaces[0]
        return self.store.add_messages(namespace, session_id, messages, time=time)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return documents(self.retrieve(query))


def documents(result: RetrievalResult) -> list[Document]:
    """One Document per bundle item, in bundle order, each with its place in the bundle."""
    return [Document(id=str(item.id), page_content=item.content, metadata=metadata)
            for item, metadata in bundle_items(result)]
