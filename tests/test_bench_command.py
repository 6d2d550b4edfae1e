"""`rms bench locomo` and `rms bench scale` end to end on tiny inputs, and their one-line errors."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from rms_retrieval.dataflows.bench import command
from rms_retrieval.dataflows.cli import main


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    """The demo conversation twice, under two sample ids, so isolation has two namespaces."""
    raw = json.loads(resources.files("rms_retrieval.dataflows").joinpath("data", "demo_conversation.json").read_text("utf-8"))
    twin = copy.deepcopy(raw["samples"][0])
    twin["sample_id"] = "demo-twin"
    path = tmp_path_factory.mktemp("data") / "locomo-shaped.json"
    path.write_text(json.dumps([raw["samples"][0], twin]), encoding="utf-8")
    return path


def test_bench_locomo_builds_the_store_and_writes_results(demo_file, tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "out"
    code = main([
        "bench", "locomo", "--data", str(demo_file), "--store", str(store), "--out", str(out),
        "--arms", "pipeline", "vector_only", "--budgets", "400", "150", "--limit-questions", "3",
        "--latency-queries", "2", "--node-time-queries", "1", "--isolation-queries", "6",
        "--determinism-queries", "1", "--determinism-repeats", "2", "--no-progress",
    ])
    assert code == 0
    results = json.loads((out / command.RESULTS_FILE).read_text())
    assert results["status"] == "complete" and results["budgets"] == [150, 400]
    assert results["store"]["built_in_this_run"] and results["store"]["ingest"]["turns_per_second"] > 0
    assert 0 < results["store"]["ingest"]["throughput_over_embedding_only"] <= 1
    assert results["store"]["namespaces"] == ["demo-priya-tomas", "demo-twin"]
    assert results["dataset"]["evaluated"] == {"main": 3, "adversarial": 0}
    assert set(results["relevance"]["arms"]) == {"pipeline", "vector_only"}
    assert set(results["relevance"]["paired"]["vector_only"]) == {"150", "400"}
    assert results["machine"]["cores"] >= 1 and results["machine"]["versions"]["duckdb"]
    assert results["configuration_fingerprint"] == results["relevance"]["arms"]["pipeline"]["settings_fingerprint"]
    speed = results["speed"]
    assert set(speed["latency"]) == {"10", "50", "200"}
    assert speed["isolation"]["queries"] == 6 and speed["isolation"]["leaks"] == 0
    assert speed["determinism"]["identical"] and "packed_bundle" in speed["node_times_ms"]
    assert (out / "all_evidence_packed_by_budget.png").exists()
    printed = capsys.readouterr().out
    assert "pipeline" in printed and "leaks 0" in printed and "byte-identical: True" in printed

    # a second run reuses the store instead of rebuilding it
    code = main(["bench", "locomo", "--data", str(demo_file), "--store", str(store), "--out", str(out),
                 "--arms", "bm25_only", "--limit-questions", "1", "--latency-queries", "0", "--node-time-queries", "0",
                 "--isolation-queries", "0", "--determinism-queries", "0", "--no-progress"])
    assert code == 0
    again = json.loads((out / command.RESULTS_FILE).read_text())
    assert not again["store"]["built_in_this_run"] and again["speed"] == {}


def test_bench_scale(tmp_path, capsys):
    assert main(["bench", "scale", "--out", str(tmp_path), "--sizes", "200", "400", "--queries", "2",
                 "--readers", "2", "--no-progress"]) == 0
    results = json.loads((tmp_path / command.SCALE_RESULTS_FILE).read_text())
    assert [row["size"] for row in results["sizes"]] == [200, 400]
    assert [len(row["reader_memory"]["many"]["each"]) for row in results["sizes"]] == [2, 2]
    assert (tmp_path / "latency_by_store_size.png").exists()
    assert main(["bench", "scale", "--out", str(tmp_path), "--readers", "1"]) == 2
    assert "--readers must be 2 or more" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--budgets", "0"], "--budgets must be positive"),
        (["--limit-questions", "0"], "--limit-questions must be positive"),
        (["--isolation-queries", "-1"], "--isolation-queries must be non-negative"),
    ],
)
def test_bad_options_are_one_line_errors(demo_file, tmp_path, capsys, arguments, message):
    code = main(["bench", "locomo", "--data", str(demo_file), "--store", str(tmp_path / "s"), "--out",
                 str(tmp_path / "o"), *arguments])
    assert code == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1


def test_missing_data_file(tmp_path, capsys):
    code = main(["bench", "locomo", "--data", str(tmp_path / "none.json"), "--store", str(tmp_path / "s"),
                 "--out", str(tmp_path / "o")])
    assert code == 2 and "file not found" in capsys.readouterr().err


def test_a_leak_or_a_difference_fails_the_command(capsys):
    assert command._exit_code({"isolation": {"leaks": 0, "pool_leaks": 0}, "determinism": {"identical": True}}) == 0
    assert command._exit_code({"isolation": {"leaks": 2, "pool_leaks": 0}}) == command.EXIT_FAILED_CHECK
    assert command._exit_code({"determinism": {"identical": False}}) == command.EXIT_FAILED_CHECK
    assert "FAILED" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_locomo_through_the_generic_jsonl_path_on_one_split(demo_file, tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "out"
    code = main([
        "bench", "locomo", "--data", str(demo_file), "--store", str(store), "--out", str(out),
        "--arms", "pipeline", "--budgets", "400", "--ingest", "jsonl", "--split", "confirm", "--skip-adversarial",
        "--latency-queries", "0", "--node-time-queries", "0", "--isolation-queries", "0",
        "--determinism-queries", "0", "--no-progress",
    ])
    assert code == 0
    results = json.loads((out / command.RESULTS_FILE).read_text())
    assert results["store"]["ingest"]["path"] == "jsonl"
    # no declared speakers: every entity is one the store spotted in the turns' content
    assert results["store"]["ingest"]["entities_added"] > 0
    assert results["dataset"]["split"] == {"name": "confirm", "conversations": ["demo-twin"]}
    asked = {row["question"].split("#")[0] for row in results["relevance"]["per_question"]["pipeline"]["main"]}
    assert asked == {"demo-twin"}
    lines = (out / command.JSONL_FILE).read_text().splitlines()
    assert all(json.loads(line)["node_type"] == "TURN" for line in lines)


def test_bench_locomo_jsonl_writes_what_rms_ingest_reads(demo_file, tmp_path, capsys):
    path = tmp_path / "turns.jsonl"
    assert main(["bench", "locomo-jsonl", "--data", str(demo_file), "--out", str(path)]) == 0
    assert "rms ingest" in capsys.readouterr().out
    assert main(["ingest", str(path), "--store", str(tmp_path / "store")]) == 0
    assert f"added {len(path.read_text().splitlines())} objects" in capsys.readouterr().out
