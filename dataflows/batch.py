"""Batch work on this machine, on Ray or on Dask: `retrieve_many` and `ingest_with_workers`.

Each runs an outer DAG (`batch_dag`, `batch_ingest`) by Hamilton's dynamic execution on the
engine's executor. Retrieval workers open stores read-only and never write the retrieval log: a
batch's record is its results (`write_parquet`), one row per request with its bundle, hash,
latency and error. Ingest embeds on the workers and writes with one writer, as `rms ingest` does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb
import pandas as pd

from rms_retrieval.dataflows import batch_dag, batch_ingest
from rms_retrieval.dataflows.batch_dag import BatchRequest, BatchResult, StoreRouting
from rms_retrieval.dataflows.batch_engines import batch_driver, task_executor
from rms_retrieval.dataflows.ingest import read_validated_lines
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import IngestReport

DEFAULT_SHARD_SIZE = 64
RESULT_COLUMNS = ("request_id", "namespaces", "store", "shard", "worker", "bundle_json", "bundle_sha256",
                  "latency_ms", "error")


class BatchInputError(ValueError):
    """Requests that cannot be run as given; the message says which and how to fix them."""


def retrieve_many(
    store_path: str | Path | Mapping[str, str | Path],
    requests: Sequence[BatchRequest | RetrievalRequest],
    *,
    engine: str = "local",
    address: str | None = None,
    workers: int | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    settings: RetrievalSettings | None = None,
) -> list[BatchResult]:
    """Answer every request, in shards of whole namespaces, on `engine` ("local", "ray" or "dask").

    `store_path` is one store directory, or a mapping from namespace to store directory (a
    request's namespaces must then share one). A plain RetrievalRequest gets its position as
    request id. `address` joins a running Ray or Dask cluster; otherwise `workers` processes are
    started for the call. Results come back in request order; a request that failed carries its
    error and no bundle, and never stops the others.
    """
    if shard_size < 1:
        raise BatchInputError(f"shard_size must be at least 1 request, got {shard_size}")
    batch_requests = _batch_requests(requests)
    with task_executor(engine, address=address, workers=workers) as executor:
        try:
            results = batch_driver(batch_dag, executor).execute(
                ["batch_results"],
                inputs={
                    "batch_requests": batch_requests,
                    "store_routing": _routing(store_path),
                    "shard_size": shard_size,
                    "settings": settings or RetrievalSettings(),
                },
            )
        finally:
            if engine == "local":
                # Tasks ran in this process: leave no store open behind the caller's back.
                batch_dag.close_cached_stores()
    return results["batch_results"]


def _batch_requests(requests: Sequence[BatchRequest | RetrievalRequest]) -> list[BatchRequest]:
    items = [item if isinstance(item, BatchRequest) else BatchRequest(request_id=str(position), request=item)
             for position, item in enumerate(requests)]
    seen: set[str] = set()
    for item in items:
        if item.request_id in seen:
            raise BatchInputError(f"request id {item.request_id!r} appears twice; give each request its own id")
        seen.add(item.request_id)
    return items


def _routing(store_path: str | Path | Mapping[str, str | Path]) -> StoreRouting:
    if isinstance(store_path, Mapping):
        if not store_path:
            raise BatchInputError("the namespace-to-store mapping is empty; map each namespace to its store directory")
        return StoreRouting(by_namespace={ns: str(Path(path)) for ns, path in store_path.items()})
    return StoreRouting(directory=str(Path(store_path)))


def read_requests(path: Path) -> list[BatchRequest]:
    """Requests from JSON Lines: RetrievalRequest fields plus an optional `request_id` (default:
    the line number). Every bad line is reported and none is run."""
    def parse(number: int, line: str) -> BatchRequest:
        fields = json.loads(line)
        if not isinstance(fields, dict):
            raise ValueError("expected a JSON object")
        request_id = str(fields.pop("request_id", number))
        return BatchRequest(request_id=request_id, request=RetrievalRequest.model_validate(fields))

    requests = read_validated_lines(path, parse, BatchInputError, nothing_done="no request was run",
                                    when_empty="no requests found (expected one JSON request per line)")
    try:
        return _batch_requests(requests)
    except BatchInputError as error:
        raise BatchInputError(f"{path}: {error}") from error


def results_frame(results: Sequence[BatchResult]) -> pd.DataFrame:
    """One row per result, the columns of RESULT_COLUMNS."""
    rows = [{name: list(getattr(result, name)) if name == "namespaces" else getattr(result, name)
             for name in RESULT_COLUMNS} for result in results]
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def write_parquet(results: Sequence[BatchResult], path: Path) -> None:
    """Write the results to one Parquet file (through DuckDB; the directory must exist)."""
    frame = results_frame(results)
    with duckdb.connect() as connection:
        connection.from_df(frame).write_parquet(str(path))


def ingest_with_workers(
    objects: Sequence[MemoryObject],
    store_path: str | Path,
    *,
    engine: str,
    address: str | None = None,
    workers: int | None = None,
    progress: bool = False,
) -> IngestReport:
    """Add `objects` to the store at `store_path` (created when missing), embedding on `engine`.

    The workers embed the texts; then one writer adds everything in one `MemoryStore.add`, all
    or nothing, so the store ends as a local ingest of the same objects leaves it, bit for bit.
    The report's details say how many texts the workers embedded and how many the writer did.
    """
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.providers import embedding
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.analysis.speakers import spoken_text

    texts = [spoken_text(memory) for memory in objects if not memory.is_bare_entity]  # what the store embeds
    vectors = {}
    if texts:
        with task_executor(engine, address=address, workers=workers) as executor:
            vectors = batch_driver(batch_ingest, executor).execute(
                ["worker_vectors"], inputs={"texts": texts, "chunk_size": embedding.ENCODE_CHUNK_SIZE})["worker_vectors"]
    encoder = batch_ingest.PrecomputedEncoder(default_encoder(), vectors)
    with MemoryStore.open(store_path, encoder=encoder) as store:
        report = store.add(objects, progress=progress)
    details = {**report.details, "texts_from_workers": encoder.texts_from_workers,
               "texts_encoded_by_writer": encoder.texts_encoded_here}
    return dataclasses.replace(report, details=details)
