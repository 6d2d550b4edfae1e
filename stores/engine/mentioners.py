"""Which rows of a segment mention each entity of a namespace, looked up one entity at a time.

A write re-weighs the entity pairs its new rows mention, and the graph it extends counts the rows
mentioning both entities of each pair (`CoMentionCounts.counter`). A LongMemEval-S namespace holds
thousands of MENTIONS edges in one segment; a mapping of every entity to its rows, made before the
first lookup, took about 10 ms of Python work per namespace, for the few pairs a one-turn write
asks about. `Mentioners` sorts the edges' targets once, as numbers, and makes the rows of an
entity when it is asked for.
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
