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
    (["--event-time-to", "2025-01-01"], "--event-time-to '2025-01-01' has no timezone"),
    (["--time-from", "soon"], "--time-from 'soon' is not an ISO 8601 time"),
    (["--limit", "-1"], "limit: Input should be greater than or equal to 0"),
    (["--min-score", "nan"], "min_score: Input should be"),
    (["--max-per-source", "-1"], "max_per_source: Input should be greater than or equal to 1"),
    (["--max-per-evidence", "0"], "max_per_evidence: Input should be greater than or equal to 1"),
    (["--set", "packing.tier_ordr=score"], "no such setting; did you mean packing.tier_order?"),
    (["--set", "packing.tier_order=scor"], "Input should be 'tiered' or 'score'"),
    (["--set", "tier_order"], "write a change as section.field=value"),
])
def test_bad_query_options(capsys, demo_store, demo_copy, argv, message):
    code, out, err = _run(capsys, *_query(demo_copy, demo_store.namespace, *argv), "Where does Tomas work?")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_query_set_changes_retrieval_settings(capsys, demo_store, demo_copy):
    from rms_retrieval.nodes.settings import RetrievalSettings

    changed = RetrievalSettings(scoring={"pronoun_speakers": ["user", "assistant"]}, packing={"tier_order": "score"})
    code, out, err = _run(capsys, *_query(demo_copy, demo_store.namespace, "--json", "--set", "packing.tier_order=score",
                                          "--set", 'scoring.pronoun_speakers=["user", "assistant"]'),
                          "Where does Tomas work now?")
    assert code == 0, err
    fingerprint = json.loads(out)["retrieval_metadata"]["configuration_fingerprint"]
    assert fingerprint == changed.fingerprint() != RetrievalSettings().fingerprint()


def test_query_forwards_mode_limit_floor_source_cap_and_time_filters(capsys, demo_store, demo_copy):
    from datetime import datetime

    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.nodes.models import RetrievalRequest
    from rms_retrieval.stores.memory_store import MemoryStore

    since, until = "2020-01-01T00:00:00+00:00", "2025-09-03T00:00:00+00:00"
    flags = {"--mode": "AUDIT", "--limit": "2", "--min-score": "0.1", "--max-per-source": "1", "--max-per-evidence": "3",
             "--time-from": since,
             "--time-to": until, "--event-time-from": since, "--event-time-to": until}
    options = {"retrieval_mode": "AUDIT", "limit": 2, "min_score": 0.1, "max_per_source": 1, "max_per_evidence": 3,
               "time_from": datetime.fromisoformat(since), "time_to": datetime.fromisoformat(until),
               "event_time_from": datetime.fromisoformat(since), "event_time_to": datetime.fromisoformat(until)}
    question = "What is wrong with Tomas's knee?"
    code, out, err = _run(capsys, *_query(demo_copy, demo_store.namespace, "--json",
                                          *[part for flag in flags.items() for part in flag]), question)
    assert code == 0, err
    with MemoryStore.open(demo_copy, create=False) as store:
        logged = RetrievalRequest.model_validate(store.retrieval_log()[-1]["payload"]["request"])
        expected = retrieve(store, question, namespaces=[demo_store.namespace], reference_time=logged.reference_time,
                            log=False, **options).bundle
    assert {name: getattr(logged, name) for name in options} == options
    assert json.loads(out) == json.loads(expected.model_dump_json()) and len(expected.items) == 2


def test_empty_question(capsys, demo_store, demo_copy):
    code, _, err = _run(capsys, *_query(demo_copy, demo_store.namespace), "   ")
    assert code == 2 and "the question is empty" in err


def test_unknown_store_and_namespace(capsys, demo_store, demo_copy, tmp_path):
    code, _, err = _run(capsys, *_query(tmp_path / "nowhere", demo_store.namespace), "q?")
    assert code == 2 and "no store at" in err and "rms ingest" in err
    code, _, err = _run(capsys, *_query(demo_copy, "no-such-conversation"), "q?")
    assert code == 2 and "no-such-conversation has no memories" in err and demo_store.namespace in err


