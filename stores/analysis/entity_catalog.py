"""A scope's entity names as columns: what query analysis matches a question's names against.

A scope holds thousands of names (a LongMemEval-S namespace about 2,500, most of them spotted in
assistant prose); a question reads the few whose first name word is one of its words. So the
catalog keeps the names as Arrow columns, finds each name's first word with Arrow's string
kernels (printable ASCII names, where Arrow's and Python's string rules agree; any other name
through `first_name_word`), and makes an `EntityRef` only for the refs a question's words open
(`refs_for`) or that a caller reads. Catalog order: namespace, alias lower-cased, alias, id (16
big-endian bytes sort as the UUIDs do).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rms_retrieval.stores.analysis.entities import first_name_word
from rms_retrieval.stores.indexes.adjacency import uuid_keys, uuid_of_bytes
from rms_retrieval.stores.indexes.entity_graph import names_of
from rms_retrieval.stores.protocols import EntityRef



@dataclass(frozen=True)
class EntityNames:
    """One segment's ENTITY rows of one namespace: their ids (a V16 column), canonical names (an
    Arrow string array, null for none) and the aliases (`metadata["aliases"]`) of the rows that
    hold any, by index into these rows."""

    namespace: str
    ids: np.ndarray
    canonicals: pa.Array
    aliases: Mapping[int, object]


def first_words(names: pa.Array) -> pa.Array:
    """`first_name_word` of each name (a null stays null): Arrow's kernels for a printable ASCII
    name whose first word is letters and digits, Python for the rest."""
    plain = pc.fill_null(pc.ascii_is_printable(names), False)  # printable ASCII (or empty)
    head = pc.list_element(pc.split_pattern(names, " ", max_splits=1), 0)
    simple = pc.and_(plain, pc.fill_null(pc.ascii_is_alnum(head), False))  # what it lower-cases as it is
    other = pc.and_(pc.invert(simple), names.is_valid())
    words = pc.ascii_lower(head)
    rows = np.flatnonzero(other.to_numpy(zero_copy_only=False))
    if not len(rows):
        return words
    values = [first_name_word(name) for name in names.take(pa.array(rows)).to_pylist()]
    return pc.replace_with_mask(words, other, pa.array(values, type=pa.string()))


def _named(names: pa.Array) -> np.ndarray:
    """Per name, whether it is a name at all: not null and not blank (`str.strip`)."""
    plain = pc.fill_null(pc.ascii_is_printable(names), False).to_numpy(zero_copy_only=False)
    blank = pc.or_(pc.equal(names, ""), pc.ascii_is_space(names))  # a printable ASCII name's only space is " "
    named = ~pc.fill_null(blank, True).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(~plain & names.is_valid().to_numpy(zero_copy_only=False)).tolist():
        named[row] = bool(names[row].as_py().strip())
    return named


def _catalog_key(ref: EntityRef) -> tuple:
    return ref.namespace, ref.alias.lower(), ref.alias, ref.object_id


class EntityCatalog(Sequence):
    """A scope's entity names (`EntityRef`s, in catalog order) as a read-only sequence: one ref per
    name (canonical or alias) of each entity, each once. `refs_for` gives the refs one of whose
    names opens with one of a question's words. A store hands out one catalog per scope;
    `list(catalog)` gives a copy to change."""

    def __init__(self, refs: Iterable[EntityRef] = ()) -> None:
        """The catalog of `refs`, in catalog order whatever their order, each once."""
        refs = list(dict.fromkeys(refs))
        namespaces = sorted({ref.namespace for ref in refs})
        self._install(namespaces, np.asarray([namespaces.index(ref.namespace) for ref in refs], dtype=np.int64),
                      uuid_keys([ref.object_id for ref in refs]), pa.array([ref.canonical_name for ref in refs], pa.string()),
                      pa.array([ref.alias for ref in refs], pa.string()))

    @classmethod
    def of_parts(cls, parts: Sequence[EntityNames]) -> EntityCatalog:
        """The catalog of the entities of `parts` (each segment's rows of each namespace)."""
        namespaces = sorted({part.namespace for part in parts})
        codes, keys, canonicals, aliases = [], [], [], []
        for part in parts:
            code = namespaces.index(part.namespace)
            plain = _named(part.canonicals)  # one ref, the canonical name as its own alias
            plain[list(part.aliases)] = False
            rows = np.flatnonzero(plain)
            codes.append(np.full(len(rows), code, dtype=np.int64))
            keys.append(part.ids[rows])
            names = part.canonicals.take(pa.array(rows, type=pa.int64())).cast(pa.string())
            canonicals.append(names)
            aliases.append(names)
            extra = [(row, name) for row, listed in sorted(part.aliases.items())
                     for name in dict.fromkeys(names_of(part.canonicals[row].as_py(), listed))]
            codes.append(np.full(len(extra), code, dtype=np.int64))
            keys.append(part.ids[np.asarray([row for row, _ in extra], dtype=np.int64)])
            canonicals.append(pa.array([part.canonicals[row].as_py() or "" for row, _ in extra], pa.string()))
            aliases.append(pa.array([name for _, name in extra], pa.string()))
        catalog = cls.__new__(cls)
        catalog._install(namespaces, np.concatenate([np.zeros(0, dtype=np.int64), *codes]),
                         np.concatenate([np.zeros(0, dtype="V16"), *keys]),
                         pa.concat_arrays([pa.array([], pa.string()), *canonicals]),
                         pa.concat_arrays([pa.array([], pa.string()), *aliases]))
        return catalog

    def _install(self, namespaces: list[str], codes: np.ndarray, keys: np.ndarray, canonicals: pa.Array,
                 aliases: pa.Array) -> None:
        """The refs as columns, in any order: namespace codes into `namespaces`, ids, canonical
        names and aliases, each ref once."""
        self._namespaces, self._codes, self._keys = namespaces, codes, keys
        self._canonicals, self._aliases = canonicals, aliases
        first = first_words(canonicals)
        differ = pc.fill_null(pc.not_equal(canonicals, aliases), True)  # most refs are a name as its own alias
        if pc.any(differ).as_py():
            self._first = (first, pc.replace_with_mask(first, differ, first_words(aliases.filter(differ))))
        else:
            self._first = (first, first)
        self._made: dict[int, EntityRef] = {}  # the refs made so far, by column row (a racing second make is equal)

    def _ref(self, row: int) -> EntityRef:
        ref = self._made.get(row)
        if ref is None:
            ref = self._made[row] = EntityRef(uuid_of_bytes(self._keys[row].tobytes()),
                                              self._namespaces[self._codes[row]], self._canonicals[row].as_py(),
                                              self._aliases[row].as_py())
        return ref

    def refs_for(self, words: Iterable[str]) -> list[EntityRef]:
        """The refs one of whose names (canonical or alias) opens with one of `words`, in catalog order."""
        wanted = pa.array(sorted(set(words)), type=pa.string())
        if not len(wanted) or not len(self._keys):
            return []
        hit = pc.or_(pc.is_in(self._first[0], value_set=wanted), pc.is_in(self._first[1], value_set=wanted))
        rows = np.flatnonzero(pc.fill_null(hit, False).to_numpy(zero_copy_only=False))
        return sorted((self._ref(row) for row in rows.tolist()), key=_catalog_key)

    @cached_property
    def id_keys(self) -> np.ndarray:
        """The distinct entity ids, sorted, as 16 big-endian bytes each (a V16 column): what a graph
        walk marks its entity nodes by, in one search."""
        return np.unique(self._keys)

    @cached_property
    def _order(self) -> list[int]:
        """The column rows in catalog order (made when the catalog is read whole or by position)."""
        return sorted(range(len(self._keys)), key=lambda row: _catalog_key(self._ref(row)))

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._ref(row) for row in self._order[index]]
        return self._ref(self._order[index])

    def __iter__(self) -> Iterator[EntityRef]:
        return (self._ref(row) for row in self._order)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (EntityCatalog, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(mine == theirs for mine, theirs in zip(self, other))

    __hash__ = None  # equal to a list of its refs, as a list is

    def __repr__(self) -> str:
        return f"EntityCatalog({list(self)!r})"

    def __reduce__(self):
        return (EntityCatalog, (list(self),))
