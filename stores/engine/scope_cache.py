"""Segments split by namespace, and values per namespace scope that outlive a generation.

A scope's graph adjacency, entity catalog and pinned objects are built from the edges, entity rows
and pinned rows of that scope's namespaces only, so a segment's rows are split by namespace once
(`NamespaceRows`, kept for as long as the segment is live) and a scope never scans another
tenant's rows. A write adds a segment to a few namespaces; a new generation keeps every scope value
whose source segments are unchanged (`ScopeValues`), so a query after a write rebuilds only the
scopes the write touched, at the cost of that scope and not of the store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from rms_retrieval.stores.protocols import Edge
from rms_retrieval.stores.engine.segments import LoadedSegment, StoredEdge

Scope = tuple[str, ...]
Value = TypeVar("Value")


@dataclass(frozen=True)
class NamespaceRows:
    """One segment's edges with a live owner (in stored order), entity rows, pinned rows and
    deleted rows (ascending), by namespace."""

    edges: Mapping[str, tuple[Edge, ...]]
    entity_rows: Mapping[str, tuple[int, ...]]
    pinned_rows: Mapping[str, tuple[int, ...]]
    dead_rows: Mapping[str, tuple[int, ...]]


def _grouped(pairs: list[tuple[str, object]]) -> Mapping[str, tuple]:
    groups: dict[str, list] = defaultdict(list)
    for namespace, item in pairs:
        groups[namespace].append(item)
    return MappingProxyType({namespace: tuple(items) for namespace, items in groups.items()})


def _edges_by_namespace(edges: Iterable[StoredEdge]) -> Mapping[str, tuple[Edge, ...]]:
    groups: dict[str, list[Edge]] = defaultdict(list)
    for stored in edges:
        groups[stored.namespace].append(stored.edge)
    return MappingProxyType({namespace: tuple(found) for namespace, found in groups.items()})


def namespace_rows(segment: LoadedSegment) -> NamespaceRows:
    """Split `segment`'s edges, entity rows, pinned rows and deleted rows by namespace (edges never cross one)."""
    namespace_of = segment.namespace_of_row
    return NamespaceRows(
        edges=_edges_by_namespace(segment.live_edges()),
        entity_rows=_grouped([(namespace_of[row], row) for row in segment.entity_rows]),
        pinned_rows=_grouped([(namespace_of[row], row) for row in segment.pinned_rows]),
        dead_rows=_grouped([(namespace_of[row], row) for row in sorted(segment.dead_rows)]),
    )


class ScopeValues(Generic[Value]):
    """Values by namespace scope, each with the ids of the segments it was built from; handed to
    the next generation, which keeps those whose segments are all still live. Racing builds of one
    scope give equal values, so the last to be stored wins harmlessly."""

    def __init__(self, previous: ScopeValues[Value] | None = None, live: Collection[str] = ()) -> None:
        kept = {} if previous is None else previous._values
        alive = frozenset(live)
        self._values: dict[Scope, tuple[tuple[str, ...], Value]] = {
            scope: entry for scope, entry in kept.items() if alive.issuperset(entry[0])
        }

    def get(self, scope: Scope, sources: tuple[str, ...], build: Callable[[], Value]) -> Value:
        """The value of `scope` built from the segments `sources` (in order), built now if unknown."""
        found = self._values.get(scope)
        if found is not None and found[0] == sources:
            return found[1]
        value = build()
        self._values[scope] = (sources, value)
        return value

    def __len__(self) -> int:
        return len(self._values)
