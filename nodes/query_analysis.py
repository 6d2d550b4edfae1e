"""Stage 1, query analysis (RFC-0005 section 3): entities, dates, intent, current state,
aggregation, and the query embedding.

Rule-based and cheap: a question without a date word never reaches dateparser, and the only
per-request cost that grows is one pass over the entity catalog. Two nodes here read outside
the request: `entity_catalog` (the graph index's names, which entity matching needs) and
`query_embedding` (the query encoder).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from uuid import UUID

from rms_retrieval.nodes.models import (AggregationKind, EntityType, QueryEmbedding, QueryAnalysis, QueryEntity,
                                        QueryIntent, RetrievalRequest, TemporalSignal, TemporalType)
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.nodes.helpers.temporal import date_words_read_as_names, parse_temporal_signals
from rms_retrieval.stores.providers.embedding import validated_query_vector
from rms_retrieval.stores.analysis.entities import ExtractedEntity, NameMatcher, extract_entities
from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
from rms_retrieval.stores.analysis.entities import first_name_word as _first_word
from rms_retrieval.stores.analysis.entities import name_key as _key
from rms_retrieval.stores.analysis.entities import name_words as _words
from rms_retrieval.stores.protocols import QueryEncoder, RetrievalStore

# How sure a name is a named entity, by how it was found; the best finding of a name wins.
# A capitalised span might be a sentence start or a title, so it is the least sure.
_SPAN_CONFIDENCE = 0.6
# A span whose first word is a known first name is more likely a person.
_FIRST_NAME_CONFIDENCE = 0.7
# The asker quoted it: a deliberate name, though not necessarily one the store knows.
_QUOTED_CONFIDENCE = 0.8
# The store's own entity catalog names it: the surest, short of 1.0, which no text match earns.
_CATALOG_CONFIDENCE = 0.9


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|(?<!\w)'([^']+)'(?!\w)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9&\-]*(?:['’][A-Za-z]+)?")

# Intent cues (RFC 3). "what's" counts as "what is".
_ENTITY_START = _rx(r"^\W*(?:who|whom|whose|who's|what\s+is|what\s+are|what's|what're)\b")
_TEMPORAL_WORDS = _rx(
    r"\b(?:when|last|before|after|since|until|till|ago|during|recently|lately|how\s+long|"
    r"(?:what|which)\s+(?:year|date|day|month|time|week))\b"
)
_RELATIONAL_WORDS = _rx(
    r"\b(?:relationships?|related|relatives?|friends?\s+with|friends?\s+of|know\s+each\s+other|"
    r"married|marry|divorced|engaged|sisters?|brothers?|siblings?|mothers?|fathers?|moms?|dads?|"
    r"parents?|husbands?|wives|wife|spouses?|partners?|boyfriends?|girlfriends?|sons?|daughters?|"
    r"children|kids?|cousins?|aunts?|uncles?|grand(?:mother|father|parent)s?|colleagues?|"
    r"co-?workers?|bosses|boss|neighbou?rs?)\b"
    r"|\bbetween\s+\S.*\s+and\s+\S|\bhow\s+(?:does|do|did)\s+\S.*\s+know\b"
)
_FACTUAL_ANYWHERE = _rx(r"\b(?:what|which|where|how\s+many|how\s+much)\b")
_FACTUAL_START = _rx(r"^\W*(?:did|does|do|is|are|was|were|has|have|can|could|will|would)\b")

# Current state (RFC 7.1).
_CURRENT_WORDS = _rx(
    r"\b(?:now|currently|current|these\s+days|at\s+the\s+moment|at\s+present|presently|"
    r"nowadays|still|anymore|any\s+more)\b"
)
_PRESENT_TENSE = _rx(r"\b(?:is|are|am|does|do)\b|\b(?:what|who|where|how|that)['’]s\b")
# A present-tense question is about the current state only when it asks about something that
# changes over time. "What is wrong with Tomas's knee?" is not, and boosting the newest
# memories there ranked an unrelated newest turn first.
_CHANGING_STATE = _rx(
    r"\b(?:live|lives|living|work|works|working|job|employer|company|dating|date|married|partner|"
    r"boyfriend|girlfriend|husband|wife|role|position|title|address|home|city|like|likes|"
    r"prefer|prefers|favou?rite|own|owns|drive|drives|use|uses|plan|plans)\b"
)
_PAST_WORDING = _rx(
    r"\b(?:when\s+(?:did|was|were|had)|how\s+long|before|after|did|was|were|had|used\s+to|ago|"
    r"previously|formerly|last|went|came|got|said|told|bought|made|took|gave|saw|met|moved|"
    r"started|began|finished|visited|attended|received|lost|found|left|became)\b"
)

# Aggregation (RFC 5, "Natural-language count and list retrievals"): conservative on purpose.
_COUNT_TIMES = _rx(r"\bhow\s+many\s+times\b")
_ELAPSED_TIME = _rx(
    r"\bhow\s+long\b|\bhow\s+many\s+(?:more\s+)?(?:seconds|minutes|hours|days|weeks|weekends|"
    r"months|years|decades)\b"
)
_COUNT = _rx(r"\bhow\s+many\b|\bhow\s+often\b|\bnumber\s+of\b|^\W*count\b|\bcount\s+(?:of|the|all|how)\b")
_LIST = _rx(
    r"^\W*(?:please\s+)?list\b|\blist\s+(?:all|every|each|the)\b|\b(?:what|which)\s+(?:are|were)\s+all\b"
    r"|\bwhich\b.*\ball\b|\bname\s+(?:all|every|each)\b"
    r"|\bwhat\s+(?:kinds|types|sorts)\s+of\b"
    r"|\bwhat\s+(?!(?:is|was|has|does|this|its|news|status|plus|yours|his|hers|ours|theirs)\b)"
    r"[a-z]{3,}s\s+(?:has|have|did|does|do)\b"
)

# The speakers of a chat a question names (scoring.pronoun_speakers): the assistant when it asks
# back for what the assistant said ("you mentioned", "you recommended", "our previous
# conversation", "we talked"), and then the assistant alone, although such a question speaks in
# the first person too ("can you remind me"); otherwise the user who asks, when it is in the first
# person. A request ("can you suggest ...") names no one: the answer lies in what the user said.
_FIRST_PERSON = re.compile(r"\b(?:I(?:['’](?:m|ve|d|ll))?|(?i:me|my|mine|myself))\b")
_ASSISTANT_RECALLED = re.compile(
    r"\byou\s+(?:\w+\s+){0,2}?(?:mentioned|recommended|suggested|provided|said|told|gave|wrote|made|listed|shared"
    r"|described|explained|named|showed|came\s+up\s+with)\b"
    r"|\bour\s+(?:previous|last|earlier)\s+(?:conversation|chat|discussion)\b|\bwe\s+(?:talked|discussed|chatted)\b",
    re.IGNORECASE,
)

_EXTRACTOR_TYPES = {t.value: t for t in EntityType}


def _speaker_roles(query: str) -> tuple[str, ...]:
    """The chat roles `query` names as its speakers (see _ASSISTANT_RECALLED)."""
    if _ASSISTANT_RECALLED.search(query):
        return ("assistant",)
    return ("user",) if _FIRST_PERSON.search(query) else ()


def _occurrences(name: str, query: str) -> list[tuple[int, int]]:
    """Where `name` occurs in `query` as whole words, case-insensitively."""
    words = _words(name)
    if not words:
        return []
    pattern = r"(?<![^\W_])" + r"[\W_]+".join(re.escape(w) for w in words) + r"(?![^\W_])"
    return [m.span() for m in re.finditer(pattern, query, re.IGNORECASE)]


class _Catalog:
    """The catalog names that could occur in one query, by lower-case name and by first word.

    One pass over the catalog, and only names whose first word is a word of the query are
    normalised: the catalog can hold thousands of names, the query a dozen words.
    """

    def __init__(self, catalog: EntityCatalog, query: str) -> None:
        self.names = NameMatcher()
        self.spelling: dict[str, str] = {}
        self.by_first_word: dict[str, set[UUID]] = {}
        query_words = set(_words(query))
        for ref in catalog.refs_for(query_words):  # refs a query word opens, in catalog order
            for name in (ref.canonical_name, ref.alias):
                if _first_word(name) not in query_words:
                    continue
                key = self.names.add(ref.object_id, name)
                if key is None:
                    continue
                if key not in self.spelling or name == ref.canonical_name:
                    self.spelling[key] = name
                first, _, rest = key.partition(" ")
                if rest:
                    self.by_first_word.setdefault(first, set()).add(ref.object_id)

    def found_in(self, query: str) -> list[str]:
        """Catalog names found in the query as whole words, as lower-case keys."""
        return self.names.names_in(query)

    def matched_ids(self, name: str) -> tuple[UUID, ...]:
        return tuple(sorted(self.names.named(name)))

    def unique_full_name(self, first_name: str) -> UUID | None:
        key = _key(first_name)
        ids = self.by_first_word.get(key, set()) if " " not in key else set()
        return next(iter(ids)) if len(ids) == 1 else None


def _capitalised_only_as_first_word(entity: ExtractedEntity, catalog: _Catalog) -> bool:
    """A one-word span opening the question ("Tell me...") that no catalog name confirms."""
    return (
        entity.start_token == 0
        and " " not in entity.name
        and not catalog.matched_ids(entity.name)
        and catalog.unique_full_name(entity.name) is None
    )


def _quoted_phrases(query: str) -> list[str]:
    phrases = []
    for match in _QUOTED.finditer(query):
        phrase = " ".join(next(g for g in match.groups() if g is not None).split())
        if phrase:
            phrases.append(phrase)
    return phrases


def _query_entities(query: str, catalog: _Catalog) -> tuple[QueryEntity, ...]:
    """Spans, quoted phrases and catalog names, one entity per lower-case name, in query order."""
    extracted = extract_entities(query)
    extractor_type = {_key(e.name): _EXTRACTOR_TYPES.get(e.entity_type, EntityType.OTHER) for e in extracted}
    candidates: list[QueryEntity] = []
    for key in catalog.found_in(query):
        guessed = extractor_type.get(key)
        entity_type = EntityType.ORGANIZATION if guessed is EntityType.ORGANIZATION else EntityType.PERSON
        name = catalog.spelling[key]
        candidates.append(
            QueryEntity(name=name, type=entity_type, confidence=_CATALOG_CONFIDENCE, matched_ids=catalog.matched_ids(name))
        )
    spans = [
        (e.name, extractor_type[_key(e.name)], _SPAN_CONFIDENCE)
        for e in extracted
        if not _capitalised_only_as_first_word(e, catalog)
    ]
    spans += [(name, EntityType.OTHER, _SPAN_CONFIDENCE) for name in date_words_read_as_names(query)]
    spans += [(phrase, EntityType.OTHER, _QUOTED_CONFIDENCE) for phrase in _quoted_phrases(query)]
    for name, entity_type, confidence in spans:
        full_name = catalog.unique_full_name(name)
        if not catalog.matched_ids(name) and full_name is not None:
            candidates.append(
                QueryEntity(
                    name=name,
                    type=EntityType.PERSON,
                    confidence=max(confidence, _FIRST_NAME_CONFIDENCE),
                    matched_ids=(full_name,),
                )
            )
        else:
            candidates.append(
                QueryEntity(name=name, type=entity_type, confidence=confidence, matched_ids=catalog.matched_ids(name))
            )
    best: dict[str, QueryEntity] = {}
    for entity in candidates:
        key = entity.name.casefold()
        if key not in best or entity.confidence > best[key].confidence:
            best[key] = entity
    return tuple(sorted(best.values(), key=lambda e: (_first_position(e.name, query), e.name.casefold())))


def _first_position(name: str, query: str) -> int:
    spans = _occurrences(name, query)
    return spans[0][0] if spans else len(query)


def _outside_dates(
    entities: tuple[QueryEntity, ...], query: str, date_spans: list[tuple[int, int]]
) -> tuple[QueryEntity, ...]:
    """Entities without those found only inside a date phrase (a catalog "June" in "in June")."""
    def inside_only(entity: QueryEntity) -> bool:
        spans = _occurrences(entity.name, query)
        return bool(spans) and all(_within(span, date_spans) for span in spans)

    return tuple(e for e in entities if not inside_only(e))


def _within(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    return any(a <= span[0] and span[1] <= b for a, b in spans)


def _signal_spans(query: str, signals: Iterable[TemporalSignal]) -> list[tuple[int, int]]:
    """Where each signal's text sits in the query; signal texts are query words, spaces normalised."""
    spans = []
    for signal in signals:
        pattern = r"\s+".join(re.escape(w) for w in signal.text.split())
        spans += [m.span() for m in re.finditer(pattern, query)]
    return spans


