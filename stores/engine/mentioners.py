"""Which rows of a segment mention each entity of a namespace, and which CO_MENTIONED edge joins
a pair of its entities, looked up one entity or one pair at a time.

A write re-weighs the entity pairs its new rows mention, and the graph it extends counts the rows
mentioning both entities of each pair (`CoMentionCounts.counter`). A LongMemEval-S namespace holds
thousands of MENTIONS edges in one segment: a mapping of every entity to its rows would cost about
10 ms of Python work per namespace for the few pairs a one-turn write asks about, so `Mentioners`
sorts the edges' targets once, as numbers, and makes the rows of an entity when it is asked for.
A write, and the graph it extends, also look up the edge of each pair they re-weigh (`PairEdges`):
a namespace's 70,000 CO_MENTIONED edges as sorted integers (the ends' codes in the segment), made
in 2-6 ms, where a dictionary by the ends' bytes takes 20-40 ms.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np


class Mentioners(Mapping[int, frozenset[int]]):
    """Entity id's integer -> the owner rows of the MENTIONS edges into it (a mapping that compares
    equal to the dictionary of them): the targets sorted once by their two 64-bit halves, each
    entity's rows made on its first lookup and kept."""

    def __init__(self, targets: np.ndarray, owners: np.ndarray) -> None:
        """`targets`: rows of 16 id bytes (big-endian, as UUID.bytes), one per edge; `owners`: each edge's row."""
        halves = np.ascontiguousarray(targets, dtype=np.uint8).reshape(-1, 16).view(">u8").astype(np.uint64)
        high, low = halves[:, 0], halves[:, 1]
        order = np.lexsort((low, high))
        high, low = high[order], low[order]
        self._rows = np.asarray(owners, dtype=np.int64)[order]
        first = np.r_[True, (high[1:] != high[:-1]) | (low[1:] != low[:-1])] if len(order) else np.zeros(0, dtype=bool)
        starts = np.flatnonzero(first)
        self._high, self._low = high[starts], low[starts]
        self._bounds = np.r_[starts, len(order)]
        self._made: dict[int, frozenset[int]] = {}

    def _place(self, entity: int) -> int:
        """The position of `entity` among the distinct targets, -1 where no edge targets it."""
        if not 0 <= entity < 1 << 128:
            return -1
        high, low = entity >> 64, entity & 0xFFFF_FFFF_FFFF_FFFF
        start = int(np.searchsorted(self._high, high, side="left"))
        stop = int(np.searchsorted(self._high, high, side="right"))
        if start == stop:
            return -1
        at = start + int(np.searchsorted(self._low[start:stop], low))
        return at if at < stop and int(self._low[at]) == low else -1

    def __getitem__(self, entity: int) -> frozenset[int]:
        made = self._made.get(entity)
        if made is not None:
            return made
        at = self._place(entity) if type(entity) is int else -1
        if at < 0:
            raise KeyError(entity)
        return self._made.setdefault(entity, frozenset(self._rows[self._bounds[at]:self._bounds[at + 1]].tolist()))

    def __iter__(self) -> Iterator[int]:
        return ((high << 64) | low for high, low in zip(self._high.tolist(), self._low.tolist()))

    def __len__(self) -> int:
        return len(self._high)


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
        self._pairs, self._ids, self._end_keys = pairs[self._order], np.asarray(ids), end_keys
        # Ids searched by their first 8 bytes as a number where those tell every id apart (a
        # search of the 16-byte keys compares bytes in Python's generic way); each id's code kept.
        prefixes = end_keys.view(">u8")[::2].astype(np.uint64) if len(end_keys) else np.zeros(0, dtype=np.uint64)
        self._prefixes = prefixes if np.all(prefixes[1:] > prefixes[:-1]) else None
        self._codes: dict[bytes, int] = {}

    def _code(self, key: bytes) -> int:
        """The position of the id `key` (16 bytes) among the end ids, -1 where no edge has it."""
        found = self._codes.get(key)
        if found is None:
            if self._prefixes is not None:
                at = int(np.searchsorted(self._prefixes, np.uint64(int.from_bytes(key[:8], "big"))))
            else:
                at = int(np.searchsorted(self._end_keys, np.frombuffer(key, dtype="V16"))[0])
            found = at if at < len(self._end_keys) and self._end_keys[at].tobytes() == key else -1
            self._codes[key] = found
        return found

    def get(self, source: bytes, target: bytes) -> int | None:
        """The id of the last edge stored from `source` to `target` (16 bytes each), None for none."""
        first, second = self._code(source), self._code(target)
        if first < 0 or second < 0:
            return None
        pair = first * len(self._end_keys) + second
        stop = int(np.searchsorted(self._pairs, pair, side="right"))
        if not stop or self._pairs[stop - 1] != pair:
            return None
        return int(self._ids[self._order[stop - 1]])  # among equal pairs, in stored order: the last