def test_a_corrupted_index_file_is_named(capsys, demo_store, demo_copy):
    [vectors] = demo_copy.glob("segments/*/index.npz")
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one float: the vectors are most of the file
    vectors.write_bytes(bytes(data))
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
@pytest.mark.slow
def test_ingest_locomo_reports_repaired_evidence(locomo_first_conversation, locomo_path):
    from rms_retrieval.dataflows.locomo import load_locomo, parse_locomo

    out = locomo_first_conversation.printed  # `rms ingest-locomo` of the first conversation alone
    assert "from 1 conversations" in out and "malformed or missing evidence ids" in out
    assert "conv-26 #37: split 'D8:6; D9:17' into D8:6, D9:17" in out
    raw = json.loads(locomo_path.read_text())[:1]
    assert len(load_locomo(locomo_path).conversations) == 10 and parse_locomo(raw, source="x").conversations[0].sample_id == "conv-26"


def _rms(*argv, script: str | None = None, cwd=None, env_extra=None):
    """`rms ARGV` in a fresh process (the installed script, or a small script that calls main),
    with no HF_HUB_OFFLINE in its environment: the library must not need it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**{k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}, **(env_extra or {})}
    command = [sys.executable, "-c", script, *argv] if script else [str(Path(sys.executable).parent / "rms"), *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_a_successful_query_prints_nothing_on_stderr(demo_store, demo_copy):
    done = _rms(*_query(demo_copy, demo_store.namespace), "Where does Tomas work now?")
    assert done.returncode == 0 and done.stdout.startswith("question: ")
    assert done.stderr == ""


_BROKEN_ENCODER = """
import sys
from rms_retrieval.stores.providers import onnx_encoder
from rms_retrieval.stores.errors import EmbeddingError

def broken(self, texts):
    raise EmbeddingError("the encoder failed (simulated)")

onnx_encoder.OnnxQueryEncoder.encode = broken
from rms_retrieval.dataflows.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_failure_inside_the_dag_is_one_line_and_verbose_adds_the_traceback(demo_store, demo_copy):
    argv = [*_query(demo_copy, demo_store.namespace), "Where does Tomas work now?"]
    quiet = _rms(*argv, script=_BROKEN_ENCODER)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (2, "", "error: the encoder failed (simulated)\n")
    verbose = _rms(*argv, "--verbose", script=_BROKEN_ENCODER)
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
    assert verbose.stderr.splitlines()[-1] == "error: the encoder failed (simulated)"


_RECORDING = """
import atexit, gc, sys
from rms_retrieval.dataflows import cli, query_command

seen = {}
start, main = query_command._start_encoder, cli.main

def recording_start():
    seen["hamilton imported when the encoder started"] = "hamilton.graph" in sys.modules
    start()

def recording_main(argv=None):
    seen["collector on"] = gc.isenabled()
    atexit.register(print, "an atexit hook of the command ran", file=sys.stderr)  # as the retrieval log's flush
    code = main(argv)
    print(sorted(seen.items()), file=sys.stderr)
    return code

query_command._start_encoder, cli.main = recording_start, recording_main
atexit.register(print, "the interpreter's teardown began", file=sys.stderr)  # registered first: run last
cli.run()
"""


def test_rms_query_starts_its_encoder_before_hamilton_and_runs_without_the_collector_or_the_teardown(
        demo_store, demo_copy, tmp_path):
    done = _rms(*_query(demo_copy, demo_store.namespace), "Where does Tomas work now?", script=_RECORDING)
    assert done.returncode == 0 and done.stdout.startswith("question: "), done.stderr
    assert done.stderr.splitlines() == ["[('collector on', False), ('hamilton imported when the encoder started', False)]",
                                        "an atexit hook of the command ran"]
    refused = _rms(*_query(demo_copy, "no-such-namespace"), "Where does Tomas work now?", script=_RECORDING)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines()[0].startswith("error: namespace no-such-namespace has no memories")
    assert refused.stderr.splitlines()[-1] == "an atexit hook of the command ran"
    assert _rms("query", "--help", script=_RECORDING).returncode == 0
    usage = _rms("query", "--store", str(demo_copy), script=_RECORDING)
    assert usage.returncode == 2 and "the following arguments are required" in usage.stderr
    other = _rms("ingest", "--store", str(tmp_path / "store"), str(tmp_path / "absent.jsonl"), script=_RECORDING)
    assert other.returncode == 2
    assert other.stderr.splitlines()[-3:] == ["[('collector on', True)]", "an atexit hook of the command ran",
                                              "the interpreter's teardown began"]


