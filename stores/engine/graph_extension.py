"""A scope's graph brought up to date from the graph built before some writes, updates and
deletes, as the full build (`scope_graph.scope_graph`) would give it, at the cost of what changed.

A write adds segments; an update, a supersede or a delete reads a segment with a new deletion file
(and an update adds the new version's segment). The graph built before keeps its edges; the
extension takes out the edges the rows deleted since owned and every edge touching an object
deleted since, adds the added segments' live edges (a later edge replaces one with its id), and
weighs again each entity pair whose count of live mentioning objects changed: a deleted row takes
one from each pair it mentions and an added live row adds one, so a pair both mention (an update
that kept a turn's names) keeps its weight without a count. `ScopeGraph` keeps the rows each
segment had deleted when the graph was made, which tell the rows deleted since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from uuid import UUID

import numpy as np

from rms_retrieval.stores.engine.edge_columns import CO_MENTIONED, MENTIONS, id_keys
from rms_retrieval.stores.engine.manifest import segment_of_key
from rms_retrieval.stores.engine.scope_cache import NamespaceRows, Scope
from rms_retrieval.stores.engine.scope_graph import CoMentionCounts, EdgeBlock, scope_graph
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.indexes.adjacency import Adjacency, uuid_of_bytes
from rms_retrieval.stores.indexes.entity_graph import co_mention_confidence
from rms_retrieval.stores.protocols import Edge

# At most this many entity pairs are weighed again to extend a graph; a larger change (a bulk add
# of long turns) rebuilds the graph instead.
MAX_EXTENDED_PAIRS = 20_000

# Up to this many rows, the edges they own are found by one comparison per row (`_owned_mask`).
FEW_ROWS = 8

Split = Sequence[tuple[LoadedSegment, NamespaceRows]]


@dataclass(frozen=True)
class ScopeGraph:
    """A scope's graph, the keys of the segments read when it was built (those holding the scope's
    rows or edges), and per key the scope's rows that segment had deleted then: what tells the rows
    deleted since (`extended_adjacency`)."""

    adjacency: Adjacency
    keys: frozenset[str]
    dead_rows: Mapping[str, frozenset[int]]

    @classmethod
    def of(cls, adjacency: Adjacency, split: Split, scope: Scope) -> ScopeGraph:
        """`adjacency`, the graph of `scope` over the segments of `split` as they are read now."""
        dead = {segment.entry.key: _scope_dead(rows, scope) for segment, rows in split}
        return cls(adjacency, frozenset(dead), MappingProxyType({key: rows for key, rows in dead.items() if rows}))


def _scope_dead(rows: NamespaceRows, scope: Scope) -> frozenset[int]:
    return frozenset(row for name in scope for row in rows.dead_rows.get(name, ()))


def built_graph(split: Split, scope: Scope, counts: CoMentionCounts, dead_ids: frozenset[tuple[str, UUID]]) -> ScopeGraph:
    """The graph of `scope` over the segments of `split`, built whole (`scope_graph`)."""
    blocks = [EdgeBlock(namespace, rows.edges.columns, rows.edges.where(namespace))
              for _, rows in split for namespace in scope if namespace in rows.edges]
    graph = scope_graph(blocks, dead_ids, {namespace: counts.mentions(namespace) for namespace in scope})
    return ScopeGraph.of(graph, split, scope)


def extended_adjacency(previous: ScopeGraph, before: tuple[str, ...], split: Split, scope: Scope,
                       counts: CoMentionCounts, dead_ids: frozenset[tuple[str, UUID]]) -> ScopeGraph | None:
    """`previous`, the graph of `scope` built from the segments `before` (keys), brought to the
    segments of `split`; `counts` weighs the pairs whose count changed, `dead_ids` are the store's
    deleted objects. None where that cannot be exact: a segment of `before` gone or moved, an added
    segment with edges before one of `before`, an added row of an id whose every row was deleted
    when the graph was built (a spotted name named again makes its entity anew with its id: its
    earlier edges come back), a segment the graph was kept for through a merge and since read with a
    new deletion file (which of its rows were deleted at the build is not known), or more than
    MAX_EXTENDED_PAIRS pairs to weigh."""
    earlier = {segment_of_key(key): key for key in before}
    if [segment.entry.id for segment, _ in split if segment.entry.id in earlier] != list(earlier):
        return None
    built = {segment_of_key(key): key for key in previous.keys}  # the segments read at the build, sources or not
    then: dict[str, frozenset[int]] = {}  # each segment read at the build: its rows of the scope deleted then
    for segment, rows in split:
        key = segment.entry.key
        if key in before or built.get(segment.entry.id) == key:  # read as it was
            then[key] = _scope_dead(rows, scope)
        elif segment.entry.id in built:  # read with a new deletion file since
            then[key] = previous.dead_rows.get(built[segment.entry.id], frozenset())
        elif segment.entry.id in earlier:  # kept through a merge, read with a new deletion file since
            return None
    last = max((at for at, (segment, _) in enumerate(split) if segment.entry.id in earlier), default=-1)
    new = [(segment, rows) for segment, rows in split if segment.entry.key not in then]  # added since the build
    if any(at < last and segment.entry.key not in then and any(name in rows.edges for name in scope)
           for at, (segment, rows) in enumerate(split)):
        return None
    # Rows deleted since the build: an added segment's all, an earlier segment's new ones.
    died = {segment.entry.key: sorted(_scope_dead(rows, scope) - then.get(segment.entry.key, frozenset()))
            for segment, rows in split if segment.entry.key not in before}
    if _resurrected(split, new, then, died, scope):
        return None
    removed: set[int] = set()
    gone = [memory_id for segment, _ in split for row in died.get(segment.entry.key, ())
            if (segment.namespace_at(row), memory_id := segment.id_at(row)) in dead_ids]
    if gone:  # every edge touching an object deleted since
        graph = previous.adjacency
        removed.update(graph.edge_id[graph.incident_edges(graph.numbers(gone), -np.inf)].tolist())
    pairs = _PairChanges(scope)
    for segment, _ in split:
        if segment.entry.key in then and died.get(segment.entry.key):
            # Gone from the graph: an owned edge has one live version (an update moves it to the new
            # version in the commit that deletes the old; a merge copies it in the one that drops its source).
            removed.update(pairs.rows(segment, died[segment.entry.key], -1).tolist())
    edges: dict[int, Edge] = {}  # added or weighed again
    for segment, rows in new:
        dead = segment.dead_rows
        pairs.rows(segment, [row for name in scope for row in range(*segment.namespace_slices.get(name, (0, 0)))
                             if row not in dead], 1)
        for namespace in scope:
            if namespace not in rows.edges:
                continue
            positions = rows.edges.positions(namespace)
            columns = rows.edges.columns
            co_mentioned = columns.types[positions] == columns.type_code(CO_MENTIONED)
            # Its CO_MENTIONED edges hold their own segment's weight: each is a pair an added row
            # mentions (weighed below where its count moved), as a write re-weighs a pair's stored edge.
            for edge in columns.graph_edges(positions[~co_mentioned]):
                if (namespace, edge.source) not in dead_ids and (namespace, edge.target) not in dead_ids:
                    edges[edge.edge_id] = edge
                    removed.discard(edge.edge_id)
    asked = pairs.moved()
    if asked is None:
        return None
    for namespace, firsts, seconds in asked:
        ends = [(uuid_of_bytes(first), uuid_of_bytes(second)) for first, second in zip(firsts.tolist(), seconds.tolist())]
        live = np.asarray([(namespace, first) not in dead_ids and (namespace, second) not in dead_ids
                           for first, second in ends], dtype=bool)  # else its edge went with the deleted end
        edge_ids = np.where(live, -1, -2)
        for segment, _ in reversed(split):  # the last stored edge of each pair
            missing = np.flatnonzero(edge_ids == -1)
            if not len(missing):
                break
            found = segment.edge_columns.co_mentioned_ids(namespace, firsts[missing], seconds[missing])
            edge_ids[missing] = np.where(found >= 0, found, -1)
        stored = np.flatnonzero(edge_ids >= 0)
        weighed = counts.counts(namespace, firsts[stored], seconds[stored])
        for at, edge_id, count in zip(stored.tolist(), edge_ids[stored].tolist(), weighed.tolist()):
            if count:
                edges[edge_id] = Edge(edge_id, *ends[at], CO_MENTIONED, co_mention_confidence(count))
                removed.discard(edge_id)
            else:
                edges.pop(edge_id, None)
                removed.add(edge_id)
    return ScopeGraph.of(previous.adjacency.updated(list(edges.values()), removed), split, scope)


def _resurrected(split: Split, new: Split,
                 then: Mapping[str, frozenset[int]], died: Mapping[str, Sequence[int]], scope: Scope) -> bool:
    """Whether an added segment holds a row of an id that had no live row when the graph was built
    (`then`: the earlier segments' rows deleted at the build; `died`: since): a deleted row of it
    then, and none of its rows live then (one live now in an earlier segment, or deleted since)."""
    earlier = [segment for segment, _ in split if segment.entry.key in then]
    dead = {(segment.namespace_at(row), segment.id_at(row)) for segment in earlier for row in then[segment.entry.key]}
    if not dead:
        return False
    since = {(segment.namespace_at(row), segment.id_at(row)) for segment in earlier for row in died.get(segment.entry.key, ())}
    for segment, _ in new:
        for name in scope:
            for row in range(*segment.namespace_slices.get(name, (0, 0))):
                key = (name, segment.id_at(row))
                if key in dead and key not in since and all(found.live_row(*key) is None for found in earlier):
                    return True
    return False


class _PairChanges:
    """The entity pairs of a scope whose count of live mentioning objects a change moved: per pair,
    the rows added (+1) and deleted (-1) that mention both entities, as arrays of 16-byte ids."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
        self._said: list[tuple[int, int, np.ndarray]] = []  # (namespace code, +1 or -1, the row's entities)

    def rows(self, segment: LoadedSegment, rows: Sequence[int], sign: int) -> np.ndarray:
        """Note what `rows` of `segment` mention, counted `sign` times; the ids of the edges they own."""
        columns = segment.edge_columns
        if not len(rows):
            return np.arange(0)
        owned = np.flatnonzero(_owned_mask(columns.rows, rows))
        mentions = owned[columns.types[owned] == columns.type_code(MENTIONS)]
        owners = columns.rows[mentions]
        targets = id_keys(columns.ends_at(mentions)[:, 16:])
        order = np.argsort(owners, kind="stable")
        owners, targets = owners[order], targets[order]
        starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1]))) if len(owners) else np.arange(0)
        for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(owners)]):
            namespace = self._scope.index(segment.namespace_at(int(owners[start])))
            self._said.append((namespace, sign, targets[start:end]))
        return columns.ids[owned].astype(np.int64)

    def moved(self) -> list[tuple[str, np.ndarray, np.ndarray]] | None:
        """Per namespace, the pairs (smaller ids, larger ids, as V16 columns) whose count moved: a
        pair an added row and a deleted row both mention (an update that kept a turn's names)
        keeps its count. None where more than MAX_EXTENDED_PAIRS pairs are mentioned."""
        net: dict[tuple[int, bytes], list] = {}  # rows that mention the same entities cancel out
        for namespace, sign, targets in self._said:
            found = net.setdefault((namespace, np.unique(targets).tobytes()), [0, targets])
            found[0] += sign
        said = [(namespace, int(np.sign(count)), targets) for (namespace, _), (count, targets) in net.items()
                for _ in range(abs(count))]
        if not said:
            return []
        keys, inverse = np.unique(np.concatenate([targets for _, _, targets in said]), return_inverse=True)
        size = len(keys)
        codes, signs, start = [], [], 0
        for namespace, sign, targets in said:
            entities = np.unique(inverse[start:start + len(targets)])
            start += len(targets)
            first, second = _pairs_of(len(entities))
            codes.append((namespace * size + entities[first]) * size + entities[second])
            signs.append(np.full(len(first), sign))
        pairs, pair_of = np.unique(np.concatenate(codes), return_inverse=True)
        if len(pairs) > MAX_EXTENDED_PAIRS:
            return None
        chosen = pairs[np.bincount(pair_of, weights=np.concatenate(signs), minlength=len(pairs)) != 0]
        namespaces, rest = np.divmod(chosen, size * size)
        firsts, seconds = np.divmod(rest, size)
        return [(self._scope[code], keys[firsts[namespaces == code]], keys[seconds[namespaces == code]])
                for code in np.unique(namespaces).tolist()]


@lru_cache(maxsize=256)
def _pairs_of(count: int) -> tuple[np.ndarray, np.ndarray]:
    """`np.triu_indices(count, 1)`: each pair of `count` things once, made once per count (a turn
    names a few to a few dozen)."""
    first, second = np.triu_indices(count, 1)
    first.flags.writeable = second.flags.writeable = False  # shared by every caller
    return first, second


def _owned_mask(owners: np.ndarray, rows: Sequence[int]) -> np.ndarray:
    """Which edges `rows` own (`owners`: each edge's owner row). A few rows are compared one at a
    time: `np.isin` takes 2 ms over the 860,000 edges of a merged LongMemEval-S segment for one row,
    a comparison 0.16."""
    if len(rows) > FEW_ROWS:
        return np.isin(owners, np.asarray(rows, dtype=np.int64))
    mask = owners == rows[0]
    for row in rows[1:]:
        mask |= owners == row
    return mask