def _name_words(entities: Iterable[QueryEntity]) -> set[str]:
    return {word for entity in entities for word in _words(entity.name)}


def _is_read_as_name(signal: TemporalSignal, name_words: set[str]) -> bool:
    """A one-word capitalised date that is part of a name ("June" dating, "Sun" Microsystems)."""
    words = signal.text.split()
    return len(words) == 1 and words[0][:1].isupper() and _key(words[0]) in name_words


def _names_capitalised_word(query: str, name_words: set[str]) -> bool:
    """A capitalised word after the first word that is part of an entity name."""
    words = _WORD.findall(query)
    return any(w[:1].isupper() and _key(re.sub(r"['’]s$", "", w)) in name_words for w in words[1:])


def _intent(
    query: str, entities: tuple[QueryEntity, ...], signals: tuple[TemporalSignal, ...], order: str
) -> QueryIntent:
    """The first matching intent rule (RFC 3), in the configured order."""
    is_entity = bool(_ENTITY_START.search(query)) or _names_capitalised_word(query, _name_words(entities))
    is_temporal = bool(_TEMPORAL_WORDS.search(query)) or bool(signals)
    checks = [(QueryIntent.ENTITY_LOOKUP, is_entity), (QueryIntent.TEMPORAL, is_temporal)]
    if order == "temporal_first":
        checks.reverse()
    checks += [
        (QueryIntent.RELATIONAL, bool(_RELATIONAL_WORDS.search(query))),
        (QueryIntent.FACTUAL, bool(_FACTUAL_ANYWHERE.search(query) or _FACTUAL_START.search(query))),
    ]
    return next((intent for intent, matched in checks if matched), QueryIntent.SEMANTIC)


