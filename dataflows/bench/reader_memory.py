"""The memory of reader processes sharing one store: one reader alone, then several at once.

Each reader is a process of its own (spawned, so it shares no page with the parent's heap) that
opens the store read-only, answers the same questions with the random encoder and waits; the
parent then reads each reader's Rss and Pss from `/proc/<pid>/smaps_rollup`. Pss counts a page
that n processes map as 1/n of a page in each, so the readers' Pss summed is the memory they take
together: a store whose files are memory-mapped is paid for once, whatever each process holds of
its own is paid once per reader. A reader loads none of Hamilton's plugins, as `rms` and the
README's serving setup do (`hamilton_plugins` lists what the readers loaded): the plugins Hamilton
would import for every library installed cost each process about 117 MB of its own.
`rms bench scale --readers N` reports it for each store size.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# issue 24: four readers of one store in at most 1.5 times the memory of one.
READERS_TARGET = 1.5
_ROLLUP_FIELDS = {"Rss": "rss_mb", "Pss": "pss_mb", "Private_Clean": "private_clean_mb", "Private_Dirty": "private_dirty_mb"}
_WHEN = datetime(2030, 1, 1, tzinfo=timezone.utc)


def rollup(pid: int) -> dict[str, float]:
    """Rss, Pss and private memory (MB) of process `pid`, from /proc (Linux)."""
    found: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if name in _ROLLUP_FIELDS:
                    found[_ROLLUP_FIELDS[name]] = int(rest.split()[0]) / 1024
    except FileNotFoundError as error:
        raise RuntimeError(f"cannot read /proc/{pid}/smaps_rollup ({error}); reader memory is measured on Linux only") from error
    return found


def _reader(path: str, questions: Sequence[tuple[str, str]], ready: Any, done: Any) -> None:
    import sys

    from rms_retrieval.dataflows.cli_support import skip_hamilton_plugins

    skip_hamilton_plugins()  # a process of `rms`'s, set up as README's serving section says
    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.stores.memory_store import MemoryStore
    from tests.factories import RandomEncoder

    encoder = RandomEncoder()
    with MemoryStore.open(path, encoder=encoder, read_only=True) as store:
        for text, namespace in questions:
            retrieve(store, text, namespaces=[namespace], encoder=encoder, reference_time=_WHEN, log=False)
        plugins = sorted(name for name in sys.modules if name.startswith("hamilton.plugins.") and name.endswith("_extensions"))
        ready.put((multiprocessing.current_process().pid, plugins))
        done.wait()


def _readers_at_once(path: Path, count: int, questions: Sequence[tuple[str, str]], timeout: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    ready, done = context.Queue(), context.Event()
    processes = [context.Process(target=_reader, args=(str(path), list(questions), ready, done), daemon=True)
                 for _ in range(count)]
    for process in processes:
        process.start()
    try:
        waiting, deadline, plugins = len(processes), time.monotonic() + timeout, set()
        while waiting:
            try:
                plugins.update(ready.get(timeout=1.0)[1])
                waiting -= 1
            except queue.Empty:
                failed = [process.exitcode for process in processes if process.exitcode is not None]
                if failed or time.monotonic() > deadline:
                    raise RuntimeError(f"a reader of {path} " + (f"exited with code {failed[0]} before it was ready"
                                       if failed else f"was not ready within {timeout:.0f} s")) from None
        each = [rollup(process.pid) for process in processes]
    finally:
        done.set()
        for process in processes:
            process.join(timeout)
            if process.is_alive():
                process.kill()
    return {"readers": count, "each": each, **{f"{field}_total": sum(row[field] for row in each) for field in each[0]},
            "hamilton_plugins": sorted(plugins)}


def reader_memory(path: str | Path, questions: Sequence[tuple[str, str]], *, readers: int = 4,
                  timeout: float = 600.0) -> dict[str, Any]:
    """The memory one reader of the store at `path` takes, then `readers` at once, each having
    answered the same `questions` ((text, namespace) pairs)."""
    if readers < 2:
        raise ValueError(f"--readers must be 2 or more to compare with one reader, got {readers}")
    one = _readers_at_once(Path(path), 1, questions, timeout)
    many = _readers_at_once(Path(path), readers, questions, timeout)
    ratio = many["pss_mb_total"] / one["pss_mb_total"]
    return {"one": one, "many": many, "questions": len(questions), "pss_ratio": ratio,
            "target_ratio": READERS_TARGET, "within_target": ratio <= READERS_TARGET}
