"""Kill a writing process with SIGKILL at random moments and check what it leaves.

Each round starts a writer process (`store_workers write`) adding turns one at a time (a merge
falls due every tenth write and runs on the writer's merge thread), waits for a random number of
commits plus a random delay, kills it, then
opens the store: it must open to a committed generation whose rows, postings and vectors agree,
holding every turn the writer reported committed (and at most the one in flight). The next write
must then remove the dead write's (or dead merge's) leftovers. `rms bench crash --kills 50` prints the figures.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import rms_retrieval.dataflows.bench  # noqa: F401  (makes the checkout's tests/ importable)
from rms_retrieval.stores.engine.manifest import read_manifest
from rms_retrieval.stores.engine.merging import dead_merges
from rms_retrieval.stores.engine.writer import never_named
from tests import store_workers


def kill_round(path: Path, rng: random.Random, *, max_commits: int = 12, max_delay: float = 0.3) -> dict[str, Any]:
    """One writer killed at a random moment; what the store held afterwards."""
    from rms_retrieval.stores.memory_store import MemoryStore

    with MemoryStore.open(path, create=False, read_only=True) as store:
        start = store.snapshot().count_objects()
    writer = subprocess.Popen([*store_workers.COMMAND, "write", str(path), str(start), "10000"],
                              stdout=subprocess.PIPE, text=True, cwd=store_workers.ROOT)
    assert writer.stdout is not None
    wanted = rng.randint(0, max_commits)
    committed = start
    while committed < start + wanted:
        line = writer.stdout.readline()
        if not line:
            break
        committed = int(line.split()[1])
    time.sleep(rng.uniform(0, max_delay))
    os.kill(writer.pid, signal.SIGKILL)
    remaining = writer.stdout.read()
    committed = max([committed, *(int(line.split()[1]) for line in remaining.split("\n") if line.startswith("committed"))])
    writer.wait()
    with MemoryStore.open(path, create=False, read_only=True) as store:
        snapshot = store.snapshot()
        problems = store_workers.snapshot_problems(snapshot)
        held = snapshot.count_objects()
    if not committed <= held <= committed + 1:
        problems.append(f"the writer reported {committed} commits but the store holds {held} turns")
    leftovers = [*never_named(path, read_manifest(path)), *dead_merges(path)]
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(held)])
    left_after_write = [*never_named(path, read_manifest(path)), *(child.name for child in dead_merges(path))]
    if left_after_write:
        problems.append(f"the next write left {left_after_write}")
    return {"held": held + 1, "committed_before_kill": committed, "leftovers_found": len(leftovers), "problems": problems}


def run_kills(path: Path, kills: int, *, seed: int = 0) -> dict[str, Any]:
    """`kills` rounds on one store at `path` (created empty)."""
    from rms_retrieval.stores.memory_store import MemoryStore

    MemoryStore.open(path, store_workers.encoder()).close()
    rng = random.Random(seed)
    rounds = [kill_round(path, rng) for _ in range(kills)]
    return {
        "kills": kills,
        "rounds_with_leftovers": sum(1 for r in rounds if r["leftovers_found"]),
        "problems": [problem for r in rounds for problem in r["problems"]],
        "turns_at_end": rounds[-1]["held"] if rounds else 0,
    }
