"""The public entry point: `retrieve()` answers one question with a Memory Bundle and logs it."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any
from uuid import UUID, uuid4

from rms_retrieval.dataflows.code_identity import code_identity
from rms_retrieval.dataflows.pipeline import FINAL_NODE, PrefetchedEncoder, build_driver, pipeline_inputs
from rms_retrieval.nodes.models import MAX_QUERY_CHARS, QueryEmbedding, RetrievalRequest
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.providers.onnx_encoder import default_encoder
from rms_retrieval.stores.protocols import (CrossEncoder, QueryEncoder, QueryReformulator, ReadableStore, answering,
                                            snapshot_of)

LOG_VERSION = 1
# A rejected request's error can quote its input; the record keeps this much of the message.
_LOGGED_ERROR_CHARS = 2000


class LazyRecord(Mapping[str, Any]):
    """A retrieval log record built on first read, once, from values that never change (the
    request, the settings, the bundle, the snapshot): serialising and hashing the bundle costs
    the request nothing. The log's writer thread reads it (stores/log/buffer.py), or whoever reads
    `RetrievalResult.log_record`; with `log=False` usually nobody does."""

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self._build: Callable[[], dict[str, Any]] | None = build
        self._record: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def value(self) -> dict[str, Any]:
        """The record as a plain dict."""
        with self._lock:
            if self._record is None:
                assert self._build is not None
                self._record, self._build = self._build(), None  # drop the inputs once built
            return self._record

    def __getitem__(self, key: str) -> Any:
        return self.value()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.value())

    def __len__(self) -> int:
        return len(self.value())


@dataclass(frozen=True)
class RetrievalResult:
    """The validated request, its bundle, its retrieval log record, and any extra nodes the caller
    asked for."""

    request_id: UUID
    request: RetrievalRequest
    bundle: MemoryBundle
    record: LazyRecord = field(repr=False)
    nodes: dict[str, Any] = field(default_factory=dict)

    @property
    def log_record(self) -> dict[str, Any]:
        """The RETRIEVAL_REQUEST record (as logged, when logging was on), built on first read."""
        return self.record.value()


def as_request(
    query: str | RetrievalRequest,
    *,
    namespaces: Sequence[str] | str | None = None,
    reference_time: datetime | None = None,
    **fields: Any,
) -> RetrievalRequest:
    """A validated request: `query` itself when it is one (then nothing else may be given), else
    one built from the question and the fields. A bare string for `namespaces` is one namespace;
    an omitted `reference_time` is the current UTC time, captured once."""
    if isinstance(query, RetrievalRequest):
        given = sorted(name for name, value in {"namespaces": namespaces, "reference_time": reference_time,
                                                 **fields}.items() if value is not None)
        if given:
            raise TypeError(f"pass either a RetrievalRequest or its fields, not both (also got {', '.join(given)})")
        return query
    if namespaces is None:
        raise TypeError("retrieve() needs namespaces=[...] (or a RetrievalRequest)")
    scope = (namespaces,) if isinstance(namespaces, str) else tuple(namespaces)
    present = {name: value for name, value in fields.items() if value is not None}
    return RetrievalRequest(query=query, namespaces=scope, reference_time=reference_time or datetime.now(timezone.utc),
                            **present)


def _query_fields(query: Any) -> dict[str, Any]:
    """The question as the log keeps it: at most MAX_QUERY_CHARS characters, with the original
    length and a hash, so a rejected 100,000-character question costs the log little."""
    text = query.query if isinstance(query, RetrievalRequest) else str(query)
    return {"query": text[:MAX_QUERY_CHARS], "query_chars": len(text),
            "query_sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
            "query_truncated": len(text) > MAX_QUERY_CHARS}


def answering_code(store_module: str) -> dict[str, str]:
    """The package version and the fingerprint of every module a bundle depends on (this module,
    `store_module`, the module of the store class that answers, and all they import), as a log
    record names them."""
    return code_identity((__name__, store_module))


def bundle_sha256(bundle: MemoryBundle) -> str:
    """The bundle's hash as the log records it: of its stable JSON."""
    return hashlib.sha256(bundle.to_json().encode()).hexdigest()


