"""The entity-object graph one batch of memories adds (RFC-0001 Section 9), as a pure function.

Known entities are the ENTITY objects already in the store or in the batch, matched by
`entity_canonical_name` and `metadata["aliases"]`. Every other object gets a MENTIONS edge to
each entity whose name occurs in its content (by `rms_retrieval.stores.analysis.entities.NameMatcher`, the
matcher query analysis uses too), plus to each name `extract_entities` spots; a spotted name
that is not known becomes a new ENTITY object (marked `extracted`, with lower confidence). Each
object's speaker (`stores/analysis/speakers.py`: `metadata["speaker"]`, or a plain turn's leading "Name:")
adds SPOKEN_BY to the entity of that name; a speaker the namespace does not know yet becomes a
PERSON ENTITY the first time they speak, before names are spotted, so the spotter finds them known.
Entities mentioned by the same object are joined by CO_MENTIONED, each to the next
CO_MENTION_WINDOW in order of first mention (`co_mentioned_pairs`), whose confidence grows with
the number of objects joining both.

Long prose: the spotter takes every capitalised run, so an assistant's answer of a few hundred
words names 30 to 200 "entities", most of them sentence-initial words ("Consider", "Some", "To")
or headings. Such a word, once spotted, is a known name and matches in any case. The window
keeps what that adds linear: about 70,000 CO_MENTIONED edges for a LongMemEval-S haystack of
500 turns, where every pair made about 234,000; LoCoMo's chat turns, which name 4 to 6, keep
99% of their pairs.

What it catches: exact names and aliases in any case, possessives ("Caroline's"), multi-word
names ("Bank of America"). What it misses: nicknames and misspellings not listed as aliases,
pronouns ("she"), names in lower case that were never spotted capitalised or declared, and
mentions in earlier batches of an entity first spotted later (edges are never added
retroactively, so splitting one ingest into batches can drop some such mentions).
Edges never cross namespaces: both ends come from one object's namespace.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid5

from rms_retrieval.stores.analysis.entities import NameMatcher, extract_entities, name_key
from rms_retrieval.stores.models import EpistemicType, MemoryObject, NodeType
from rms_retrieval.stores.analysis.speakers import DEFAULT_SPEAKER_RULES, SpeakerRules, speaker_of

# Fixed, so an extracted entity gets the same id whenever the same memories are written; the
# namespace's anchor (below) keeps the id out of reach of anyone who knows no id of that namespace.
ENTITY_ID_NAMESPACE = UUID("6f1d7c1e-3a53-5b8e-9a4e-2f0c6f1b8d35")

MENTIONS = "MENTIONS"
SPOKEN_BY = "SPOKEN_BY"
CO_MENTIONED = "CO_MENTIONED"

DECLARED_MENTION_CONFIDENCE = 0.9
EXTRACTED_MENTION_CONFIDENCE = 0.7
EXTRACTED_ENTITY_CONFIDENCE = 0.7
SPOKEN_BY_CONFIDENCE = 1.0
# Each mentioned entity is joined to the next CO_MENTION_WINDOW in order of first mention, so an
# object's CO_MENTIONED pairs grow with what it says, not with its square (a long assistant turn
# names 30 to 200 capitalised runs).
CO_MENTION_WINDOW = 8
# A CO_MENTIONED edge's confidence: the base, a step per object mentioning both entities, and the
# most, which CO_MENTIONS_SATURATED objects or more reach.
CO_MENTION_BASE, CO_MENTION_STEP, CO_MENTION_MOST = 0.35, 0.1, 0.95
CO_MENTIONS_SATURATED = 6


@dataclass(frozen=True, slots=True, order=True)
class GraphEdge:
    """An edge to write. CO_MENTIONED edges have source < target; others point object → entity."""

    namespace: str
    edge_type: str
    source: UUID
    target: UUID
    confidence: float


@dataclass(frozen=True, slots=True)
class GraphUpdate:
    """What a batch adds: new ENTITY objects (by id), new edges, and re-weighted CO_MENTIONED edges."""

    entities: tuple[MemoryObject, ...]
    edges: tuple[GraphEdge, ...]
    reweighted: tuple[GraphEdge, ...]


CoMentionKey = tuple[str, UUID, UUID]  # (namespace, smaller entity id, larger entity id)


def entity_id(namespace: str, name: str, anchor: UUID, attempt: int = 0) -> UUID:
    """The id an extracted entity named `name` gets in `namespace`, whose first stored object has
    the id `anchor` (StoreSnapshot.namespace_anchor). The anchor makes the id unguessable to a
    writer of another namespace, so that store-made ids reveal nothing across namespaces. A store
    whose first choice is already taken in the namespace (by an id a user supplied) asks for
    attempt 1, 2, ... until one is free."""
    suffix = f"\x00{attempt}" if attempt else ""
    return uuid5(ENTITY_ID_NAMESPACE, f"{namespace}\x00{anchor}\x00{name.lower()}{suffix}")


def co_mention_confidence(objects_mentioning_both: int) -> float:
    """0.45 for one shared mention, +0.1 for each further one, at most 0.95 (CO_MENTIONS_SATURATED or more)."""
    return round(min(CO_MENTION_MOST, CO_MENTION_BASE + CO_MENTION_STEP * objects_mentioning_both), 2)


def co_mentioned_pairs(in_order: Sequence[UUID], window: int = CO_MENTION_WINDOW) -> set[tuple[UUID, UUID]]:
    """The entity pairs one object joins by CO_MENTIONED, each (smaller id, larger id): every
    entity with the next `window` entities in order of first mention. An object naming m entities
    adds at most window x m pairs, where all pairs would be m(m-1)/2; one naming window + 1 or
    fewer joins them all."""
    return {(a, b) if a < b else (b, a)
            for i, a in enumerate(in_order) for b in in_order[i + 1 : i + 1 + window]}


def entity_names(entity: MemoryObject) -> list[str]:
    """The canonical name and every alias of an ENTITY object."""
    return names_of(entity.entity_canonical_name, entity.metadata.get("aliases"))


def names_of(canonical_name: str | None, aliases: object) -> list[str]:
    """An entity's canonical name and aliases (`metadata["aliases"]`, its text items), blank ones left out."""
    listed = aliases if isinstance(aliases, list) else []
    names = [canonical_name or ""] + [alias for alias in listed if isinstance(alias, str)]
    return [name for name in names if name.strip()]


