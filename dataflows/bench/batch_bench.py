"""`rms bench batch`: batch retrieval throughput, sequential and on 1 and 2 workers of Ray and Dask.

LoCoMo questions, each on its own conversation, are repeated to `--requests` requests. Arms:
`sequential` is `retrieve()` in a loop; `local` is `retrieve_many` in this process (the outer
DAG and batched query embedding, no cluster); `ray-N` and `dask-N` run it on a cluster of N
worker processes started by the arm. A cluster's start and its workers' first task (loading the
model and opening the store) are timed apart, as `startup_s` and `warmup_s`, so requests/s
counts only the batch. The per-task overhead is what the workers' time does not explain:
(workers x wall time - the requests' own latency) / tasks.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from rms_retrieval.dataflows.batch import DEFAULT_SHARD_SIZE, retrieve_many
from rms_retrieval.dataflows.batch_dag import BatchRequest
from rms_retrieval.nodes.models import RetrievalRequest

DEFAULT_REQUESTS = 20_000
DEFAULT_ARMS = ("sequential", "local", "ray-1", "ray-2", "dask-1", "dask-2")
RESULTS_FILE = "batch_results.json"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `bench batch` to the `rms bench` parser."""
    batch = commands.add_parser("batch", help="batch retrieval throughput: sequential, local, Ray and Dask workers")
    batch.add_argument("--data", required=True, help="the LoCoMo JSON file (locomo10.json)")
    batch.add_argument("--store", required=True, help="store directory; built from --data when it is empty")
    batch.add_argument("--out", required=True, help=f"directory for {RESULTS_FILE}")
    batch.add_argument("--requests", type=int, default=DEFAULT_REQUESTS,
                       help=f"LoCoMo questions repeated to this many requests (default {DEFAULT_REQUESTS})")
    batch.add_argument("--shard-size", type=int, default=DEFAULT_SHARD_SIZE)
    batch.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), metavar="ARM",
                       help=f"arms to run (default {' '.join(DEFAULT_ARMS)}); ray-N and dask-N take any N")
    batch.set_defaults(run=_cmd_batch)


def locomo_requests(dataset: Any, count: int) -> list[BatchRequest]:
    """The dataset's questions on their own conversation at its reference time, repeated to `count`."""
    from rms_retrieval.dataflows.locomo import reference_time

    when = {c.sample_id: reference_time(c) for c in dataset.conversations}
    questions = islice(cycle(dataset.questions), count)
    return [BatchRequest(request_id=str(number), request=RetrievalRequest(
                query=q.question, namespaces=(q.sample_id,), reference_time=when[q.sample_id]))
            for number, q in enumerate(questions)]


def sequential_arm(store_path: str, requests: Sequence[BatchRequest]) -> dict[str, Any]:
    """`retrieve()` once per request, one process, one query embedding per request."""
    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore

    encoder = default_encoder()
    with MemoryStore.open(store_path, create=False, read_only=True) as store:
        warm = requests[0].request
        retrieve(store, warm.query, namespaces=warm.namespaces, reference_time=warm.reference_time, encoder=encoder, log=False)
        started = time.perf_counter()
        bundle_bytes = 0
        for item in requests:
            r = item.request
            result = retrieve(store, r.query, namespaces=r.namespaces, reference_time=r.reference_time,
                              token_budget=r.token_budget, encoder=encoder, log=False)
            bundle_bytes += len(result.bundle.to_json())
        wall = time.perf_counter() - started
    return {"arm": "sequential", "workers": 1, "requests": len(requests), "tasks": len(requests),
            "wall_s": wall, "requests_per_s": len(requests) / wall, "per_request_ms": wall * 1000 / len(requests),
            "startup_s": 0.0, "warmup_s": 0.0, "failed": 0, "task_overhead_ms": None,
            "bundle_kb": bundle_bytes / 1024 / len(requests)}


