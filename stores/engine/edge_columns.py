"""A segment's graph edges as columns: what `index.npz` stores, held as arrays and decoded into
`StoredEdge` objects only where a caller asks for them.

Opening a segment decodes none of its edges (two UUIDs and a dataclass each). A reader decodes
one namespace's edges when its graph is first built, and counts co-mentions from the arrays of
one namespace's MENTIONS edges; an update or a delete decodes the edges of the rows it changes
(`edge_index.py`), compaction those of the segments it rewrites, and `rms check` every edge.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from uuid import UUID

import numpy as np
import pyarrow as pa

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.engine.mentioners import Mentioners, PairEdges
from rms_retrieval.stores.indexes.adjacency import code_of, used_numbers, uuid_of_bytes
from rms_retrieval.stores.protocols import Edge

MENTIONS = "MENTIONS"
SPOKEN_BY = "SPOKEN_BY"
CO_MENTIONED = "CO_MENTIONED"
# index.npz's arrays of the edges all start with this. Types and namespaces are codes into their
# distinct names (`edge_type_codes` and `edge_type_names`/`edge_type_name_ends`, the same for
# namespaces); segments written before stored each edge's texts (`edge_type_bytes` and
# `edge_type_ends`, ...), and those written before owners were stored have no `edge_rows`. The
# ends are codes too (`edge_end_codes`, a source and a target per edge, into `edge_end_ids`, the
# segment's distinct ends as rows of 16 id bytes, sorted); segments written before stored each
# edge's two ids (`edge_ends`, 32 bytes per edge). Confidences are codes into their distinct values
# (`edge_confidence_codes`, `edge_confidence_values`: a store makes a handful), and ids, owner rows
# and every kind of code take the smallest integer type their values fit (`smallest_int`); segments
# written before stored each edge's float64 confidence (`edge_confidences`), int64 ids and rows
# and int32 end codes, and read the same.
EDGE_PREFIX = "edge_"
# Present (one byte) where each CO_MENTIONED edge's confidence weighs the segment's own rows that
# mention both its ends (`scope_graph.counted_confidences`): a scope's graph then counts only the
# other segments' rows. Segments written without it hold the writer's weight and are counted.
COUNTED_ARRAY = "edge_co_mentions_counted"


@dataclass(frozen=True, slots=True)
class StoredEdge:
    """An edge as a segment stores it: the graph edge, the namespace both its ends lie in, and the
    segment row of the object whose analysis made it (its owner: MENTIONS, SPOKEN_BY and SUPERSEDES
    are owned by their source's row; -1 for none, as CO_MENTIONED, which is derived from the
    MENTIONS around it). An edge whose owner row is deleted is dead with it, although a newer
    version of the object may hold the same id. `row=None`: not known yet (a segment written
    before owners were stored), found by the source's row in the segment when it is loaded."""

    edge: Edge
    namespace: str
    row: int | None = None


def _texts_array(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [text.encode() for text in texts]
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), np.cumsum([len(text) for text in encoded], dtype=np.int64)


def smallest_int(values: np.ndarray) -> np.ndarray:
    """`values` (integers) as the smallest of uint8/16/32 (none negative) or int8/16/32 that holds
    them, else int64."""
    low, high = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    kinds = (np.uint8, np.uint16, np.uint32) if low >= 0 else (np.int8, np.int16, np.int32)
    return values.astype(next((kind for kind in kinds if np.iinfo(kind).min <= low and high <= np.iinfo(kind).max), np.int64))


def _coded(texts: Sequence[str], name: str) -> dict[str, np.ndarray]:
    """`texts` as codes into their distinct values (in order of first appearance), those values as
    UTF-8 bytes and ends: `edge_<name>_codes`, `edge_<name>_names` and `edge_<name>_name_ends`."""
    distinct: dict[str, int] = {}
    codes = [distinct.setdefault(text, len(distinct)) for text in texts]
    names, ends = _texts_array(list(distinct))
    return {f"edge_{name}_codes": smallest_int(np.asarray(codes, dtype=np.int64)),
            f"edge_{name}_names": names, f"edge_{name}_name_ends": ends}


