"""Assembly of the retrieval DAG: the Hamilton driver and the inputs every request needs.

The driver is public: `build_driver()` and `pipeline_inputs()` let a caller (a notebook, an
audit) execute any intermediate node, e.g. `merged_candidates` or `fused_scores`, for the same
inputs `retrieve()` uses.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from hamilton import driver

from rms_retrieval.nodes import candidate_generation, filtering, merging, packing, query_analysis, scoring, session_context
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

STAGE_MODULES = (
    query_analysis,
    candidate_generation,
    merging,
    filtering,
    scoring,
    session_context,
    packing,
)
FINAL_NODE = "packed_bundle"


@lru_cache(maxsize=8)
def _cached_driver(fusion: str) -> driver.Driver:
    return driver.Builder().with_modules(*STAGE_MODULES).with_config({"fusion": fusion}).build()


def build_driver(settings: RetrievalSettings | None = None) -> driver.Driver:
    """The retrieval DAG for these settings' structural switches (built once per switch value)."""
    settings = settings or RetrievalSettings()
    return _cached_driver(settings.hamilton_config()["fusion"])


def pipeline_inputs(
    store: Any, request: RetrievalRequest, settings: RetrievalSettings, encoder: QueryEncoder
) -> dict[str, Any]:
    """The driver inputs for one request. One store object serves every store protocol."""
    return {
        "request": request,
        "settings": settings,
        "query_encoder": encoder,
        "vector_index": store,
        "lexical_index": store,
        "graph_index": store,
        "object_store": store,
    }
