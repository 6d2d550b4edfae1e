"""`rms log compact` and `rms log tail` on a store directory's log segments."""

from __future__ import annotations

import json

from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.log.retrieval_log import LOG_DIRECTORY, RetrievalLogWriter, read_records


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


def _scoped(store, scopes) -> None:
    with RetrievalLogWriter(store / LOG_DIRECTORY) as writer:
        for number, scope in enumerate(scopes):
            writer.append({"request_id": str(number), "payload": {"namespace_scope": scope}})


def test_tail_with_namespaces_shows_only_requests_that_read_nothing_else(tmp_path, capsys):
    """Issue 21 #14: a server bound to some namespaces must serve its callers' log only."""
    _scoped(tmp_path, [["a"], ["b"], ["a", "b"], [], ["a"]])
    assert main(["log", "tail", "--store", str(tmp_path), "--namespace", "a"]) == 0
    assert [json.loads(line)["request_id"] for line in capsys.readouterr().out.splitlines()] == ["0", "4"]
    assert main(["log", "tail", "--store", str(tmp_path), "--namespace", "a", "--namespace", "b", "--limit", "3"]) == 0
    assert [json.loads(line)["request_id"] for line in capsys.readouterr().out.splitlines()] == ["1", "2", "4"]
    assert [r["request_id"] for r in read_records(tmp_path / LOG_DIRECTORY, namespaces=["b"])] == ["1"]


def test_compaction_keeps_a_month_by_default_and_everything_when_asked(tmp_path, capsys):
    import time

    old_ns = time.time_ns() - 40 * 86_400 * 10**9
    with RetrievalLogWriter(tmp_path / LOG_DIRECTORY) as writer:
        writer.append({"request_id": "old"}, logged_at_ns=old_ns)
        writer.append({"request_id": "new"})
    with RetrievalLogWriter(tmp_path / LOG_DIRECTORY) as writer:
        writer.append({"request_id": "newer"})
    assert main(["log", "compact", "--store", str(tmp_path), "--keep-all"]) == 0
    assert [r["request_id"] for r in read_records(tmp_path / LOG_DIRECTORY)] == ["old", "new", "newer"]
    assert main(["log", "compact", "--store", str(tmp_path)]) == 0
    assert [r["request_id"] for r in read_records(tmp_path / LOG_DIRECTORY)] == ["new", "newer"]


def test_a_directory_named_like_a_log_segment_is_passed_over(tmp_path, capsys):
    """Issue 21 #12: a directory `log/x.jsonl` broke `rms log tail`."""
    _fill(tmp_path, 2, segments=1)
    (tmp_path / LOG_DIRECTORY / "x.jsonl").mkdir()
    assert main(["log", "tail", "--store", str(tmp_path)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