def _number_arrays(ids: np.ndarray, confidences: np.ndarray, rows: np.ndarray, end_codes: np.ndarray
                   ) -> dict[str, np.ndarray]:
    """Ids, owner rows and end codes each in the smallest integer type that holds them, and
    confidences as codes into their distinct values."""
    return {"edge_ids": smallest_int(ids), **confidence_arrays(confidences), "edge_rows": smallest_int(rows),
            "edge_end_codes": smallest_int(end_codes.reshape(len(ids), 2))}


def confidence_arrays(confidences: np.ndarray) -> dict[str, np.ndarray]:
    """Confidences as codes into their distinct values (`edge_confidence_codes`, `_values`)."""
    values, codes = np.unique(np.asarray(confidences, dtype=np.float64), return_inverse=True)
    return {"edge_confidence_values": values, "edge_confidence_codes": smallest_int(codes.reshape(-1))}


def stored_edge_arrays(edges: Sequence[StoredEdge]) -> dict[str, np.ndarray]:
    """The edges as plain arrays for index.npz (ids as 16-byte rows, types and namespaces as codes)."""
    ends = np.frombuffer(b"".join(stored.edge.source.bytes + stored.edge.target.bytes for stored in edges), dtype=np.uint8)
    distinct, codes = np.unique(id_keys(ends), return_inverse=True)
    return {
        **_number_arrays(np.asarray([stored.edge.edge_id for stored in edges], dtype=np.int64),
                         np.asarray([stored.edge.confidence for stored in edges], dtype=np.float64),
                         np.asarray([-1 if stored.row is None else stored.row for stored in edges], dtype=np.int64), codes),
        "edge_end_ids": np.frombuffer(distinct.tobytes(), dtype=np.uint8).reshape(len(distinct), 16),
        **_coded([stored.edge.edge_type for stored in edges], "type"),
        **_coded([stored.namespace for stored in edges], "namespace"),
    }


def _recoded(parts: Sequence[tuple[np.ndarray, tuple[str, ...]]], kept: np.ndarray, name: str) -> dict[str, np.ndarray]:
    """`_coded`'s arrays for the texts given as each part's (codes, names), concatenated, at `kept`:
    the names the kept edges use, in order of first use by a part."""
    every = list(dict.fromkeys(text for _, names in parts for text in names))
    codes = np.concatenate([np.zeros(0, dtype=np.int64),
                            *(np.asarray([every.index(text) for text in names], dtype=np.int64)[part_codes]
                              for part_codes, names in parts)])[kept]
    used = np.unique(codes)
    names, ends = _texts_array([every[code] for code in used.tolist()])
    return {f"edge_{name}_codes": smallest_int(np.searchsorted(used, codes)),
            f"edge_{name}_names": names, f"edge_{name}_name_ends": ends}


def joined_ends(parts: Sequence[tuple[EdgeColumns, np.ndarray | slice]]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The distinct ends of the edges at each part's positions as one sorted V16 column (UUID
    order), and each part's (source, target) pairs as codes into it: sorted once over the
    distinct ends, not over every edge's two ids."""
    local = [columns.end_codes_at(positions) for columns, positions in parts]
    if len(local) == 1:  # one part's distinct ends: sorted already where its segment stores them so
        keys = id_keys(local[0][1])
        if np.all(keys[1:].view("S16") > keys[:-1].view("S16")):
            return keys, [local[0][0]]
    ids = np.concatenate([np.zeros((0, 16), dtype=np.uint8), *(used for _, used in local)])
    keys, code_of = np.unique(id_keys(ids), return_inverse=True)
    offsets = np.cumsum([0, *(len(used) for _, used in local)])
    return keys, [code_of.reshape(-1)[offset + codes] for (codes, _), offset in zip(local, offsets.tolist())]


def _moved_rows(rows: np.ndarray, new_row: np.ndarray) -> np.ndarray:
    """Owner rows where `new_row` moved them; -1 (no owner) stays -1, also in a segment of no rows."""
    moved = np.full(len(rows), -1, dtype=np.int64)
    owned = rows >= 0
    moved[owned] = new_row[rows[owned]]
    return moved


