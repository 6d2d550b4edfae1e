"""Operational benchmarks (RFC-0005 Section 13): latency, time per node, namespace isolation,
determinism, and latency against store size.

All latencies are of `retrieve()` in a warm process (`log=False`, so the retrieval log does not
grow). The floor is what any vector-backed retrieval must pay at least, the query embedding and
an exact top-k vector search, measured on the same queries interleaved with the pipeline so both
see the same machine load.
"""

from __future__ import annotations

import random
import resource
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
from hamilton import driver
from hamilton.lifecycle import NodeExecutionHook
from tqdm import tqdm

from rms_retrieval.dataflows.bench.metrics import latency_percentiles
from rms_retrieval.dataflows.pipeline import STAGE_MODULES, FINAL_NODE, emptying_memo, pipeline_inputs
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import QueryEncoder
from tests.factories import RandomEncoder

BUNDLE_SIZES = (10, 50, 200)
LATENCY_BUDGET = 100_000  # large enough that `limit`, not the budget, decides the bundle size
FLOOR_TARGET_RATIO = 1.5
SCALE_SIZES = (10_000, 100_000)
SCALE_NAMESPACES = 10
_WORDS = (
    "garden painting river camping guitar marathon recipe puppy museum violin hiking pottery "
    "adoption concert library beach festival bakery sunrise workshop kayak poetry lantern orchard"
).split()


@dataclass(frozen=True)
class BenchQuery:
    """One query as `retrieve()` takes it."""

    text: str
    namespaces: tuple[str, ...]
    reference_time: datetime


class NodeTimer(NodeExecutionHook):
    """Wall time of every Hamilton node execution, by node name."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self._started: dict[tuple[str, str], float] = {}

    def run_before_node_execution(self, *, node_name: str, run_id: str, **future_kwargs: Any) -> None:
        self._started[(run_id, node_name)] = time.perf_counter()

    def run_after_node_execution(self, *, node_name: str, run_id: str, **future_kwargs: Any) -> None:
        started = self._started.pop((run_id, node_name), None)
        if started is not None:
            self.seconds[node_name].append(time.perf_counter() - started)

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean and p50/p95/p99 per node in milliseconds, slowest mean first."""
        rows = {name: {"mean_ms": float(np.mean(values)) * 1000.0, **latency_percentiles(values)}
                for name, values in self.seconds.items()}
        return dict(sorted(rows.items(), key=lambda kv: -kv[1]["mean_ms"]))


def timed_driver(settings: RetrievalSettings, timer: NodeTimer) -> driver.Driver:
    """The retrieval DAG of `rms_retrieval.dataflows.pipeline`, with `timer` hooked into every node."""
    return emptying_memo(
        driver.Builder()
        .with_modules(*STAGE_MODULES)
        .with_config(settings.hamilton_config())
        .with_adapters(timer)
        .build()
    )


def node_times(store: Any, queries: Sequence[BenchQuery], encoder: QueryEncoder, *, limit: int = 50) -> dict:
    """Time per node over `queries` (bundles of `limit` objects), through a driver with a NodeTimer."""
    settings = RetrievalSettings()
    timer = NodeTimer()
    dag = timed_driver(settings, timer)
    for query in queries:
        request = RetrievalRequest(query=query.text, namespaces=query.namespaces, reference_time=query.reference_time,
                                   token_budget=LATENCY_BUDGET, limit=limit)
        dag.execute([FINAL_NODE], inputs=pipeline_inputs(store, request, settings, encoder))
    return timer.summary()


def _retrieve(store: Any, query: BenchQuery, encoder: QueryEncoder, **options: Any):
    return retrieve(store, query.text, namespaces=query.namespaces, reference_time=query.reference_time,
                    encoder=encoder, log=False, **options)


def _floor(store: Any, query: BenchQuery, encoder: QueryEncoder, k: int) -> int:
    vector = encoder.encode([query.text])[0]
    return len(store.snapshot().search_vector(vector, query.namespaces, k))


