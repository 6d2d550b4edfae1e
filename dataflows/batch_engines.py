"""Where a batch DAG's tasks run: in this process, on Ray, or on Dask, through Hamilton's executors.

With no `address`, `ray` and `dask` start a local cluster of `workers` processes for the call and
shut it down after; with an `address` they join that cluster and leave it running. A Ray
already started in this process (`ray.init(...)`) is used as it is and left running.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hamilton import driver
    from hamilton.execution import executors

ENGINES = ("local", "ray", "dask")


class BatchEngineError(ValueError):
    """An engine that cannot run: unknown, not installed, or given impossible options."""


@contextmanager
def task_executor(engine: str, *, address: str | None = None, workers: int | None = None) -> Iterator[executors.TaskExecutor]:
    """The Hamilton executor for `engine`, with its cluster up for the duration."""
    from hamilton.execution import executors

    if engine not in ENGINES:
        raise BatchEngineError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if workers is not None and workers < 1:
        raise BatchEngineError(f"workers must be at least 1, got {workers}")
    if engine == "local":
        if address is not None or workers is not None:
            raise BatchEngineError("the local engine runs in this process; drop address and workers, or choose ray or dask")
        yield executors.SynchronousLocalTaskExecutor()
    elif engine == "ray":
        with _ray_executor(address, workers) as executor:
            yield executor
    else:
        with _dask_executor(address, workers) as executor:
            yield executor


def batch_driver(module: ModuleType, executor: executors.TaskExecutor) -> driver.Driver:
    """The dynamic-execution driver of a batch DAG: planning here, the parallel block on `executor`."""
    from hamilton import driver
    from hamilton.execution import executors

    return (
        driver.Builder()
        .enable_dynamic_execution(allow_experimental_mode=True)
        .with_modules(module)
        .with_local_executor(executors.SynchronousLocalTaskExecutor())
        .with_remote_executor(executor)
        .build()
    )


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise BatchEngineError(f"the {extra} engine needs {module}: pip install 'rms-retrieval[{extra}]'") from error


@contextmanager
def _ray_executor(address: str | None, workers: int | None) -> Iterator[executors.TaskExecutor]:
    ray = _require("ray", "ray")
    from hamilton.plugins.h_ray import RayTaskExecutor

    started = not ray.is_initialized()
    if started:
        if address is not None and workers is not None:
            raise BatchEngineError("an existing Ray cluster has its own workers; pass address or workers, not both")
        ray.init(address=address, num_cpus=workers, include_dashboard=False)
    try:
        yield RayTaskExecutor(skip_init=True)
    finally:
        if started:
            ray.shutdown()


@contextmanager
def _dask_executor(address: str | None, workers: int | None) -> Iterator[executors.TaskExecutor]:
    _require("dask.distributed", "dask")
    from dask.distributed import Client, LocalCluster
    from hamilton.plugins.h_dask import DaskExecutor

    if address is not None:
        if workers is not None:
            raise BatchEngineError("an existing Dask cluster has its own workers; pass address or workers, not both")
        cluster = None
        client = Client(address)
    else:
        # One thread per worker process: retrieval holds the GIL, so threads would only queue.
        cluster = LocalCluster(n_workers=workers or 1, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        yield DaskExecutor(client=client)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