_INTERRUPTED = """
from rms_retrieval.dataflows import cli

def interrupted(argv=None):
    raise KeyboardInterrupt

cli.main = interrupted
cli.run()
"""


def test_rms_query_interrupted_ends_as_a_shell_reports_ctrl_c():
    assert _rms("query", "What?", script=_INTERRUPTED).returncode == 130


def test_verbose_may_come_anywhere_before_a_double_dash():
    from rms_retrieval.dataflows.cli import _split_verbose

    assert _split_verbose(["query", "--verbose", "q"]) == (["query", "q"], True)
    assert _split_verbose(["--verbose", "query", "q"]) == (["query", "q"], True)
    assert _split_verbose(["query", "--", "--verbose"]) == (["query", "--", "--verbose"], False)


_HELP_IMPORTS = """
import contextlib, io, json, sys
from rms_retrieval.dataflows.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["--help"])
    except SystemExit:
        pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"hamilton", "torch", "pandas", "pydantic", "numpy",
                "duckdb", "faiss", "sentence_transformers", "transformers", "matplotlib", "graphviz"})
ours = sorted(m for m in sys.modules if m.startswith("rms_retrieval."))
print(json.dumps({"help": out.getvalue(), "heavy": heavy, "ours": ours}))
"""


def test_help_lists_every_command_and_imports_none_of_them():
    from rms_retrieval.dataflows.cli import COMMANDS

    done = _rms(script=_HELP_IMPORTS)
    report = json.loads(done.stdout)
    assert report["heavy"] == []
    # code_identity (standard library only) gives the root package its version.
    assert report["ours"] == ["rms_retrieval.dataflows", "rms_retrieval.dataflows.cli",
                              "rms_retrieval.dataflows.cli_support", "rms_retrieval.dataflows.code_identity"]
    for name, (_, help_text) in COMMANDS.items():
        assert name in report["help"] and " ".join(help_text.split()[:4]) in " ".join(report["help"].split())


def test_the_command_table_matches_what_each_module_registers():
    """`rms --help` from the table reads exactly as from the modules' own parsers, and each
    command's module is the one the table names."""
    import argparse

    from rms_retrieval.dataflows.cli import COMMANDS, build_parser

    assert build_parser().format_help() == build_parser([]).format_help()
    for name in COMMANDS:
        parser = build_parser([name])
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert sub.choices[name].add_help, f"{name} is not registered by {COMMANDS[name][0]}"


def test_audit_and_query_commands_do_not_import_the_optional_extras():
    """Hamilton itself imports its matplotlib plugin when matplotlib is installed; switched off
    here (its documented variable, in the child only), the check is about our own imports."""
    done = _rms(env_extra={"HAMILTON_AUTOLOAD_EXTENSIONS": "0"}, script="""
import sys
import rms_retrieval.dataflows.audit_command, rms_retrieval.dataflows.query_command
import rms_retrieval.dataflows.ingest_command, rms_retrieval.dataflows.retrieval, rms_retrieval.dataflows.explain
import rms_retrieval.dataflows.replay, rms_retrieval.dataflows.audit
print(sorted({m.split(".")[0] for m in sys.modules} & {"matplotlib", "graphviz", "langchain_core"}))
""")
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize("extra, question, message", [
    (["--budget", str(10**12)], "Where does Tomas work?", "token_budget: Input should be less than or equal to"),
    ([], "why? " * 2000, "query: String should have at most 8192 characters"),
])
def test_a_rejected_request_is_one_line_and_still_logged(capsys, demo_store, demo_copy, extra, question, message):
    from rms_retrieval.stores.memory_store import MemoryStore

    code, out, err = _run(capsys, *_query(demo_copy, demo_store.namespace, *extra), question)
    assert (code, out) == (2, "") and err.startswith(f"error: {message}") and err.count("\n") == 1
    with MemoryStore.open(demo_copy, create=False, read_only=True) as store:
        assert store.retrieval_log()[-1]["payload"]["status"] == "failed"