def _is_current_state(query: str, intent: QueryIntent, signals: tuple[TemporalSignal, ...]) -> bool:
    """Present-tense "current" questions (RFC 7.1); never with past wording or a date."""
    dated = any(s.type is not TemporalType.RECURRING for s in signals)
    if dated or _PAST_WORDING.search(query):
        return False
    if _CURRENT_WORDS.search(query):
        return True
    return (
        bool(_PRESENT_TENSE.search(query) and _CHANGING_STATE.search(query))
        and intent is not QueryIntent.TEMPORAL
    )


def _aggregation(query: str) -> AggregationKind | None:
    """COUNT or LIST for set questions; elapsed-time questions are arithmetic, not sets (RFC 5)."""
    if _COUNT_TIMES.search(query):
        return AggregationKind.COUNT
    if _ELAPSED_TIME.search(query):
        return None
    if _COUNT.search(query):
        return AggregationKind.COUNT
    if _LIST.search(query):
        return AggregationKind.LIST
    return None


def entity_catalog(store_snapshot: RetrievalStore, request: RetrievalRequest) -> EntityCatalog:
    """Every entity name and alias in the request's namespaces."""
    return store_snapshot.entity_catalog(request.namespaces)


def query_embedding(
    request: RetrievalRequest, query_encoder: QueryEncoder, settings: RetrievalSettings
) -> QueryEmbedding | None:
    """The query's unit vector, checked as stored vectors are, or None when the vector path is off."""
    if PathType.VECTOR not in settings.candidates.enabled_paths:
        return None
    identity = query_encoder.identity
    return QueryEmbedding(vector=validated_query_vector(query_encoder.encode([request.query]), identity),
                          identity=identity)


def query_analysis(
    request: RetrievalRequest, entity_catalog: EntityCatalog, settings: RetrievalSettings
) -> QueryAnalysis:
    """Entities, date windows, intent, current-state and aggregation flags of the request's question."""
    query = request.query
    named = _query_entities(query, _Catalog(entity_catalog, query))
    name_words = _name_words(named)
    signals = tuple(
        s for s in parse_temporal_signals(query, request.reference_time) if not _is_read_as_name(s, name_words)
    )
    entities = _outside_dates(named, query, _signal_spans(query, signals))
    intent = _intent(query, entities, signals, settings.query_intent_order)
    return QueryAnalysis(
        raw_query=query,
        entities=entities,
        temporal_signals=signals,
        intent=intent,
        current_state=_is_current_state(query, intent, signals),
        aggregation=_aggregation(query),
        speaker_roles=_speaker_roles(query),
        namespace_scope=request.namespaces,
        retrieval_mode=request.retrieval_mode,
        reference_time=request.reference_time,
    )
