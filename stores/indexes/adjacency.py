"""The entity graph of one namespace scope as arrays: each edge's two ends (node numbers), its
confidence, id and type, in edge-id order.

The graph walk asks for the edges around a frontier once per hop, found by marking the frontier's
nodes and reading both ends of every edge against the marks: a pass over the edges, as the
per-node lists it replaced cost (their union was made through a mask of every edge), with no
index to sort when a namespace's graph is first built. Nodes are numbered in UUID order and edges
in edge-id order, so sorting numbers sorts ids. A store builds one per namespace scope from its
segments' edge columns (`from_codes`: no edge becomes a Python object) and, after a write that
only added to the scope, updates it (`updated`); a list of `Edge` builds one too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property
from uuid import UUID, SafeUUID

import numpy as np

from rms_retrieval.stores.protocols import Edge


class Adjacency:
    """Edges in edge-id order as arrays (`source`, `target` node numbers, `confidence`,
    `edge_id`, `edge_type`) and the node ids in UUID order. No edge is a Python object:
    `touching` makes the ones it returns."""

    def __init__(self, edges: Sequence[Edge]) -> None:
        count = len(edges)
        # Nodes in UUID order: 16 big-endian bytes sort as the UUID's integer does.
        keys, codes = np.unique(uuid_keys([e.source for e in edges] + [e.target for e in edges]), return_inverse=True)
        codes = codes.reshape(-1)
        type_names = tuple(dict.fromkeys(e.edge_type for e in edges))
        self._from_codes(
            np.fromiter((e.edge_id for e in edges), dtype=np.int64, count=count), keys, codes[:count], codes[count:],
            _type_codes([e.edge_type for e in edges], type_names), type_names,
            np.fromiter((e.confidence for e in edges), dtype=float, count=count),
        )

    @classmethod
    def from_codes(cls, edge_id: np.ndarray, keys: np.ndarray, sources: np.ndarray, targets: np.ndarray,
                   type_codes: np.ndarray, type_names: tuple[str, ...], confidence: np.ndarray,
                   every_key_used: bool = False) -> Adjacency:
        """The graph of edges given as columns: ids, both ends as codes into `keys` (the node ids as
        a sorted V16 column, so codes sort as the ids do), types as codes into `type_names` and
        confidences, in any order (ids unique). Ids no edge uses are no nodes; `every_key_used`:
        the caller knows each key is an end of some edge, so the codes number the nodes as they are."""
        graph = cls.__new__(cls)
        graph._from_codes(edge_id, keys, sources, targets, type_codes, type_names, confidence, every_key_used)
        return graph

    def _from_codes(self, edge_id: np.ndarray, keys: np.ndarray, sources: np.ndarray, targets: np.ndarray,
                    type_codes: np.ndarray, type_names: tuple[str, ...], confidence: np.ndarray,
                    every_key_used: bool = False) -> None:
        edge_id, confidence = np.asarray(edge_id), np.asarray(confidence, dtype=float)
        if edge_id.dtype.kind != "i":  # else kept in the signed type it comes in (a segment's smallest)
            edge_id = edge_id.astype(np.int64)
        if not np.all(edge_id[1:] > edge_id[:-1]):  # else in id order already (a scope's graph is)
            order = np.argsort(edge_id, kind="stable")
            edge_id, sources, targets, type_codes, confidence = (
                edge_id[order], sources[order], targets[order], type_codes[order], confidence[order])
        if every_key_used:
            self._install(keys, sources, targets, confidence, edge_id, type_codes, type_names)
            return
        count = len(edge_id)
        numbers, used = used_numbers(np.concatenate([sources, targets]), len(keys))
        self._install(keys[used], numbers[:count], numbers[count:], confidence, edge_id, type_codes, type_names)

    def _install(self, node_keys: np.ndarray, source: np.ndarray, target: np.ndarray, confidence: np.ndarray,
                 edge_id: np.ndarray, type_codes: np.ndarray, type_names: tuple[str, ...],
                 node_ids: UuidColumn | None = None) -> None:
        """`node_keys`: the node ids as a sorted V16 column (their UUIDs are made on first use of
        `nodes`: a walk reads the few it returns, `node_at`); `node_ids`, a column of them already
        holding some UUIDs."""
        self.node_keys = node_keys
        # node_at's answers, made on first ask (the graph never changes)
        self._node_ids = UuidColumn(node_keys) if node_ids is None else node_ids
        self.source, self.target, self.confidence, self.edge_id = source, target, confidence, edge_id
        self._type_codes, self._type_names = type_codes, type_names
        self._sources: dict[tuple, frozenset[int]] = {}  # source_keys_into's answers: this graph never changes

    @cached_property
    def edge_type(self) -> tuple[str, ...]:
        """Each edge's type, in edge-id order (made on first use; a walk reads `type_at`)."""
        return tuple(self._type_names[code] for code in self._type_codes.tolist())

    def type_at(self, position: int) -> str:
        """The type of the edge at `position` (edge-id order)."""
        return self._type_names[self._type_codes[position]]

    @cached_property
    def nodes(self) -> tuple[UUID, ...]:
        """The node ids in node (UUID) order."""
        return tuple(uuid_of_bytes(key.tobytes()) for key in self.node_keys)

    def node_at(self, number: int) -> UUID:
        """The id of node `number`."""
        return self._node_ids.at(number)

    def updated(self, upserts: Sequence[Edge], removed: Iterable[int] = ()) -> Adjacency:
        """This graph with `upserts` added (an edge replaces the one with its id) and the edges with
        ids in `removed` taken out: what `Adjacency` of the resulting edge list gives, array for
        array, with per-edge Python work only for the changed edges (a write changes few of a
        namespace's edges). The other edges are read in place: the few changed ones are found by
        search, the new ones inserted where their ids and ends sort, and nothing of the graph's
        size is sorted or copied more than once (each fresh page is a fault on first touch)."""
        size, count = len(self.edge_id), len(upserts)
        removed = set(removed)
        taken = np.fromiter(removed - {edge.edge_id for edge in upserts}, dtype=np.int64)
        if count and not sorted_positions(self.edge_id, taken)[1].any():
            reweighed = self._reweighed(upserts)
            if reweighed is not None:
                return reweighed
        gone = np.fromiter({*removed, *(edge.edge_id for edge in upserts)}, dtype=np.int64)
        at, held = sorted_positions(self.edge_id, gone)  # ids are unique and ascending
        dropped = at[held]
        keep = np.ones(size, dtype=bool)
        keep[dropped] = False
        added = sorted(upserts, key=_edge_id)
        added_ends = uuid_keys([e.source for e in added] + [e.target for e in added])
        # Nodes stay while a kept edge touches them: only the dropped edges' ends can lose their last one.
        node_count = len(self.node_keys)
        alive = np.ones(node_count, dtype=bool)
        if len(dropped):
            degree = np.bincount(self.source, minlength=node_count) + np.bincount(self.target, minlength=node_count)
            degree -= np.bincount(self.source[dropped], minlength=node_count) + np.bincount(self.target[dropped],
                                                                                           minlength=node_count)
            alive = degree > 0
        kept_nodes = None if alive.all() else np.flatnonzero(alive)
        base = self.node_keys if kept_nodes is None else self.node_keys[kept_nodes]
        missing = np.unique(added_ends[~sorted_positions(base, added_ends)[1]])
        inserted_at = np.searchsorted(base, missing)
        node_keys = np.insert(base, inserted_at, missing) if len(missing) else base  # sorted: nodes stay in UUID order
        rank = np.arange(len(base)) if kept_nodes is None else np.cumsum(alive) - 1
        remap = rank + np.searchsorted(inserted_at, rank, side="right")  # each old node's new number
        if kept_nodes is not None:
            remap[~alive] = -1
        renumbered = len(missing) or kept_nodes is not None
        added_numbers = np.searchsorted(node_keys, added_ends)
        at_ids = np.fromiter((e.edge_id for e in added), dtype=np.int64, count=count)

        def kept(column: np.ndarray) -> np.ndarray:
            """`column` at the edges that stay (the column itself where none went)."""
            return column[keep] if len(dropped) else column

        into = np.searchsorted(kept(self.edge_id), at_ids)  # ids sort: the new edges go where theirs do
        type_names = tuple(dict.fromkeys([*self._type_names, *(e.edge_type for e in added)]))
        source, target = kept(self.source), kept(self.target)
        if renumbered:
            source, target = remap[source], remap[target]
        updated = Adjacency.__new__(Adjacency)
        updated._install(
            node_keys,
            _inserted(source, into, added_numbers[:count]),
            _inserted(target, into, added_numbers[count:]),
            _inserted(kept(self.confidence), into, np.fromiter((e.confidence for e in added), float, count)),
            _inserted(kept(self.edge_id), into, at_ids),
            _inserted(kept(self._type_codes), into, _type_codes([e.edge_type for e in added], type_names)),
            type_names,  # the old codes keep their names
            self._node_ids.moved(node_keys, remap),  # the UUIDs made so far, for nodes that stay
        )
        return updated

    def _reweighed(self, upserts: Sequence[Edge]) -> Adjacency | None:
        """`updated` where no edge goes and every upsert replaces an edge with its id, ends and
        type (an update that kept a turn's names moves its edges to the new version): the graph's
        arrays shared, only its confidences copied. None where that is not so."""
        ids = np.fromiter((edge.edge_id for edge in upserts), dtype=np.int64, count=len(upserts))
        at, held = sorted_positions(self.edge_id, ids)
        if not held.all() or any(self.node_at(int(self.source[position])) != edge.source
                                 or self.node_at(int(self.target[position])) != edge.target
                                 or self.type_at(position) != edge.edge_type for position, edge in zip(at.tolist(), upserts)):
            return None
        confidence = self.confidence.copy()
        confidence[at] = [edge.confidence for edge in upserts]
        updated = Adjacency.__new__(Adjacency)
        updated._install(self.node_keys, self.source, self.target, confidence, self.edge_id, self._type_codes,
                         self._type_names, self._node_ids)
        # source_keys_into's answers stand (the same nodes) where no changed edge of their type crossed their bound
        changed = list(zip((edge.edge_type for edge in upserts), self.confidence[at].tolist(), confidence[at].tolist()))
        stands: dict[tuple[str, float], bool] = {}  # per (type, bound): the few a walk asks for, each checked once
        for key, found in dict(self._sources).items():
            if (key[1], key[2]) not in stands:
                stands[key[1], key[2]] = all(kind != key[1] or (old >= key[2]) == (new >= key[2]) for kind, old, new in changed)
            if stands[key[1], key[2]]:
                updated._sources[key] = found
        return updated

    @property
    def edges(self) -> tuple[Edge, ...]:
        """Every edge as an object, in edge-id order (for tests and audits: the walk reads the arrays)."""
        return tuple(self._edge(i) for i in range(len(self.edge_id)))

    def _edge(self, position: int) -> Edge:
        return Edge(int(self.edge_id[position]), self.node_at(self.source[position]), self.node_at(self.target[position]),
                    self.type_at(position), float(self.confidence[position]))

    def __len__(self) -> int:
        return len(self.node_keys)

    def numbers(self, nodes: Iterable[UUID]) -> np.ndarray:
        """The node numbers of `nodes` that are in this graph, ascending and once each."""
        ids = list(nodes)
        return self.key_numbers(uuid_keys(ids))

    def key_numbers(self, keys: np.ndarray) -> np.ndarray:
        """`numbers` of ids given as a V16 column (16 big-endian bytes each): one search for all."""
        node_keys = self.node_keys
        if not len(node_keys) or not len(keys):
            return np.arange(0)
        at, held = sorted_positions(node_keys, keys)
        return _ascending_once(at[held], len(node_keys))

    def incident_edges(self, numbers: np.ndarray, min_confidence: float) -> np.ndarray:
        """Positions (edge-id order) of the edges touching node `numbers` with at least `min_confidence`."""
        if not len(numbers):
            return np.arange(0)
        marked = np.zeros(len(self.node_keys), dtype=bool)
        marked[numbers] = True
        found = np.flatnonzero(marked[self.source] | marked[self.target])
        return found[self.confidence[found] >= min_confidence]

    def source_keys_into(self, targets: Iterable[UUID], edge_type: str, min_confidence: float) -> frozenset[int]:
        """The sources of the `edge_type` edges into `targets` with at least `min_confidence`, as
        the ids' integers (`UUID.int`), read from the node keys: no UUID is made for them."""
        numbers = self.numbers(targets)
        key = (numbers.tobytes(), edge_type, min_confidence)
        found = self._sources.get(key)
        if found is None:
            edges = self.incident_edges(numbers, min_confidence)
            into = np.isin(self.target[edges], numbers) & (self._type_codes[edges] == code_of(self._type_names, edge_type))
            found = frozenset(key_ints(self.node_keys[_ascending_once(self.source[edges[into]], len(self.node_keys))]))
            if len(self._sources) >= 1024:  # a bound, as many distinct questions name many people
                self._sources.clear()
            self._sources[key] = found
        return found

    def touching(self, nodes: Iterable[UUID], min_confidence: float) -> list[Edge]:
        """Edges with an endpoint in `nodes` and at least `min_confidence`, by edge id, once each."""
        return [self._edge(i) for i in self.incident_edges(self.numbers(nodes), min_confidence).tolist()]