def test_the_last_representable_year_answers_or_fails_in_one_line(capsys, demo_store, demo_copy):
    argv = ["query", "--store", str(demo_copy), "--namespace", demo_store.namespace,
            "--reference-time", "9999-12-31T00:00:00+00:00"]
    for question in ("What happened this year?", "What did we do last week?", "Any plans for next week?"):
        code, out, err = _run(capsys, *argv, question)
        assert (code == 0 and out.startswith("question: ")) or (code == 2 and err.count("\n") == 1), err
        assert "Traceback" not in err


def test_a_missing_extra_is_named_in_one_line(capsys, monkeypatch, tmp_path):
    import sys

    import rms_retrieval.dataflows.bench as bench_package

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the [bench] extra were not installed
    monkeypatch.delitem(sys.modules, "rms_retrieval.dataflows.bench.plots", raising=False)
    monkeypatch.delattr(bench_package, "plots", raising=False)  # an earlier test may have imported it
    code, out, err = _run(capsys, "bench", "scale", "--out", str(tmp_path / "out"), "--sizes", "10")
    assert (code, out) == (2, "")
    assert err == "error: `rms bench` needs matplotlib, part of the [bench] extra: pip install 'rms-retrieval[bench]'\n"


def test_a_missing_module_that_no_extra_brings_is_a_bug_not_a_user_error(monkeypatch):
    import argparse

    from rms_retrieval.dataflows import cli

    def broken(args):
        import no_such_module_anywhere  # noqa: F401

    parser = argparse.ArgumentParser()
    parser.set_defaults(run=broken)
    monkeypatch.setattr(cli, "build_parser", lambda load: parser)
    with pytest.raises(ModuleNotFoundError):
        cli.main([])


def test_ingest_messages_continues_sessions_and_refuses_bad_lines(capsys, tmp_path):
    from rms_retrieval.stores.memory_store import MemoryStore

    lines = [{"namespace": "chat", "session_id": "s1", "role": "user", "name": "Caroline", "content": "I went"},
             {"namespace": "chat", "session_id": "s1", "role": "assistant", "name": "Mel", "content": "Nice"}]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in [*lines, {**lines[0], "role": "robot"}]) + "\n")
    store = tmp_path / "store"
    code, _, err = _run(capsys, "ingest", str(path), "--store", str(store), "--format", "messages")
    assert code == 2 and "nothing was added" in err and "line 3, role" in err and err.count("\n") == 1
    assert not (store / "manifest.json").exists()
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    for _ in range(2):
        code, out, err = _run(capsys, "ingest", str(path), "--store", str(store), "--format", "messages")
        assert code == 0, err
    with MemoryStore.open(store, read_only=True) as opened:
        objects = [o for segment in opened.snapshot().segments for o in segment.objects()]
    assert sorted((o.session_seq, o.content) for o in objects if o.node_type == "TURN") == [
        (0, "I went"), (1, "Nice"), (2, "I went"), (3, "Nice")]
    assert sorted(o.content for o in objects if o.node_type == "ENTITY") == ["Caroline", "Mel"]


def test_without_the_bench_modules_rms_bench_says_where_the_benchmarks_run(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "rms_retrieval.dataflows.bench.command", None)  # as in the wheel
    code, out, err = _run(capsys, "bench", "locomo", "--data", "x.json")
    assert (code, out) == (2, "")
    assert err.startswith("error: `rms bench`: the benchmarks are not part of the installed package: they run from a "
                          "repository checkout") and err.count("\n") == 1
