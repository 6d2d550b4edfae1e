"""Reader memory: one reader process, then several at once, weighed by their Pss."""

from __future__ import annotations

import os

import pytest

from rms_retrieval.dataflows.bench import speed_bench
from rms_retrieval.dataflows.bench.reader_memory import reader_memory, rollup
from rms_retrieval.stores.memory_store import MemoryStore
from tests.factories import RandomEncoder


def test_a_process_s_memory_is_read_from_proc():
    own = rollup(os.getpid())
    assert set(own) == {"rss_mb", "pss_mb", "private_clean_mb", "private_dirty_mb"} and own["pss_mb"] > 0
    with pytest.raises(RuntimeError, match="Linux only"):
        rollup(2**22 + 1)


def test_readers_of_one_store_are_weighed_against_one(tmp_path, monkeypatch):
    # The readers load Hamilton's pandas plugin only, even where the environment lets Hamilton
    # import one for every library installed (dask, at least, is).
    monkeypatch.delenv("HAMILTON_AUTOLOAD_EXTENSIONS", raising=False)
    with MemoryStore.open(tmp_path / "store", encoder=RandomEncoder()) as store:
        store.add(speed_bench.synthetic_objects(0, 200, namespaces=2))
    memory = reader_memory(tmp_path / "store", [("garden river", "synthetic-0"), ("museum", "synthetic-1")], readers=2)
    assert memory["one"]["readers"] == 1 and [len(memory[key]["each"]) for key in ("one", "many")] == [1, 2]
    assert memory["many"]["pss_mb_total"] > memory["one"]["pss_mb_total"] > 0
    assert memory["pss_ratio"] == memory["many"]["pss_mb_total"] / memory["one"]["pss_mb_total"]
    assert memory["within_target"] == (memory["pss_ratio"] <= 1.5)
    assert memory["one"]["hamilton_plugins"] == memory["many"]["hamilton_plugins"] == []
    with pytest.raises(ValueError, match="2 or more"):
        reader_memory(tmp_path / "store", [("garden", "synthetic-0")], readers=1)
