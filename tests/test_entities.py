from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import pytest

from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.query_analysis import query_analysis
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
from rms_retrieval.stores.analysis.entities import (NameMatcher, extract_entities, first_name_word, name_key,
                                                   name_words)
from rms_retrieval.stores.indexes.entity_graph import MENTIONS, entity_graph, known_names
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import EntityRef


def _names(text: str) -> list[tuple[str, str]]:
    return [(found.name, found.entity_type) for found in extract_entities(text)]


def test_capitalised_runs_possessives_and_joiners():
    # The organisation cue reads the last word only, so "Bank of America" stays OTHER.
    assert _names("Caroline's sister moved to New York with Bank of America.") == [
        ("Caroline", "OTHER"),
        ("New York", "PLACE"),
        ("Bank of America", "OTHER"),
    ]
    assert _names("She studies at Boston University") == [("Boston University", "ORGANIZATION")]


def test_function_words_weekdays_and_repeats_are_skipped():
    assert _names("Hey Mel! Monday I met Mel and Oh, Yes. I went.") == [("Mel", "OTHER")]
    assert _names("she met caroline") == []


def test_acronyms_are_organisations():
    assert _names("I joined the LGBTQ support group") == [("LGBTQ", "ORGANIZATION")]


# ---- one name matcher for ingest and query --------------------------------------------------

_TRICKY = [
    # (declared name, text, names it)
    ("Jo_Ann", "I met Jo Ann at the market", True),
    ("Jo Ann", "I met jo_ann at the market", True),
    ("O'Brien", "Dinner with O’Brien went well", True),
    ("Jean-Luc", "I called jean luc yesterday", True),
    ("José", "I called Jose\u0301 yesterday", True),  # the text's accent is a combining mark
    ("Straße", "We walked down STRASSE", True),
    ("ＡＣＭＥ", "She works at ACME now", True),
    ("Caroline", "Caroline's painting is lovely", True),
    ("Ann", "Annie went hiking", False),
    ("Jo", "Joanne went hiking", False),
    ("Zoë", "Zoe went hiking", False),  # an accent is part of the name
    ("A", "A friend went hiking", False),  # one letter never names anyone
]


def _named_at_ingest(name: str, text: str) -> bool:
    entity = MemoryObject(id=UUID(int=1), namespace="ns", node_type=NodeType.ENTITY, content=f"{name}, a friend",
                          entity_canonical_name=name)
    turn = MemoryObject(id=UUID(int=2), namespace="ns", content=text)
    update = entity_graph([turn], known_names([entity]), {}, {"ns": turn.id})
    return any(edge.edge_type == MENTIONS and edge.target == entity.id for edge in update.edges)


def _named_in_query(name: str, text: str) -> bool:
    request = RetrievalRequest(query=text, namespaces=("ns",), reference_time=datetime(2024, 1, 1, tzinfo=UTC))
    analysis = query_analysis(request, EntityCatalog([EntityRef(UUID(int=1), "ns", name, name)]), RetrievalSettings())
    return any(UUID(int=1) in entity.matched_ids for entity in analysis.entities)


@pytest.mark.parametrize("name, text, names_it", _TRICKY)
def test_ingest_and_query_agree_on_tricky_names(name, text, names_it):
    assert (_named_at_ingest(name, text), _named_in_query(name, text)) == (names_it, names_it)


def test_name_keys_fold_case_accents_and_separators():
    assert name_words("Jo_Ann O’Brien-Smith") == ["jo", "ann", "o", "brien", "smith"]
    assert name_key("Jose\u0301  STRASSE") == name_key("josé strasse") == "josé strasse"
    assert first_name_word("Jo_Ann") == "jo" and first_name_word("Mel Brown") == "mel"


def test_matcher_finds_names_as_whole_words_shortest_first():
    matcher = NameMatcher()
    assert matcher.add(UUID(int=1), "Melanie Brown") == "melanie brown"
    assert matcher.add(UUID(int=2), "Mel") == "mel"
    assert matcher.add(UUID(int=3), "x") is None
    assert matcher.names_in("melanie brown and MEL, not melanies or x") == ["mel", "melanie brown"]
    assert matcher.ids_in_order("Mel") == [UUID(int=2)] and matcher.named("MELANIE  brown") == {UUID(int=1)}


@pytest.mark.parametrize("query", ["Did Mel see Ann?", "What did Melanie Brown buy?", "Where is Zoë Ånd?", "When did nobody go?"])
def test_query_analysis_finds_a_catalogs_names_whatever_their_order(query):
    refs = [EntityRef(UUID(int=1), "ns", "Melanie Brown", "Mel"), EntityRef(UUID(int=1), "ns", "Melanie Brown", "Melanie Brown"),
            EntityRef(UUID(int=2), "ns", "Ann", "Ann"), EntityRef(UUID(int=3), "ns", "Zoë Ånd", "Zoë Ånd")]
    request = RetrievalRequest(query=query, namespaces=("ns",), reference_time=datetime(2024, 1, 1, tzinfo=UTC))
    indexed = query_analysis(request=request, entity_catalog=EntityCatalog(refs), settings=RetrievalSettings())
    assert indexed == query_analysis(request=request, entity_catalog=EntityCatalog(refs[::-1]), settings=RetrievalSettings())


def test_a_copied_matcher_takes_names_without_changing_the_one_it_was_copied_from():
    matcher = NameMatcher()
    matcher.add(UUID(int=1), "Caroline")
    copied = matcher.copy()
    copied.add(UUID(int=2), "caroline")  # a second id for a name both know
    copied.add(UUID(int=3), "Bank of America")
    assert copied.named("Caroline") == {UUID(int=1), UUID(int=2)} and matcher.named("Caroline") == {UUID(int=1)}
    assert copied.ids_in_order("at the Bank of America") == [UUID(int=3)] and matcher.ids_in_order("at the Bank of America") == []
