"""rms-retrieval: hybrid retrieval for long-term conversational and agent memory (RFC-0005).

The one import package. Its sub-packages live in the repository's top-level folders:
`rms_retrieval.dataflows` (driver, `retrieve()`, CLI), `rms_retrieval.nodes` (the Hamilton stage
modules) and `rms_retrieval.stores` (DuckDB and FAISS behind small protocols). Names are
imported on first use, so `import rms_retrieval` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from rms_retrieval.dataflows.code_identity import package_version

__version__ = package_version()

_PUBLIC = {
    "retrieve": "rms_retrieval.dataflows.retrieval",
    "RetrievalResult": "rms_retrieval.dataflows.retrieval",
    "MemoryStore": "rms_retrieval.stores.memory_store",
    "MemoryObject": "rms_retrieval.stores.models",
    "RetrievalSettings": "rms_retrieval.nodes.settings",
    "RetrievalRequest": "rms_retrieval.nodes.models",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'rms_retrieval' has no attribute {name!r}")
    return getattr(import_module(_PUBLIC[name]), name)