def merged_edge_arrays(parts: Sequence[tuple[EdgeColumns, np.ndarray]]) -> dict[str, np.ndarray]:
    """The edges of several segments as one segment's arrays, with no edge made an object: each
    part is a segment's columns and where its rows went (`new_row[row]`); of the edges with one
    id the last wins (a later part, or later in a part), and they are stored in id order."""
    ids = np.concatenate([np.zeros(0, dtype=np.int64), *(columns.ids for columns, _ in parts)])
    keys, part_ends = joined_ends([(columns, np.arange(len(columns))) for columns, _ in parts])
    ends = np.concatenate([np.zeros((0, 2), dtype=np.int64), *part_ends])
    rows = np.concatenate([np.zeros(0, dtype=np.int64), *(_moved_rows(columns.rows, new_row) for columns, new_row in parts)])
    confidences = np.concatenate([np.zeros(0, dtype=np.float64), *(columns.confidences_at(slice(None)) for columns, _ in parts)])
    _, last = np.unique(ids[::-1], return_index=True)
    kept = len(ids) - 1 - last  # the last of each id, in id order
    codes, used = used_numbers(ends[kept], len(keys))  # the ends the kept edges use
    return {
        **_number_arrays(ids[kept], confidences[kept], rows[kept], codes),
        "edge_end_ids": np.frombuffer(keys[used].tobytes(), dtype=np.uint8).reshape(len(used), 16),
        **_recoded([(columns.types, columns.type_names) for columns, _ in parts], kept, "type"),
        **_recoded([(columns.namespaces, columns.namespace_names) for columns, _ in parts], kept, "namespace"),
    }


def _codes(arrays: Mapping[str, np.ndarray], name: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """The codes and names of the edges' `name` texts, from either stored form."""
    if f"edge_{name}_codes" not in arrays:  # each edge's text (segments written before codes)
        return _dictionary(arrays[f"edge_{name}_bytes"], arrays[f"edge_{name}_ends"])
    codes = np.asarray(arrays[f"edge_{name}_codes"])
    _, names = _dictionary(arrays[f"edge_{name}_names"], arrays[f"edge_{name}_name_ends"])
    if codes.dtype.kind not in "iu" or (len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(names))):
        raise ValueError(f"edge {name} codes do not match their names")
    return codes, names


def id_keys(ends: np.ndarray) -> np.ndarray:
    """Rows of 16 id bytes as one V16 column: comparable, sortable and searchable by numpy, and
    sorted as the ids' integers sort (big-endian bytes)."""
    return np.ascontiguousarray(ends).reshape(-1, 16).view("V16").ravel()


