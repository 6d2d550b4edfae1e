"""Processes that write and read one store at once: the store's concurrency and crash tests, and
the crash benchmark (`rms bench crash`).

Run from the repository's root as `python -m tests.store_workers write STORE START COUNT` (adds turns
START..START+COUNT-1 one per write, printing `committed N` after each) or `... read STORE STOP`
(checks snapshots, answers, enumerates and explains in a loop until the file STOP exists, then
prints one JSON summary) or
`... hold STORE READY GO` (takes one snapshot, touches READY, waits for GO, then enumerates and
aggregates that old snapshot and prints what it read). Every turn lives in one namespace, says
the word "turn" and names no entity, so a generation holding n objects holds exactly turns
0..n-1: a snapshot is consistent when its rows, its BM25 postings and its vectors all hold
exactly those turns.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np

from rms_retrieval.stores.models import MemoryObject
from tests.factories import RandomEncoder

# How to start one (in ROOT, so that `tests` imports).
ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "tests.store_workers"]
NAMESPACE = "live"
DIMENSION = 16
_WORDS = "garden painting river camping guitar marathon recipe puppy museum violin hiking pottery".split()
_T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
# Between a reader's requests: four readers that never pause starve the one writer of a 2-core machine.
PAUSE_SECONDS = 0.05


def turn(number: int) -> MemoryObject:
    """Turn `number` of the live conversation: lower-case words only, so no entity is spotted."""
    words = " ".join(_WORDS[(number * 7 + k) % len(_WORDS)] for k in range(6))
    when = _T0 + timedelta(seconds=number)
    return MemoryObject(id=UUID(int=number + 1), namespace=NAMESPACE, session_id="s", session_seq=number,
                        content=f"turn {number} {words}", created_at=when, updated_at=when)


def encoder() -> RandomEncoder:
    return RandomEncoder(DIMENSION)


def snapshot_problems(snapshot: Any) -> list[str]:
    """Why this snapshot is not exactly turns 0..n-1 in rows, postings and vectors, written by at
    least n commits (one add per turn; merges commit generations of their own)."""
    objects = snapshot.count_objects()
    problems = []
    if snapshot.generation < objects:
        problems.append(f"{snapshot.state_fingerprint()}: {objects} turns in fewer generations")
    return problems + live_problems(snapshot, {UUID(int=number + 1) for number in range(objects)})


def live_problems(snapshot: Any, wanted: set[UUID]) -> list[str]:
    """Why rows, postings and vectors of this snapshot do not hold exactly the turns `wanted`."""
    problems = []
    if set(snapshot.get_objects(wanted, [NAMESPACE])) != wanted or snapshot.count_objects() != len(wanted):
        problems.append(f"{snapshot.state_fingerprint()}: rows are not the {len(wanted)} turns wanted")
    lexical = {hit.object_id for hit in snapshot.search_lexical("turn", [NAMESPACE], len(wanted) + 5)}
    if lexical != wanted:
        problems.append(f"{snapshot.state_fingerprint()}: BM25 finds {len(lexical)} of {len(wanted)} turns")
    vector = np.ones(DIMENSION, dtype=np.float32) / np.sqrt(DIMENSION)
    vectors = {hit.object_id for hit in snapshot.search_vector(vector, [NAMESPACE], len(wanted) + 5)} if wanted else set()
    if vectors != wanted:
        problems.append(f"{snapshot.state_fingerprint()}: vector search finds {len(vectors)} of {len(wanted)} turns")
    return problems


def suffix_problems(snapshot: Any, total: int) -> list[str]:
    """Why this snapshot is not turns d..total-1 for some d: what `forget` leaves at any moment."""
    return live_problems(snapshot, {UUID(int=number + 1) for number in range(total - snapshot.count_objects(), total)})


def forget(store_path: Path, start: int, stop: int) -> None:
    """Remove turns start..stop-1 in order, one commit each: an odd turn is updated (metadata)
    and then erased by that metadata, an even one deleted; every fourth turn also compacts."""
    from rms_retrieval.stores.memory_store import MemoryStore

    with MemoryStore.open(store_path, encoder()) as store:
        for number in range(start, stop):
            object_id = UUID(int=number + 1)
            if number % 2:
                store.update(NAMESPACE, object_id, metadata={"forget": number})
                store.erase(NAMESPACE, where={"metadata.forget": number})
            else:
                store.delete(NAMESPACE, [object_id])
            if number % 4 == 0:
                store.compact()
            print(f"removed {number + 1}", flush=True)


def write(store_path: Path, start: int, count: int) -> None:
    from rms_retrieval.stores.memory_store import MemoryStore

    with MemoryStore.open(store_path, encoder()) as store:
        for number in range(start, start + count):
            store.add([turn(number)])
            print(f"committed {number + 1}", flush=True)


def read(store_path: Path, stop: Path, seconds: float = 600.0) -> dict[str, Any]:
    """Check snapshots until `stop` exists (at most `seconds`): each loop checks one snapshot's
    rows, postings and vectors, answers one `retrieve()` and enumerates it; every tenth loop
    also explains a turn."""
    from rms_retrieval.dataflows.explain import explain
    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.stores.exact.enumeration import iter_objects
    from rms_retrieval.stores.memory_store import MemoryStore

    summary: dict[str, Any] = {"requests": 0, "explained": 0, "generations": set(), "problems": [], "errors": []}
    deadline = time.monotonic() + seconds
    request = {"namespaces": [NAMESPACE], "encoder": encoder(), "reference_time": _T0 + timedelta(days=1)}
    with MemoryStore.open(store_path, create=False, read_only=True) as store:
        while time.monotonic() < deadline and not stop.exists():
            try:
                snapshot = store.snapshot()
                summary["problems"] += snapshot_problems(snapshot)
                summary["generations"].add(snapshot.generation)
                retrieve(snapshot, "which turn was about the river?", log=False, **request)
                scanned = [memory.id.int - 1 for memory in iter_objects(snapshot, namespace=NAMESPACE, batch_size=200)]
                if scanned != list(range(snapshot.count_objects())):
                    summary["problems"].append(f"{snapshot.state_fingerprint()}: a scan read {len(scanned)} turns")
                if summary["requests"] % 10 == 0:
                    explain(snapshot, "which turn was about the river?", UUID(int=1), **request)
                    summary["explained"] += 1
                summary["requests"] += 1
            except Exception as error:  # every failure is reported, none may happen
                summary["errors"].append(f"{type(error).__name__}: {error}")
            _say_ready(stop)
            time.sleep(PAUSE_SECONDS)
    summary["generations"] = sorted(summary["generations"])
    return summary


def _say_ready(stop: Path) -> None:
    """Touch `ready-<pid>` beside `stop` once: the test starts its writer when every reader has
    read a snapshot, so that no reader can miss the writes it is there to see."""
    ready = stop.parent / f"ready-{os.getpid()}"
    if not ready.exists():
        ready.touch()


def wait_until_ready(stop: Path, readers: Sequence[Any], seconds: float = 300.0) -> None:
    """Wait until each reader process has touched its `ready-<pid>` (or raise if one ended)."""
    deadline = time.monotonic() + seconds
    while any(not (stop.parent / f"ready-{reader.pid}").exists() for reader in readers):
        ended = [reader.args for reader in readers if reader.poll() is not None]
        if ended or time.monotonic() > deadline:
            raise RuntimeError(f"a reader ended or did not start in {seconds} s: {ended}")
        time.sleep(0.05)


def watch(store_path: Path, stop: Path, total: int, seconds: float = 600.0) -> dict[str, Any]:
    """Check snapshots while `forget` runs, until `stop` exists: each must hold turns d..total-1
    for some d in rows, postings, vectors, enumeration and aggregation, never a state between."""
    from rms_retrieval.stores.exact.enumeration import iter_objects
    from rms_retrieval.stores.errors import StaleSnapshotError
    from rms_retrieval.stores.memory_store import MemoryStore

    summary: dict[str, Any] = {"requests": 0, "generations": set(), "problems": [], "errors": [], "asked_again": 0}
    deadline = time.monotonic() + seconds
    with MemoryStore.open(store_path, create=False, read_only=True) as store:
        while time.monotonic() < deadline and not stop.exists():
            try:
                snapshot = store.snapshot()
                summary["problems"] += suffix_problems(snapshot, total)
                summary["generations"].add(snapshot.generation)
                scanned = [memory.id.int - 1 for memory in iter_objects(snapshot, namespace=NAMESPACE, batch_size=7)]
                if scanned != list(range(total - snapshot.count_objects(), total)):
                    summary["problems"].append(f"{snapshot.state_fingerprint()}: a scan read {len(scanned)} turns")
                summary["requests"] += 1
            except StaleSnapshotError:  # an erase removed an older generation's files mid-scan
                summary["asked_again"] += 1
            except Exception as error:  # every other failure is reported, none may happen
                summary["errors"].append(f"{type(error).__name__}: {error}")
            _say_ready(stop)
            time.sleep(PAUSE_SECONDS)
    summary["generations"] = sorted(summary["generations"])
    return summary


def hold(store_path: Path, ready: Path, go: Path, seconds: float = 120.0) -> dict[str, Any]:
    """Take one snapshot, touch `ready`, wait for `go`, then enumerate and aggregate that snapshot
    (a request that outlives the writes after it began)."""
    from rms_retrieval.stores.exact.aggregation import AssertionQuery, aggregate_assertions
    from rms_retrieval.stores.exact.enumeration import iter_objects
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import NodeType

    summary: dict[str, Any] = {"errors": []}
    with MemoryStore.open(store_path, create=False, read_only=True) as store:
        snapshot = store.snapshot()
        summary.update(generation=snapshot.generation, objects=snapshot.count_objects())
        ready.touch()
        deadline = time.monotonic() + seconds
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            summary["scanned"] = [memory.id.int - 1 for memory in iter_objects(snapshot, namespace=NAMESPACE, batch_size=7)]
            aggregation = aggregate_assertions(snapshot, AssertionQuery(namespace=NAMESPACE, node_types=(NodeType.TURN,)))
            summary["exclusions"] = aggregation.exclusions
        except Exception as error:  # every failure is reported, none may happen
            summary["errors"].append(f"{type(error).__name__}: {error}")
    return summary


def main(argv: Sequence[str]) -> int:
    command, store_path, *arguments = argv
    if command == "write":
        write(Path(store_path), int(arguments[0]), int(arguments[1]))
    elif command == "watch":
        print(json.dumps(watch(Path(store_path), Path(arguments[0]), int(arguments[1]))), flush=True)
    elif command == "forget":
        forget(Path(store_path), int(arguments[0]), int(arguments[1]))
    elif command == "hold":
        print(json.dumps(hold(Path(store_path), Path(arguments[0]), Path(arguments[1]))), flush=True)
    else:
        print(json.dumps(read(Path(store_path), Path(arguments[0]))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
