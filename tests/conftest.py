"""Shared fixtures. The sentence encoder takes seconds to load, so one serves the whole session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from uuid import UUID

import pytest

from rms_retrieval.dataflows.demo import DemoCorpus
from rms_retrieval.stores.providers.embedding import SentenceEncoder


@pytest.fixture(scope="session")
def encoder() -> SentenceEncoder:
    """The packaged MiniLM encoder, loaded once: the same one `retrieve()` uses by default."""
    from rms_retrieval.stores.providers.embedding import default_encoder

    return default_encoder()


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


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    """The demo corpus in one store for the session (closed, so a notebook kernel can open it),
    plus one memory in a second namespace, for namespace-isolation checks."""
    from rms_retrieval.dataflows.demo import load_demo
    from rms_retrieval.dataflows.locomo import reference_time
    from rms_retrieval.stores.providers.embedding import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject

    corpus = load_demo()
    other = MemoryObject(namespace="demo-other-conversation", node_type="FACT",
                         content="Tomas works as a carpenter in Bristol.")
    path = tmp_path_factory.mktemp("demo") / "store"
    with MemoryStore.open(path, encoder=default_encoder()) as store:
        store.add([*corpus.objects, other])
    return DemoStore(path, corpus, reference_time(corpus.dataset.conversations[0]), other.id)


@pytest.fixture
def demo_copy(demo_store: DemoStore, tmp_path: Path) -> Path:
    """A private copy of the demo store, for tests that write to it (the retrieval log)."""
    import shutil

    return Path(shutil.copytree(demo_store.path, tmp_path / "store"))


LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """`../shared/data/locomo10.json`; tests that need it skip cleanly where it is absent."""
    if not LOCOMO.exists():
        pytest.skip(f"LoCoMo is not at {LOCOMO}")
    return LOCOMO


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray of two CPUs for the session; batch tests run their tasks on it."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def dask_address():
    """A local Dask cluster of two worker processes for the session: its scheduler address."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        yield cluster.scheduler_address
