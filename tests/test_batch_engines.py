"""The engines' executors: what each yields, and the options each refuses before starting anything."""

from __future__ import annotations

import pytest
from hamilton.execution import executors

from rms_retrieval.dataflows import batch_ingest
from rms_retrieval.dataflows.batch_engines import BatchEngineError, _require, batch_driver, task_executor


def test_the_local_engine_runs_a_batch_dag_in_this_process():
    with task_executor("local") as executor:
        assert isinstance(executor, executors.SynchronousLocalTaskExecutor)
        driver = batch_driver(batch_ingest, executor)
        result = driver.execute(["text_chunks"], inputs={"texts": ["a", "b", "c"], "chunk_size": 2})
    assert result["text_chunks"] == [("a", "b"), ("c",)]


@pytest.mark.parametrize("engine, options, message", [
    ("spark", {}, "unknown engine 'spark'; choose one of local, ray, dask"),
    ("local", {"address": "tcp://x:1"}, "the local engine runs in this process"),
    ("local", {"workers": 2}, "drop address and workers"),
    ("ray", {"workers": 0}, "workers must be at least 1"),
    ("dask", {"workers": 2, "address": "tcp://x:1"}, "pass address or workers, not both"),
])
def test_impossible_options_are_refused_before_any_cluster_starts(engine, options, message):
    with pytest.raises(BatchEngineError, match=message):
        with task_executor(engine, **options):
            pass


def test_a_missing_engine_package_names_the_extra_to_install():
    with pytest.raises(BatchEngineError, match=r"pip install 'rms-retrieval\[ray\]'"):
        _require("rms_no_such_module", "ray")
