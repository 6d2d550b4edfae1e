"""`rms log compact` and `rms log tail` on a store directory's log segments."""

from __future__ import annotations

import json

from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.retrieval_log import LOG_DIRECTORY, RetrievalLogWriter, read_records


def _fill(store, count: int, segments: int = 3) -> None:
    for segment in range(segments):
        with RetrievalLogWriter(store / LOG_DIRECTORY) as writer:
            for sequence in range(count):
                writer.append({"request_id": f"{segment}-{sequence}", "payload": {"query_embedding": [1.0, 2.0]}})


def test_compact_merges_and_applies_retention(tmp_path, capsys):
    _fill(tmp_path, 4)
    assert main(["log", "compact", "--store", str(tmp_path), "--max-records", "5"]) == 0
    assert "merged 3 closed segments: kept 5 records, dropped 7" in capsys.readouterr().out
    assert [r["request_id"] for r in read_records(tmp_path / LOG_DIRECTORY)] == ["1-3", "2-0", "2-1", "2-2", "2-3"]


def test_tail_prints_the_latest_records_oldest_first(tmp_path, capsys):
    _fill(tmp_path, 3, segments=1)
    assert main(["log", "tail", "--store", str(tmp_path), "--limit", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["request_id"] for r in lines] == ["0-1", "0-2"]
    assert lines[0]["payload"]["query_embedding"] == [1.0, 2.0]


def test_bad_input_gets_one_line(tmp_path, capsys):
    assert main(["log", "compact", "--store", str(tmp_path / "absent")]) == 2
    assert "no store at" in capsys.readouterr().err
    assert main(["log", "compact", "--store", str(tmp_path), "--max-records", "0"]) == 2
    assert "max_records" in capsys.readouterr().err
