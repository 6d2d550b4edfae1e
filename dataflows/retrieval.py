"""The public entry point: `retrieve()` answers one question with a Memory Bundle and logs it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any
from uuid import UUID, uuid4


from rms_retrieval.dataflows.pipeline import FINAL_NODE, build_driver, pipeline_inputs
from rms_retrieval.nodes.models import MemoryBundle, QueryEmbedding, RetrievalRequest
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder, SnapshotSource

LOG_VERSION = 1


@dataclass(frozen=True)
class RetrievalResult:
    """The bundle, its retrieval log record, and any extra nodes the caller asked for."""

    request_id: UUID
    bundle: MemoryBundle
    log_record: dict[str, Any]
    nodes: dict[str, Any] = field(default_factory=dict)


@lru_cache(maxsize=1)
def default_encoder() -> QueryEncoder:
    """The packaged all-MiniLM-L6-v2 encoder, loaded once per process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rms_retrieval.stores.embedding import SentenceEncoder

    return SentenceEncoder()


def _log_record(
    request_id: UUID,
    request: RetrievalRequest | None,
    query: str,
    settings: RetrievalSettings,
    store: Any,
    bundle: MemoryBundle | None,
    embedding: QueryEmbedding | None,
    error: BaseException | None,
) -> dict[str, Any]:
    """The RFC 10 RETRIEVAL_REQUEST record, plus what replay needs (embedding, index state, settings)."""
    meta = bundle.retrieval_metadata if bundle else {}
    payload: dict[str, Any] = {
        "request_id": str(request_id),
        "status": "failed" if error else "ok",
        "error": f"{type(error).__name__}: {error}" if error else None,
        "query": query,
        "namespace_scope": list(request.namespaces) if request else [],
        "retrieval_mode": str(request.retrieval_mode) if request else None,
        "reference_time": request.reference_time.isoformat() if request else None,
        "request": request.model_dump(mode="json") if request else None,
        "query_intent": meta.get("intent"),
        "candidates_generated": meta.get("candidates_generated", 0),
        "candidates_after_filter": meta.get("candidates_after_filter", 0),
        "objects_included_in_bundle": len(bundle.items) if bundle else 0,
        "tokens_used": bundle.tokens_used if bundle else 0,
        "context_budget": request.token_budget if request else None,
        "scores": {str(item.id): item.score for item in bundle.items} if bundle else {},
        "excluded": meta.get("excluded", {}),
        "embedding_mismatch": meta.get("embedding_mismatch", False),
        "embedding_model_version": (
            f"{embedding.identity.model_name}@{embedding.identity.model_hash}" if embedding else None
        ),
        "query_embedding": [float(x) for x in embedding.vector] if embedding is not None else None,
        "index_state": store.state_fingerprint(),
        "configuration": settings.model_dump(mode="json"),
        "configuration_fingerprint": settings.fingerprint(),
        "bundle_sha256": hashlib.sha256(bundle.to_json().encode()).hexdigest() if bundle else None,
    }
    return {"op_type": "RETRIEVAL_REQUEST", "log_version": LOG_VERSION, "request_id": str(request_id),
            "payload": payload}


def retrieve(
    store: Any,
    query: str,
    *,
    namespaces: Sequence[str],
    reference_time: datetime | None = None,
    token_budget: int = 4096,
    config: RetrievalSettings | None = None,
    encoder: QueryEncoder | None = None,
    extra_nodes: Sequence[str] = (),
    overrides: dict[str, Any] | None = None,
    log: bool = True,
    **options: Any,
) -> RetrievalResult:
    """Answer `query` from `namespaces` of `store` with a token-budgeted Memory Bundle.

    `reference_time` (timezone-aware) anchors relative dates and recency; omitted, the current
    UTC time is captured once. `options` are the other `RetrievalRequest` fields (retrieval_mode,
    time_from/time_to, event_time_from/event_time_to, limit, min_score, max_per_source).
    `extra_nodes` returns intermediate nodes (e.g. "fused_scores") in `RetrievalResult.nodes`;
    `overrides` replaces node values (replay passes the logged "query_embedding").
    Every call writes one retrieval log record to the store, a failed one included.
    """
    settings = config or RetrievalSettings()
    if isinstance(store, SnapshotSource):
        store = store.snapshot()  # one generation for the whole request, even while a writer commits
    request_id = uuid4()
    request: RetrievalRequest | None = None
    embedding: QueryEmbedding | None = None
    try:
        request = RetrievalRequest(
            query=query,
            namespaces=tuple(namespaces),
            reference_time=reference_time or datetime.now(timezone.utc),
            token_budget=token_budget,
            **options,
        )
        wanted = list(dict.fromkeys([FINAL_NODE, "query_embedding", *extra_nodes]))
        results = build_driver(settings).execute(
            wanted,
            inputs=pipeline_inputs(store, request, settings, encoder or default_encoder()),
            overrides=overrides or {},
        )
    except Exception as error:
        if log:
            store.log_retrieval(_log_record(request_id, request, query, settings, store, None, None, error))
        raise
    bundle: MemoryBundle = results[FINAL_NODE]
    embedding = results["query_embedding"]
    record = _log_record(request_id, request, query, settings, store, bundle, embedding, None)
    if log:
        store.log_retrieval(record)
    extras = {name: results[name] for name in extra_nodes}
    return RetrievalResult(request_id=request_id, bundle=bundle, log_record=record, nodes=extras)
