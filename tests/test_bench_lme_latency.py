"""The LongMemEval-S block of `rms bench latency` (dataflows/bench/lme_latency.py): a small
LongMemEval-S store `rms bench lme` builds, timed beside the demo conversation."""

from __future__ import annotations

import pytest


def test_the_lme_block_times_long_haystacks_beside_locomo_warm_and_after_a_write(
        demo_store, demo_copy, tmp_path, capsys):
    import json
    from pathlib import Path

    import rms_retrieval.dataflows as dataflows
    from rms_retrieval.dataflows.bench.lme_latency import lme_queries
    from rms_retrieval.dataflows.cli import main
    from rms_retrieval.stores.memory_store import MemoryStore
    from tests.test_bench_lme import write_folder

    folder = write_folder(tmp_path / "longmemeval_s")
    lme_store = tmp_path / "lme-store"
    assert main(["bench", "lme", "--data", str(folder), "--store", str(lme_store), "--vector-cache",
                 str(tmp_path / "cache"), "--out", str(tmp_path / "lme-out"), "--split", "all", "--arms", "pipeline",
                 "--budgets", "4000", "--no-progress"]) == 0
    with MemoryStore.open(lme_store, create=False, read_only=True) as store:
        before = store.snapshot().state_fingerprint()
    demo = tmp_path / "demo-locomo.json"
    demo.write_text(json.dumps(json.loads((Path(dataflows.__file__).parent / "data" / "demo_conversation.json")
                                          .read_text())["samples"]))
    capsys.readouterr()
    report_file = tmp_path / "report.json"
    assert main(["bench", "latency", "--data", str(demo), "--store", str(demo_copy), "--questions", "2",
                 "--node-queries", "1", "--no-peers", "--lme-data", str(folder), "--lme-store", str(lme_store),
                 "--lme-samples", "3", "--out", str(report_file)]) == 0
    out = capsys.readouterr().out
    assert "LongMemEval-S p50 over LoCoMo's in the same block" in out
    assert "LongMemEval-S, a question right after a one-turn write over the same warm: p50" in out
    assert "LongMemEval-S, a question right after a one-turn update over the same warm: p50" in out
    assert "LoCoMo: the first query on a namespace is not timed: the questions name one namespace" in out
    assert "LongMemEval-S: the first query on a namespace is not timed" in out  # one question, one namespace
    written = json.loads(report_file.read_text())
    lme = written["lme"]
    assert written["first_query"] is None and lme["first_query"] is None
    assert set(lme["arms_ms"]) == {"lme_pipeline", "locomo_pipeline", "lme_after_write"}
    assert lme["questions"] == 1 and lme["asked"] == 3
    assert lme["arms_ms"]["lme_after_write"]["n"] == lme["lme_after_update_ms"]["after_update"]["n"] == 3
    with MemoryStore.open(lme_store, create=False, read_only=True) as store:
        assert store.snapshot().state_fingerprint() == before  # the writes went to a copy
    with pytest.raises(ValueError, match="holds none of the questions"):
        lme_queries(folder, ["another-namespace"])
    assert main(["bench", "latency", "--data", str(demo), "--store", str(demo_copy), "--lme-data", str(folder)]) == 2
    assert "--lme-data and --lme-store go together" in capsys.readouterr().err
