"""retrieve_many on every engine: the bundles sequential retrieve() gives, failures per request, Parquet out."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from rms_retrieval.dataflows.batch import (
    RESULT_COLUMNS,
    BatchInputError,
    read_requests,
    results_frame,
    retrieve_many,
    write_parquet,
)
from rms_retrieval.dataflows.batch_dag import BatchRequest
from rms_retrieval.dataflows.batch_engines import BatchEngineError
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.stores.memory_store import MemoryStore

OTHER = "demo-other-conversation"


@pytest.fixture(scope="module")
def store_copy(demo_store, tmp_path_factory) -> Path:
    """A private copy: Ray and Dask workers keep it open read-only for the whole session."""
    return shutil.copytree(demo_store.path, tmp_path_factory.mktemp("batch") / "store")


@pytest.fixture(scope="module")
def batch(demo_store, store_copy):
    """Requests over two namespaces of one store, one whose store is missing, one with no store,
    and the bundles sequential retrieve() gives for the answerable ones."""
    questions = demo_store.corpus.sample_questions + [q.question for q in demo_store.corpus.dataset.questions]
    items = []
    for number, question in enumerate(questions):
        namespaces = (demo_store.namespace,) if number % 3 else (demo_store.namespace, OTHER)
        items.append(BatchRequest(request_id=f"q{number}", request=RetrievalRequest(
            query=question, namespaces=namespaces, reference_time=demo_store.reference_time,
            token_budget=120 + 40 * number, limit=None if number % 4 else 5)))
    items.insert(2, BatchRequest(request_id="ghost", request=RetrievalRequest(
        query="Who is there?", namespaces=("ghost",), reference_time=demo_store.reference_time)))
    items.append(BatchRequest(request_id="nowhere", request=RetrievalRequest(
        query="Who is there?", namespaces=("unmapped",), reference_time=demo_store.reference_time)))
    expected = {}
    with MemoryStore.open(store_copy, create=False, read_only=True) as store:
        for item in items:
            if item.request_id not in ("ghost", "nowhere"):
                r = item.request
                expected[item.request_id] = retrieve(
                    store, r.query, namespaces=r.namespaces, reference_time=r.reference_time,
                    token_budget=r.token_budget, limit=r.limit, log=False).bundle.to_json()
    mapping = {demo_store.namespace: store_copy, OTHER: store_copy, "ghost": store_copy.parent / "no-store"}
    return mapping, items, expected


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow),
                                    pytest.param("dask", marks=pytest.mark.slow)])
def test_every_engine_gives_the_bundles_of_sequential_retrieve_and_reports_failures_per_request(engine, batch, request):
    mapping, items, expected = batch
    address = request.getfixturevalue("dask_address") if engine == "dask" else None
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    results = retrieve_many(mapping, items, engine=engine, address=address, shard_size=3)
    assert [r.request_id for r in results] == [item.request_id for item in items]
    answered = {r.request_id: r.bundle_json for r in results if r.error is None}
    assert answered == expected
    failed = {r.request_id: r.error for r in results if r.error is not None}
    assert failed.keys() == {"ghost", "nowhere"}
    assert failed["ghost"].startswith("StoreError: no memory store at") and "in no store of the mapping" in failed["nowhere"]
    assert all(r.bundle_sha256 and r.latency_ms > 0 for r in results if r.error is None)
    assert len({r.shard for r in results if r.error is None}) > 1


def test_a_single_store_path_and_plain_requests_get_positions_as_ids(demo_store, store_copy):
    request = RetrievalRequest(query="Where does Priya live?", namespaces=(demo_store.namespace,),
                               reference_time=demo_store.reference_time)
    results = retrieve_many(store_copy, [request, request])
    assert [r.request_id for r in results] == ["0", "1"]
    assert results[0].bundle_json == results[1].bundle_json and results[0].store == str(store_copy)


def test_results_are_written_to_parquet_one_row_per_request(batch, tmp_path):
    mapping, items, _ = batch
    results = retrieve_many(mapping, items[:4])
    write_parquet(results, tmp_path / "bundles.parquet")
    rows = duckdb.sql(f"SELECT * FROM read_parquet('{tmp_path / 'bundles.parquet'}')").fetchall()
    assert rows == [tuple(list(value) if name == "namespaces" else value for name, value in vars(r).items())
                    for r in results]
    assert list(results_frame(results).columns) == list(RESULT_COLUMNS) == list(vars(results[0]))
    columns = duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{tmp_path / 'bundles.parquet'}')").fetchall()
    assert {name: kind for name, kind, *_ in columns}["namespaces"] == "VARCHAR[]"


def test_requests_are_read_from_json_lines_with_ids_defaulting_to_line_numbers(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text('{"request_id": "a", "query": "Who?", "namespaces": ["n"], "reference_time": "2025-01-01T00:00:00Z"}\n'
                    '\n{"query": "Where?", "namespaces": ["n"], "reference_time": "2025-01-01T00:00:00Z", "limit": 2}\n')
    items = read_requests(path)
    assert [(i.request_id, i.request.query, i.request.limit) for i in items] == [("a", "Who?", None), ("3", "Where?", 2)]


@pytest.mark.parametrize("text, message", [
    ('{"query": "Who?", "namespaces": ["n"]}\nnot json\n', "line 1, reference_time: Field required; line 2: Expecting value"),
    ('["a list"]\n', "line 1: expected a JSON object"),
    ('\n\n', "no requests found"),
    ('{"request_id": "x", "query": "A?", "namespaces": ["n"], "reference_time": "2025-01-01T00:00:00Z"}\n' * 2,
     "request id 'x' appears twice"),
])
def test_a_bad_requests_file_names_what_to_fix_and_runs_nothing(tmp_path, text, message):
    path = tmp_path / "requests.jsonl"
    path.write_text(text)
    with pytest.raises(BatchInputError, match=message.replace("(", r"\(").replace("?", r"\?")):
        read_requests(path)


def test_engine_options_are_checked_before_anything_runs(store_copy):
    with pytest.raises(BatchEngineError, match="unknown engine 'spark'"):
        retrieve_many(store_copy, [], engine="spark")


def test_an_empty_mapping_is_refused():
    with pytest.raises(BatchInputError, match="mapping is empty"):
        retrieve_many({}, [])
