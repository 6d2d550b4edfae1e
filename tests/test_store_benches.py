"""`rms bench ingest` and `rms bench crash` run end to end at tiny sizes and print their figures."""

from __future__ import annotations

import json

from rms_retrieval.dataflows.cli import main


def test_bench_ingest_reports_single_add_latency_and_bulk_throughput(tmp_path, capsys):
    assert main(["bench", "ingest", "--out", str(tmp_path), "--sizes", "20", "50", "--singles", "3"]) == 0
    out = capsys.readouterr().out
    assert "20 objects: one-turn add p50" in out and "objects/s" in out
    results = json.loads((tmp_path / "ingest_results.json").read_text())
    assert [row["size"] for row in results["sizes"]] == [20, 50]
    assert results["sizes"][1]["single_add_ms"]["n"] == 3 and ", mean " in out
    assert results["sizes"][1]["single_add_excluding_embedding_mean_ms"] > 0
    # each size erases the session its last bulk add ended in; the deletes after it skip what it took
    assert all(row["erased_objects"] >= 1 and row["erase_session_ms"] > 0 for row in results["sizes"])
    assert "-turn session" in out
    # a question right after each round's last update, then again: one each per round
    last = results["sizes"][1]
    assert last["question_after_update_ms"]["n"] == last["question_warm_ms"]["n"] == 3
    assert "a question right after an update p50" in out


def test_bench_crash_counts_its_kills(capsys):
    assert main(["bench", "crash", "--kills", "2", "--seed", "5"]) == 0
    assert "2 kills: 0 problems" in capsys.readouterr().out
