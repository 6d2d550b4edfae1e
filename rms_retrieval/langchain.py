"""LangChain integration: `RmsRetriever`, a `BaseRetriever` over an rms-retrieval store.

Needs the [langchain] extra (`pip install 'rms-retrieval[langchain]'`). Each call is one
`retrieve()`: the documents come in bundle order (pinned first, then by tier and score, as
packed), one per bundle item, and every call is logged in the store like any other request.
Callers that want the packed text ask `bundle()` for the whole Memory Bundle (`.context`).
`ainvoke` runs the same call in LangChain's executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as error:  # the integration is optional; say which extra brings it
    raise ImportError("RmsRetriever needs langchain-core, part of the [langchain] extra: "
                      "pip install 'rms-retrieval[langchain]'") from error
from pydantic import ConfigDict, Field, field_validator, model_validator

from rms_retrieval.dataflows.retrieval import RetrievalResult, as_request, retrieve
from rms_retrieval.nodes.models import DEFAULT_TOKEN_BUDGET, BundleItem, MemoryBundle
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

# A stand-in question for checking the request fields when the retriever is built.
_PROBE = "probe"


class RmsRetriever(BaseRetriever):
    """Memories relevant to a question, as LangChain `Document`s in bundle order.

    `store` is an open store or the path of one (then opened here, and closed by `close()`);
    `namespaces` a list, or one namespace as a string; `token_budget` bounds the packed items.
    `reference_time` (default: now, per call) and `request_options` (the other
    `RetrievalRequest` fields: retrieval_mode, limit, min_score, max_per_source, time windows)
    are optional and checked when the retriever is built.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: Any
    namespaces: tuple[str, ...]
    token_budget: int = DEFAULT_TOKEN_BUDGET
    reference_time: datetime | None = None
    request_options: dict[str, Any] = Field(default_factory=dict)
    settings: RetrievalSettings | None = None
    encoder: QueryEncoder | None = None

    @field_validator("store", mode="before")
    @classmethod
    def _open_path(cls, value: Any) -> Any:
        if isinstance(value, str | Path):
            from rms_retrieval.stores.memory_store import MemoryStore

            return MemoryStore.open(value, create=False)
        return value

    @field_validator("namespaces", mode="before")
    @classmethod
    def _one_namespace(cls, value: Sequence[str] | str) -> Sequence[str]:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _request_fields_valid(self) -> RmsRetriever:
        self._request(_PROBE)
        return self

    def _request(self, query: str):
        return as_request(query, namespaces=self.namespaces, reference_time=self.reference_time,
                          token_budget=self.token_budget, **self.request_options)

    def retrieve(self, query: str) -> RetrievalResult:
        """One `retrieve()` call with this retriever's request fields."""
        return retrieve(self.store, self._request(query), settings=self.settings, encoder=self.encoder)

    def bundle(self, query: str) -> MemoryBundle:
        """The whole Memory Bundle for `query`; `.context` is the packed text."""
        return self.retrieve(query).bundle

    def close(self) -> None:
        """Close the store (for a retriever built from a path)."""
        self.store.close()

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return documents(self.retrieve(query))


def documents(result: RetrievalResult) -> list[Document]:
    """One Document per bundle item, in bundle order, each with its place in the bundle."""
    return [_document(item, position, str(result.request_id)) for position, item in enumerate(result.bundle.items, 1)]


def _document(item: BundleItem, position: int, request_id: str) -> Document:
    metadata = {
        "id": str(item.id),
        "score": item.score,
        "paths": [str(path) for path in item.paths],
        "tier": item.tier,
        "tokens": item.tokens,
        "event_time": item.event_time.isoformat() if item.event_time else None,
        "namespace": item.namespace,
        "node_type": item.node_type,
        "position": position,
        "request_id": request_id,
    }
    return Document(id=str(item.id), page_content=item.content, metadata=metadata)
