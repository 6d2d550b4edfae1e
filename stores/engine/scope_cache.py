"""Segments split by namespace, and values per namespace scope that outlive a generation.

A scope's graph adjacency, entity catalog and pinned objects are built from the edges, entity rows
and pinned rows of that scope's namespaces only, so a segment's rows are split by namespace once
(`NamespaceRows`, kept for as long as the segment is live) and a scope never scans another
tenant's rows. A write adds a segment to a few namespaces; a new generation keeps every scope value
whose source segments are unchanged (`ScopeValues`), or were merged into one segment that holds
exactly their live rows (`merged_keys`) while the value was built from every one of them that
holds the scope, so a query after a write rebuilds only the scopes the write touched, at the cost
of that scope and not of the store. A scope's graph is kept while its segments live, whatever
deletion file they are read with, and brought up to date by what changed since it was built
(stores/engine/graph_extension.py); the entity names of a scope grow with the segments a write
adds (`appended`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rms_retrieval.stores.models import NodeType
from rms_retrieval.stores.engine.edge_columns import LiveEdgeGroups, grouped_by_code
from rms_retrieval.stores.engine.manifest import segment_of_key
from rms_retrieval.stores.engine.segments import LoadedSegment

Scope = tuple[str, ...]
Value = TypeVar("Value")


class NamespaceRows:
    """One segment's edges with a live owner (in stored order; split when first read), entity rows,
    pinned rows and deleted rows (ascending), by namespace; `dead_kinds`: per namespace, which of
    "entity_rows" and "pinned_rows" its deleted rows held."""

    __slots__ = ("entity_rows", "pinned_rows", "dead_rows", "dead_kinds", "_segment", "_edges")

    def __init__(self, segment: LoadedSegment, entity_rows: Mapping[str, tuple[int, ...]],
                 pinned_rows: Mapping[str, tuple[int, ...]], dead_rows: Mapping[str, tuple[int, ...]],
                 dead_kinds: Mapping[str, frozenset[str]]) -> None:
        self.entity_rows, self.pinned_rows, self.dead_rows, self.dead_kinds = entity_rows, pinned_rows, dead_rows, dead_kinds
        self._segment, self._edges = segment, None

    @property
    def edge_namespaces(self) -> frozenset[str]:
        """The namespaces the segment holds edges of, live or not."""
        return self._segment.edge_namespaces

    @property
    def edges(self) -> LiveEdgeGroups:
        if self._edges is None:  # racing reads split alike
            self._edges = self._segment.live_edges_by_namespace()
        return self._edges


def _by_namespace(segment: LoadedSegment, rows: Sequence[int]) -> Mapping[str, tuple[int, ...]]:
    """Ascending `rows` of `segment` grouped by namespace, each group ascending, the groups in order
    of their first row; array operations, as a segment holds tens of thousands of entity rows."""
    groups = grouped_by_code(np.asarray(segment.columns.namespace_codes), np.asarray(rows, dtype=np.int64))
    names = segment.columns.namespaces
    in_order = sorted(groups, key=lambda found: int(found[1][0]))  # by each group's first row
    return MappingProxyType({names[code]: tuple(group.tolist()) for code, group in in_order})


def namespace_rows(segment: LoadedSegment, earlier: NamespaceRows | None = None) -> NamespaceRows:
    """Split `segment`'s edges, entity rows, pinned rows and deleted rows by namespace (edges never
    cross one); from `earlier`, the split of the same segment before some more of its rows were
    deleted, where given: only the namespaces of the rows deleted since are split again."""
    if earlier is None:
        dead = _by_namespace(segment, sorted(segment.dead_rows))
        return NamespaceRows(segment, _by_namespace(segment, segment.entity_rows),
                             _by_namespace(segment, segment.pinned_rows), dead,
                             MappingProxyType({name: _kinds(segment, list(rows)) for name, rows in dead.items()}))
    before = {row for rows in earlier.dead_rows.values() for row in rows}
    died = _by_namespace(segment, sorted(set(segment.dead_rows) - before))
    gone = frozenset(row for rows in died.values() for row in rows)
    entity, pinned, dead = dict(earlier.entity_rows), dict(earlier.pinned_rows), dict(earlier.dead_rows)
    kinds = dict(earlier.dead_kinds)
    for name, rows in died.items():
        for kept in (entity, pinned):
            if name in kept:
                kept[name] = tuple(row for row in kept[name] if row not in gone)
        dead[name] = tuple(sorted((*dead.get(name, ()), *rows)))
        kinds[name] = _kinds(segment, list(dead[name]))
    dead = _first_row_order(dead)
    return NamespaceRows(segment, _first_row_order(entity), _first_row_order(pinned), dead,
                         MappingProxyType({name: kinds[name] for name in dead}))


def _first_row_order(groups: Mapping[str, tuple[int, ...]]) -> Mapping[str, tuple[int, ...]]:
    """The non-empty groups, in order of their first row (as `_by_namespace` gives them)."""
    return MappingProxyType(dict(sorted(((name, rows) for name, rows in groups.items() if rows),
                                        key=lambda item: item[1][0])))


def handed_splits(previous: Sequence[LoadedSegment], handed: Mapping[str, NamespaceRows],
                  segments: Sequence[LoadedSegment]) -> dict[str, NamespaceRows]:
    """The splits a new generation of `segments` starts with, by segment key: those `handed` on
    from the `previous` generation, and for a segment read with a new deletion file, its split made
    from the earlier one (`namespace_rows`' `earlier`): a question right after an update or a
    delete splits no segment whole again."""
    earlier = {segment.entry.id: handed[segment.entry.key] for segment in previous if segment.entry.key in handed}
    kept = {}
    for segment in segments:
        key = segment.entry.key
        if key in handed:
            kept[key] = handed[key]
        elif segment.entry.id in earlier:
            kept[key] = namespace_rows(segment, earlier[segment.entry.id])
    return kept


def _kinds(segment: LoadedSegment, rows: list[int]) -> frozenset[str]:
    """Which of "entity_rows" and "pinned_rows" some of `rows` of `segment` are."""
    types = segment.columns.node_types.take(pa.array(rows, type=pa.int64())).dictionary_decode()
    held = {"entity_rows": pc.any(pc.equal(types, NodeType.ENTITY.value)).as_py(),
            "pinned_rows": bool(segment.columns.pinned[rows].any())}
    return frozenset(kind for kind, found in held.items() if found)


class ScopeValues(Generic[Value]):
    """Values by namespace scope, each with the keys of the segments it was built from; handed to
    the next generation, which keeps those whose segments are all still live. Racing builds of one
    scope give equal values, so the last to be stored wins harmlessly."""

    def __init__(self, previous: ScopeValues[Value] | None = None, live: Collection[str] = (),
                 merged: Merges | None = None, by_segment: bool = False) -> None:
        """`merged`: the segments merges replaced, each merged segment holding exactly its sources'
        live rows (`merged_keys`). A value built from every source of a merge that holds its
        scope's namespaces is kept, as built from the merged segment; one built before a source
        that holds them was written is not (the merged segment holds that source's rows too).
        `by_segment`: a value is kept while its sources' segments are live (`live` holds their
        ids), whatever deletion file they are read with now: its `extend` brings it up to date."""
        kept = {} if previous is None else previous._values
        alive = frozenset(live)
        self._values: dict[Scope, tuple[tuple[str, ...], Value]] = {}
        for scope, (sources, value) in kept.items():
            if merged and merged.renamed:
                if not merged.covers(scope, sources):
                    continue
                sources = _renamed(sources, merged.renamed)
            if alive.issuperset(map(segment_of_key, sources) if by_segment else sources):
                self._values[scope] = (sources, value)

    def get(self, scope: Scope, sources: tuple[str, ...], build: Callable[[], Value],
            extend: Callable[[Value, tuple[str, ...]], Value | None] | None = None) -> Value:
        """The value of `scope` built from the segments `sources` (in order), built now if unknown.
        With `extend`, a value built from other sources is handed to it with those sources; it
        returns the value brought up to `sources`, or None where it cannot, and the value is built."""
        found = self._values.get(scope)
        if found is not None and found[0] == sources:
            return found[1]
        value = None if extend is None or found is None else extend(found[1], found[0])
        if value is None:
            value = build()
        self._values[scope] = (sources, value)
        return value

    def __len__(self) -> int:
        return len(self._values)


def appended(before: tuple[str, ...], sources: tuple[str, ...]) -> tuple[str, ...] | None:
    """The segments `sources` holds after those of `before`, where `before` is how it starts (what
    a write that merged and deleted nothing leaves), else None."""
    return sources[len(before):] if len(before) <= len(sources) and sources[:len(before)] == before else None


def row_sources(split: Sequence[tuple[LoadedSegment, NamespaceRows]], scope: Scope, kind: str) -> tuple[str, ...]:
    """The sources of a value read from one kind of row of `scope` (`kind`: "entity_rows",
    "pinned_rows"): each segment of `split` holding such a row in the scope, by its id while none of
    its deleted rows in the scope was of that kind (a deleted turn leaves the scope's entities as
    they were), else by its key, which names its deletion file. A live segment's id stays live
    (`ScopeValues`' `live` holds ids and keys), so a value outlives deletions of other rows."""
    sources = []
    for segment, rows in split:
        if any(kind in rows.dead_kinds.get(name, ()) for name in scope):
            sources.append(segment.entry.key)
        elif any(name in getattr(rows, kind) for name in scope):
            sources.append(segment.entry.id)
    return tuple(sources)


def _renamed(sources: tuple[str, ...], merged: Mapping[str, str]) -> tuple[str, ...]:
    """`sources` with each run of one merge's sources (neighbours in segment order) as its merged key."""
    renamed: list[str] = []
    for key in sources:
        key = merged.get(key, key)
        if not renamed or renamed[-1] != key:
            renamed.append(key)
    return tuple(renamed)


@dataclass(frozen=True)
class Merges:
    """`renamed`: source key -> merged key; `holding`: the namespaces each source holds anything
    of that a scope value is built from (edges, entity, pinned or deleted rows)."""

    renamed: Mapping[str, str]
    holding: Mapping[str, frozenset[str]]

    def covers(self, scope: Scope, sources: tuple[str, ...]) -> bool:
        """Whether `sources` holds every source, of each merge one of them went into, that holds
        a namespace of `scope`."""
        merged_into = {self.renamed[key] for key in sources if key in self.renamed}
        return all(key in sources for key, into in self.renamed.items()
                   if into in merged_into and not self.holding[key].isdisjoint(scope))


def _value_namespaces(segment: LoadedSegment) -> frozenset[str]:
    """The namespaces `segment` holds edges, entity rows, pinned rows or deleted rows of: what a
    scope value reads (a plain turn that names no one adds to none of them)."""
    rows = np.asarray([*segment.entity_rows, *segment.pinned_rows, *segment.dead_rows], dtype=np.int64)
    codes = np.unique(np.asarray(segment.columns.namespace_codes)[rows])
    return frozenset(segment.edge_namespaces) | frozenset(segment.columns.namespaces[code] for code in codes.tolist())


def merged_keys(previous: Collection[LoadedSegment], segments: Collection[LoadedSegment]) -> Merges:
    """Each segment of `segments` that a merge made from segments of `previous` and that holds
    exactly their live rows: as many deleted rows as they had together (deletions only grow, so
    the same ones). A merged segment answers every scope as its sources did, so a value built from
    them still holds."""
    before = {segment.entry.id: segment for segment in previous}
    renamed: dict[str, str] = {}
    holding: dict[str, frozenset[str]] = {}
    for segment in segments:
        sources = segment.entry.sources
        if not sources or segment.entry.id in before or not all(source in before for source in sources):
            continue
        if sum(len(before[source].dead_rows) for source in sources) == len(segment.dead_rows):
            for source in sources:
                renamed[before[source].entry.key] = segment.entry.key
                holding[before[source].entry.key] = _value_namespaces(before[source])
    return Merges(renamed, holding)
