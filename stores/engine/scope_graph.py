"""The entity graph of a namespace scope, built from its segments' edge columns with array
operations: no edge becomes a Python object on the way (stores/engine/edge_columns.py).

What it computes is `StoreSnapshot.adjacency`'s rule: the live edges of the scope's namespaces,
a later segment's edge replacing an earlier one with the same id, an edge with a deleted end left
out, and every CO_MENTIONED edge weighed by the live objects mentioning both its entities
(`co_mention_confidence`), left out where none does. A segment written by this code stores, as
each of its CO_MENTIONED edges' confidence, the weight of its own rows mentioning both ends
(`counted_confidences`), so a graph counts only the other segments' rows for that edge.
`CoMentionCounts` gives the same counts a pair at a time, for what a write re-weighs, or for
many pairs at once, for a graph brought up to date (stores/engine/graph_extension.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from uuid import UUID

import numpy as np

from rms_retrieval.stores.engine.edge_columns import CO_MENTIONED, MENTIONS, EdgeColumns, grouped_by_code, id_keys, joined_ends
from rms_retrieval.stores.indexes.adjacency import Adjacency, code_of, sorted_positions
from rms_retrieval.stores.engine.mentioners import SortedIds
from rms_retrieval.stores.engine.segment_parquet import consecutive_run
from rms_retrieval.stores.engine.segments import NO_ROWS, LoadedSegment
from rms_retrieval.stores.indexes.entity_graph import (CO_MENTION_BASE, CO_MENTION_STEP, CO_MENTIONS_SATURATED,
                                                       co_mention_confidence)


# What `_own_counts` gives for an edge of a segment that did not count its rows.
NOT_COUNTED = -1
# `co_mention_confidence` of 0 to CO_MENTIONS_SATURATED objects (`_weights`).
_WEIGHTS = np.asarray([co_mention_confidence(count) for count in range(CO_MENTIONS_SATURATED + 1)], dtype=float)
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
    """Some edges of one segment in one namespace: positions into the segment's edge columns, or
    the slice of them they cover (`LiveEdgeGroups.where`)."""

    namespace: str
    columns: EdgeColumns
    positions: np.ndarray | slice

    def __len__(self) -> int:
        return len(range(*self.positions.indices(len(self.columns)))) if isinstance(self.positions, slice) \
            else len(self.positions)

    @property
    def where(self) -> np.ndarray | slice:
        """Where the block's edges are read from: a slice of the columns (views) where they lie together."""
        if isinstance(self.positions, slice):
            return self.positions
        run = consecutive_run(self.positions, len(self.columns))
        return self.positions if run is None else run


@dataclass(frozen=True)
class Mentions:
    """One segment's live MENTIONS of one namespace: (entity, row) pairs, each once."""

    entities: np.ndarray  # 16 bytes per entity id, as a V16 column
    rows: np.ndarray
    row_count: int


def mentions_of(columns: EdgeColumns, namespace: str, dead: np.ndarray | None, row_count: int,
                deleted: bool = False) -> Mentions:
    """The live rows' MENTIONS edges of `namespace` in one segment (`deleted`: the dead rows' instead)."""
    return _chosen_mentions(*columns.mention_ends(namespace), dead, row_count, deleted)


def _chosen_mentions(entities: np.ndarray, rows: np.ndarray, dead: np.ndarray | None, row_count: int,
                     deleted: bool) -> Mentions:
    if dead is not None and len(rows):
        chosen = dead[rows] if deleted else ~dead[rows]
        entities, rows = entities[chosen], rows[chosen]
    elif deleted:
        entities, rows = entities[:0], rows[:0]
    return Mentions(id_keys(entities), rows, row_count)


@dataclass(frozen=True)
class SegmentMentions:
    """One segment's MENTIONS of one namespace, read as arrays only when a count needs them, and
    its edge columns, whose CO_MENTIONED confidences, where counted (`counted_confidences`), stand
    in for counting the segment's own rows again for its own CO_MENTIONED edges."""

    columns: EdgeColumns
    namespace: str
    dead: np.ndarray | None  # per row, True where deleted (None: no row is)
    row_count: int

    @cached_property
    def live(self) -> Mentions:
        return _chosen_mentions(*self._ends, self.dead, self.row_count, False)

    @cached_property
    def deleted(self) -> Mentions:
        """The dead rows' MENTIONS: what a stored count, made before they died, holds too many."""
        return _chosen_mentions(*self._ends, self.dead, self.row_count, True)

    @cached_property
    def _ends(self) -> tuple[np.ndarray, np.ndarray]:
        """Every MENTIONS edge's entity and row (read once for the live and the dead rows)."""
        return self.columns.mention_ends(self.namespace)