def latency_by_bundle_size(
    store: Any,
    queries: Sequence[BenchQuery],
    encoder: QueryEncoder,
    sizes: Sequence[int] = BUNDLE_SIZES,
    *,
    warmup: int = 3,
    progress: bool = False,
) -> dict[str, Any]:
    """p50/p95/p99 of `retrieve()` with `limit=size`, the floor at k=size, and bundle sizes reached.
    `pipeline_cpu_ms` is the process's CPU time per request: on a shared machine, about what an idle
    one's wall time would be, since the pipeline runs on one thread."""
    for query in queries[:warmup]:
        _retrieve(store, query, encoder, token_budget=LATENCY_BUDGET, limit=max(sizes))
        _floor(store, query, encoder, max(sizes))
    report: dict[str, Any] = {}
    for size in sizes:
        pipeline_seconds, pipeline_cpu, floor_seconds, items = [], [], [], []
        for query in tqdm(queries, desc=f"latency, {size} objects", unit="q", disable=not progress):
            started, cpu_started = time.perf_counter(), time.process_time()
            bundle = _retrieve(store, query, encoder, token_budget=LATENCY_BUDGET, limit=size).bundle
            pipeline_seconds.append(time.perf_counter() - started)
            pipeline_cpu.append(time.process_time() - cpu_started)
            items.append(len(bundle.items))
            started = time.perf_counter()
            _floor(store, query, encoder, size)
            floor_seconds.append(time.perf_counter() - started)
        pipeline, floor = latency_percentiles(pipeline_seconds), latency_percentiles(floor_seconds)
        report[str(size)] = {
            "pipeline_ms": pipeline,
            "pipeline_cpu_ms": latency_percentiles(pipeline_cpu),
            "floor_ms": floor,
            "p50_over_floor_p50": pipeline["p50"] / floor["p50"],
            "within_target": pipeline["p50"] / floor["p50"] <= FLOOR_TARGET_RATIO,
            "items_min": int(min(items)),
            "items_mean": float(np.mean(items)),
            "queries_reaching_size": int(sum(n >= size for n in items)),
        }
    return report


def isolation_queries(
    texts: Sequence[str], namespaces: Sequence[str], reference_time: datetime, count: int, *, seed: int = 0
) -> list[BenchQuery]:
    """`count` sampled (text, namespaces) pairs: any text against any namespace, one in four asking two."""
    if len(namespaces) < 2:
        raise ValueError(f"isolation needs a store with several namespaces, found {len(namespaces)}")
    rng = random.Random(seed)
    queries = []
    for _ in range(count):
        width = 2 if rng.random() < 0.25 else 1
        chosen = tuple(sorted(rng.sample(list(namespaces), width)))
        queries.append(BenchQuery(rng.choice(list(texts)), chosen, reference_time))
    return queries


def namespace_isolation(
    store: Any, queries: Sequence[BenchQuery], encoder: QueryEncoder, *, token_budget: int = 4000,
    progress: bool = False, checkpoint: Callable[[dict[str, Any]], None] | None = None, checkpoint_every: int = 1000,
) -> dict[str, Any]:
    """Every bundle item, and every object of the ranked pool, must lie in the requested namespaces.

    Each distinct text is embedded once by the encoder and passed as the `query_embedding` node:
    isolation is a property of the store's filtering, which every query still runs in full.
    """
    embeddings: dict[str, Any] = {}
    leaks: list[dict[str, str]] = []
    pool_leaks = items = pool_objects = done = 0
    started = time.perf_counter()

    def report() -> dict[str, Any]:
        return {
            "queries": done,
            "queries_planned": len(queries),
            "namespaces": sorted({ns for q in queries for ns in q.namespaces}),
            "bundle_items_checked": items,
            "pool_objects_checked": pool_objects,
            "leaks": len(leaks),
            "pool_leaks": pool_leaks,
            "leak_examples": leaks[:20],
            "seconds": time.perf_counter() - started,
        }

    bar = tqdm(queries, desc="isolation", unit="q", disable=not progress)
    for query in bar:
        if query.text not in embeddings:
            embeddings[query.text] = _retrieve(store, query, encoder, token_budget=token_budget,
                                               extra_nodes=["query_embedding"]).nodes["query_embedding"]
        result = _retrieve(store, query, encoder, token_budget=token_budget, extra_nodes=["ranked_candidates"],
                           overrides={"query_embedding": embeddings[query.text]})
        for item in result.bundle.items:
            items += 1
            if item.namespace not in query.namespaces:
                leaks.append({"query": query.text, "namespaces": ",".join(query.namespaces), "object": str(item.id),
                              "object_namespace": item.namespace})
        ranked = result.nodes["ranked_candidates"]
        for memory in ranked.pool.objects:
            pool_objects += 1
            pool_leaks += memory.namespace not in query.namespaces
        done += 1
        bar.set_postfix(leaks=len(leaks), pool_leaks=pool_leaks, refresh=False)
        if checkpoint is not None and done % checkpoint_every == 0:
            checkpoint(report())
    return report()


