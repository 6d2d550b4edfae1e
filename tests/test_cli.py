"""The `rms` command line: output forms and every bad input as a one-line error with exit 2."""

from __future__ import annotations

import json

import pytest

from rms_retrieval.dataflows.cli import main
from rms_retrieval.nodes.models import DEFAULT_TOKEN_BUDGET


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _query(store, namespace, *extra):
    return ["query", "--store", str(store), "--namespace", namespace,
            "--reference-time", "2025-09-03T00:00:00+00:00", *extra]


def test_query_prints_a_readable_bundle(capsys, demo_store, demo_copy):
    code, out, err = _run(capsys, *_query(demo_copy, demo_store.namespace, "--budget", "200"),
                          "What is wrong with Tomas's knee?")
    assert code == 0, err
    assert out.startswith("question: What is wrong with Tomas's knee?")
    assert "tokens: " in out and "/200" in out
    assert "IT band" in out and "excluded: 1 DEPRECATED, 1 HYPOTHETICAL" in out


def test_query_json_is_the_bundle(capsys, demo_store, demo_copy):
    code, out, _ = _run(capsys, *_query(demo_copy, demo_store.namespace, "--json"), "Where does Tomas work now?")
    bundle = json.loads(out)
    assert code == 0 and bundle["bundle_version"] == 1
    assert bundle["tokens_used"] <= bundle["token_budget"] == DEFAULT_TOKEN_BUDGET
    assert all(item["namespace"] == demo_store.namespace for item in bundle["items"])


@pytest.mark.parametrize("argv, message", [
    (["--budget", "0"], "--budget must be at least 1"),
    (["--reference-time", "yesterday"], "not an ISO 8601 time"),
    (["--reference-time", "2025-01-01T00:00:00"], "has no timezone"),
])
def test_bad_query_options(capsys, demo_store, demo_copy, argv, message):
    code, out, err = _run(capsys, *_query(demo_copy, demo_store.namespace, *argv), "Where does Tomas work?")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_empty_question(capsys, demo_store, demo_copy):
    code, _, err = _run(capsys, *_query(demo_copy, demo_store.namespace), "   ")
    assert code == 2 and "the question is empty" in err


def test_unknown_store_and_namespace(capsys, demo_store, demo_copy, tmp_path):
    code, _, err = _run(capsys, *_query(tmp_path / "nowhere", demo_store.namespace), "q?")
    assert code == 2 and "no store at" in err and "rms ingest" in err
    code, _, err = _run(capsys, *_query(demo_copy, "no-such-conversation"), "q?")
    assert code == 2 and "no-such-conversation has no memories" in err and demo_store.namespace in err


def test_a_corrupted_index_file_is_named(capsys, demo_store, demo_copy):
    [vectors] = demo_copy.glob("segments/*/vectors.npy")
    vectors.write_bytes(vectors.read_bytes()[:-4] + b"\x00\x00\x80\x3f")  # a last float turned into 1.0
    code, _, err = _run(capsys, *_query(demo_copy, demo_store.namespace), "Where does Tomas work?")
    assert code == 2 and vectors.name in err and "Traceback" not in err


def test_ingest_jsonl_reports_each_bad_line_and_adds_nothing(capsys, tmp_path):
    good = {"namespace": "notes", "content": "Buy oat milk", "created_at": "2025-01-01T00:00:00Z",
            "updated_at": "2025-01-01T00:00:00Z"}
    lines = [json.dumps(good), json.dumps({**good, "confidence": 2}), "{not json", json.dumps({**good, "content": ""})]
    path = tmp_path / "memories.jsonl"
    path.write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    code, _, err = _run(capsys, "ingest", str(path), "--store", str(store))
    assert code == 2 and "nothing was added" in err
    assert "line 2, confidence" in err and "line 3" in err and "line 4, content" in err
    assert not (store / "manifest.json").exists()
    path.write_text(json.dumps(good) + "\n")
    code, out, err = _run(capsys, "ingest", str(path), "--store", str(store))
    assert code == 0, err
    assert out.startswith("added 1 objects")


def test_demo_builds_and_answers(capsys, tmp_path):
    code, out, err = _run(capsys, "demo", "--store", str(tmp_path / "demo"))
    assert code == 0, err
    assert out.count("question: ") == 4 and "demo store:" in out


@pytest.mark.locomo
def test_ingest_locomo_reports_repaired_evidence(capsys, locomo_path, tmp_path):
    from rms_retrieval.dataflows.locomo import load_locomo, parse_locomo

    one = load_locomo(locomo_path)  # one conversation keeps the test fast
    raw = json.loads(locomo_path.read_text())[:1]
    small = tmp_path / "one.json"
    small.write_text(json.dumps(raw))
    code, out, err = _run(capsys, "ingest-locomo", str(small), "--store", str(tmp_path / "store"))
    assert code == 0, err
    assert "from 1 conversations" in out and "malformed or missing evidence ids" in out
    assert "conv-26 #37: split 'D8:6; D9:17' into D8:6, D9:17" in out
    assert len(one.conversations) == 10 and parse_locomo(raw, source="x").conversations[0].sample_id == "conv-26"
