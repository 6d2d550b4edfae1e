"""Replay a logged request without the embedding model and compare the bundle with the logged one.

A retrieval log record holds the request, the settings, the query embedding and the store's
index state. Replay rebuilds the request and settings from it, overrides the
`query_embedding` node with the logged vector, and passes an encoder that refuses to run, so
the model is provably not used. A record of the opt-in reranker holds the cross-encoder's scores
and a reformulated one its alternative questions with their vectors: replay hands them to
`cross_encoder_scores` and `query_reformulations`, and neither model nor provider runs. Equal bundle hashes mean the identical bundle; otherwise the
report lists what differs, and says whether the store changed since the record was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import numpy as np

from rms_retrieval.dataflows.retrieval import RetrievalResult, retrieve
from rms_retrieval.nodes.models import QueryEmbedding, Reformulations, RetrievalRequest
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import CrossEncoderScores, PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import (CrossEncoder, EmbeddingIdentity, QueryEncoder, QueryReformulator,
                                            ReadableStore, snapshot_of)

# Fields of the log payload that describe the bundle; replay compares them when the hashes differ.
COMPARED_FIELDS = ("query_intent", "candidates_generated", "candidates_after_filter", "objects_included_in_bundle",
                   "tokens_used", "embedding_mismatch", "excluded", "scores")


class ReplayError(ValueError):
    """The record cannot be replayed (unknown id, a failed request, an unreadable record)."""


class RefusingEncoder(QueryEncoder):
    """An encoder with the right identity that refuses to embed: replay must use the logged vector."""

    def __init__(self, identity: EmbeddingIdentity) -> None:
        self._identity = identity

    @property
    def identity(self) -> EmbeddingIdentity:
        return self._identity

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        raise ReplayError("replay tried to run the embedding model; it must use the logged query embedding")


@dataclass(frozen=True)
class ReplayReport:
    """The outcome of replaying one logged request."""

    request_id: str
    query: str
    identical: bool
    logged_bundle_sha256: str
    replayed_bundle_sha256: str
    logged_index_state: str
    current_index_state: str
    differences: tuple[str, ...]
    bundle: MemoryBundle

    @property
    def index_state_changed(self) -> bool:
        return self.logged_index_state != self.current_index_state

    def to_text(self) -> str:
        head = f"request {self.request_id}: {self.query!r}"
        if self.identical:
            return f"{head}\n  identical bundle (sha256 {self.replayed_bundle_sha256[:16]}, index state {self.current_index_state})"
        lines = [head, f"  DIFFERENT bundle: logged sha256 {self.logged_bundle_sha256[:16]}, "
                       f"replayed {self.replayed_bundle_sha256[:16]}"]
        lines += [f"  - {difference}" for difference in self.differences]
        return "\n".join(lines)


def find_record(store: ReadableStore, request_id: str | UUID) -> dict[str, Any]:
    """The logged RETRIEVAL_REQUEST record with this id, searched newest first from the log files' ends."""
    wanted = str(request_id)
    entries = store.retrieval_log_newest_first()
    try:
        for _, record in entries:
            if record.get("request_id") == wanted:
                return record
    finally:
        entries.close()
    raise ReplayError(f"no retrieval record {wanted} in {getattr(store, 'path', 'the store')}; "
                      f"`rms replay --store DIR --last 5` replays the latest ones")


def _identity(store: ReadableStore, logged_version: str | None, dimension: int) -> EmbeddingIdentity:
    """The store's identity when the record was embedded with the same model, else the logged one,
    so the vector path sees the same (mis)match it saw when the request ran."""
    stored = store.embedding_identity
    if stored is not None and logged_version == f"{stored.model_name}@{stored.model_hash}":
        return stored
    name, _, model_hash = (logged_version or "unknown@unknown").rpartition("@")
    return EmbeddingIdentity(name, model_hash, dimension)


class RefusingCrossEncoder(CrossEncoder):
    """A cross-encoder with the logged identity that refuses to score: replay uses the logged scores."""

    def __init__(self, identity: str) -> None:
        self._identity = identity

    @property
    def identity(self) -> str:
        return self._identity

    def score(self, question: str, texts: Sequence[str]) -> np.ndarray:
        raise ReplayError("replay tried to run the cross-encoder; it must use the logged reranker scores")


class RefusingReformulator(QueryReformulator):
    """A reformulation provider that refuses to run: replay uses the logged alternatives."""

    def __init__(self, identity: str | None) -> None:
        self._identity = identity or "none"

    @property
    def identity(self) -> str:
        return self._identity

    def alternatives(self, question: str, limit: int) -> tuple[str, ...]:
        raise ReplayError("replay tried to ask the reformulation provider; it must use the logged alternatives")


def policy_overrides(
    payload: Mapping[str, Any],
) -> tuple[dict[str, Any], CrossEncoder | None, QueryReformulator | None]:
    """The node values a record's opt-in policies logged (the cross-encoder's scores, the
    reformulation's alternatives and their vectors), as driver overrides, and the refusing models."""
    overrides: dict[str, Any] = {}
    cross_encoder = reformulator = None
    reranker = payload.get("reranker")
    if reranker is not None:
        overrides["cross_encoder_scores"] = CrossEncoderScores(
            tuple(UUID(oid) for oid in reranker["object_ids"]), np.asarray(reranker["scores"], dtype=np.float64),
            reranker["model"])
        cross_encoder = RefusingCrossEncoder(reranker["model"])
    reformulation = payload.get("reformulation")
    if reformulation is not None:
        overrides["query_reformulations"] = Reformulations.from_record(reformulation)
        reformulator = RefusingReformulator(reformulation.get("provider"))
    return overrides, cross_encoder, reformulator


