"""Ingest-time expansion: the text a TURN is embedded and indexed by, beside its stored content.

A dialogue turn often means little alone ("Yes, last Tuesday!"): its subject is in the turn
before it. With an expansion, a TURN that has a session id and position is embedded (vector) and
analysed for BM25 (lexical) together with its neighbouring turns of the same session, while its
stored `content` stays exactly what was given. The setting changes what the store's vectors and
postings mean, so a store records it in its manifest at its first write and every later write
uses the recorded one (`resolved_expansion`); asking for another is an error, never a silent mix.

Neighbours are the nearest turns before (and after) a turn in its own session, found among the
objects of the same add and the committed store. A later add cannot rewrite a turn already
stored, so a turn's *next* neighbour is only seen when both arrive in the same add.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.analysis.positions import SessionKey, session_key
from rms_retrieval.stores.analysis.speakers import spoken_text


class TurnExpansion(BaseModel):
    """Which neighbouring turns join a TURN's text, and for which index (vector, lexical or both)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    previous: int = Field(default=0, ge=0, le=3, description="Earlier turns of the session joined to a turn.")
    next: int = Field(default=0, ge=0, le=3, description="Later turns of the same add joined to a turn.")
    vector: bool = Field(default=True, description="Embed the expanded text.")
    lexical: bool = Field(default=False, description="Analyse the expanded text for BM25.")

    @property
    def is_off(self) -> bool:
        return (self.previous == 0 and self.next == 0) or not (self.vector or self.lexical)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    def effective(self) -> TurnExpansion:
        """The same expansion in one canonical form, so every setting that expands nothing is OFF."""
        return OFF if self.is_off else self


OFF = TurnExpansion()
# Named settings for the command line; the first is what a new store gets when none is asked for.
PRESETS: dict[str, TurnExpansion] = {
    "off": OFF,
    "previous": TurnExpansion(previous=1, vector=True, lexical=False),
    "previous-lexical": TurnExpansion(previous=1, vector=False, lexical=True),
    "previous-both": TurnExpansion(previous=1, vector=True, lexical=True),
    "previous-next": TurnExpansion(previous=1, next=1, vector=True, lexical=False),
    "previous-next-lexical": TurnExpansion(previous=1, next=1, vector=False, lexical=True),
    "previous-next-both": TurnExpansion(previous=1, next=1, vector=True, lexical=True),
}
DEFAULT_EXPANSION = PRESETS["previous-lexical"]


def expansion_named(name: str) -> TurnExpansion:
    """The preset called `name`; a one-line error listing the presets otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise StoreError(f"unknown expansion {name!r}; choose one of {', '.join(PRESETS)}") from None


def expansion_from_json(document: Any) -> TurnExpansion:
    """The expansion a manifest records (absent: a store written before expansion existed, so off)."""
    if document is None:
        return OFF
    try:
        return TurnExpansion.model_validate(document)
    except ValidationError as error:
        raise StoreError(f"the manifest's expansion {document!r} is not valid ({error.errors()[0]['msg']}); "
                         "the manifest is damaged, restore it from a backup") from error


def resolved_expansion(recorded: TurnExpansion, object_count: int, asked: TurnExpansion | None) -> TurnExpansion:
    """The expansion a write uses: an empty store takes the one asked for (else the default); a
    store holding objects keeps its own, and asking for a different one is an error."""
    if object_count == 0:
        return (DEFAULT_EXPANSION if asked is None else asked).effective()
    if asked is not None and asked.effective() != recorded:
        raise StoreError(f"the store was written with expansion {recorded.to_json()} and cannot take objects "
                         f"expanded as {asked.to_json()}; open it without an expansion, or ingest into an empty store")
    return recorded


@dataclass(frozen=True)
class IndexedTexts:
    """Per row, the text its vector is computed from and the (text, entity name) BM25 analyses."""

    vector: list[str]
    lexical: list[tuple[str, str | None]]


def indexed_texts(rows: Sequence[MemoryObject], stored: Sequence[Any], expansion: TurnExpansion) -> IndexedTexts:
    """The texts each row is embedded and indexed by; `stored` are the committed segments
    (anything with `sessions` and `object_at`, as `LoadedSegment`) whose turns can be neighbours."""
    texts = [spoken_text(memory) for memory in rows]
    documents = [(text, memory.entity_canonical_name) for text, memory in zip(texts, rows, strict=True)]
    if expansion.is_off:
        return IndexedTexts(texts, documents)
    sessions = _session_turns(rows, stored)
    positions = {key: {seq: index for index, (seq, _) in enumerate(turns)} for key, turns in sessions.items()}
    vector_texts, lexical_documents = [], []
    for memory, own, document in zip(rows, texts, documents, strict=True):
        key = _session_key(memory)
        text = own
        if key is not None:
            turns = sessions[key]
            position = positions[key][memory.session_seq]
            before = [content for _, content in turns[max(0, position - expansion.previous) : position]]
            after = [content for _, content in turns[position + 1 : position + 1 + expansion.next]]
            text = "\n".join([*before, own, *after])
        vector_texts.append(text if expansion.vector else own)
        lexical_documents.append((text, memory.entity_canonical_name) if expansion.lexical else document)
    return IndexedTexts(vector_texts, lexical_documents)


def _session_key(memory: MemoryObject) -> SessionKey | None:
    return None if memory.session_seq is None else session_key(memory)


def _session_turns(rows: Sequence[MemoryObject], stored: Sequence[Any]) -> dict[SessionKey, list[tuple[int, str]]]:
    """(position, content) of every TURN in the sessions `rows` touch, from `rows` and the store,
    in session order; a position given twice keeps the new row's (the batch is what is written)."""
    wanted: dict[SessionKey, dict[int, str]] = defaultdict(dict)
    for memory in rows:
        key = _session_key(memory)
        if key is not None:
            wanted[key]
    for segment in stored:
        for key, turns in wanted.items():
            for seq, row in segment.sessions.get(key, ()):
                neighbour = segment.object_at(row)
                if neighbour.node_type is NodeType.TURN:
                    turns.setdefault(seq, spoken_text(neighbour))
    for memory in rows:
        key = _session_key(memory)
        if key is not None:
            wanted[key][memory.session_seq] = spoken_text(memory)
    return {key: sorted(turns.items()) for key, turns in wanted.items()}