class KnownNames:
    """The entities one namespace knows, by any of their names, and which of them were extracted.

    A store makes one per namespace from the columns of its ENTITY rows (`of_entries`, no object
    decoded) and keeps it across writes, extended by the entities each write adds (`with_entries`:
    a copy); `entity_graph` adds a batch's names to a copy (`copy`), so one a store keeps never
    changes, and a write to a namespace of thousands of entities does not index every name again.
    Ids are kept as their integers (`NameMatcher`)."""

    def __init__(self) -> None:
        self.names = NameMatcher()
        self.extracted: set[int] = set()

    @classmethod
    def of(cls, entities: Iterable[MemoryObject]) -> KnownNames:
        """The names of `entities` (ENTITY objects of one namespace; other objects are left out)."""
        return cls.of_entries(entity_entries(entities))

    @classmethod
    def of_entries(cls, entries: Iterable[tuple[int, list[str], bool]]) -> KnownNames:
        """The names of the entities `entries` gives: (id's integer, names, extracted) each."""
        return cls()._adding(entries)

    def copy(self) -> KnownNames:
        copied = KnownNames()
        copied.names, copied.extracted = self.names.copy(), set(self.extracted)
        return copied

    def with_entries(self, entries: Iterable[tuple[int, list[str], bool]]) -> KnownNames:
        """These names and those of `entries` (as `of_entries` takes them), in a copy."""
        return self.copy()._adding(entries)

    def _adding(self, entries: Iterable[tuple[int, list[str], bool]]) -> KnownNames:
        for number, names, extracted in entries:
            self.add(number, names, extracted)
        return self

    def add(self, object_id: UUID | int, names: Iterable[str], extracted: bool) -> None:
        for name in names:
            self.names.add(object_id, name)
        if extracted:
            self.extracted.add(object_id if type(object_id) is int else object_id.int)

    def is_extracted(self, object_id: UUID) -> bool:
        return object_id.int in self.extracted

    def named(self, name: str) -> set[UUID]:
        return self.names.named(name)

    def occurring_in(self, text: str) -> list[UUID]:
        return self.names.ids_in_order(text)


def entity_entries(entities: Iterable[MemoryObject]) -> Iterator[tuple[int, list[str], bool]]:
    """(id's integer, names, extracted) of each ENTITY object of `entities` (others are left out)."""
    return ((entity.id.int, entity_names(entity), bool(entity.metadata.get("extracted")))
            for entity in entities if entity.node_type is NodeType.ENTITY)


def known_names(entities: Iterable[MemoryObject]) -> dict[str, KnownNames]:
    """The names of `entities` (ENTITY objects) by namespace, as `entity_graph` takes them."""
    by_namespace: dict[str, list[MemoryObject]] = defaultdict(list)
    for entity in entities:
        by_namespace[entity.namespace].append(entity)
    return {namespace: KnownNames.of(found) for namespace, found in by_namespace.items()}