def determinism(
    store: Any, queries: Sequence[BenchQuery], encoder: QueryEncoder, *, repeats: int = 100,
    token_budget: int = 4000, progress: bool = False,
) -> dict[str, Any]:
    """`repeats` rounds over `queries` (interleaved); every bundle JSON must equal the first round's."""
    first: list[str] = []
    mismatches: dict[int, int] = defaultdict(int)
    for round_number in tqdm(range(repeats), desc="determinism", unit="round", disable=not progress):
        for position, query in enumerate(queries):
            text = _retrieve(store, query, encoder, token_budget=token_budget).bundle.to_json()
            if round_number == 0:
                first.append(text)
            elif text != first[position]:
                mismatches[position] += 1
    return {
        "queries": len(queries),
        "repeats": repeats,
        "bundles_compared": len(queries) * repeats,
        "identical": not mismatches,
        "queries_with_differences": {queries[p].text: n for p, n in sorted(mismatches.items())},
    }


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def directory_size_mb(path: str | Path) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 1e6


# ----- scaling: synthetic stores -----------------------------------------------------------------


def synthetic_objects(start: int, count: int, *, namespaces: int = SCALE_NAMESPACES, seed: int = 0) -> list[MemoryObject]:
    """`count` turns of random words, in sessions of 20, spread over `namespaces` namespaces."""
    rng = random.Random(seed + start)
    base = datetime(2024, 1, 1, tzinfo=timezone.utc)
    objects = []
    for number in range(start, start + count):
        when = base + timedelta(minutes=number)
        words = " ".join(rng.choice(_WORDS) for _ in range(12))
        objects.append(MemoryObject(
            id=UUID(int=number + 1), namespace=f"synthetic-{number % namespaces}",
            session_id=f"session_{number // (20 * namespaces)}", session_seq=(number // namespaces) % 20,
            content=f"turn {number}: {words}", created_at=when, updated_at=when, event_time=when,
        ))
    return objects


def scale_store(path: str | Path, size: int, *, batch: int = 50_000, progress: bool = False) -> dict[str, Any]:
    """Build (or reuse) a synthetic store of `size` objects at `path`; time every batch added."""
    from rms_retrieval.stores.memory_store import MemoryStore

    encoder = RandomEncoder()
    with MemoryStore.open(path, encoder=encoder) as store:
        present = store.snapshot().count_objects()
        if present > size:
            raise ValueError(f"{path} holds {present} objects, more than the {size} asked for; use an empty directory")
        added_seconds = 0.0
        for start in tqdm(range(present, size, batch), desc=f"building {size}", unit="batch", disable=not progress):
            report = store.add(synthetic_objects(start, min(batch, size - start)))
            added_seconds += report.seconds
        return {"objects": store.snapshot().count_objects(), "objects_added": size - present, "build_seconds": added_seconds,
                "size_mb": directory_size_mb(path)}


def scale_latency(path: str | Path, *, queries: int = 50, node_time_queries: int = 10, seed: int = 0) -> dict[str, Any]:
    """Latency of `retrieve()` (bundle of 50) and its floor on a synthetic store, queries of random words,
    the seconds to open the store and take its first snapshot, and the time per node over
    `node_time_queries` further queries. Those are not among the timed ones: a query seen before
    finds its objects decoded already, which would hide what `candidate_objects` costs."""
    from rms_retrieval.stores.memory_store import MemoryStore

    encoder = RandomEncoder()
    rng = random.Random(seed)
    started = time.perf_counter()
    with MemoryStore.open(path, encoder=encoder, read_only=True) as store:
        namespaces = store.snapshot().namespaces()
        opened = time.perf_counter() - started
        when = datetime(2030, 1, 1, tzinfo=timezone.utc)
        sampled = [BenchQuery(" ".join(rng.choice(_WORDS) for _ in range(4)), (rng.choice(namespaces),), when)
                   for _ in range(queries + node_time_queries)]
        latency = latency_by_bundle_size(store, sampled[:queries], encoder, sizes=(50,), warmup=2)["50"]
        latency["open_seconds"] = opened
        if node_time_queries:
            latency["node_times_ms"] = node_times(store, sampled[queries:], encoder)
    return latency


def run_scale(out: str | Path, sizes: Sequence[int] = SCALE_SIZES, *, queries: int = 50, progress: bool = True,
              readers: int = 4) -> dict:
    """Build each synthetic store under `out/stores` (reusing smaller ones is not attempted), time
    it, and weigh one reader process of it against `readers` at once (`reader_memory`)."""
    from rms_retrieval.dataflows.bench.reader_memory import reader_memory
    from rms_retrieval.stores.memory_store import MemoryStore

    rows = []
    for size in sizes:
        path = Path(out) / "stores" / f"synthetic-{size}"
        started = time.perf_counter()
        built = scale_store(path, size, progress=progress)
        built["wall_seconds"] = time.perf_counter() - started
        latency = scale_latency(path, queries=queries, node_time_queries=min(10, queries))
        rng = random.Random(size)
        with MemoryStore.open(path, read_only=True) as store:
            namespaces = store.snapshot().namespaces()
        asked = [(" ".join(rng.choice(_WORDS) for _ in range(4)), namespaces[number % len(namespaces)])
                 for number in range(min(20, queries))]
        memory = reader_memory(path, asked, readers=readers)
        rows.append({"size": size, **built, "latency": latency, "peak_memory_mb": peak_memory_mb(), "reader_memory": memory})
        if progress:
            print(f"{size:>9} objects: built in {built['build_seconds']:.0f} s, opened in {latency['open_seconds']:.2f} s, "
                  f"p50 {latency['pipeline_ms']['p50']:.1f} ms, CPU p50 {latency['pipeline_cpu_ms']['p50']:.1f} ms "
                  f"(floor {latency['floor_ms']['p50']:.1f} ms); one reader Pss {memory['one']['pss_mb_total']:.0f} MB "
                  f"(Rss {memory['one']['rss_mb_total']:.0f}), {readers} readers {memory['many']['pss_mb_total']:.0f} MB "
                  f"(Rss {memory['many']['rss_mb_total']:.0f}): {memory['pss_ratio']:.2f}x")
    return {"sizes": rows, "encoder": "RandomEncoder (random unit vectors seeded by text)",
            "namespaces": SCALE_NAMESPACES}


def locomo_bench_queries(dataset: Any, questions: Sequence[Any]) -> list[BenchQuery]:
    """LoCoMo questions as queries on their own conversation at its reference time."""
    from rms_retrieval.dataflows.locomo import reference_time

    when = {c.sample_id: reference_time(c) for c in dataset.conversations}
    return [BenchQuery(q.question, (q.sample_id,), when[q.sample_id]) for q in questions]


def summary_lines(speed: Mapping[str, Any]) -> list[str]:
    """The printed latency, isolation and determinism lines."""
    lines = []
    for size, row in speed.get("latency", {}).items():
        p, f = row["pipeline_ms"], row["floor_ms"]
        lines.append(
            f"bundle of {size:>3}: p50 {p['p50']:7.1f} ms  p95 {p['p95']:7.1f}  p99 {p['p99']:7.1f}  | floor p50 "
            f"{f['p50']:6.1f} ms  ratio {row['p50_over_floor_p50']:.2f} (target <= {FLOOR_TARGET_RATIO})  "
            f"items min {row['items_min']}"
        )
    if "isolation" in speed:
        iso = speed["isolation"]
        lines.append(f"isolation: {iso['queries']} queries over {len(iso['namespaces'])} namespaces, "
                     f"{iso['bundle_items_checked']} items checked, leaks {iso['leaks']} (pool leaks {iso['pool_leaks']})")
    if "determinism" in speed:
        det = speed["determinism"]
        lines.append(f"determinism: {det['queries']} queries x {det['repeats']} repeats, byte-identical: {det['identical']}")
    return lines
