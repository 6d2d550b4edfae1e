"""Shared fixtures. An encoder takes a while to load, so one of each serves the whole session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from uuid import UUID

import pytest
from filelock import FileLock

from rms_retrieval.dataflows.demo import DemoCorpus
from rms_retrieval.dataflows.locomo import LocomoDataset
from rms_retrieval.stores.providers.embedding import SentenceEncoder
from rms_retrieval.stores.providers.onnx_encoder import OnnxQueryEncoder


@pytest.fixture(scope="session")
def encoder() -> OnnxQueryEncoder:
    """The packaged MiniLM encoder, loaded once: the one a store and `retrieve()` use by default."""
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    return default_encoder()


@pytest.fixture(scope="session")
def sentence_encoder() -> SentenceEncoder:
    """The same weights through sentence-transformers: the reference the default encoder agrees with."""
    return SentenceEncoder()


@dataclass(frozen=True)
class DemoStore:
    """The demo store's directory and what tests need to query it; open it where you need it."""

    path: Path
    corpus: DemoCorpus
    reference_time: datetime
    other_namespace_id: UUID

    @property
    def namespace(self) -> str:
        return self.corpus.namespace


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name` that `build(folder)` filled, run once for all the xdist workers of this
    run (the first to take the file lock builds; the others wait and reuse it). Read it, or copy it
    before writing: the workers share it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    folder = root / name
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


def _build_demo_store(folder: Path) -> None:
    from rms_retrieval.dataflows.demo import load_demo
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    other = MemoryObject(namespace="demo-other-conversation", node_type="FACT",
                         content="Tomas works as a carpenter in Bristol.")
    with MemoryStore.open(folder / "store", encoder=default_encoder()) as store:
        store.add([*load_demo().objects, other])
    (folder / "other_namespace_id").write_text(str(other.id))


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    """The demo corpus in one store for the session (closed, so a notebook kernel can open it),
    plus one memory in a second namespace, for namespace-isolation checks. Built once per run and
    copied to each worker: tests write its retrieval log."""
    from rms_retrieval.dataflows.demo import load_demo
    from rms_retrieval.dataflows.locomo import reference_time

    built = built_once(tmp_path_factory, "demo-store", _build_demo_store)
    path = Path(shutil.copytree(built / "store", tmp_path_factory.mktemp("demo") / "store"))
    corpus = load_demo()
    return DemoStore(path, corpus, reference_time(corpus.dataset.conversations[0]),
                     UUID((built / "other_namespace_id").read_text()))


@pytest.fixture
def demo_copy(demo_store: DemoStore, tmp_path: Path) -> Path:
    """A private copy of the demo store, for tests that write to it (the retrieval log)."""
    return Path(shutil.copytree(demo_store.path, tmp_path / "store"))


LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """`../shared/data/locomo10.json`; tests that need it skip cleanly where it is absent."""
    if not LOCOMO.exists():
        pytest.skip(f"LoCoMo is not at {LOCOMO}")
    return LOCOMO


@dataclass(frozen=True)
class LocomoStore:
    """LoCoMo's first conversation as `rms ingest-locomo` stores it, and what the command printed."""

    dataset: LocomoDataset  # of that one conversation
    path: Path
    printed: str


def _build_locomo_first_conversation(folder: Path, locomo_path: Path) -> None:
    import contextlib
    import io
    import json

    from rms_retrieval.dataflows.cli import main

    one = folder / "one.json"
    one.write_text(json.dumps(json.loads(locomo_path.read_text())[:1]))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["ingest-locomo", str(one), "--store", str(folder / "store")])
    assert code == 0, printed.getvalue()
    (folder / "printed.txt").write_text(printed.getvalue())


@pytest.fixture(scope="session")
def locomo_first_conversation(locomo_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LocomoStore:
    """Built once per run; its tests only read it."""
    from rms_retrieval.dataflows.locomo import load_locomo

    folder = built_once(tmp_path_factory, "locomo-first-conversation",
                        lambda into: _build_locomo_first_conversation(into, locomo_path))
    return LocomoStore(load_locomo(folder / "one.json"), folder / "store", (folder / "printed.txt").read_text())


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray of two CPUs for the session; batch tests run their tasks on it."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def dask_address():
    """A local Dask cluster of one worker process for the session: its scheduler address."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        yield cluster.scheduler_address