def _dictionary(blob: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Texts stored as concatenated UTF-8 and their ends, as codes into their distinct values
    (Arrow reads the two arrays as a string column without copying a text out)."""
    if len(ends) == 0:
        return np.zeros(0, dtype=np.int32), ()
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    if offsets[-1] != len(blob) or np.any(np.diff(offsets) < 0):
        raise ValueError("text ends do not match their bytes")
    texts = pa.Array.from_buffers(pa.large_utf8(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(blob))])
    texts.validate(full=True)  # valid UTF-8, or the segment is damaged
    encoded = texts.dictionary_encode()
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32), tuple(encoded.dictionary.to_pylist())


class EdgeColumns:
    """One segment's edges in stored order: ids, both ends (codes into the segment's distinct
    ends, or 16 bytes each in older segments: `ends_at` reads either), type and namespace codes,
    confidences and owner rows (-1 for none). Immutable once made."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        """From index.npz's arrays, which must hold `edge_rows` (older segments' edges are decoded
        and given owners first: `from_stored`). Raises ValueError or KeyError where they disagree."""
        self.ids = np.asarray(arrays["edge_ids"])
        count = len(self.ids)
        self._end_ids: np.ndarray | None = None
        if "edge_end_codes" in arrays:
            self._end_ids = np.asarray(arrays["edge_end_ids"], dtype=np.uint8).reshape(-1, 16)
            self._ends = np.asarray(arrays["edge_end_codes"]).reshape(count, 2)
            if self._ends.dtype.kind not in "iu" or (count and (int(self._ends.min()) < 0 or int(self._ends.max()) >= len(self._end_ids))):
                raise ValueError("edge end codes do not match their ids")
        else:
            self._ends = np.asarray(arrays["edge_ends"], dtype=np.uint8).reshape(count, 32)
        self._confidence_values: np.ndarray | None = None
        if "edge_confidence_codes" in arrays:
            self._confidence_values = np.asarray(arrays["edge_confidence_values"], dtype=np.float64)
            self._confidences = np.asarray(arrays["edge_confidence_codes"])
            if self._confidences.dtype.kind not in "iu" or (count and int(self._confidences.max()) >= len(self._confidence_values)):
                raise ValueError("edge confidence codes do not match their values")
        else:
            self._confidences = np.asarray(arrays["edge_confidences"], dtype=np.float64)
        self.rows = np.asarray(arrays["edge_rows"])
        if self.ids.dtype.kind not in "iu" or self.rows.dtype.kind not in "iu":
            raise ValueError("edge ids or owner rows are not integers")
        self.counted = COUNTED_ARRAY in arrays
        self.types, self.type_names = _codes(arrays, "type")
        self.namespaces, self.namespace_names = _codes(arrays, "namespace")
        if not (len(self._confidences) == len(self.rows) == len(self.types) == len(self.namespaces) == count):
            raise ValueError("the edge arrays differ in length")
        for array in (self.ids, self._ends, self._confidences, self.rows, self.types, self.namespaces):
            array.flags.writeable = False
        self._lock = threading.Lock()
        self._mentioners: dict[str, Mentioners] = {}
        self._co_mentioned: dict[str, PairEdges] = {}

    @classmethod
    def from_stored(cls, edges: Sequence[StoredEdge]) -> EdgeColumns:
        """Columns of edges whose owners are known."""
        return cls(stored_edge_arrays(edges))

    def __len__(self) -> int:
        return len(self.ids)

    def confidences_at(self, positions: np.ndarray | slice) -> np.ndarray:
        """The confidences (float64) of the edges at `positions` (a slice of them may be a read-only view)."""
        stored = self._confidences[positions]
        return stored if self._confidence_values is None else self._confidence_values[stored]

    def counts_at(self, positions: np.ndarray | slice, base: float, step: float) -> np.ndarray:
        """`rint((confidence - base) / step)` of the edges at `positions`, as integers: worked out
        once for each of the few distinct confidences where they are stored as codes (as int32 then,
        half the pages of a fresh int64 array over a long namespace's edges)."""
        if self._confidence_values is None:
            return np.rint((self._confidences[positions] - base) / step).astype(np.int64)
        counts = np.rint((self._confidence_values - base) / step)
        fits = not len(counts) or np.abs(counts).max() < 2**31
        return counts.astype(np.int32 if fits else np.int64)[self._confidences[positions]]

    def ends_at(self, positions: np.ndarray) -> np.ndarray:
        """The ends of the edges at `positions` (indices or a mask), one row of 32 bytes per edge:
        the source's id bytes, then the target's."""
        if self._end_ids is None:
            return self._ends[positions]
        codes = self._ends[positions]
        return self._end_ids[codes.reshape(-1)].reshape(len(codes), 32)

    def end_codes_at(self, positions: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        """The ends of the edges at `positions` as (source, target) codes, one row per edge, into
        the distinct ids they use (rows of 16 bytes, each once): what a scope's graph numbers its
        nodes from without sorting every edge's two ids."""
        if self._end_ids is None:
            keys, inverse = np.unique(id_keys(self._ends[positions]), return_inverse=True)
            return inverse.reshape(-1, 2), np.frombuffer(keys.tobytes(), dtype=np.uint8).reshape(-1, 16)
        numbers, used = used_numbers(self._ends[positions], len(self._end_ids))
        return numbers, self._end_ids[used]

    def check_owners(self, rows: int, directory: object) -> None:
        """Every owner row is -1 or a row of a segment of `rows` rows (a StoreError names the first that is not)."""
        bad = np.flatnonzero((self.rows < -1) | (self.rows >= rows))
        if len(bad):
            raise StoreError(f"edge {int(self.ids[bad[0]])} of segment {directory} names row {int(self.rows[bad[0]])} "
                             f"of a segment of {rows} rows; run `rms check`")

    @property
    def last_edge_id(self) -> int:
        """The id of the last stored edge (0 for none): edges are stored in id order."""
        return int(self.ids[-1]) if len(self.ids) else 0

    @cached_property
    def namespace_set(self) -> frozenset[str]:
        """The namespaces of the edges (a compacted segment may hold edges of a namespace without its rows)."""
        return frozenset(self.namespace_names)

    def decoded(self, positions: np.ndarray | None = None) -> tuple[StoredEdge, ...]:
        """The edges at `positions` (every edge without), as objects, in the order given."""
        if positions is None:
            positions = np.arange(len(self.ids))
        namespaces = self.namespace_names
        return tuple(StoredEdge(edge, namespaces[code], row) for edge, code, row in zip(
            self.graph_edges(positions), self.namespaces[positions].tolist(), self.rows[positions].tolist()))

    def graph_edges(self, positions: np.ndarray) -> list[Edge]:
        """The graph edges at `positions`, in the order given. Each distinct end is made a UUID
        once (an entity is the end of many edges), which halves the cost of a namespace's first
        graph."""
        ends, inverse = np.unique(id_keys(self.ends_at(positions)), return_inverse=True)
        ids = [uuid_of_bytes(end.tobytes()) for end in ends]
        numbers = inverse.reshape(-1, 2)
        types = self.type_names
        return [Edge(edge_id, ids[source], ids[target], types[type_code], confidence)
                for edge_id, source, target, type_code, confidence in zip(
                    self.ids[positions].tolist(), numbers[:, 0].tolist(), numbers[:, 1].tolist(),
                    self.types[positions].tolist(), self.confidences_at(positions).tolist())]

    def type_code(self, edge_type: str) -> int:
        """The code of `edge_type` among the edges' types, -1 when no edge has it."""
        return code_of(self.type_names, edge_type)

    def _of(self, namespace: str, edge_type: str) -> np.ndarray:
        """Per edge, whether it is one of `namespace`'s `edge_type` edges."""
        return (self.namespaces == code_of(self.namespace_names, namespace)) & (self.types == self.type_code(edge_type))

    def live_positions(self, dead: np.ndarray | None) -> np.ndarray:
        """The edges with no owner (-1) or a live owner row (`dead`: per row, True where deleted)."""
        if dead is None:
            return np.arange(len(self.ids))
        owned = self.rows >= 0
        live = ~owned
        live[owned] = ~dead[self.rows[owned]]  # no index into `dead` for an edge with no owner
        return np.flatnonzero(live)

    def live_by_namespace(self, dead: np.ndarray | None) -> LiveEdgeGroups:
        """The live edges by namespace, each namespace's decoded on first lookup."""
        return LiveEdgeGroups(self, None if dead is None else self.live_positions(dead))

    def mentioners(self, namespace: str) -> Mentioners:
        """Entity id's integer -> the owner rows (dead ones too) with a MENTIONS edge into it, in
        `namespace`: from the arrays of that namespace's MENTIONS edges alone, an entity's rows
        made when it is looked up."""
        found = self._mentioners.get(namespace)
        if found is not None:
            return found
        found = Mentioners(*self.mention_ends(namespace))
        with self._lock:
            return self._mentioners.setdefault(namespace, found)

    def mention_ends(self, namespace: str) -> tuple[np.ndarray, np.ndarray]:
        """The targets (rows of 16 id bytes) and owner rows of `namespace`'s owned MENTIONS edges, dead rows included."""
        mask = self._of(namespace, MENTIONS) & (self.rows >= 0)
        return self.ends_at(mask)[:, 16:], self.rows[mask]

    def co_mentioned_id(self, namespace: str, source: UUID, target: UUID) -> int | None:
        """The id of the CO_MENTIONED edge from `source` to `target` in `namespace` stored here (the last stored,
        as a later edge replaces one with its id), from a lookup of that namespace's edges made on first use."""
        return self._pair_edges(namespace).get(source.bytes, target.bytes)

    def co_mentioned_ids(self, namespace: str, sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """`co_mentioned_id` of each pair of two V16 columns of ids, -1 for none."""
        return self._pair_edges(namespace).get_each(sources, targets)

    def _pair_edges(self, namespace: str) -> PairEdges:
        found = self._co_mentioned.get(namespace)
        if found is None:
            mask = self._of(namespace, CO_MENTIONED)
            keys, codes = (np.unique(id_keys(self._ends[mask]), return_inverse=True) if self._end_ids is None  # older:
                           else (id_keys(self._end_ids), self._ends[mask]))  # each edge's ids as bytes, not codes
            found = PairEdges(codes, self.ids[mask], keys)
            with self._lock:
                found = self._co_mentioned.setdefault(namespace, found)
        return found


def _run_starts(codes: np.ndarray) -> np.ndarray:
    """Where each run of equal codes starts."""
    return np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1] if len(codes) else np.arange(0)


def grouped_by_code(codes: np.ndarray, positions: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """`positions` grouped by their `codes`, by code, each group in the order given (one stable sort)."""
    order = np.argsort(codes[positions], kind="stable")
    ordered, grouped = codes[positions][order], positions[order]
    starts = _run_starts(ordered)
    return [(int(code), group) for code, group in zip(ordered[starts].tolist(), np.split(grouped, starts[1:]))]


class LiveEdgeGroups(Mapping[str, tuple[Edge, ...]]):
    """A segment's live edges by namespace (in stored order): the keys from the arrays, each
    namespace's edges decoded when it is first looked up and then kept. Racing lookups decode
    equal tuples; the first kept wins."""

    def __init__(self, columns: EdgeColumns, live: np.ndarray | None) -> None:
        """`live`: the live edges' positions, ascending (None: every edge). A namespace's edges are
        one run of positions where the segment keeps them together (as writes and merges do);
        otherwise they are gathered by one stable sort of the namespace codes."""
        self._columns, self._live = columns, live
        codes = columns.namespaces if live is None else columns.namespaces[live]
        self._order = None
        starts = _run_starts(codes)
        if len(np.unique(codes[starts])) < len(starts):  # a namespace in more than one run
            self._order = np.argsort(codes, kind="stable")
            codes = codes[self._order]
            starts = _run_starts(codes)
        ends = np.r_[starts[1:], len(codes)].astype(np.int64)
        self._runs = {columns.namespace_names[code]: (start, end)  # by code, as the namespaces' codes sort
                      for code, start, end in sorted(zip(codes[starts].tolist(), starts.tolist(), ends.tolist()))}
        self._decoded: dict[str, tuple[Edge, ...]] = {}
        self._lock = threading.Lock()

    @property
    def columns(self) -> EdgeColumns:
        return self._columns

    def positions(self, namespace: str) -> np.ndarray:
        """The column positions of `namespace`'s live edges, in stored order (none for an unknown namespace)."""
        start, end = self._runs.get(namespace, (0, 0))
        run = np.arange(start, end) if self._order is None else self._order[start:end]
        return run if self._live is None else self._live[run]

    def where(self, namespace: str) -> np.ndarray | slice:
        """`positions(namespace)`, as a slice of the columns where they are one run of them (the
        namespace's edges kept together and none of the segment's dead): a scope's graph reads them
        as views, with no array of 80,000 positions made and checked."""
        if self._order is None and self._live is None:
            start, end = self._runs.get(namespace, (0, 0))
            return slice(start, end)
        return self.positions(namespace)

    def __getitem__(self, namespace: str) -> tuple[Edge, ...]:
        found = self._decoded.get(namespace)
        if found is not None:
            return found
        if namespace not in self._runs:
            raise KeyError(namespace)  # no live edge of this namespace here
        edges = tuple(self._columns.graph_edges(self.positions(namespace)))
        with self._lock:
            return self._decoded.setdefault(namespace, edges)

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._runs

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

