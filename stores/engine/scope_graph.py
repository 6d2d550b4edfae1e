"""The entity graph of a namespace scope, built from its segments' edge columns with array
operations: no edge becomes a Python object on the way (stores/engine/edge_columns.py).

What it computes is `StoreSnapshot.adjacency`'s rule: the live edges of the scope's namespaces,
a later segment's edge replacing an earlier one with the same id, an edge with a deleted end left
out, and every CO_MENTIONED edge weighed by the live objects mentioning both its entities
(`co_mention_confidence`), left out where none does. `CoMentionCounts` gives the same counts a
pair at a time, for what a write re-weighs (`scope_cache.extended_adjacency`, the writer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

import numpy as np

from rms_retrieval.stores.engine.edge_columns import CO_MENTIONED, EdgeColumns, id_keys, joined_ends
from rms_retrieval.stores.indexes.adjacency import Adjacency
from rms_retrieval.stores.engine.segments import NO_ROWS, LoadedSegment
from rms_retrieval.stores.indexes.entity_graph import co_mention_confidence


# The most cells (entities x mentioning rows, one byte each, each entity's rows padded to whole
# 64-bit words) of the table co_mention_counts looks co-mentions up in; a larger scope searches a
# sorted list instead.
DENSE_CELLS = 1 << 24
# What one word of the bit sets costs against one row looked up in the table: half (on the
# namespaces of a LongMemEval-S and a LoCoMo store, the bit sets took 0.45-0.75 of the lookups'
# time for as many numbers touched), so the bit sets are taken up to twice as many numbers.
BIT_WORD_SHARE = 2


@dataclass(frozen=True)
class EdgeBlock:
    """Some edges of one segment in one namespace: positions into the segment's edge columns."""

    namespace: str
    columns: EdgeColumns
    positions: np.ndarray


@dataclass(frozen=True)
class Mentions:
    """One segment's live MENTIONS of one namespace: (entity, row) pairs, each once."""

    entities: np.ndarray  # 16 bytes per entity id, as a V16 column
    rows: np.ndarray
    row_count: int


def mentions_of(columns: EdgeColumns, namespace: str, dead: np.ndarray | None, row_count: int) -> Mentions:
    """The live rows' MENTIONS edges of `namespace` in one segment."""
    entities, rows = columns.mention_ends(namespace)
    if dead is not None and len(rows):
        live = ~dead[rows]
        entities, rows = entities[live], rows[live]
    return Mentions(id_keys(entities), rows, row_count)


