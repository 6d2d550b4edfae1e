"""Which rows of a segment mention each entity of a namespace, and which CO_MENTIONED edge joins
a pair of its entities, looked up one entity or one pair at a time.

A write re-weighs the entity pairs its new rows mention, counting the rows mentioning both
entities of each pair (`CoMentionCounts.counter`), and a graph brought up to date counts the pairs
whose count moved from the same sorted arrays, all at once (`CoMentionCounts.counts`). A LongMemEval-S namespace holds
thousands of MENTIONS edges in one segment: a mapping of every entity to its rows would cost about
10 ms of Python work per namespace for the few pairs a one-turn write asks about, so `Mentioners`
sorts the edges' targets once, as numbers, and makes the rows of an entity when it is asked for.
A write, and a graph brought up to date, also look up the edge of each pair they re-weigh (`PairEdges`):
a namespace's 70,000 CO_MENTIONED edges as sorted integers (the ends' codes in the segment), made
in 2-6 ms, where a dictionary by the ends' bytes takes 20-40 ms.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from rms_retrieval.stores.indexes.adjacency import key_ints, sorted_positions


class SortedIds:
    """Distinct ids as a sorted V16 column (16 big-endian bytes each), and the positions of ids in
    it: searched by their first 8 bytes as numbers where those tell every id apart (a search of the
    16-byte keys compares bytes in numpy's generic way: 1.7 ms for a LongMemEval-S namespace's
    15,000 mentions), by the bytes otherwise. `positions` searches many at once; `position` one as
    a scalar (about 4 µs, where `positions` of one takes 11), each answer kept."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys
        prefixes = _prefixes(keys)
        self._prefixes = prefixes if np.all(prefixes[1:] > prefixes[:-1]) else None
        self._positions: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def positions(self, wanted: np.ndarray) -> np.ndarray:
        """The position of each id of `wanted` (a V16 column) among the ids, -1 where absent."""
        if not len(self.keys):
            return np.full(len(wanted), -1, dtype=np.int64)
        if self._prefixes is None:
            at, held = sorted_positions(self.keys, wanted)
        else:  # distinct prefixes: where a prefix sorts is where its id would
            at = sorted_positions(self._prefixes, _prefixes(wanted))[0]
            held = self.keys[at] == wanted
        return np.where(held, at, -1)

    def position(self, key: bytes) -> int:
        """The position of the id `key` (16 bytes) among the ids, -1 where it is not one of them."""
        found = self._positions.get(key)
        if found is None:
            if self._prefixes is not None:
                at = int(np.searchsorted(self._prefixes, np.uint64(int.from_bytes(key[:8], "big"))))
            else:
                at = int(np.searchsorted(self.keys, np.frombuffer(key, dtype="V16"))[0])
            found = at if at < len(self.keys) and self.keys[at].tobytes() == key else -1
            self._positions[key] = found
        return found


def _prefixes(keys: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each V16 id as a number (big-endian: the numbers sort as the bytes do)."""
    return np.ascontiguousarray(keys).view(">u8")[::2].astype(np.uint64) if len(keys) else np.zeros(0, dtype=np.uint64)


class Mentioners(Mapping[int, frozenset[int]]):
    """Entity id's integer -> the owner rows of the MENTIONS edges into it (a mapping that compares
    equal to the dictionary of them): the targets sorted once by their two 64-bit halves, each
    entity's rows made on its first lookup and kept."""

    def __init__(self, targets: np.ndarray, owners: np.ndarray) -> None:
        """`targets`: rows of 16 id bytes (big-endian, as UUID.bytes), one per edge; `owners`: each edge's row."""
        targets = np.ascontiguousarray(targets, dtype=np.uint8).reshape(-1, 16)
        halves = targets.view(">u8").astype(np.uint64)
        high, low = halves[:, 0], halves[:, 1]
        order = np.lexsort((low, high))
        high, low = high[order], low[order]
        self._rows = np.asarray(owners, dtype=np.int64)[order]
        first = np.r_[True, (high[1:] != high[:-1]) | (low[1:] != low[:-1])] if len(order) else np.zeros(0, dtype=bool)
        starts = np.flatnonzero(first)
        self._ids = SortedIds(np.ascontiguousarray(targets[order[starts]]).view("V16").ravel())
        self._bounds = np.r_[starts, len(order)]
        self._made: dict[int, frozenset[int]] = {}

    def __getitem__(self, entity: int) -> frozenset[int]:
        made = self._made.get(entity)
        if made is not None:
            return made
        at = self._ids.position(entity.to_bytes(16, "big")) if type(entity) is int and 0 <= entity < 1 << 128 else -1
        if at < 0:
            raise KeyError(entity)
        return self._made.setdefault(entity, frozenset(self._rows[self._bounds[at]:self._bounds[at + 1]].tolist()))

    def ends(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge's target (rows of 16 id bytes) and owner row, by target: what `mention_ends`
        gives, in another order, from the arrays sorted once."""
        targets = np.repeat(self._ids.keys, np.diff(self._bounds))
        return np.frombuffer(targets.tobytes(), dtype=np.uint8).reshape(-1, 16), self._rows

    def __iter__(self) -> Iterator[int]:
        return iter(key_ints(self._ids.keys))

    def __len__(self) -> int:
        return len(self._ids)


class PairEdges:
    """The id of the edge stored for each (source, target) pair of ids, the last stored where a
    pair has several: each edge's two ends as codes into its segment's distinct end ids (sorted
    16-byte keys), one integer per pair, sorted once (stably); a lookup finds the two ids' codes
    and then the pair's, by search."""

    def __init__(self, codes: np.ndarray, ids: np.ndarray, end_keys: np.ndarray) -> None:
        """`codes`: per edge, (source, target) as positions in `end_keys` (a V16 column of distinct
        ids); `ids`: each edge's id, in stored order."""
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, 2)
        if len(end_keys) > 1 and not np.all(end_keys[1:].view("S16") > end_keys[:-1].view("S16")):
            end_keys, renumbered = np.unique(end_keys, return_inverse=True)  # sorted, each once
            codes = renumbered.reshape(-1)[codes]
        pairs = codes[:, 0] * len(end_keys) + codes[:, 1]
        self._order = np.argsort(pairs, kind="stable")
        self._pairs, self._ids, self._ends = pairs[self._order], np.asarray(ids), SortedIds(end_keys)

    def get_each(self, sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """`get` of each (source, target) pair of two V16 columns at once, -1 for none."""
        first, second = self._ends.positions(sources), self._ends.positions(targets)
        pairs = first * len(self._ends) + second
        stop = np.searchsorted(self._pairs, pairs, side="right")
        found = (first >= 0) & (second >= 0) & (stop > 0)
        found[found] = self._pairs[stop[found] - 1] == pairs[found]
        ids = self._ids[self._order[np.maximum(stop, 1) - 1]].astype(np.int64) if len(self._order) else -1
        return np.where(found, ids, -1)

    def get(self, source: bytes, target: bytes) -> int | None:
        """The id of the last edge stored from `source` to `target` (16 bytes each), None for none."""
        first, second = self._ends.position(source), self._ends.position(target)
        if first < 0 or second < 0:
            return None
        pair = first * len(self._ends) + second
        stop = int(np.searchsorted(self._pairs, pair, side="right"))
        if not stop or self._pairs[stop - 1] != pair:
            return None
        return int(self._ids[self._order[stop - 1]])  # among equal pairs, in stored order: the last