def _log_record(
    request_id: UUID,
    request: RetrievalRequest | None,
    query: Any,
    settings: RetrievalSettings,
    store_module: str,
    index_state: str,
    bundle: MemoryBundle | None,
    embedding: QueryEmbedding | None,
    error: BaseException | None,
    policies: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The RFC 10 RETRIEVAL_REQUEST record, plus what replay needs (embedding, index state, settings)."""
    meta = bundle.retrieval_metadata if bundle else None
    payload: dict[str, Any] = {
        "request_id": str(request_id),
        "status": "failed" if error else "ok",
        "error": f"{type(error).__name__}: {error}"[:_LOGGED_ERROR_CHARS] if error else None,
        **_query_fields(query),
        # Every namespace the request read, its cross-scope hints' included (isolation of the log).
        "namespace_scope": sorted({*request.namespaces, *request.cross_scope_namespaces}) if request else [],
        "retrieval_mode": str(request.retrieval_mode) if request else None,
        "reference_time": request.reference_time.isoformat() if request else None,
        "request": request.model_dump(mode="json") if request else None,
        "query_intent": str(meta.intent) if meta else None,
        "candidates_generated": meta.candidates_generated if meta else 0,
        "candidates_after_filter": meta.candidates_after_filter if meta else 0,
        "objects_included_in_bundle": len(bundle.items) if bundle else 0,
        "tokens_used": bundle.tokens_used if bundle else 0,
        "context_budget": request.token_budget if request else None,
        "scores": {str(item.id): item.score for item in bundle.items} if bundle else {},
        "excluded": {str(oid): reason for oid, reason in meta.excluded.items()} if meta else {},
        "embedding_mismatch": meta.embedding_mismatch if meta else False,
        "backend_failures": {str(path): why for path, why in sorted(meta.backend_failures.items())} if meta else {},
        "min_score_skipped": meta.min_score_skipped if meta else False,
        "aggregation_coverage": (meta.aggregation_coverage.model_dump(mode="json")
                                 if meta and meta.aggregation_coverage is not None else None),
        "embedding_model_version": (
            f"{embedding.identity.model_name}@{embedding.identity.model_hash}" if embedding else None
        ),
        "query_embedding": [float(x) for x in embedding.vector] if embedding is not None else None,
        "index_state": index_state,
        "configuration": settings.model_dump(mode="json"),
        "configuration_fingerprint": settings.fingerprint(),
        "bundle_sha256": bundle_sha256(bundle) if bundle else None,
        # Which code answered: replay tells a code change from a settings or a store change.
        **answering_code(store_module),
        # The opt-in policies' provenance (the cross-encoder's scores, the alternative questions), only
        # when one ran: records of requests without them keep their bytes.
        **(policies or {}),
    }
    return {"op_type": "RETRIEVAL_REQUEST", "log_version": LOG_VERSION, "request_id": str(request_id),
            "payload": payload}


def policy_nodes(settings: RetrievalSettings) -> tuple[str, ...]:
    """The nodes whose values the log keeps for the opt-in policies these settings enable."""
    return (("cross_encoder_scores", "reranked_scores") if settings.rerank.enabled else ()) + (
        ("query_reformulations",) if settings.reformulation.enabled else ())


def policy_provenance(settings: RetrievalSettings, results: Mapping[str, Any]) -> dict[str, Any]:
    """What the log records of the opt-in policies that ran: the reranker's model, policy, every
    reranked candidate's model score and assigned place (replay uses the scores instead of the
    model), and the reformulation's alternatives, their vectors and any provider failure."""
    provenance: dict[str, Any] = {}
    if settings.rerank.enabled:
        given, reranked = results["cross_encoder_scores"], results["reranked_scores"]
        places = {obj.id: int(rank) for obj, rank in zip(reranked.pool.objects, reranked.pool.factors.rerank_rank.tolist())
                  if rank == rank}
        provenance["reranker"] = {
            "model": given.model, "policy": settings.rerank.policy, "top_k": settings.rerank.top_k,
            "prior_weight": settings.rerank.prior_weight, "anchor": str(reranked.anchor) if reranked.anchor else None,
            "object_ids": [str(oid) for oid in given.object_ids], "scores": [float(v) for v in given.scores],
            "ranks": [places.get(oid) for oid in given.object_ids],
        }
    if settings.reformulation.enabled:
        provenance["reformulation"] = results["query_reformulations"].as_record()
    return provenance


