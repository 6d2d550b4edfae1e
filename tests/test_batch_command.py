"""`rms batch` and `rms ingest --engine`: the files they read and write, the clusters they start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from rms_retrieval.dataflows.cli import main
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.memory_store import MemoryStore


@pytest.fixture(scope="module")
def store_copy(demo_store, tmp_path_factory) -> Path:
    return shutil.copytree(demo_store.path, tmp_path_factory.mktemp("batch-command") / "store")


@pytest.fixture
def requests_file(demo_store, tmp_path) -> Path:
    lines = [{"request_id": f"r{i}", "query": q, "namespaces": [demo_store.namespace],
              "reference_time": demo_store.reference_time.isoformat(), "token_budget": 300}
             for i, q in enumerate(demo_store.corpus.sample_questions)]
    lines.append({"request_id": "elsewhere", "query": "Who?", "namespaces": ["nobody-here"],
                  "reference_time": demo_store.reference_time.isoformat()})
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _parquet(path: Path) -> dict[str, tuple]:
    rows = duckdb.sql(f"SELECT request_id, bundle_json, error FROM read_parquet('{path}')").fetchall()
    return {request_id: (bundle, error) for request_id, bundle, error in rows}


@pytest.mark.parametrize("engine_options", [["--engine", "local"],
                                            pytest.param(["--engine", "dask", "--workers", "1"], marks=pytest.mark.slow)])
def test_rms_batch_writes_one_parquet_row_per_request_with_the_bundles_retrieve_gives(
        engine_options, store_copy, requests_file, demo_store, tmp_path, capsys):
    out = tmp_path / "bundles.parquet"
    code = main(["batch", "--store", str(store_copy), "--in", str(requests_file), "--out", str(out),
                 "--shard-size", "2", *engine_options])
    assert code == 0
    assert f"answered {len(demo_store.corpus.sample_questions) + 1} of" in capsys.readouterr().out
    rows = _parquet(out)
    with MemoryStore.open(store_copy, create=False, read_only=True) as store:
        for number, question in enumerate(demo_store.corpus.sample_questions):
            expected = retrieve(store, question, namespaces=[demo_store.namespace],
                                reference_time=demo_store.reference_time, token_budget=300, log=False)
            assert rows[f"r{number}"] == (expected.bundle.to_json(), None)
    # A namespace the store does not hold is no error: its bundle is empty.
    assert json.loads(rows["elsewhere"][0])["items"] == []


@pytest.mark.slow
def test_rms_ingest_on_a_ray_it_starts_gives_the_store_a_local_ingest_gives(demo_store, tmp_path, capsys):
    memories = demo_store.corpus.objects[:16]  # the Ray worker embeds each text alone: a few suffice
    path = tmp_path / "memories.jsonl"
    path.write_text("".join(memory.model_dump_json() + "\n" for memory in memories))
    added = f"added {len(memories)} objects"
    assert main(["ingest", str(path), "--store", str(tmp_path / "local")]) == 0  # here, on the session's model
    assert added in capsys.readouterr().out
    done = subprocess.run([sys.executable, "-m", "rms_retrieval.dataflows.cli", "ingest", str(path), "--store",
                           str(tmp_path / "ray"), "--engine", "ray", "--workers", "1"],
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert added in done.stdout
    questions = demo_store.corpus.sample_questions
    bundles = []
    for store in (tmp_path / "local", tmp_path / "ray"):
        with MemoryStore.open(store, create=False, read_only=True) as opened:
            bundles.append([retrieve(opened, q, namespaces=[demo_store.namespace], log=False,
                                     reference_time=demo_store.reference_time).bundle.to_json() for q in questions])
    assert bundles[0] == bundles[1]


@pytest.mark.parametrize("arguments, message", [
    (["--store", "{tmp}/missing"], "no store at"),
    (["--out", "{tmp}/no-such-dir/out.parquet"], "does not exist; create it first"),
    (["--in", "{tmp}/missing.jsonl"], "cannot be read"),
    (["--engine", "local", "--workers", "2"], "drop address and workers"),
])
def test_rms_batch_explains_a_mistake_in_one_line(arguments, message, store_copy, requests_file, tmp_path, capsys):
    given = {"--store": str(store_copy), "--in": str(requests_file), "--out": str(tmp_path / "out.parquet")}
    extra = []
    for flag, value in zip(arguments[::2], arguments[1::2]):
        if flag in given:
            given[flag] = value.format(tmp=tmp_path)
        else:
            extra += [flag, value]
    code = main(["batch", *[part for pair in given.items() for part in pair], *extra])
    error = capsys.readouterr().err
    assert code == 2 and message in error and error.count("\n") == 1