def settings_as_logged(configuration: Mapping[str, Any]) -> RetrievalSettings:
    """The settings a record was made with."""
    return RetrievalSettings.model_validate(configuration)


def _fingerprint_cause(settings: RetrievalSettings, configuration: Mapping[str, Any]) -> str:
    if settings.model_dump(mode="json") == configuration:
        return "the fingerprint function changed since the record, or the record was edited"
    return "the settings code changed since the record (fields added, or defaults changed)"


def _payload_differences(logged: Mapping[str, Any], replayed: Mapping[str, Any]) -> list[str]:
    differences = []
    for name in COMPARED_FIELDS:
        before, after = logged.get(name), replayed.get(name)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            gone = sorted(set(before) - set(after))
            new = sorted(set(after) - set(before))
            changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
            parts = [f"{len(gone)} no longer present ({', '.join(gone[:3])})" if gone else "",
                     f"{len(new)} new ({', '.join(new[:3])})" if new else "",
                     "; ".join(f"{k}: {before[k]} -> {after[k]}" for k in changed[:3])]
            differences.append(f"{name}: " + "; ".join(p for p in parts if p))
        else:
            differences.append(f"{name}: {before} -> {after}")
    return differences


@dataclass(frozen=True)
class LoggedRequest:
    """What a record holds to run its request again without the model: the request, the settings
    it ran with, the logged query embedding (None when it searched no vectors) and an encoder
    with the logged identity that refuses to embed."""

    request_id: str
    request: RetrievalRequest
    settings: RetrievalSettings
    embedding: QueryEmbedding | None
    encoder: RefusingEncoder
    payload: Mapping[str, Any]

    def run(self, store: ReadableStore, settings: RetrievalSettings | None = None,
            extra_nodes: Sequence[str] = ()) -> RetrievalResult:
        """The request again on `store` (not logged), under its own settings or `settings`, with
        the logged vector in place of the `query_embedding` node wherever the vector path is on."""
        settings = settings or self.settings
        searches_vectors = PathType.VECTOR in settings.candidates.enabled_paths
        logged, cross_encoder, reformulator = policy_overrides(self.payload)
        return retrieve(store, self.request, settings=settings, encoder=self.encoder, extra_nodes=extra_nodes,
                        cross_encoder=cross_encoder, reformulator=reformulator,
                        overrides={"query_embedding": self.embedding if searches_vectors else None, **logged}, log=False)


def logged_request(store: ReadableStore, record: Mapping[str, Any]) -> LoggedRequest:
    """The request a successful record logged, ready to run again (ReplayError for a failed one)."""
    payload = record.get("payload") or {}
    request_id = str(record.get("request_id"))
    if payload.get("status") != "ok" or payload.get("bundle_sha256") is None:
        raise ReplayError(f"request {request_id} failed when it ran ({payload.get('error')}); there is no bundle to replay")
    vector = payload.get("query_embedding")
    embedding = None
    identity = store.embedding_identity or EmbeddingIdentity("none", "none", 0)
    if vector is not None:
        identity = _identity(store, payload.get("embedding_model_version"), len(vector))
        embedding = QueryEmbedding(np.asarray(vector, dtype=np.float32), identity)
    return LoggedRequest(request_id, RetrievalRequest.model_validate(payload["request"]),
                         settings_as_logged(payload["configuration"]), embedding, RefusingEncoder(identity), payload)


def replay_record(store: ReadableStore, record: Mapping[str, Any]) -> ReplayReport:
    """Replay one logged record (see module docstring)."""
    store = snapshot_of(store)  # the run and the state it is compared with read one generation
    logged = logged_request(store, record)
    payload, settings = logged.payload, logged.settings
    differences = []
    if settings.fingerprint() != payload.get("configuration_fingerprint"):
        differences.append(f"the logged configuration reads back with fingerprint {settings.fingerprint()}, "
                           f"logged {payload.get('configuration_fingerprint')}: "
                           f"{_fingerprint_cause(settings, payload['configuration'])}")
    result = logged.run(store)
    replayed = result.log_record["payload"]
    digest = replayed["bundle_sha256"]
    logged_state, current_state = payload.get("index_state"), store.state_fingerprint()
    identical = digest == payload["bundle_sha256"]
    if not identical:
        if logged_state != current_state:
            differences.insert(0, f"the index state changed since the request was logged: {logged_state} -> {current_state}")
        for field, what in (("package_version", "the package version"),
                            ("dag_fingerprint", "the code of every module a bundle depends on")):
            if payload.get(field) is not None and payload.get(field) != replayed.get(field):
                differences.insert(0, f"{what} changed since the request was logged: "
                                      f"{payload[field]} -> {replayed[field]}")
        if replayed.get("embedding_model_version") != payload.get("embedding_model_version"):
            differences.append(f"embedding model {payload.get('embedding_model_version')} -> "
                               f"{replayed.get('embedding_model_version')}")
        differences += _payload_differences(payload, replayed)
        if not differences:
            differences.append("the bundles differ only in fields the log does not keep")
    return ReplayReport(logged.request_id, logged.request.query, identical, payload["bundle_sha256"], digest,
                        logged_state, current_state, tuple(differences), result.bundle)


def replay(store: ReadableStore, request_id: str | UUID) -> ReplayReport:
    """Replay the logged request `request_id` from `store`'s retrieval log, without the embedding model."""
    return replay_record(store, find_record(store, request_id))