def retrieve(
    store: ReadableStore,
    query: str | RetrievalRequest,
    *,
    namespaces: Sequence[str] | str | None = None,
    reference_time: datetime | None = None,
    token_budget: int | None = None,
    settings: RetrievalSettings | None = None,
    encoder: QueryEncoder | None = None,
    cross_encoder: CrossEncoder | None = None,
    reformulator: QueryReformulator | None = None,
    extra_nodes: Sequence[str] = (),
    overrides: dict[str, Any] | None = None,
    log: bool = True,
    **options: Any,
) -> RetrievalResult:
    """Answer `query` from `namespaces` of `store` with a token-budgeted Memory Bundle.

    `query` is the question, or a whole `RetrievalRequest` (then give none of the request
    fields). `namespaces` is a list, or one namespace as a string. `reference_time`
    (timezone-aware) anchors relative dates and recency; omitted, the current UTC time is captured
    once. `token_budget` defaults to `DEFAULT_TOKEN_BUDGET` (4096). `options` are the other
    `RetrievalRequest` fields (retrieval_mode, time_from/time_to, event_time_from/event_time_to,
    limit, min_score, max_per_source). The question may be at most `MAX_QUERY_CHARS` (8,192)
    characters. `extra_nodes` returns intermediate nodes (e.g. "fused_scores") in
    `RetrievalResult.nodes`; `overrides` replaces node values (replay passes the logged
    "query_embedding"). `cross_encoder` scores pairs when the settings enable the reranker
    (default: the packaged ms-marco MiniLM, the `[rerank]` extra), `reformulator` gives alternative
    questions when they enable query reformulation (default: the chat-completions endpoint of the
    `reformulation` settings). Every call logs one retrieval record in the store, a rejected request
    included (with the question capped at `MAX_QUERY_CHARS`, its length and hash); the record is
    built and written off the request path (stores/log/buffer.py), and `log=False` builds none
    unless `RetrievalResult.log_record` is read.
    """
    settings = settings or RetrievalSettings()
    source, store = store, snapshot_of(store)  # one generation for the whole request, even while a writer commits
    request_id = uuid4()
    request: RetrievalRequest | None = None
    try:
        request = as_request(query, namespaces=namespaces, reference_time=reference_time, token_budget=token_budget,
                             **options)
        wanted = list(dict.fromkeys([FINAL_NODE, "query_embedding", *policy_nodes(settings), *extra_nodes]))
        encoder = encoder or default_encoder()
        with answering(source):  # the store's merge thread gives way meanwhile
            if PathType.VECTOR in settings.candidates.enabled_paths and "query_embedding" not in (overrides or {}):
                encoder = PrefetchedEncoder(encoder, request.query)  # made while the other paths run
            results = build_driver(settings).execute(
                wanted,
                inputs=pipeline_inputs(store, request, settings, encoder, cross_encoder, reformulator),
                overrides=overrides or {},
            )
    except Exception as error:
        if log:
            store.log_retrieval(LazyRecord(partial(_log_record, request_id, request, query, settings, type(store).__module__,
                                                   store.state_fingerprint(), None, None, error)))
        raise
    bundle: MemoryBundle = results[FINAL_NODE]
    embedding: QueryEmbedding = results["query_embedding"]
    record = LazyRecord(partial(_log_record, request_id, request, request, settings, type(store).__module__,
                                store.state_fingerprint(), bundle, embedding, None, policy_provenance(settings, results)))
    if log:
        store.log_retrieval(record)
    extras = {name: results[name] for name in extra_nodes}
    return RetrievalResult(request_id=request_id, request=request, bundle=bundle, record=record, nodes=extras)