def stored_co_mentions(columns: EdgeColumns, row_count: int) -> np.ndarray:
    """Per edge of a segment being written, how many of its rows (of `row_count`) mention both ends
    of a CO_MENTIONED edge (0 for any other edge, or where source > target). The edges are grouped
    by namespace in one sort, as a merged segment can hold thousands of namespaces."""
    counts = np.zeros(len(columns), dtype=np.int64)
    co_mentioned = np.flatnonzero(columns.types == columns.type_code(CO_MENTIONED))
    mentions = np.flatnonzero((columns.types == columns.type_code(MENTIONS)) & (columns.rows >= 0))
    mention_groups = dict(grouped_by_code(columns.namespaces, mentions))
    for code, chosen in grouped_by_code(columns.namespaces, co_mentioned):
        said = mention_groups.get(code, mentions[:0])
        keys, (ends,) = joined_ends([(columns, chosen)])
        found = Mentions(id_keys(columns.ends_at(said)[:, 16:]), columns.rows[said], row_count)
        counts[chosen] = co_mention_counts(ends[:, 0], ends[:, 1], keys, [found])
    return counts


def counted_confidences(columns: EdgeColumns, row_count: int) -> np.ndarray:
    """The confidences a segment being written stores: each CO_MENTIONED edge's weighs the rows of
    this segment that mention both its ends (`co_mention_confidence`, dead rows too: a deletion
    comes later), every other edge's as given. A scope's graph reads this segment's count back
    from it (`_own_counts`) instead of counting these rows again, and counts only the other
    segments' rows: no array is added to the segment."""
    confidences = columns.confidences_at(slice(None)).copy()
    chosen = np.flatnonzero(columns.types == columns.type_code(CO_MENTIONED))
    confidences[chosen] = _weights(stored_co_mentions(columns, row_count)[chosen])
    return confidences


def _weights(counts: np.ndarray) -> np.ndarray:
    """`co_mention_confidence` of each count, from a table (every count from CO_MENTIONS_SATURATED
    on weighs the same)."""
    return _WEIGHTS[np.minimum(counts, CO_MENTIONS_SATURATED)]


def _own_counts(columns: EdgeColumns, positions: np.ndarray | slice, count: int) -> np.ndarray:
    """Per CO_MENTIONED edge at `positions`, the count of its own segment's rows that its stored
    confidence gives (`co_mention_confidence` backwards: CO_MENTIONS_SATURATED stands for that
    many rows or more), or NOT_COUNTED where the segment did not count (`counted_confidences`)."""
    if not columns.counted:
        return np.full(count, NOT_COUNTED, dtype=np.int64)
    return columns.counts_at(positions, CO_MENTION_BASE, CO_MENTION_STEP)


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
    paired = None  # where few pairs are asked of many mentions: the entities they name
    if 2 * len(ordered) < sum(len(mentions.rows) for mentions in segments):
        named = np.concatenate([sources[ordered], targets[ordered]])
        paired = np.zeros(len(keys), dtype=bool)
        paired[named[named < len(keys)]] = True
    for mentions in segments:
        if not len(mentions.rows) or not len(ordered):
            continue
        entity_codes = _found(keys, mentions.entities)  # an entity no edge of the scope touches pairs with none
        known = entity_codes >= 0
        if paired is not None:  # an entity no asked pair names counts for none
            known[known] = paired[entity_codes[known]]
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
            hit = sorted_positions(codes, probes)[1]
        totals[pairs] += np.bincount(pair_of[hit], minlength=len(pairs))
    return totals


def dead_keys(dead_ids: Iterable[tuple[str, UUID]]) -> dict[str, np.ndarray]:
    """The deleted (namespace, id)s as, per namespace, its ids' 16-byte keys (V16), sorted, once each."""
    grouped: dict[str, list[bytes]] = {}
    for namespace, memory_id in dead_ids:
        grouped.setdefault(namespace, []).append(memory_id.bytes)
    return {namespace: np.unique(id_keys(np.frombuffer(b"".join(ids), dtype=np.uint8))) for namespace, ids in grouped.items()}


