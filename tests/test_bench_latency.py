"""`rms bench latency` on a tiny LoCoMo-shaped store: every arm runs, ratios and the node table come out."""

from __future__ import annotations

import sys

import pytest

from rms_retrieval.dataflows.bench import latency_bench
from rms_retrieval.dataflows.bench.latency_bench import CHANNELS, PEER_MISSING, channel_off, run_latency
from rms_retrieval.nodes.pools import PathType
from tests.factories import FakeEncoder
from tests.test_bench_identical import _dataset


@pytest.fixture
def store(tmp_path):
    from rms_retrieval.dataflows.ingest import locomo_objects
    from rms_retrieval.stores.memory_store import MemoryStore

    with MemoryStore.open(tmp_path / "store", encoder=FakeEncoder()) as opened:
        opened.add(locomo_objects(_dataset()), progress=False)
        yield opened


def test_each_channel_switched_off_differs_from_the_defaults_in_that_channel_only():
    assert PathType.GRAPH not in channel_off(PathType.GRAPH).candidates.enabled_paths
    assert channel_off(PathType.SESSION_CONTEXT).session.window == 0
    assert channel_off(PathType.VECTOR).session == channel_off(PathType.LEXICAL).session
    assert len(CHANNELS) == 5


def test_a_run_reports_every_arm_with_ratios_and_the_node_table(store, tmp_path):
    from rms_retrieval.dataflows.ingest import locomo_objects
    from rms_retrieval.stores.memory_store import MemoryStore

    with MemoryStore.open(tmp_path / "live", encoder=FakeEncoder()) as live:
        live.add(locomo_objects(_dataset()), progress=False)
        before, generation = live.snapshot().count_objects(), live.snapshot().generation
        report = run_latency(store, _dataset(), FakeEncoder(), questions=3, node_queries=2, after_write_store=live)
        assert live.snapshot().count_objects() == before + 3  # one write before each timed question
        assert live.snapshot().generation >= generation + 6  # and one update: a new version, as many objects
    arms = set(report["arms_ms"])
    assert {"pipeline", "pipeline_logged", "pipeline_threads", "floor", "peer_k30", "peer_k200", "no_graph",
            "no_session_context", "round3_off", "pipeline_after_write"} <= arms
    assert set(report["after_write_over_quiet"]) == set(report["after_update_over_quiet"]) == {"p50", "p99"}
    assert set(report["after_update_ms"]) == {"quiet", "after_update"}  # a block of its own, after the others
    assert report["after_update_ms"]["after_update"]["n"] == 3
    assert report["p50_over_floor"]["floor"] == 1.0 and report["p50_over_peer_k200"]["peer_k200"] == 1.0
    assert "fused_scores" in report["node_times_ms"] and report["notes"] == []
    lines = latency_bench.summary_lines(report)
    assert any(line.startswith("pipeline ") for line in lines)
    assert any(line.startswith("a question right after a one-turn write") for line in lines)
    assert report["pipeline_without_collections"]["requests"] == 3
    assert any(line.startswith("pipeline p99 over its p50") and "requests met one" in line for line in lines)


def test_without_the_peers_extra_the_peer_arms_are_skipped_with_a_message(store, monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_classic.retrievers", None)
    report = run_latency(store, _dataset(), FakeEncoder(), questions=2, node_queries=1)
    assert "peer_k30" not in report["arms_ms"] and report["notes"] == [PEER_MISSING]
    assert "p50_over_peer_k200" not in report


def test_the_command_times_questions_after_writes_on_a_copy_and_leaves_the_store_as_it_was(
        demo_store, demo_copy, tmp_path, capsys):
    import json
    from pathlib import Path

    import rms_retrieval.dataflows as dataflows
    from rms_retrieval.dataflows.cli import main
    from rms_retrieval.stores.memory_store import MemoryStore

    with MemoryStore.open(demo_copy, create=False, read_only=True) as store:
        before = store.snapshot().state_fingerprint()
    demo = tmp_path / "demo-locomo.json"  # the demo conversation in LoCoMo's own file format
    demo.write_text(json.dumps(json.loads((Path(dataflows.__file__).parent / "data" / "demo_conversation.json")
                                          .read_text())["samples"]))
    assert main(["bench", "latency", "--data", str(demo), "--store", str(demo_copy), "--questions", "2",
                 "--node-queries", "1", "--no-peers"]) == 0
    out = capsys.readouterr().out
    assert "a question right after a one-turn write over the same on a quiet store: p50" in out
    assert "a question right after a one-turn update over the same on a quiet store: p50" in out
    with MemoryStore.open(demo_copy, create=False, read_only=True) as store:
        assert store.snapshot().state_fingerprint() == before

