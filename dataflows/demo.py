"""`rms demo`: build the embedded default store from the shipped demo conversation and answer
a few sample questions with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rms_retrieval.dataflows.ingest import locomo_objects
from rms_retrieval.dataflows.locomo import LocomoDataset, parse_locomo, reference_time
from rms_retrieval.stores.models import MemoryObject

DEMO_RESOURCE = "demo_conversation.json"


@dataclass(frozen=True)
class DemoCorpus:
    dataset: LocomoDataset
    objects: list[MemoryObject]
    sample_questions: list[str]

    @property
    def namespace(self) -> str:
        return self.dataset.conversations[0].sample_id


def load_demo() -> DemoCorpus:
    """The demo conversation (written for this project) as MemoryObjects, plus its questions."""
    text = resources.files("rms_retrieval.dataflows").joinpath("data", DEMO_RESOURCE).read_text(encoding="utf-8")
    raw = json.loads(text)
    dataset = parse_locomo(raw["samples"], source=DEMO_RESOURCE)
    extra = [MemoryObject.model_validate(item) for item in raw["objects"]]
    return DemoCorpus(dataset, locomo_objects(dataset) + extra, list(raw["sample_questions"]))


def build_demo_store(store_path: str | Path, *, progress: bool = False):
    """Open the demo store at `store_path`, building it on first use (later runs reuse it)."""
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore

    corpus = load_demo()
    store = MemoryStore.open(str(store_path), encoder=default_encoder())
    if store.snapshot().count_objects([corpus.namespace]) == 0:
        store.add(corpus.objects, progress=progress)
    return store, corpus


def run_demo(store_path: str | Path, print_fn: Callable[[str], None] = print) -> None:
    """Build or reopen the demo store and print a bundle for each sample question."""
    from rms_retrieval.dataflows.presenter import format_bundle
    from rms_retrieval.dataflows.retrieval import retrieve

    store, corpus = build_demo_store(store_path, progress=True)
    with store:
        when = reference_time(corpus.dataset.conversations[0])
        print_fn(f"demo store: {store_path} ({store.snapshot().count_objects()} objects); reference time {when:%Y-%m-%d}")
        for question in corpus.sample_questions:
            result = retrieve(store, question, namespaces=[corpus.namespace], reference_time=when, token_budget=300)
            print_fn("")
            print_fn(format_bundle(result.bundle))
