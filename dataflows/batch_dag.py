"""The outer DAG of batch retrieval: requests are routed to stores, cut into shards that fan out
(`Parallelizable`), each shard runs the ordinary retrieval DAG per request, results are collected.

`shard_results` is the only node that runs on the workers. It opens its store read-only once per
process and keeps it for later shards (`cached_store`), and embeds the shard's queries together
(`query_vectors`), handing each request its vector as the `query_embedding` override, as replay
does. A request that fails becomes a result with its error; the others are unaffected.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hamilton.htypes import Collect, Parallelizable
from pydantic import BaseModel, ConfigDict, Field

from rms_retrieval.nodes.models import QueryEmbedding, RetrievalRequest
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings


class BatchRequest(BaseModel):
    """One request of a batch: a validated RetrievalRequest and the id its result carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str = Field(min_length=1)
    request: RetrievalRequest


@dataclass(frozen=True)
class BatchResult:
    """The outcome of one request: its bundle (JSON and sha256) or the error that stopped it.

    `latency_ms` is the request's own retrieval time plus its share of the shard's query embedding.
    """

    request_id: str
    namespaces: tuple[str, ...]
    store: str
    shard: int
    worker: str
    bundle_json: str | None
    bundle_sha256: str | None
    latency_ms: float
    error: str | None


@dataclass(frozen=True)
class StoreRouting:
    """Which store directory answers a namespace: one for all of them, or one per namespace."""

    directory: str | None = None
    by_namespace: Mapping[str, str] | None = None

    def directory_for(self, namespaces: Sequence[str]) -> str:
        """The one directory holding every namespace of a request, or ValueError saying why not."""
        if self.by_namespace is None:
            assert self.directory is not None
            return self.directory
        missing = [ns for ns in namespaces if ns not in self.by_namespace]
        if missing:
            raise ValueError(f"namespace {', '.join(missing)} is in no store of the mapping; "
                             f"add it to the namespace-to-store mapping")
        directories = sorted({self.by_namespace[ns] for ns in namespaces})
        if len(directories) > 1:
            raise ValueError(f"the namespaces span stores {', '.join(directories)}; a request reads one store, "
                             f"so keep namespaces asked together in one store")
        return directories[0]


@dataclass(frozen=True)
class Shard:
    """Requests for whole namespaces of one store, answered by one task."""

    number: int
    store: str
    requests: tuple[BatchRequest, ...]


@dataclass(frozen=True)
class RoutedRequests:
    """Requests by store directory and namespace scope, in input order, and the ones with no store."""

    by_scope: Mapping[tuple[str, tuple[str, ...]], tuple[BatchRequest, ...]]
    unroutable: tuple[BatchResult, ...]


def routed_requests(batch_requests: list[BatchRequest], store_routing: StoreRouting) -> RoutedRequests:
    """Each request under its store and namespace scope; one with no single store is a failed result."""
    by_scope: dict[tuple[str, tuple[str, ...]], list[BatchRequest]] = {}
    unroutable = []
    for item in batch_requests:
        namespaces = item.request.namespaces
        try:
            directory = store_routing.directory_for(namespaces)
        except ValueError as error:
            unroutable.append(_failed(item, "", -1, error))
            continue
        by_scope.setdefault((directory, namespaces), []).append(item)
    return RoutedRequests({scope: tuple(items) for scope, items in by_scope.items()}, tuple(unroutable))


def request_shards(routed_requests: RoutedRequests, shard_size: int) -> list[Shard]:
    """Shards of at most `shard_size` requests that never split a namespace scope they can hold.

    Scopes are packed whole, store by store; a scope with more than `shard_size` requests gets
    shards of its own, so no shard mixes part of one scope with another.
    """
    shards: list[Shard] = []
    pending: list[BatchRequest] = []
    pending_store = ""

    def flush() -> None:
        if pending:
            shards.append(Shard(len(shards), pending_store, tuple(pending)))
            pending.clear()

    for (store, _), items in sorted(routed_requests.by_scope.items()):
        if store != pending_store or len(pending) + len(items) > shard_size:
            flush()
            pending_store = store
        if len(items) > shard_size:
            for start in range(0, len(items), shard_size):
                pending.extend(items[start : start + shard_size])
                flush()
        else:
            pending.extend(items)
    flush()
    return shards


def shard(request_shards: list[Shard]) -> Parallelizable[Shard]:
    """One task per shard."""
    yield from request_shards