def _found(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The position of each wanted key in the sorted, distinct `keys`, -1 where absent. Integer keys
    (codes) are looked up in a table; 16-byte ids are searched as `SortedIds` searches them."""
    if not len(keys) or not len(wanted):
        return np.full(len(wanted), -1, dtype=np.int64)
    if keys.dtype.kind in "iu":
        table = np.full(int(keys.max()) + 1, -1, dtype=np.int64)
        table[keys] = np.arange(len(keys))
        inside = (wanted >= 0) & (wanted < len(table))
        return np.where(inside, table[np.where(inside, wanted, 0)], -1)
    return SortedIds(keys).positions(wanted)


def _scope_counts(pairs: np.ndarray, sources: np.ndarray, targets: np.ndarray, keys: np.ndarray,
                  stored: np.ndarray, block_of: np.ndarray | None, blocks: Sequence[EdgeBlock],
                  segments: Sequence[SegmentMentions]) -> np.ndarray:
    """The live objects mentioning both ends of each edge of `pairs`, summed over `segments`: for
    an edge whose own segment counted its rows (`stored`, `_own_counts`), that count less the
    segment's dead rows' share; for the rest, counted from each segment's live MENTIONS. A stored
    count of CO_MENTIONS_SATURATED stands for that many rows or more, and weighs as they do: it
    stands where no dead row of its segment mentions both ends, and the live rows are counted
    where one does. `block_of`: each edge's block, None where there is one block."""
    totals = np.zeros(len(pairs), dtype=np.int64)
    sources, targets, stored = sources[pairs], targets[pairs], stored[pairs]
    block_of = np.zeros(len(pairs), dtype=np.int64) if block_of is None else block_of[pairs]
    for segment in segments:
        own = (stored >= 0) & np.isin(block_of, [number for number, block in enumerate(blocks) if block.columns is segment.columns])
        counted = np.zeros(len(pairs), dtype=bool)
        if own.any():
            mine = np.flatnonzero(own)
            counts = stored[mine]
            if segment.dead is not None:
                gone = co_mention_counts(sources[mine], targets[mine], keys, [segment.deleted])
                stands = (counts < CO_MENTIONS_SATURATED) | (gone == 0)  # else its live rows are counted below
                mine, counts = mine[stands], (counts - gone)[stands]
            totals[mine] += counts
            counted[mine] = True
        if not counted.all():
            other = ~counted
            totals[other] += co_mention_counts(sources[other], targets[other], keys, [segment.live])
    return totals


def _stored_counts_hold(chosen: np.ndarray, stored: np.ndarray, blocks: Sequence[EdgeBlock],
                        segments: Sequence[SegmentMentions]) -> bool:
    """Whether the `chosen` edges' stored counts (`_own_counts`) are their scope counts: one segment
    with no dead row holds every edge, and counted its rows for each chosen one."""
    return (len(segments) == 1 and segments[0].dead is None and all(block.columns is segments[0].columns for block in blocks)
            and not (chosen & (stored < 0)).any())


def _joined(parts: Sequence[np.ndarray]) -> np.ndarray:
    """`np.concatenate(parts)`, or the one part itself (an array only read, never written)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _in_namespace(namespace: np.ndarray | None, number: int) -> np.ndarray | bool:
    """Which edges are of the scope's `number`th namespace (`namespace`: each edge's; None: one namespace)."""
    return True if namespace is None else namespace == number


def scope_graph(blocks: Sequence[EdgeBlock], dead_ids: frozenset[tuple[str, UUID]],
                mentions: dict[str, list[SegmentMentions]]) -> Adjacency:
    """The graph of the scope whose live edges `blocks` hold, in segment order; `dead_ids`: the
    store's deleted (namespace, id)s; `mentions`: per namespace, each segment's MENTIONS."""
    blocks = [block for block in blocks if len(block)]
    if not blocks:
        return Adjacency([])
    at = [block.where for block in blocks]
    ids = _joined([block.columns.ids[where] for block, where in zip(blocks, at)])  # as stored: the smallest integers
    keys, block_ends = joined_ends([(block.columns, where) for block, where in zip(blocks, at)])
    ends = _joined(block_ends)  # node numbers (intp), as the graph keeps them
    # Types as codes into the blocks' type names (each segment numbers its own): no string per edge.
    type_names = tuple(sorted({name for block in blocks for name in block.columns.type_names}))
    if len(blocks) == 1 and blocks[0].columns.type_names == type_names:  # its codes are the scope's
        types = blocks[0].columns.types[at[0]]
    else:
        types = np.concatenate([np.asarray([type_names.index(name) for name in block.columns.type_names],
                                           dtype=np.int64)[block.columns.types[where]] for block, where in zip(blocks, at)])
    confidence = _joined([block.columns.confidences_at(where) for block, where in zip(blocks, at)])
    if confidence.base is not None:  # a view of the segment's column: CO_MENTIONED weights are written below
        confidence = confidence.copy()
    names = sorted({block.namespace for block in blocks})
    # Each edge's namespace and block as codes, where there is more than one (None: all the same).
    namespace = None if len(names) == 1 else np.concatenate(
        [np.full(len(block), names.index(block.namespace)) for block in blocks])
    block_of = None if len(blocks) == 1 else np.concatenate(
        [np.full(len(block), number) for number, block in enumerate(blocks)])
    stored = _joined([_own_counts(block.columns, where, len(block)) for block, where in zip(blocks, at)])
    replaced = not np.all(ids[1:] > ids[:-1])  # else every id is there once, in id order
    if replaced:
        _, last = np.unique(ids[::-1], return_index=True)  # a later segment's edge replaces one with its id
        keep = len(ids) - 1 - last
        ids, ends, types, confidence, stored = ids[keep], ends[keep], types[keep], confidence[keep], stored[keep]
        namespace = None if namespace is None else namespace[keep]
        block_of = None if block_of is None else block_of[keep]
    co_mentioned = types == code_of(type_names, CO_MENTIONED)
    sources, targets = ends[:, 0], ends[:, 1]
    alive = np.ones(len(ids), dtype=bool)
    dead_by_namespace = dead_keys(dead_ids)
    for number, name in enumerate(names):
        if name in dead_by_namespace:
            gone = _found(keys, dead_by_namespace[name])
            gone = gone[gone >= 0]
            alive &= ~(_in_namespace(namespace, number) & (np.isin(sources, gone) | np.isin(targets, gone)))
    counts = np.zeros(len(ids), dtype=np.int64)
    for number, name in enumerate(names):
        chosen = co_mentioned & alive & _in_namespace(namespace, number)
        segments = mentions.get(name, [])
        if _stored_counts_hold(chosen, stored, blocks, segments):
            np.copyto(counts, stored, where=chosen)  # in place: no copy of a long namespace's counts
        else:
            counts[chosen] = _scope_counts(np.flatnonzero(chosen), sources, targets, keys, stored, block_of, blocks,
                                           segments)
    alive &= ~co_mentioned | (counts > 0)
    # Weighed in place, through one array of weights: no copy of the 80,000 counts of a long
    # namespace's edges made three times over (each fresh array's pages fault in again).
    np.copyto(confidence, _WEIGHTS[np.minimum(counts, CO_MENTIONS_SATURATED, out=counts)], where=co_mentioned & alive)
    if not replaced and alive.all():  # every edge stays, so every end of `keys` is a node (no copies either)
        return Adjacency.from_codes(ids, keys, sources, targets, types, type_names, confidence, every_key_used=True)
    return Adjacency.from_codes(ids[alive], keys, sources[alive], targets[alive], types[alive], type_names, confidence[alive])


class CoMentionCounts(Mapping[tuple[str, UUID, UUID], int]):
    """How many live objects mention both entities of a pair, summed over segments on lookup
    (`counter`, dead rows left out). Iterating lists every pair, as the
    tests need: quadratic in a long turn's names, so no query or write iterates it."""

    def __init__(self, segments: Sequence[LoadedSegment], namespaces: Iterable[str]) -> None:
        self._namespaces = frozenset(namespaces)
        # A MENTIONS edge lives in the segment of the row that owns it, so only those of the namespace count.
        self._segments = {namespace: [segment for segment in segments if namespace in segment.namespace_slices]
                          for namespace in self._namespaces}

    def mentions(self, namespace: str) -> list[SegmentMentions]:
        """Each segment's MENTIONS of `namespace` (what `scope_graph` counts with)."""
        return [SegmentMentions(segment.edge_columns, namespace, segment.dead, segment.entry.rows)
                for segment in self._segments.get(namespace, ())]

    def counts(self, namespace: str, firsts: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """`count` of each pair of two V16 columns (smaller ids, larger ids), counted together from
        each segment's MENTIONS of the namespace as its `Mentioners` keeps them sorted."""
        keys, codes = np.unique(np.concatenate([firsts, seconds]), return_inverse=True)
        mentions = [_chosen_mentions(*segment.mentioners(namespace).ends(), segment.dead, segment.entry.rows, False)
                    for segment in self._segments.get(namespace, ())]
        return co_mention_counts(codes[:len(firsts)], codes[len(firsts):], keys, mentions)

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
