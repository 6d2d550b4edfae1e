"""Issue 21 #1, #12 and #13: a store is never wiped for a lost manifest, only store-made
directories are collected, and `rms check --repair` rebuilds a manifest from intact segments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import store_workers
from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.engine.check import check_store
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.engine.manifest import read_manifest
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.engine.repair import STORE_FACTS_FILE, repair_store
from rms_retrieval.stores.engine.merging import MERGE_FACTOR

TURNS = MERGE_FACTOR + 5  # one merge of the first ten segments, five segments after it


def _grown(path: Path, turns: int = TURNS) -> list[str]:
    """A store written one turn per add whose merged-away segments stay on disk (an hour's grace),
    as they do for a while after every merge; the live segments' ids."""
    with MemoryStore.open(path, store_workers.encoder(), retired_grace=3600) as store:
        for number in range(turns):
            store.add([store_workers.turn(number)])
            store.wait_for_merges()
    return sorted(segment.id for segment in read_manifest(path).segments)


def _contents(path: Path) -> list[str]:
    with MemoryStore.open(path, store_workers.encoder(), create=False) as store:
        found = store.snapshot().get_objects([store_workers.turn(n).id for n in range(TURNS + 5)], [store_workers.NAMESPACE])
        return sorted(memory.content for memory in found.values())


def _identity():
    return store_workers.encoder().identity


def test_a_store_without_its_manifest_is_never_created_over(tmp_path):
    """#1: `open` used to write an empty generation 0, and the next add removed every segment."""
    path = tmp_path / "store"
    _grown(path)
    (path / "manifest.json").unlink()
    with pytest.raises(StoreError, match=r"holds segments but its manifest.json is missing.*rms check --store .* --repair"):
        MemoryStore.open(path, store_workers.encoder())
    with pytest.raises(StoreError, match="--repair"):
        MemoryStore.open(path, create=False)
    assert not (path / "manifest.json").exists() and len(list((path / "segments").iterdir())) > 1


def test_rms_ingest_into_a_store_without_its_manifest_is_refused_and_check_says_repair(tmp_path, capsys):
    path = tmp_path / "store"
    _grown(path)
    before = sorted(p.name for p in (path / "segments").iterdir())
    (path / "manifest.json").unlink()
    line = tmp_path / "one.jsonl"
    line.write_text(json.dumps({"namespace": "x", "content": "hello"}) + "\n")
    assert main(["ingest", str(line), "--store", str(path)]) != 0
    assert main(["check", "--store", str(path)]) != 0
    out = capsys.readouterr()
    assert "--repair" in out.out + out.err and "rms ingest" not in out.out
    assert sorted(p.name for p in (path / "segments").iterdir()) == before


def test_repair_rebuilds_a_lost_manifest_from_the_segments_without_counting_merged_ones_twice(tmp_path):
    path = tmp_path / "store"
    _grown(path)
    expected = _contents(path)
    generation = read_manifest(path).generation
    (path / "manifest.json").unlink()
    report = repair_store(path, _identity)
    # all ten of the merge's sources are still on disk, in their grace
    assert report.manifest_was == "missing" and report.objects == TURNS and len(report.replaced) == MERGE_FACTOR
    assert read_manifest(path).generation > generation
    assert _contents(path) == expected and check_store(path).problems == []
    with MemoryStore.open(path, store_workers.encoder()) as store:  # and it takes writes again
        store.add([store_workers.turn(TURNS)])
        assert store.snapshot().count_objects() == TURNS + 1


def test_repair_of_a_damaged_manifest_keeps_the_damaged_file_aside(tmp_path):
    path = tmp_path / "store"
    _grown(path)
    (path / "manifest.json").write_text('{"format_version": 4, "generation": ')
    report = repair_store(path, _identity)
    assert report.manifest_was == "damaged" and report.objects == TURNS
    assert (path / "manifest.json.damaged").read_text().startswith('{"format_version"')
    assert check_store(path).problems == []


def test_repair_sets_a_damaged_segment_aside_and_reports_exactly_what_it_held(tmp_path):
    path = tmp_path / "store"
    _grown(path)
    last = read_manifest(path).segments[-1].id
    (path / "segments" / last / "objects.parquet").write_bytes(b"not parquet")
    assert check_store(path).problems
    report = repair_store(path, _identity)
    assert [(segment_id, rows) for segment_id, _, rows in report.set_aside] == [(last, {store_workers.NAMESPACE: 1})]
    assert report.objects == TURNS - 1 and "lost: segment" in report.to_text()
    assert (path / "damaged").is_dir() and not (path / "segments" / last).exists()
    assert len(_contents(path)) == TURNS - 1 and check_store(path).problems == []


def test_repair_brings_a_damaged_merge_back_from_its_sources_in_their_grace(tmp_path):
    path = tmp_path / "store"
    _grown(path)
    merged = next(entry for entry in read_manifest(path).segments if entry.sources)
    (path / "segments" / merged.id / "index.npz").write_bytes(b"damaged")
    report = repair_store(path, _identity)
    # its ten sources are all still there (a merge commits after the write that made it due)
    assert report.objects == TURNS and "back from 10 of the 10 segments it merged" in report.to_text()
    assert [rows for _, _, rows in report.set_aside] == [{}]
    assert len(_contents(path)) == TURNS and check_store(path).problems == []


def test_repair_of_a_lost_segment_directory_and_of_a_sound_store(tmp_path):
    path = tmp_path / "store"
    _grown(path)
    assert not repair_store(path, _identity).changed  # a sound store is left as it is
    shutil.rmtree(path / "segments" / read_manifest(path).segments[-1].id)
    report = repair_store(path, _identity)
    assert report.set_aside[0][1] == "its directory is gone" and report.objects == TURNS - 1


def test_repair_without_store_facts_takes_the_given_identity_and_says_so(tmp_path):
    path = tmp_path / "store"
    _grown(path, turns=3)
    (path / "manifest.json").unlink()
    (path / STORE_FACTS_FILE).unlink()
    report = repair_store(path, _identity)
    assert "store.json is missing" in report.to_text()
    assert read_manifest(path).embedding == _identity()


def test_rms_check_repair_prints_the_report(tmp_path, capsys):
    path = tmp_path / "store"
    _grown(path, turns=3)
    (path / "manifest.json").unlink()
    assert main(["check", "--store", str(path), "--repair"]) == 0
    out = capsys.readouterr().out
    assert "repaired (manifest.json was missing)" in out and "ok: generation" in out


def test_a_write_removes_only_what_the_store_made_under_segments(tmp_path):
    """#12: an operator's directory under segments/ was deleted by the next write."""
    path = tmp_path / "store"
    _grown(path, turns=2)
    (path / "segments" / "backup-2024").mkdir()
    (path / "segments" / "backup-2024" / "keep.txt").write_text("mine")
    (path / "segments" / "g99999999-zzzz").mkdir()
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(5)])
        store.add([store_workers.turn(6)])
    assert (path / "segments" / "backup-2024" / "keep.txt").read_text() == "mine"
    assert (path / "segments" / "g99999999-zzzz").is_dir()


def test_repair_keeps_deleted_rows_deleted(tmp_path):
    path = tmp_path / "store"
    _grown(path, 4)
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.delete(store_workers.NAMESPACE, [store_workers.turn(3).id])  # the last turn: none is indexed with it
    (path / "manifest.json").unlink()
    repair_store(path, _identity)
    with MemoryStore.open(path, create=False, read_only=True) as store:
        assert store_workers.live_problems(store.snapshot(), {store_workers.turn(n).id for n in range(3)}) == []
