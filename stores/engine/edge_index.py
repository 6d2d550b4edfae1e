"""A segment's edges grouped by owner row and by target entity, and its co-mention counts over
every row less the dead ones: what updates, deletes and `rms check` read of the edges a segment
decodes whole (`LoadedSegment.edge_index`), beside the arrays a query reads (edge_columns.py)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from functools import cached_property
from itertools import combinations
from uuid import UUID

from rms_retrieval.stores.engine.edge_columns import MENTIONS, SPOKEN_BY, StoredEdge


class LiveCounts(Mapping[tuple[str, UUID, UUID], int]):
    """Counts over every row less those of the dead rows; a pair no live row counts is absent."""

    def __init__(self, every: Mapping[tuple[str, UUID, UUID], int], dead: Mapping[tuple[str, UUID, UUID], int]) -> None:
        self._every, self._dead = every, dead

    def __getitem__(self, key: tuple[str, UUID, UUID]) -> int:
        count = self._every[key] - self._dead.get(key, 0)
        if count <= 0:
            raise KeyError(key)
        return count

    def __iter__(self):
        return (key for key, count in self._every.items() if count > self._dead.get(key, 0))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class EdgeIndex:
    """One segment's edges grouped by owner row, its owners by target entity, and co-mention
    counts over every row (what a deletion file subtracts from)."""

    def __init__(self, edges: Sequence[StoredEdge]) -> None:
        self._edges = edges
        self.by_owner: dict[int, list[int]] = defaultdict(list)
        # (namespace, entity) -> (owner row, MENTIONS or SPOKEN_BY) of the edges into it
        self.owners_into: dict[tuple[str, UUID], list[tuple[int, str]]] = defaultdict(list)
        for position, stored in enumerate(edges):
            if stored.row is not None and stored.row >= 0:
                self.by_owner[stored.row].append(position)
                if stored.edge.edge_type in (MENTIONS, SPOKEN_BY):
                    self.owners_into[(stored.namespace, stored.edge.target)].append((stored.row, stored.edge.edge_type))

    @cached_property
    def co_mentions(self) -> Counter[tuple[str, UUID, UUID]]:
        counts: Counter[tuple[str, UUID, UUID]] = Counter()
        for row in self.by_owner:
            counts.update(self.pairs_of(row))
        return counts

    def pairs_of(self, row: int) -> list[tuple[str, UUID, UUID]]:
        """The (namespace, smaller id, larger id) entity pairs the object of `row` mentions."""
        mentioned = [self._edges[position] for position in self.by_owner.get(row, ())
                     if self._edges[position].edge.edge_type == MENTIONS]
        if not mentioned:
            return []
        namespace = mentioned[0].namespace
        return [(namespace, first, second)
                for first, second in combinations(sorted({stored.edge.target for stored in mentioned}), 2)]
