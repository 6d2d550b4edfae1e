"""LangChain integration: `RmsRetriever`, a `BaseRetriever` over an rms-retrieval store, which
also writes chat messages (`add_messages`: LangChain messages or OpenAI-shaped dicts).

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
from pydantic import ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr, field_validator, model_validator

from rms_retrieval.dataflows.retrieval import RetrievalResult, as_request, retrieve
from rms_retrieval.nodes.models import DEFAULT_TOKEN_BUDGET, BundleItem, MemoryBundle
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import IngestReport, QueryEncoder

# A stand-in question for checking the request fields when the retriever is built.
_PROBE = "probe"


class RmsRetriever(BaseRetriever):
    """Memories relevant to a question, as LangChain `Document`s in bundle order.

    `store` is an open store, which stays the caller's to close, or the path of one, which is
    opened here and closed by `close()`;
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
    _opened_store: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _open_path(cls, data: Any, handler: ModelWrapValidatorHandler[RmsRetriever]) -> RmsRetriever:
        """Open a store given as a path, remember that this retriever owns it, and close it again
        when the other fields are invalid."""
        path = data.get("store") if isinstance(data, dict) else None
        if not isinstance(path, str | Path):
            return handler(data)
        from rms_retrieval.stores.memory_store import MemoryStore

        store = MemoryStore.open(path, create=False)
        try:
            retriever = handler({**data, "store": store})
        except Exception:
            store.close()
            raise
        retriever._opened_store = True
        return retriever

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
        return retrieve(self.store, self._request(query), config=self.settings, encoder=self.encoder)

    def bundle(self, query: str) -> MemoryBundle:
        """The whole Memory Bundle for `query`; `.context` is the packed text."""
        return self.retrieve(query).bundle

    def add_messages(self, messages: Sequence[Any], *, session_id: str, namespace: str | None = None,
                     time: datetime | None = None) -> IngestReport:
        """Write chat messages (`HumanMessage`, `AIMessage`, ... or dicts; stores/messages.py) as the
        next turns of `session_id` in `namespace`, which may be left out when the retriever reads one."""
        if namespace is None:
            if len(self.namespaces) != 1:
                raise ValueError(f"the retriever reads {len(self.namespaces)} namespaces; say which one the "
                                 "messages go to with namespace=")
            namespace = self.namespaces[0]
        return self.store.add_messages(namespace, session_id, messages, time=time)

    def close(self) -> None:
        """Close the store this retriever opened from a path; a store the caller passed in is left open."""
        if self._opened_store:
            self.store.close()

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return documents(self.retrieve(query))


def documents(result: RetrievalResult) -> list[Document]:
    """One Document per bundle item, in bundle order, each with its place in the bundle."""
    skipped = result.bundle.retrieval_metadata.get("min_score_skipped", False)
    return [_document(item, position, str(result.request_id), skipped)
            for position, item in enumerate(result.bundle.items, 1)]


def _document(item: BundleItem, position: int, request_id: str, min_score_skipped: bool) -> Document:
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
        "min_score_skipped": min_score_skipped,
    }
    return Document(id=str(item.id), page_content=item.content, metadata=metadata)
