"""What the framework integrations share: a retriever's request fields, and one bundle item's metadata.

`RetrieverFields` is the part of a retriever that is ours, whatever the framework: the store
(an open one, or a path opened here), the namespaces, the token budget and the other request
fields, checked when the retriever is built, and one `retrieve()` per question. `item_metadata`
is what each returned item carries, the same in LangChain's `Document`, LlamaIndex's node and
the MCP server's `memory_search`. This module imports no framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr, field_validator, model_validator

from rms_retrieval.dataflows.retrieval import RetrievalResult, as_request, retrieve
from rms_retrieval.nodes.models import DEFAULT_TOKEN_BUDGET, RetrievalRequest
from rms_retrieval.nodes.bundle import BundleItem, MemoryBundle
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

# A stand-in question for checking the request fields when the retriever is built.
_PROBE = "probe"


class RetrieverFields(BaseModel):
    """A store and the request fields every question is asked with.

    `store` is an open store, which stays the caller's to close, or the path of one, which is
    opened here and closed by `close()`;
    `namespaces` a list, or one namespace as a string; `token_budget` bounds the packed items.
    `reference_time` (default: now, per call) and `request_options` (the other
    `RetrievalRequest` fields: retrieval_mode, limit, min_score, max_per_source, max_per_evidence,
    time windows)
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
    def _open_path(cls, data: Any, handler: ModelWrapValidatorHandler[RetrieverFields]) -> RetrieverFields:
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
    def _request_fields_valid(self) -> RetrieverFields:
        self.request(_PROBE)
        return self

    def request(self, query: str) -> RetrievalRequest:
        """The validated request for `query` with these fields."""
        return as_request(query, namespaces=self.namespaces, reference_time=self.reference_time,
                          token_budget=self.token_budget, **self.request_options)

    def retrieve(self, query: str) -> RetrievalResult:
        """One `retrieve()` call with these request fields (logged in the store like any request)."""
        return retrieve(self.store, self.request(query), settings=self.settings, encoder=self.encoder)

    def bundle(self, query: str) -> MemoryBundle:
        """The whole Memory Bundle for `query`; `.context` is the packed text."""
        return self.retrieve(query).bundle

    def close(self) -> None:
        """Close the store this retriever opened from a path; a store the caller passed in is left open."""
        if self._opened_store:
            self.store.close()


def item_metadata(item: BundleItem, position: int, request_id: str, min_score_skipped: bool) -> dict[str, Any]:
    """One bundle item's metadata, JSON-ready: its id, score, paths, tier, tokens, time, namespace,
    type, 1-based position in the bundle, the request that returned it, and whether that request's
    `min_score` floor was skipped (RFC 7.2: the vector path found a model mismatch)."""
    return {
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


def bundle_items(result: RetrievalResult) -> list[tuple[BundleItem, dict[str, Any]]]:
    """Each bundle item with its metadata, in bundle order."""
    request_id = str(result.request_id)
    skipped = result.bundle.retrieval_metadata.min_score_skipped
    return [(item, item_metadata(item, position, request_id, skipped))
            for position, item in enumerate(result.bundle.items, 1)]