def _inserted(column: np.ndarray, positions: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`column` with `values` inserted before `positions` (as `np.insert`), in a wider integer type
    where a value does not fit the column's."""
    if len(values) and column.dtype.kind in "iu":
        limits = np.iinfo(column.dtype)
        if values.min() < limits.min or values.max() > limits.max:
            column = column.astype(np.int64)
    return np.insert(column, positions, values) if len(values) else column


def sorted_positions(column: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of `values` is in the ascending `column` (its last position where it would sort
    past the end), and whether it is there."""
    if not len(column):
        return np.zeros(len(values), dtype=np.intp), np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(column, values), len(column) - 1)
    return at, column[at] == values


def code_of(names: tuple[str, ...], name: str) -> int:
    """The code (position) of `name` among `names`, -1 when absent."""
    try:
        return names.index(name)
    except ValueError:
        return -1


def _type_codes(types: Sequence[str], names: tuple[str, ...]) -> np.ndarray:
    """Each of `types` as its position in `names`."""
    position = {name: code for code, name in enumerate(names)}
    return np.fromiter((position[edge_type] for edge_type in types), dtype=np.int64, count=len(types))


def _edge_id(edge: Edge) -> int:
    return edge.edge_id


def uuid_keys(ids: Sequence[UUID]) -> np.ndarray:
    """The ids as a V16 column of their 16 big-endian bytes, which sort as the UUIDs do."""
    return np.frombuffer(b"".join(node.bytes for node in ids), dtype="V16")


_new_object, _set_slot = object.__new__, object.__setattr__


def uuid_of(value: int) -> UUID:
    """`UUID(int=value)` for a `value` known to fit 128 bits (one read from 16 stored bytes): the
    same object (equal, same hash, `is_safe` unknown, pickled alike), its two slots set without
    `UUID.__init__`'s argument checks, in half its time (a namespace's first query makes hundreds)."""
    made = _new_object(UUID)
    _set_slot(made, "int", value)
    _set_slot(made, "is_safe", SafeUUID.unknown)
    return made


def uuid_of_bytes(key: bytes) -> UUID:
    """`UUID(bytes=key)` for 16 big-endian bytes, as `uuid_of` makes it."""
    return uuid_of(int.from_bytes(key, "big"))


def key_ints(keys: np.ndarray) -> list[int]:
    """Ids given as 16 big-endian bytes each (`uuid_keys`' form) as the integers `UUID.int` gives."""
    data = np.ascontiguousarray(keys).tobytes()
    return [int.from_bytes(data[at:at + 16], "big") for at in range(0, len(data), 16)]


class UuidColumn:
    """A column of 16-byte ids (`uuid_keys`' form), each made a UUID the first time it is asked
    for and kept: searches and walks ask for the same few again, and a caller that keeps one
    object per id shares it."""

    def __init__(self, keys: np.ndarray) -> None:
        self._keys, self._made = keys, {}

    def at(self, position: int) -> UUID:
        found = self._made.get(position)
        if found is None:
            found = self._made[position] = uuid_of_bytes(self._keys[position].tobytes())
        return found

    def at_each(self, positions: np.ndarray) -> list[UUID]:
        """`at` of each of `positions`, in order."""
        made = self._made
        return [made.get(position) or self.at(position) for position in positions.tolist()]

    def moved(self, keys: np.ndarray, positions: np.ndarray) -> UuidColumn:
        """A column of `keys` that starts with the UUIDs this one made, each at its new position
        (`positions[old]`; -1: the id is not in `keys`)."""
        column = UuidColumn(keys)
        if self._made:
            now = positions[np.fromiter(self._made, dtype=np.int64, count=len(self._made))].tolist()
            column._made = {new: made for new, made in zip(now, self._made.values()) if new >= 0}
        return column


def used_numbers(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """`codes` (below `size`) numbered densely in code order over the codes they use, and those
    codes ascending: what `np.unique(codes, return_inverse=True)` gives, through a mask, not a sort.
    The numbers are numpy's index type (intp): a graph indexes with them on every walk, and an index
    array of another type is converted, into a fresh array, each time."""
    used = np.zeros(size, dtype=bool)
    used[codes] = True
    numbers = np.cumsum(used, dtype=np.intp)
    numbers -= 1  # in place: no second table
    return numbers[codes], np.flatnonzero(used)


def _ascending_once(positions: np.ndarray, size: int) -> np.ndarray:
    """`np.unique(positions)` for positions below `size`, through a mask: numpy 2.4's hashing
    `unique` took 2 ms for the 9,000 edge positions around a LoCoMo speaker, the mask 0.07 ms."""
    seen = np.zeros(size, dtype=bool)
    seen[positions] = True
    return np.flatnonzero(seen)
