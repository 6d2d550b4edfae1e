"""Memories that change: which rows an update, a supersede, a delete or an erase touches, and the
new versions it writes. Pure functions over one snapshot; `MemoryStore` commits what they return
under the write lock (stores/engine/writer.py `commit`, stores/engine/compaction.py).

Every change is namespace-scoped: an id of another namespace is reported exactly like an id the
store never held, so a caller learns nothing about other tenants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
from pydantic import ValidationError

from rms_retrieval.stores.indexes.entity_graph import MENTIONS, SPOKEN_BY, GraphUpdate, entity_id
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.analysis.expansion import IndexedTexts, TurnExpansion, indexed_texts
from rms_retrieval.stores.indexes.postings import TermPostings, term_postings
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.engine.segments import LoadedSegment, StoredEdge
from rms_retrieval.stores.snapshot import StoreSnapshot
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.engine.writer import PreparedWrite, joined, row_vectors
from rms_retrieval.stores.analysis.speakers import SpeakerRules, speaker_of, spoken_text

# What `update` may change in place; `content` too, as a new version that is embedded and indexed again.
UPDATABLE_FIELDS = ("lifecycle_state", "epistemic_type", "confidence", "salience", "valid_to", "metadata", "content")
# What `erase(where=...)` may select on, besides `metadata.<key>`.
ERASE_FIELDS = ("owner", "scope", "session_id", "node_type", "source_ref", "lifecycle_state", "epistemic_type")
SUPERSEDES = "SUPERSEDES"
# How many of an entity's derived ids (entity_graph.entity_id attempts) tell that the store made it.
_DERIVED_ID_ATTEMPTS = 8

Located = tuple[LoadedSegment, int]  # the segment and row of a live object


def located(snapshot: StoreSnapshot, namespace: str, object_id: UUID) -> Located:
    """Where the live object `object_id` of `namespace` is; one-line StoreError otherwise (the same
    for an id of another namespace as for an unknown one)."""
    for segment in snapshot.segments:
        row = segment.live_row(namespace, object_id)
        if row is not None:
            return segment, row
    if namespace not in snapshot.namespaces():
        raise StoreError(f"namespace {namespace!r} holds no objects; check the namespace name")
    raise StoreError(f"no object {object_id} in namespace {namespace!r}; check the id (`rms query --mode AUDIT` lists them)")


def new_version(memory: MemoryObject, changes: Mapping[str, Any], now: datetime) -> MemoryObject:
    """`memory` with `changes` applied and `updated_at` = `now`, validated as a new object would be."""
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise StoreError(f"cannot update {unknown[0]!r}; updatable fields are {', '.join(UPDATABLE_FIELDS)}")
    if not changes:
        raise StoreError(f"nothing to update on {memory.id}; name at least one of {', '.join(UPDATABLE_FIELDS)}")
    try:
        return MemoryObject.model_validate({**memory.model_dump(), **changes, "updated_at": now})
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(map(str, first["loc"])) or "update"
        raise StoreError(f"cannot update {memory.id}: {field}: {first['msg']}") from error


def copied_write(versions: Sequence[tuple[Located, MemoryObject]], expansion: TurnExpansion, *, edges: bool = True
                 ) -> PreparedWrite:
    """New versions of objects of one namespace whose content is unchanged: their old rows' vectors
    and postings are copied, so they score exactly as before; nothing is embedded or analysed.
    With `edges`, the edges their old rows owned move to the new rows (same ids); without, the
    objects drop out of the graph (a superseded object: the graph reads as if only its successor
    had been stored)."""
    rows = tuple(memory for _, memory in versions)
    if len({memory.namespace for memory in rows}) > 1:
        raise StoreError("one change touches one namespace; this is a bug, report it")
    dimension = versions[0][0][0].vectors.matrix.shape[1] if versions else 0
    vectors = SegmentVectors.stacked([None if memory.is_bare_entity else segment.vectors.of(row)
                                      for (segment, row), memory in versions], dimension)
    postings = TermPostings.concatenate([segment.postings.subset(np.asarray([row])) for (segment, row), _ in versions])
    moved = moved_edges([where for where, _ in versions]) if edges else ()
    return PreparedWrite(rows, vectors, moved, GraphUpdate((), (), ()), 0.0, postings, expansion)


def moved_edges(old_rows: Sequence[Located]) -> tuple[StoredEdge, ...]:
    """The edges each of `old_rows` owned, owned by row i of the new write for the i-th old row
    (their ids kept: the new segment's copy wins, and the old one dies with its row)."""
    moved = [StoredEdge(stored.edge, stored.namespace, new_row)
             for new_row, (segment, row) in enumerate(old_rows) for stored in segment.owned_edges(row)]
    return tuple(sorted(moved, key=lambda stored: stored.edge.edge_id))


def selected(snapshot: StoreSnapshot, namespace: str | None, owner: str | None, where: Mapping[str, Any] | None
             ) -> list[Located]:
    """The live rows an erase removes: of `namespace` (every namespace if None), of `owner`, and
    matching every `where` field (ERASE_FIELDS or `metadata.<key>`) exactly."""
    where = dict(where or {})
    for field in where:
        if field not in ERASE_FIELDS and not field.startswith("metadata."):
            raise StoreError(f"cannot erase by {field!r}; use one of {', '.join(ERASE_FIELDS)} or metadata.<key>")
    if namespace is None and owner is None and not where:
        raise StoreError("erase needs a namespace, an owner or a filter; it never erases a whole store by default")
    if namespace is not None and namespace not in snapshot.namespaces():
        raise StoreError(f"namespace {namespace!r} holds no objects; check the namespace name")
    found: list[Located] = []
    for segment in snapshot.segments:
        for name, (start, stop) in segment.namespace_slices.items():
            if namespace is not None and name != namespace:
                continue
            for row in range(start, stop):
                if row in segment.dead_rows:
                    continue
                memory = segment.object_at(row)
                if (owner is None or memory.owner == owner) and all(_value(memory, field) == value for field, value in where.items()):
                    found.append((segment, row))
    return found


def _value(memory: MemoryObject, field: str) -> Any:
    if field.startswith("metadata."):
        return memory.metadata.get(field.removeprefix("metadata."))
    value = getattr(memory, field)
    return getattr(value, "value", value)


@dataclass(frozen=True)
class EntityChanges:
    """What removing some objects does to the entities the store made (entity_graph: spotted names
    and speakers it did not know): `orphans`, named by no object left, are deleted; `redated`, whose
    first mention (or first turn spoken, for a speaker) is gone, get a new version dated, owned and
    scoped by the first one left, as the store would have made them had it never held the gone ones."""

    orphans: tuple[Located, ...] = ()
    redated: tuple[tuple[Located, MemoryObject], ...] = ()


def entity_changes(snapshot: StoreSnapshot, gone: Sequence[Located], added: PreparedWrite | None) -> EntityChanges:
    """The EntityChanges of removing `gone` in a commit that also writes `added` (whose objects
    and edges count as left). Costs the edges into the entities `gone` named, never a scan."""
    gone_rows = {(segment.entry.id, row) for segment, row in gone}
    named = {(stored.namespace, stored.edge.target) for segment, row in gone for stored in segment.owned_edges(row)
             if stored.edge.edge_type in (MENTIONS, SPOKEN_BY)}
    orphans: list[Located] = []
    redated: list[tuple[Located, MemoryObject]] = []
    for namespace, entity_key in sorted(named, key=lambda key: (key[0], key[1].int)):
        where = next(((segment, row) for segment in snapshot.segments
                      if (row := segment.live_row(namespace, entity_key)) is not None), None)
        if where is None or (where[0].entry.id, where[1]) in gone_rows:
            continue
        entity = where[0].object_at(where[1])
        if not store_made(snapshot, entity):
            continue
        kind = MENTIONS if entity.metadata.get("extracted") else SPOKEN_BY  # what dated it (entity_graph)
        into = [stored for stored in (added.edges if added is not None else ())
                if (stored.namespace, stored.edge.target) == (namespace, entity_key) and stored.edge.edge_type in (MENTIONS, SPOKEN_BY)]
        left = ((segment, owner, edge_type) for segment in snapshot.segments
                for owner, edge_type in segment.edge_index.owners_into(namespace, entity_key)
                if owner not in segment.dead_rows and (segment.entry.id, owner) not in gone_rows)
        if not into and next(left, None) is None:
            orphans.append(where)
            continue
        dater_gone = any(segment.object_at(row).created_at == entity.created_at for segment, row in gone
                         for stored in segment.owned_edges(row)
                         if (stored.namespace, stored.edge.target, stored.edge.edge_type) == (namespace, entity_key, kind))
        if not dater_gone:
            continue
        # Only now are the objects left read: a speaker's entity may have spoken thousands of turns.
        left_dating = [segment.object_at(owner) for segment in snapshot.segments
                       for owner, edge_type in segment.edge_index.owners_into(namespace, entity_key)
                       if edge_type == kind and owner not in segment.dead_rows and (segment.entry.id, owner) not in gone_rows]
        left_dating += [added.rows[stored.row] for stored in into if stored.edge.edge_type == kind and added is not None]
        if not left_dating:
            continue
        first = min(left_dating, key=lambda memory: (memory.created_at, memory.id))
        dated = {"created_at": first.created_at, "updated_at": first.created_at, "owner": first.owner, "scope": first.scope}
        if any(getattr(entity, field) != value for field, value in dated.items()):
            redated.append((where, entity.model_copy(update=dated)))
    return EntityChanges(tuple(orphans), tuple(redated))


def store_made(snapshot: StoreSnapshot, entity: MemoryObject) -> bool:
    """Whether the store made this ENTITY (entity_graph: a spotted name, or a speaker it did not
    know), rather than a caller: its id is one the store derives for its name."""
    if entity.node_type is not NodeType.ENTITY:
        return False
    if entity.metadata.get("extracted"):
        return True
    anchor = snapshot.namespace_anchor(entity.namespace)
    name = entity.entity_canonical_name or entity.content
    return anchor is not None and any(entity.id == entity_id(entity.namespace, name, anchor, attempt)
                                      for attempt in range(_DERIVED_ID_ATTEMPTS))


def deleted_rows(rows: Sequence[Located]) -> dict[str, set[int]]:
    """Rows by segment id, as `writer.commit` takes them."""
    grouped: dict[str, set[int]] = {}
    for segment, row in rows:
        grouped.setdefault(segment.entry.id, set()).add(row)
    return grouped


class _Without:
    """A segment as indexed_texts reads it (its sessions and objects) less some rows."""

    def __init__(self, segment: LoadedSegment, rows: set[int]) -> None:
        self._segment, self._rows = segment, rows
        self.sessions = _FilteredSessions(segment.sessions, rows)

    def object_at(self, row: int) -> MemoryObject:
        return self._segment.object_at(row)


class _FilteredSessions:
    def __init__(self, sessions: Mapping, rows: set[int]) -> None:
        self._sessions, self._rows = sessions, rows

    def get(self, key: Any, default: Any = ()) -> Any:
        found = self._sessions.get(key)
        return default if found is None else [(seq, row) for seq, row in found if row not in self._rows]


def followers(snapshot: StoreSnapshot, gone: Sequence[Located], expansion: TurnExpansion) -> list[Located]:
    """The live turns whose indexed text took in a turn of `gone` (the `expansion.previous` turns
    after it in its session): they are embedded and indexed again, so that the store answers as
    one that never held the gone turns."""
    if expansion.previous == 0 or not gone:
        return []
    gone_rows = {(segment.entry.id, row) for segment, row in gone}
    sessions: dict[Any, list[tuple[int, Located]]] = {}
    for segment, row in gone:
        memory = segment.object_at(row)
        if memory.session_id is None or memory.session_seq is None:
            continue
        key = (memory.namespace, memory.owner, memory.scope, memory.session_id)
        if key not in sessions:
            sessions[key] = sorted((seq, (other, position)) for other in snapshot.segments
                                   for seq, position in other.sessions.get(key, ()))
    found: dict[tuple[str, int], Located] = {}
    for segment, row in gone:
        memory = segment.object_at(row)
        key = (memory.namespace, memory.owner, memory.scope, memory.session_id)
        later = [where for seq, where in sessions.get(key, ()) if memory.session_seq is not None and seq > memory.session_seq
                 and (where[0].entry.id, where[1]) not in gone_rows]
        for where in later[:expansion.previous]:
            found[(where[0].entry.id, where[1])] = where
    return sorted(found.values(), key=lambda where: (where[0].entry.id, where[1]))


def reindexed_write(snapshot: StoreSnapshot, gone: Sequence[Located], again: Sequence[Located], encoder: Any,
                    expansion: TurnExpansion, present: Sequence[MemoryObject] = ()) -> PreparedWrite:
    """New versions (unchanged objects, their edges moved) of `again`, embedded and indexed as if
    `gone` were never stored and the new versions `present` (written by the same commit) were."""
    ordered = sorted(again, key=lambda where: where[0].namespace_at(where[1]))
    rows = tuple(segment.object_at(row) for segment, row in ordered)
    without: dict[str, set[int]] = deleted_rows([*gone, *again])
    stored = [_Without(segment, without.get(segment.entry.id, set())) for segment in snapshot.segments]
    texts = indexed_texts([*rows, *present], stored, expansion)
    texts = IndexedTexts(texts.vector[:len(rows)], texts.lexical[:len(rows)])
    vectors = row_vectors(rows, texts.vector, encoder, {}, progress=False)
    return PreparedWrite(rows, vectors, moved_edges(ordered), GraphUpdate((), (), ()), 0.0, term_postings(texts.lexical),
                         expansion)


def analysed_again(old: MemoryObject, version: MemoryObject, speakers: SpeakerRules) -> bool:
    """Whether a new version is embedded, indexed and put in the graph again: its content changed,
    or its speaker (a `metadata["speaker"]` change), who is part of the text it is indexed by and
    the source of its SPOKEN_BY edge. (An ENTITY's name cannot change, so neither can whether it is
    bare, and with it whether it has a vector, unless its content does.)"""
    return (version.content, spoken_text(version), speaker_of(version, speakers)) != \
        (old.content, spoken_text(old), speaker_of(old, speakers))


def with_entity_changes(snapshot: StoreSnapshot, gone: Sequence[Located], prepared: PreparedWrite | None
                        ) -> tuple[PreparedWrite | None, list[Located]]:
    """A change's write and the rows it deletes, completed by what removing `gone` does to the
    entities the store made (entity_changes): orphans deleted, re-dated ones rewritten."""
    entities = entity_changes(snapshot, gone, prepared)
    deleted = [*gone, *entities.orphans, *(where for where, _ in entities.redated)]
    if not entities.redated:
        return prepared, deleted
    for namespace in sorted({version.namespace for _, version in entities.redated}):
        redated = copied_write([(where, version) for where, version in entities.redated if version.namespace == namespace],
                               snapshot.manifest.expansion, edges=False)
        prepared = redated if prepared is None else joined(prepared, redated)
    return prepared, deleted
