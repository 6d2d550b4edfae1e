"""`rms dag`, `rms explain`, `rms replay` end to end on the demo store, in process."""

from __future__ import annotations

import json

import pytest

from rms_retrieval.dataflows.cli import main
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.memory_store import MemoryStore

QUESTION = "Where does Tomas work now?"


def _request(demo_store) -> list[str]:
    return ["--store", str(demo_store.path), "--namespace", demo_store.namespace,
            "--reference-time", demo_store.reference_time.isoformat()]


def test_rms_dag_draws_the_whole_dag_and_one_execution(tmp_path, demo_store, capsys):
    assert main(["dag", "--out", str(tmp_path / "dag.svg")]) == 0
    assert "</svg>" in (tmp_path / "dag.svg").read_text()
    assert main(["dag", "--fusion", "weighted", "--out", str(tmp_path / "weighted.png")]) == 0
    assert (tmp_path / "weighted.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["dag", *_request(demo_store), "--budget", "200", "--out", str(tmp_path / "run.svg"), QUESTION]) == 0
    out = capsys.readouterr().out
    assert "wrote the retrieval DAG (fusion=rrf)" in out and f"/200 tokens) to {tmp_path / 'run.svg'}" in out
    assert "/200 tokens" in (tmp_path / "run.svg").read_text()


def test_rms_dag_without_dot_prints_one_line_with_the_install_hint(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["dag", "--out", str(tmp_path / "dag.svg")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install graphviz" in err and "make system-deps" in err
    assert "Traceback" not in err


def test_rms_dag_of_a_request_needs_a_store_and_a_namespace(tmp_path, capsys):
    assert main(["dag", "--out", str(tmp_path / "run.svg"), QUESTION]) == 2
    assert "needs --store and --namespace" in capsys.readouterr().err


def test_rms_explain_prints_the_lineage_or_json(demo_store, capsys):
    deprecated = next(o for o in demo_store.corpus.objects if o.epistemic_type == "DEPRECATED")
    assert main(["explain", *_request(demo_store), "--id", str(deprecated.id), QUESTION]) == 0
    out = capsys.readouterr().out
    assert "outcome: EXCLUDED at filtered_candidates: DEPRECATED" in out
    assert "fused_scores <- filtered_candidates, query_analysis, settings" in out
    assert main(["explain", *_request(demo_store), "--id", str(deprecated.id), "--json", QUESTION]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["outcome"] == "EXCLUDED" and document["decided_by"] == "filtered_candidates"


@pytest.mark.parametrize(("argument", "message"), [
    (["--id", "not-a-uuid"], "is not an object id"),
    (["--id", "00000000-0000-0000-0000-000000000001", "--namespace", "nobody"], "namespace nobody has no memories"),
])
def test_rms_explain_rejects_bad_input_in_one_line(demo_store, capsys, argument, message):
    assert main(["explain", *_request(demo_store), *argument, QUESTION]) == 2
    assert message in capsys.readouterr().err


def test_rms_replay_replays_logged_requests(demo_store, capsys):
    with MemoryStore.open(demo_store.path, create=False) as store:
        ids = [str(retrieve(store, question, namespaces=[demo_store.namespace],
                            reference_time=demo_store.reference_time, token_budget=150).request_id)
               for question in demo_store.corpus.sample_questions[:2]]
    assert main(["replay", "--store", str(demo_store.path), *ids]) == 0
    out = capsys.readouterr().out
    assert out.count("identical bundle") == 2 and "2 of 2 replayed bundles are identical" in out
    assert main(["replay", "--store", str(demo_store.path), "--last", "1"]) == 0
    assert main(["replay", "--store", str(demo_store.path), "no-such-request"]) == 2
    assert "no retrieval record no-such-request" in capsys.readouterr().err
    assert main(["replay", "--store", str(demo_store.path)]) == 2


def test_rms_replay_bound_to_namespaces_sees_only_their_requests(demo_store, capsys):
    """Issue 21 #14: a request of another namespace reads exactly like one never logged."""
    with MemoryStore.open(demo_store.path, create=False) as store:
        request_id = str(retrieve(store, QUESTION, namespaces=[demo_store.namespace],
                                  reference_time=demo_store.reference_time, token_budget=150).request_id)
    assert main(["replay", "--store", str(demo_store.path), "--namespace", demo_store.namespace, request_id]) == 0
    capsys.readouterr()
    assert main(["replay", "--store", str(demo_store.path), "--namespace", "someone-else", request_id]) == 2
    assert f"no retrieval record {request_id}" in capsys.readouterr().err
    assert main(["replay", "--store", str(demo_store.path), "--namespace", "someone-else", "--last", "3"]) == 0
    assert "0 of 0 replayed bundles" in capsys.readouterr().out


def test_rms_explain_of_another_namespaces_object_reads_like_a_missing_id(demo_store, capsys):
    missing = "00000000-0000-0000-0000-000000000007"
    outputs = {}
    for object_id in (missing, str(demo_store.other_namespace_id)):
        assert main(["explain", *_request(demo_store), "--id", object_id, QUESTION]) == 0
        outputs[object_id] = capsys.readouterr().out.replace(object_id, "ID")
    assert outputs[missing] == outputs[str(demo_store.other_namespace_id)]
    assert f"not found in namespaces [{demo_store.namespace}]" in outputs[missing]
    assert "carpenter" not in outputs[missing] and "demo-other-conversation" not in outputs[missing]


def test_audit_commands_open_the_store_read_only(demo_store, tmp_path, monkeypatch, capsys):
    opened = []
    real_open = MemoryStore.open.__func__

    def spy(cls, path, *args, **kwargs):
        opened.append(kwargs.get("read_only", False))
        return real_open(cls, path, *args, **kwargs)

    monkeypatch.setattr(MemoryStore, "open", classmethod(spy))
    deprecated = next(o for o in demo_store.corpus.objects if o.epistemic_type == "DEPRECATED")
    assert main(["explain", *_request(demo_store), "--id", str(deprecated.id), QUESTION]) == 0
    assert main(["dag", *_request(demo_store), "--out", str(tmp_path / "run.svg"), QUESTION]) == 0
    main(["replay", "--store", str(demo_store.path), "--last", "1"])
    capsys.readouterr()
    assert opened == [True, True, True]


def test_rms_whatif_one_request_as_text_json_and_a_marked_picture(tmp_path, demo_store, capsys):
    with MemoryStore.open(demo_store.path, create=False) as store:
        request_id = str(retrieve(store, QUESTION, namespaces=[demo_store.namespace],
                                  reference_time=demo_store.reference_time, token_budget=200).request_id)
    change = ["--set", "candidates.vector_k=3"]
    assert main(["whatif", "--store", str(demo_store.path), request_id, *change]) == 0
    out = capsys.readouterr().out
    assert "what if candidates.vector_k=3" in out and "first difference: candidate_limits" in out
    assert main(["whatif", "--store", str(demo_store.path), request_id, *change, "--json",
                 "--out", str(tmp_path / "diff.svg")]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["replayable"] and report["first_difference"] == "candidate_limits"
    assert "#c62828" in (tmp_path / "diff.svg").read_text() and "diff.svg" in captured.err


def test_rms_whatif_over_the_latest_requests(demo_store, capsys):
    with MemoryStore.open(demo_store.path, create=False) as store:
        for question in (QUESTION, "What is wrong with Tomas's knee?"):
            retrieve(store, question, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time)
    assert main(["whatif", "--store", str(demo_store.path), "--last", "2", "--set", "session.window=0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == summary["replayed"] == 2 and summary["changes"] == {"session.window": 0}
    assert summary["first_difference"] == {"session_context": 2}


@pytest.mark.parametrize("arguments, message", [
    (["--set", "scoring.speeker_boost=0", "--last", "1"], "did you mean scoring.speaker_boost?"),
    (["--set", "scoring.speaker_boost=20", "--last", "1"], "Input should be less than or equal to 10"),
    (["--last", "1"], "name the change with --set"),
    (["--set", "scoring.speaker_boost=0"], "name one REQUEST_ID, or choose logged requests with --last N"),
    (["--set", "scoring.speaker_boost=0", "no-such-request"], "no retrieval record no-such-request"),
])
def test_rms_whatif_bad_input_is_one_line(demo_store, capsys, arguments, message):
    assert main(["whatif", "--store", str(demo_store.path), *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