def entity_graph(
    batch: Sequence[MemoryObject],
    known: Mapping[str, KnownNames],
    existing_co_mentions: Mapping[CoMentionKey, int],
    anchors: Mapping[str, UUID],
    speakers: SpeakerRules = DEFAULT_SPEAKER_RULES,
) -> GraphUpdate:
    """New entities and edges for `batch`, given the names of the store's ENTITY objects in the
    batch's namespaces (`known`, by namespace: `known_names`, or a store's `known_names`, none
    of which changes), per entity pair how many stored objects already mention both, each
    namespace's anchor (entity_id), and how a plain turn names its speaker (`speakers`)."""
    ordered = sorted(batch, key=lambda memory: (memory.namespace, memory.created_at, memory.id))
    namespaces: dict[str, KnownNames] = defaultdict(KnownNames, {name: names.copy() for name, names in known.items()})
    for entity in ordered:
        for number, names, extracted in entity_entries([entity]):  # none for an object that is no entity
            namespaces[entity.namespace].add(number, names, extracted)

    # by (namespace, id): ids are unique within a namespace only, and one batch may hold the same id in two
    speaker_by_object: dict[tuple[str, UUID], str] = {}
    new_speakers: dict[UUID, MemoryObject] = {}
    for memory in ordered:
        speaker = None if memory.node_type is NodeType.ENTITY else speaker_of(memory, speakers)
        if speaker is None or len(name_key(speaker)) < 2:
            continue
        speaker_by_object[(memory.namespace, memory.id)] = speaker
        known = namespaces[memory.namespace]
        if not known.named(speaker):
            new_id = entity_id(memory.namespace, speaker, anchors[memory.namespace])
            known.add(new_id, [speaker], extracted=False)
            new_speakers[new_id] = _new_entity(new_id, speaker, memory, extracted=False, entity_type="PERSON")

    spotted_new: dict[UUID, tuple[str, str]] = {}  # id -> (name, entity type) of first spotting
    spotted_by_object: dict[tuple[str, UUID], set[UUID]] = {}
    for memory in ordered:
        if memory.node_type is NodeType.ENTITY:
            continue
        known = namespaces[memory.namespace]
        ids: set[UUID] = set()
        for spotted in extract_entities(memory.content):
            matches = known.named(spotted.name)
            if not matches:
                new_id = entity_id(memory.namespace, spotted.name, anchors[memory.namespace])
                spotted_new[new_id] = (spotted.name, spotted.entity_type)
                known.add(new_id, [spotted.name], extracted=True)
                matches = {new_id}
            ids |= matches
        spotted_by_object[(memory.namespace, memory.id)] = ids

    edges: list[GraphEdge] = []
    first_mention: dict[UUID, MemoryObject] = {}
    batch_co_mentions: dict[CoMentionKey, int] = defaultdict(int)
    for memory in ordered:
        if memory.node_type is NodeType.ENTITY:
            continue
        known = namespaces[memory.namespace]
        in_order = known.occurring_in(memory.content)
        mentioned = set(in_order) | spotted_by_object[(memory.namespace, memory.id)]
        for target in sorted(mentioned):
            confidence = EXTRACTED_MENTION_CONFIDENCE if known.is_extracted(target) else DECLARED_MENTION_CONFIDENCE
            edges.append(GraphEdge(memory.namespace, MENTIONS, memory.id, target, confidence))
            first_mention.setdefault(target, memory)
        speaker = speaker_by_object.get((memory.namespace, memory.id))
        if speaker is not None:
            for target in sorted(known.named(speaker)):
                edges.append(GraphEdge(memory.namespace, SPOKEN_BY, memory.id, target, SPOKEN_BY_CONFIDENCE))
        for pair in co_mentioned_pairs([*in_order, *sorted(mentioned.difference(in_order))]):
            batch_co_mentions[(memory.namespace, *pair)] += 1

    reweighted: list[GraphEdge] = []
    for key, count in batch_co_mentions.items():
        namespace, first, second = key
        already = existing_co_mentions.get(key, 0)
        edge = GraphEdge(namespace, CO_MENTIONED, first, second, co_mention_confidence(already + count))
        (reweighted if already else edges).append(edge)

    entities = [
        _new_entity(new_id, name, first_mention[new_id], extracted=True, entity_type=entity_type)
        for new_id, (name, entity_type) in spotted_new.items()
    ] + list(new_speakers.values())
    return GraphUpdate(
        entities=tuple(sorted(entities, key=lambda entity: entity.id)),
        edges=tuple(sorted(edges)),
        reweighted=tuple(sorted(reweighted)),
    )


def _new_entity(new_id: UUID, name: str, first: MemoryObject, *, extracted: bool, entity_type: str) -> MemoryObject:
    """A new ENTITY dated by the first memory naming it: a spotted name (INFERRED, lower
    confidence, marked `extracted`) or a speaker the namespace did not know (an OBSERVED PERSON)."""
    created_at: datetime = first.created_at
    return MemoryObject(
        id=new_id,
        namespace=first.namespace,
        owner=first.owner,
        scope=first.scope,
        node_type=NodeType.ENTITY,
        content=name,
        entity_canonical_name=name,
        epistemic_type=EpistemicType.INFERRED if extracted else EpistemicType.OBSERVED,
        confidence=EXTRACTED_ENTITY_CONFIDENCE if extracted else 1.0,
        created_at=created_at,
        updated_at=created_at,
        metadata={"entity_type": entity_type, "extracted": True} if extracted else {"entity_type": entity_type},
    )