def engine_arm(arm: str, store_path: str, requests: Sequence[BatchRequest], shard_size: int) -> dict[str, Any]:
    """`retrieve_many` on the arm's engine: `local`, or `ray-N` / `dask-N` on N fresh worker processes."""
    engine, _, count = arm.partition("-")
    workers = int(count) if count else 1
    started = time.perf_counter()
    with _cluster(engine, workers) as options:
        startup = time.perf_counter() - started
        # Two small shards per worker, so that every worker has loaded the model and the store.
        warm_started = time.perf_counter()
        retrieve_many(store_path, requests[: 2 * workers * 4], shard_size=4, **options)
        warmup = time.perf_counter() - warm_started
        run_started = time.perf_counter()
        results = retrieve_many(store_path, requests, shard_size=shard_size, **options)
        wall = time.perf_counter() - run_started
    tasks = len({result.shard for result in results})
    busy_ms = sum(result.latency_ms for result in results)
    return {"arm": arm, "workers": workers, "requests": len(requests), "tasks": tasks, "wall_s": wall,
            "requests_per_s": len(requests) / wall, "per_request_ms": busy_ms / len(requests),
            "startup_s": startup, "warmup_s": warmup, "failed": sum(r.error is not None for r in results),
            "task_overhead_ms": (workers * wall * 1000 - busy_ms) / tasks,
            "bundle_kb": sum(len(r.bundle_json or "") for r in results) / 1024 / len(results)}


@contextmanager
def _cluster(engine: str, workers: int) -> Iterator[dict[str, Any]]:
    """The arm's cluster, up for both of its runs: retrieve_many options that reach it."""
    if engine == "local":
        yield {"engine": "local"}
    elif engine == "ray":
        import ray

        ray.init(num_cpus=workers, include_dashboard=False)
        try:
            yield {"engine": "ray"}
        finally:
            ray.shutdown()
    elif engine == "dask":
        from dask.distributed import LocalCluster

        with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster:
            yield {"engine": "dask", "address": cluster.scheduler_address}
    else:
        raise ValueError(f"unknown arm {engine!r}; arms are sequential, local, ray-N and dask-N")


def run_batch_bench(store_path: str, requests: Sequence[BatchRequest], arms: Sequence[str], shard_size: int,
                    report: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every arm on the same requests, one after the other, each reported as it ends."""
    rows = []
    for arm in arms:
        row = sequential_arm(store_path, requests) if arm == "sequential" else engine_arm(arm, store_path, requests, shard_size)
        rows.append(row)
        report(table_line(row))
    return rows


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The throughput table in Markdown."""
    return ["| arm | workers | requests | tasks | requests/s | ms per request (busy) | per-task overhead ms "
            "| cluster start s | warm-up s | bundle KB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *(table_line(row) for row in rows)]


def table_line(row: dict[str, Any]) -> str:
    overhead = "" if row["task_overhead_ms"] is None else f"{row['task_overhead_ms']:.1f}"
    return (f"| {row['arm']} | {row['workers']} | {row['requests']} | {row['tasks']} | {row['requests_per_s']:.1f} "
            f"| {row['per_request_ms']:.1f} | {overhead} | {row['startup_s']:.1f} | {row['warmup_s']:.1f} "
            f"| {row['bundle_kb']:.1f} |")


def _cmd_batch(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench.machine import machine_info
    from rms_retrieval.dataflows.ingest import ingest_locomo
    from rms_retrieval.dataflows.locomo import load_locomo

    if args.requests < 1:
        raise ValueError(f"--requests must be at least 1, got {args.requests}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not Path(args.store).is_dir() or not any(Path(args.store).iterdir()):
        ingest_locomo(Path(args.data), args.store)
    dataset = load_locomo(Path(args.data))
    requests = locomo_requests(dataset, args.requests)
    print("\n".join(table_lines([])))
    rows = run_batch_bench(args.store, requests, args.arms, args.shard_size)
    payload = {"machine": machine_info(), "requests": args.requests, "shard_size": args.shard_size, "arms": rows}
    (out / RESULTS_FILE).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out / RESULTS_FILE}")
    return 0
