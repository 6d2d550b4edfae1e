"""`rms bench ingest`: what one small write costs as a store grows, and bulk throughput.

One store grows through the requested sizes by bulk adds of synthetic turns (timed: bulk
throughput, the merges they make due included: the bulk phase ends when they are done); at each
size, `singles` one-turn adds are timed (single-turn latency; merges run on the store's merge
thread after an add returns, and the wait for them after the last add is reported apart), then
`singles` one-object updates (metadata) and deletes of the oldest turns (in the largest
segment), each delete followed by the first BM25 search on the new generation (what a reader
pays for the segment whose deletion file changed) and by one more update, after which a
question on its namespace is timed, then the same question again (`retrieve()`, a bundle of 50,
every namespace asked once before: what a question right after a one-object update costs over
the same question warm), and one erase of a whole session of a
namespace, the one the last bulk add ended in (erase compacts at once: its cost grows with the
segments that held the session). Vectors
come from `RandomEncoder` (random unit vectors seeded by the text), so no model runs: the
figures are the store's own cost, and `embedding_seconds` (near zero here) is reported apart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from rms_retrieval.dataflows.bench.metrics import latency_percentiles
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.dataflows.bench.speed_bench import directory_size_mb, peak_memory_mb, synthetic_objects
from tests.factories import RandomEncoder

INGEST_SIZES = (1_000, 10_000, 100_000)
SINGLES = 30
BULK_BATCH = 50_000
# What the question after an update asks (every synthetic turn starts with "turn": BM25's worst case).
QUESTION = "which turn spoke of the river and the garden?"


def run_ingest(path: Path, sizes: Sequence[int] = INGEST_SIZES, *, singles: int = SINGLES,
               progress: bool = True) -> dict[str, Any]:
    """Grow one store at `path` (empty) through `sizes`, timing bulk adds and single-turn adds."""
    from rms_retrieval.stores.memory_store import MemoryStore

    rows: list[dict[str, Any]] = []
    next_number = victim = 0
    gone: set[UUID] = set()
    with MemoryStore.open(path, RandomEncoder()) as store:
        for size in sorted(sizes):
            bulk_objects = bulk_seconds = bulk_embedding = 0.0
            while store.snapshot().count_objects() < size:
                count = min(BULK_BATCH, size - store.snapshot().count_objects())
                report = store.add(synthetic_objects(next_number, count))
                next_number += count
                bulk_objects += count
                bulk_seconds += report.seconds
                bulk_embedding += report.details["embedding_seconds"]
            started = time.perf_counter()
            store.wait_for_merges()
            bulk_seconds += time.perf_counter() - started
            last_bulk = synthetic_objects(next_number - 1, 1)[0]
            latencies, without_embedding = [], []
            for _ in range(singles):
                started = time.perf_counter()
                report = store.add(synthetic_objects(next_number, 1))
                latencies.append(time.perf_counter() - started)
                without_embedding.append(latencies[-1] - report.details["embedding_seconds"])
                next_number += 1
            started = time.perf_counter()
            store.wait_for_merges()
            merges_after_singles = time.perf_counter() - started
            changes: dict[str, list[float]] = {"update": [], "delete": [], "lexical_after_delete": [],
                                               "question_after_update": [], "question_warm": []}
            for namespace in store.snapshot().namespaces():  # the first question on a namespace is not timed here
                _asked(store, namespace)
            for _ in range(singles):
                for kind in ("update", "delete", "asked"):  # "asked": one more update, then a question timed
                    while UUID(int=victim + 1) in gone:  # synthetic_objects' ids
                        victim += 1
                    memory = synthetic_objects(victim, 1)[0]
                    victim += 1
                    started = time.perf_counter()
                    if kind == "delete":
                        store.delete(memory.namespace, [memory.id])
                    else:
                        store.update(memory.namespace, memory.id, metadata={"checked": True})
                    if kind == "asked":
                        changes["question_after_update"].append(_asked(store, memory.namespace))
                        changes["question_warm"].append(_asked(store, memory.namespace))
                        continue
                    changes[kind].append(time.perf_counter() - started)
                    if kind == "delete":
                        started = time.perf_counter()
                        store.snapshot().search_lexical("turn", [memory.namespace], 10)
                        changes["lexical_after_delete"].append(time.perf_counter() - started)
            started = time.perf_counter()
            erased = store.erase(last_bulk.namespace, where={"session_id": last_bulk.session_id})
            erase_seconds = time.perf_counter() - started
            gone.update(erased.object_ids)
            row = {
                "size": size,
                "erase_session_ms": 1000.0 * erase_seconds,
                "erased_objects": len(erased.object_ids),
                "single_update_ms": latency_percentiles(changes["update"]),
                "single_delete_ms": latency_percentiles(changes["delete"]),
                "lexical_after_delete_ms": latency_percentiles(changes["lexical_after_delete"]),
                "question_after_update_ms": latency_percentiles(changes["question_after_update"]),
                "question_warm_ms": latency_percentiles(changes["question_warm"]),
                "single_add_ms": latency_percentiles(latencies),
                "single_add_excluding_embedding_ms": latency_percentiles(without_embedding),
                "single_add_excluding_embedding_mean_ms": 1000.0 * sum(without_embedding) / len(without_embedding),
                # merges run after the adds return; what was still running after the last one
                "merge_wait_after_singles_ms": 1000.0 * merges_after_singles,
                "bulk_objects": int(bulk_objects),
                "bulk_objects_per_second": bulk_objects / max(bulk_seconds - bulk_embedding, 1e-9) if bulk_objects else None,
                "segments": len(store.snapshot().segments),
                "size_mb": directory_size_mb(path),
                "peak_memory_mb": peak_memory_mb(),
            }
            rows.append(row)
            if progress:
                print(summary_line(row), flush=True)
    return {"sizes": rows, "encoder": "RandomEncoder (no model; random unit vectors seeded by text)", "singles": singles}


def _asked(store: Any, namespace: str) -> float:
    """Seconds `retrieve()` takes to answer `QUESTION` in `namespace` (a bundle of 50)."""
    started = time.perf_counter()
    retrieve(store, QUESTION, namespaces=[namespace], encoder=RandomEncoder(), limit=50, log=False)
    return time.perf_counter() - started


def summary_line(row: dict[str, Any]) -> str:
    single = row["single_add_excluding_embedding_ms"]
    bulk = row["bulk_objects_per_second"]
    return (f"{row['size']:>9} objects: one-turn add p50 {single['p50']:.1f} ms, p95 {single['p95']:.1f} ms, "
            f"mean {row['single_add_excluding_embedding_mean_ms']:.1f} ms "
            f"(embedding excluded), then {row['merge_wait_after_singles_ms']:.0f} ms of merges; bulk {bulk:,.0f} objects/s; {row['segments']} segments, "
            f"{row['size_mb']:.0f} MB, peak {row['peak_memory_mb']:.0f} MB; one-object update p50 "
            f"{row['single_update_ms']['p50']:.1f} ms, delete p50 {row['single_delete_ms']['p50']:.1f} ms, first BM25 "
            f"search after a delete p50 {row['lexical_after_delete_ms']['p50']:.1f} ms; a question right after "
            f"an update p50 {row['question_after_update_ms']['p50']:.1f} ms, p99 {row['question_after_update_ms']['p99']:.1f}, "
            f"the same warm {row['question_warm_ms']['p50']:.1f} and {row['question_warm_ms']['p99']:.1f}; erase of a "
            f"{row['erased_objects']}-turn session {row['erase_session_ms']:.0f} ms" if bulk else
            f"{row['size']:>9} objects: one-turn add p50 {single['p50']:.1f} ms")