def co_mention_counts(sources: np.ndarray, targets: np.ndarray, keys: np.ndarray, segments: Sequence[Mentions],
                      dense_cells: int | None = None, by_bits: bool | None = None) -> np.ndarray:
    """For each (source, target) entity pair (codes into `keys`, the ids as a sorted V16 column),
    the live objects mentioning both, summed over `segments`; 0 unless source < target (pairs are
    stored smaller id first, and codes sort as ids do). Never a listing of every pair. Where the
    table of every (entity, mentioning row) has at most `dense_cells` (DENSE_CELLS) cells, a pair
    costs either the rows of its less mentioned entity, each looked up in that table, or one AND
    of the two entities' rows as bit sets, whichever costs less (BIT_WORD_SHARE; `by_bits` forces one);
    a larger scope searches for each row of the less mentioned entity."""
    dense_cells = DENSE_CELLS if dense_cells is None else dense_cells
    totals = np.zeros(len(sources), dtype=np.int64)
    ordered = np.flatnonzero(sources < targets)
    for mentions in segments:
        if not len(mentions.rows) or not len(ordered):
            continue
        entity_codes = _found(keys, mentions.entities)  # an entity no edge of the scope touches pairs with none
        known = entity_codes >= 0
        entity_keys, entity_of = np.unique(entity_codes[known], return_inverse=True)
        if not len(entity_keys):
            continue
        _, row_of = np.unique(mentions.rows[known], return_inverse=True)  # the mentioning rows, numbered densely
        stride = int(row_of.max()) + 1
        codes = np.unique(entity_of.astype(np.int64).reshape(-1) * stride + row_of.reshape(-1))  # by entity, then row
        indptr = np.searchsorted(codes // stride, np.arange(len(entity_keys) + 1))
        first = _found(entity_keys, sources[ordered])
        second = _found(entity_keys, targets[ordered])
        both = (first >= 0) & (second >= 0)
        pairs, first, second = ordered[both], first[both], second[both]
        first_count = indptr[first + 1] - indptr[first]
        second_count = indptr[second + 1] - indptr[second]
        fewer = np.where(first_count <= second_count, first, second)
        other = np.where(first_count <= second_count, second, first)
        lengths = np.minimum(first_count, second_count)
        dense = len(entity_keys) * stride <= dense_cells
        if dense:  # a table of every (entity, row), each entity's row padded to whole 64-bit words
            words = -(-stride // 64)
            table = np.zeros((len(entity_keys), words * 64), dtype=bool)
            table[codes // stride, codes % stride] = True
            if by_bits if by_bits is not None else len(pairs) * words < BIT_WORD_SHARE * int(lengths.sum()):
                bits = np.packbits(table, axis=1, bitorder="little").view(np.uint64)  # each entity's rows, 64 a word
                totals[pairs] += np.bitwise_count(bits[first] & bits[second]).sum(axis=1, dtype=np.int64)
                continue
        pair_of = np.repeat(np.arange(len(pairs)), lengths)
        starts = np.repeat(indptr[fewer] - (np.cumsum(lengths) - lengths), lengths)
        rows = codes[starts + np.arange(len(pair_of))] % stride  # each row of the less mentioned entity
        if dense:  # one lookup per row in the table
            hit = table[other[pair_of], rows]
        else:
            probes = other[pair_of] * stride + rows
            hit = codes[np.minimum(np.searchsorted(codes, probes), len(codes) - 1)] == probes
        totals[pairs] += np.bincount(pair_of[hit], minlength=len(pairs))
    return totals


def _found(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The position of each wanted key in the sorted, distinct `keys`, -1 where absent. Integer keys
    (codes) are looked up in a table; 16-byte ids are searched by their first 8 bytes as a number
    where those tell every key apart (searching the bytes themselves took 1.7 ms for a LongMemEval-S
    namespace's 15,000 mentions), by the bytes otherwise."""
    if not len(keys) or not len(wanted):
        return np.full(len(wanted), -1, dtype=np.int64)
    if keys.dtype.kind in "iu":
        table = np.full(int(keys.max()) + 1, -1, dtype=np.int64)
        table[keys] = np.arange(len(keys))
        inside = (wanted >= 0) & (wanted < len(table))
        return np.where(inside, table[np.where(inside, wanted, 0)], -1)
    prefixes = keys.view(">u8")[::2].astype(np.uint64)  # big-endian: numbers sort as the bytes do
    if np.all(prefixes[1:] > prefixes[:-1]):
        at = np.minimum(np.searchsorted(prefixes, wanted.view(">u8")[::2].astype(np.uint64)), len(keys) - 1)
    else:
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[at] == wanted, at, -1)


def scope_graph(blocks: Sequence[EdgeBlock], dead_ids: frozenset[tuple[str, UUID]],
                mentions: dict[str, list[Mentions]]) -> Adjacency:
    """The graph of the scope whose live edges `blocks` hold, in segment order; `dead_ids`: the
    store's deleted (namespace, id)s; `mentions`: per namespace, each segment's live MENTIONS."""
    blocks = [block for block in blocks if len(block.positions)]
    if not blocks:
        return Adjacency([])
    ids = np.concatenate([block.columns.ids[block.positions] for block in blocks]).astype(np.int64)
    keys, block_ends = joined_ends([(block.columns, block.positions) for block in blocks])
    ends = np.concatenate(block_ends).astype(np.int64)
    types = np.concatenate([np.asarray(block.columns.type_names, dtype=object)[block.columns.types[block.positions]]
                            for block in blocks])
    co_mentioned = np.concatenate([block.columns.types[block.positions] == block.columns.type_code(CO_MENTIONED)
                                   for block in blocks])  # codes, not the names: no string compared per edge
    confidence = np.concatenate([block.columns.confidences_at(block.positions) for block in blocks])
    names = sorted({block.namespace for block in blocks})
    namespace = np.concatenate([np.full(len(block.positions), names.index(block.namespace)) for block in blocks])
    if not np.all(ids[1:] > ids[:-1]):  # else every id is there once, in id order, as the search below leaves them
        _, last = np.unique(ids[::-1], return_index=True)  # a later segment's edge replaces one with its id
        keep = len(ids) - 1 - last
        ids, ends, types, confidence, namespace = ids[keep], ends[keep], types[keep], confidence[keep], namespace[keep]
        co_mentioned = co_mentioned[keep]
    sources, targets = ends[:, 0], ends[:, 1]
    alive = np.ones(len(ids), dtype=bool)
    for number, name in enumerate(names):
        dead = [memory_id.bytes for dead_namespace, memory_id in dead_ids if dead_namespace == name]
        if dead:
            gone = _found(keys, id_keys(np.frombuffer(b"".join(dead), dtype=np.uint8)))
            gone = gone[gone >= 0]
            alive &= ~((namespace == number) & (np.isin(sources, gone) | np.isin(targets, gone)))
    counts = np.zeros(len(ids), dtype=np.int64)
    for number, name in enumerate(names):
        chosen = np.flatnonzero(co_mentioned & alive & (namespace == number))
        counts[chosen] = co_mention_counts(sources[chosen], targets[chosen], keys, mentions.get(name, []))
    alive &= ~co_mentioned | (counts > 0)
    weighed = np.flatnonzero(co_mentioned & alive)
    distinct, which = np.unique(counts[weighed], return_inverse=True)  # each weight computed once, as a write does
    confidence[weighed] = np.asarray([co_mention_confidence(found) for found in distinct.tolist()], dtype=float)[which]
    return Adjacency.from_codes(ids[alive], keys, sources[alive], targets[alive], types[alive], confidence[alive])


class CoMentionCounts(Mapping[tuple[str, UUID, UUID], int]):
    """How many live objects mention both entities of a pair, summed over segments on lookup
    (`counter`, dead rows left out). Iterating lists every pair, as the
    tests need: quadratic in a long turn's names, so no query or write iterates it."""

    def __init__(self, segments: Sequence[LoadedSegment], namespaces: Iterable[str]) -> None:
        self._namespaces = frozenset(namespaces)
        # A MENTIONS edge lives in the segment of the row that owns it, so only those of the namespace count.
        self._segments = {namespace: [segment for segment in segments if namespace in segment.namespace_slices]
                          for namespace in self._namespaces}

    def mentions(self, namespace: str) -> list[Mentions]:
        """Each segment's live MENTIONS of `namespace`, as arrays (what `scope_graph` counts with)."""
        return [mentions_of(segment.edge_columns, namespace, segment.dead, segment.entry.rows)
                for segment in self._segments.get(namespace, ())]

    def count(self, key: tuple[str, UUID, UUID]) -> int:
        """The live objects mentioning both entities of `key`, 0 for none (or another namespace)."""
        return self.counter(key[0])(key[1], key[2])

    def counter(self, namespace: str) -> Callable[[UUID, UUID], int]:
        """`count` for one namespace's pairs (smaller id, larger id), for a loop over many: in each
        segment holding the namespace, the rows mentioning both entities (the intersection of
        their mentioning rows, `LoadedSegment.mentioners`) less its dead rows. No segment lists every
        pair its objects mention, which is quadratic in the names of a long turn."""
        parts = [(segment.mentioners(namespace), segment.dead_rows) for segment in self._segments.get(namespace, ())]

        def count(first: UUID, second: UUID) -> int:
            low, high = first.int, second.int
            if not low < high:
                return 0
            total = 0
            for mentioners, dead in parts:
                rows = mentioners.get(low)
                if rows:
                    both = rows & mentioners.get(high, NO_ROWS)
                    total += len(both - dead) if dead and both else len(both)
            return total
        return count

    def __getitem__(self, key: tuple[str, UUID, UUID]) -> int:
        total = self.count(key)
        if not total:
            raise KeyError(key)
        return total

    def __iter__(self) -> Iterator[tuple[str, UUID, UUID]]:
        keys = {key for namespace, segments in self._segments.items() for segment in segments
                for key in segment.co_mentions if key[0] == namespace}
        return iter(sorted(keys))

    def __len__(self) -> int:
        return sum(1 for _ in self)