def shard_results(shard: Shard, settings: RetrievalSettings) -> list[BatchResult]:
    """Every request of the shard answered from its store, the queries embedded together."""
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    started = time.perf_counter()
    try:
        store, lock = cached_store(shard.store)
        encoder = default_encoder()
        vectors = None
        if PathType.VECTOR in settings.candidates.enabled_paths:
            vectors = encoder.encode([item.request.query for item in shard.requests])
    except Exception as error:
        return [_failed(item, shard.store, shard.number, error) for item in shard.requests]
    embedding_ms = (time.perf_counter() - started) * 1000 / len(shard.requests)
    with lock:
        return [
            _answer(store, shard, item, settings, encoder,
                    None if vectors is None else QueryEmbedding(vectors[position], encoder.identity), embedding_ms)
            for position, item in enumerate(shard.requests)
        ]


def batch_results(shard_results: Collect[list[BatchResult]], routed_requests: RoutedRequests,
                  batch_requests: list[BatchRequest]) -> list[BatchResult]:
    """All results, failed ones included, in the order the requests came in."""
    order = {item.request_id: position for position, item in enumerate(batch_requests)}
    results = [result for results in shard_results for result in results]
    results.extend(routed_requests.unroutable)
    return sorted(results, key=lambda result: order[result.request_id])


# ----- on the workers ------------------------------------------------------------------------

# Open stores per worker process, least recently used first. A worker serving many stores keeps
# only the latest few open: each holds its vectors and caches in memory.
MAX_OPEN_STORES = 8
_STORES: OrderedDict[str, tuple[int | None, Any, threading.Lock]] = OrderedDict()
_STORES_LOCK = threading.Lock()


def cached_store(directory: str) -> tuple[Any, threading.Lock]:
    """The store at `directory` opened read-only once per process, and the lock its users share.

    At most MAX_OPEN_STORES stay open; the least recently used is closed first. Every commit adds a file to the store directory, which moves the directory's mtime, so a
    store that changed since it was opened is reopened rather than served stale. One DuckDB
    connection is not for concurrent use, hence the lock (Dask runs tasks in worker threads).
    """
    from rms_retrieval.stores.memory_store import MemoryStore

    path = str(Path(directory).resolve())
    # A missing directory gets no signature, and MemoryStore.open says what is missing.
    signature = os.stat(path).st_mtime_ns if os.path.isdir(path) else None
    with _STORES_LOCK:
        cached = _STORES.get(path)
        if cached is not None and cached[0] == signature:
            _STORES.move_to_end(path)
            return cached[1], cached[2]
        if cached is not None:
            _close(_STORES.pop(path))
        store = MemoryStore.open(path, create=False, read_only=True)
        _STORES[path] = (signature, store, threading.Lock())
        while len(_STORES) > MAX_OPEN_STORES:
            _close(_STORES.popitem(last=False)[1])
        return store, _STORES[path][2]


def _close(cached: tuple[int | None, Any, threading.Lock]) -> None:
    _, store, lock = cached
    with lock:
        store.close()


def close_cached_stores() -> None:
    """Close every store this process keeps open (the local engine does, after its batch)."""
    with _STORES_LOCK:
        while _STORES:
            _close(_STORES.popitem()[1])


def _answer(store: Any, shard: Shard, item: BatchRequest, settings: RetrievalSettings, encoder: Any,
            embedding: QueryEmbedding | None, embedding_ms: float) -> BatchResult:
    from rms_retrieval.dataflows.retrieval import retrieve

    request = item.request
    started = time.perf_counter()
    try:
        result = retrieve(store, request, settings=settings, encoder=encoder,
                          overrides=None if embedding is None else {"query_embedding": embedding}, log=False)
    except Exception as error:
        return _failed(item, shard.store, shard.number, error)
    bundle_json = result.bundle.to_json()
    return BatchResult(
        request_id=item.request_id, namespaces=request.namespaces, store=shard.store, shard=shard.number,
        worker=_worker_name(), bundle_json=bundle_json,
        bundle_sha256=hashlib.sha256(bundle_json.encode()).hexdigest(),
        latency_ms=(time.perf_counter() - started) * 1000 + embedding_ms, error=None,
    )


def _failed(item: BatchRequest, store: str, shard_number: int, error: BaseException) -> BatchResult:
    return BatchResult(
        request_id=item.request_id, namespaces=item.request.namespaces, store=store, shard=shard_number,
        worker=_worker_name(), bundle_json=None, bundle_sha256=None, latency_ms=0.0,
        error=f"{type(error).__name__}: {error}",
    )


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
