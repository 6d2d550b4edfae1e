"""A segment's edges grouped by owner row and by target entity, and its co-mention counts over
every row less the dead ones: what updates, deletes and `rms check` read of a segment's edges
(`LoadedSegment.edge_index`), beside the arrays a query reads (edge_columns.py).

The groups are positions into the edge columns, sorted once (by owner row; the owned MENTIONS
and SPOKEN_BY edges by namespace, then target): an update or a delete decodes only the edges of
the rows it changes and reads the owners of the entities they named, where it decoded every edge
of the segment into objects (0.5 s and 140,000 objects for the garbage collector to scan for as
long as the segment lived, on the first update of a LoCoMo store's one segment).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from functools import cached_property
from itertools import combinations
from uuid import UUID

import numpy as np

from rms_retrieval.stores.engine.edge_columns import MENTIONS, SPOKEN_BY, EdgeColumns, StoredEdge, id_keys
from rms_retrieval.stores.indexes.adjacency import code_of, uuid_of_bytes


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
    """One segment's edges by owner row, its owners by target entity, and co-mention counts over
    every row (what a deletion file subtracts from), as positions into `columns`."""

    def __init__(self, columns: EdgeColumns) -> None:
        self._columns = columns
        rows = np.asarray(columns.rows, dtype=np.int64)
        owned = np.flatnonzero(rows >= 0)
        # Stable sorts: within one owner, and within one target, the edges keep their stored order.
        self._by_owner = owned[np.argsort(rows[owned], kind="stable")]
        self._owners = rows[self._by_owner]
        kinds = [code for code in (columns.type_code(MENTIONS), columns.type_code(SPOKEN_BY)) if code >= 0]
        into = owned[np.isin(columns.types[owned], kinds)]
        targets = id_keys(columns.ends_at(into)[:, 16:])
        by_target = np.argsort(targets, kind="stable")
        order = by_target[np.argsort(columns.namespaces[into][by_target], kind="stable")]
        self._into, self._into_targets = into[order], targets[order]
        self._into_namespaces = np.asarray(columns.namespaces)[self._into]

    def owned(self, row: int) -> np.ndarray:
        """The positions of the edges `row`'s analysis made, in stored order (none for a row that made none)."""
        start, end = np.searchsorted(self._owners, [row, row + 1])
        return self._by_owner[start:end]

    def owned_edges(self, row: int) -> tuple[StoredEdge, ...]:
        """The edges `row`'s analysis made, decoded, in stored order."""
        return self._columns.decoded(self.owned(row))

    def owners_into(self, namespace: str, entity: UUID) -> list[tuple[int, str]]:
        """(owner row, MENTIONS or SPOKEN_BY) of the owned edges into `entity` in `namespace`, in stored order."""
        code = code_of(self._columns.namespace_names, namespace)
        start, end = np.searchsorted(self._into_namespaces, [code, code + 1])
        targets = self._into_targets[start:end]
        key = np.frombuffer(entity.bytes, dtype="V16")
        first, last = start + np.searchsorted(targets, key, "left")[0], start + np.searchsorted(targets, key, "right")[0]
        positions = self._into[first:last]
        names = self._columns.type_names
        return [(row, names[kind]) for row, kind in zip(self._columns.rows[positions].tolist(),
                                                        self._columns.types[positions].tolist())]

    @cached_property
    def co_mentions(self) -> Counter[tuple[str, UUID, UUID]]:
        """Per (namespace, smaller id, larger id): how many rows mention both (a full listing, every row's pairs)."""
        counts: Counter[tuple[str, UUID, UUID]] = Counter()
        first_of = np.unique(self._owners, return_index=True)[1]
        for row in self._owners[np.sort(first_of)].tolist():  # in the order the rows' first edges are stored
            counts.update(self.pairs_of(row))
        return counts

    def pairs_of(self, row: int) -> list[tuple[str, UUID, UUID]]:
        """The (namespace, smaller id, larger id) entity pairs the object of `row` mentions."""
        columns = self._columns
        positions = self.owned(row)
        positions = positions[columns.types[positions] == columns.type_code(MENTIONS)]
        if not len(positions):
            return []
        namespace = columns.namespace_names[int(columns.namespaces[positions[0]])]
        targets = {uuid_of_bytes(bytes(end)) for end in columns.ends_at(positions)[:, 16:]}
        return [(namespace, first, second) for first, second in combinations(sorted(targets), 2)]
