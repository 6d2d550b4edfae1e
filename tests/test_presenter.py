"""The human-readable bundle: header, warnings, one line per item, exclusion counts."""

from __future__ import annotations

from datetime import datetime, timezone
from uuid import UUID

from rms_retrieval.dataflows.presenter import format_bundle
from rms_retrieval.nodes.bundle import BundleItem, MemoryBundle
from rms_retrieval.nodes.pools import PathType
from tests.factories import make_metadata

WHEN = datetime(2025, 3, 3, tzinfo=timezone.utc)


def _bundle(**metadata) -> MemoryBundle:
    item = BundleItem(id=UUID(int=1), namespace="ns", node_type="TURN", content="Tomas: hi", text="Tomas: hi",
                      score=0.5, paths=(PathType.VECTOR, PathType.LEXICAL), path_count=2, tier=2, tokens=4,
                      event_time=WHEN)
    return MemoryBundle(query="Who said hi?", namespaces=("ns",), reference_time=WHEN, token_budget=100,
                        tokens_used=4, items=(item,), context="Tomas: hi",
                        retrieval_metadata=make_metadata(**metadata))


def test_a_bundle_reads_line_by_line():
    text = format_bundle(_bundle(excluded={UUID(int=2): "DEPRECATED", UUID(int=3): "DEPRECATED", UUID(int=4): "bare_entity"}))
    assert text.splitlines() == [
        "question: Who said hi?",
        "namespaces: ns   intent: SEMANTIC   tokens: 4/100   items: 1",
        f"  1. tier 2  0.500000  {'VECTOR+LEXICAL':<36} 2025-03-03  Tomas: hi",
        "excluded: 2 DEPRECATED, 1 bare_entity",
    ]


def test_warnings_come_before_the_items():
    lines = format_bundle(_bundle(embedding_mismatch=True, backend_failures={"LEXICAL": "index gone"})).splitlines()
    assert lines[2:4] == ["warning: embedding model mismatch, the vector path was not used",
                          "warning: LEXICAL path failed: index gone"]
