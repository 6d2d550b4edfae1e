"""Stage 1 nodes called directly: entities, intent in both orders, current state, aggregation, limits."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import pytest
from hamilton import driver

import rms_retrieval.nodes.query_analysis as query_analysis_module
import rms_retrieval.nodes.candidate_generation as candidate_generation_module
from rms_retrieval.nodes.models import (AggregationKind, EntityType, QueryAnalysis, QueryEntity, QueryIntent,
                                        RetrievalMode, RetrievalRequest, TemporalType)
from rms_retrieval.nodes.pools import CandidateLimits
from rms_retrieval.nodes.candidate_generation import candidate_limits
from rms_retrieval.nodes.query_analysis import query_analysis
from rms_retrieval.nodes.candidate_settings import CandidateSettings
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
from rms_retrieval.stores.protocols import EntityRef

REFERENCE = datetime(2023, 8, 20, 12, 0, tzinfo=UTC)
CAROLINE, MELANIE, JUNE, TUESDAY, ACME = (UUID(int=i) for i in range(1, 6))
CATALOG = [
    EntityRef(CAROLINE, "ns", "Caroline", "Caroline"),
    EntityRef(MELANIE, "ns", "Melanie Brown", "Melanie Brown"),
    EntityRef(MELANIE, "ns", "Melanie Brown", "Mel"),
    EntityRef(JUNE, "ns", "June", "June"),
    EntityRef(TUESDAY, "ns", "Tuesday", "Tuesday"),
    EntityRef(ACME, "ns", "ACME Corp", "ACME Corp"),
]
ENTITY_FIRST = RetrievalSettings()
TEMPORAL_FIRST = RetrievalSettings(query_intent_order="temporal_first")
I = QueryIntent


def _request(query: str, **fields) -> RetrievalRequest:
    return RetrievalRequest(query=query, namespaces=("ns",), reference_time=REFERENCE, **fields)


def _analyse(query: str, settings: RetrievalSettings = ENTITY_FIRST, catalog=None) -> QueryAnalysis:
    return query_analysis(
        request=_request(query), entity_catalog=EntityCatalog(CATALOG if catalog is None else catalog), settings=settings
    )


# ---- entities -------------------------------------------------------------------------------


def test_capitalised_span_matches_catalog_name():
    analysis = _analyse("Tell me about Caroline's painting")
    assert analysis.entities == (
        QueryEntity(name="Caroline", type=EntityType.PERSON, confidence=0.9, matched_ids=(CAROLINE,)),
    )


def test_lower_case_catalog_name_and_alias():
    analysis = _analyse("tell me about caroline and mel")
    assert analysis.entities == (
        QueryEntity(name="Caroline", type=EntityType.PERSON, confidence=0.9, matched_ids=(CAROLINE,)),
        QueryEntity(name="Mel", type=EntityType.PERSON, confidence=0.9, matched_ids=(MELANIE,)),
    )


def test_catalog_names_are_whole_words():
    assert _analyse("tell me about caroline's melody and caroliner").entities == (
        QueryEntity(name="Caroline", type=EntityType.PERSON, confidence=0.9, matched_ids=(CAROLINE,)),
    )


def test_first_name_span_matches_unique_full_name():
    analysis = _analyse("Tell me about Melanie")
    assert analysis.entities == (
        QueryEntity(name="Melanie", type=EntityType.PERSON, confidence=0.7, matched_ids=(MELANIE,)),
    )


def test_first_name_shared_by_two_full_names_stays_unmatched():
    catalog = [
        EntityRef(CAROLINE, "ns", "Sam Smith", "Sam Smith"),
        EntityRef(MELANIE, "ns", "Sam Jones", "Sam Jones"),
    ]
    assert _analyse("Tell me about Sam", catalog=catalog).entities == (
        QueryEntity(name="Sam", type=EntityType.OTHER, confidence=0.6, matched_ids=()),
    )


def test_span_without_catalog_keeps_extractor_type():
    assert _analyse("Did she move to Boston", catalog=[]).entities == (
        QueryEntity(name="Boston", type=EntityType.PLACE, confidence=0.6),
    )


def test_catalog_organisation_keeps_extractor_type():
    (entity,) = _analyse("tell me about ACME Corp").entities
    assert (entity.name, entity.type, entity.matched_ids) == ("ACME Corp", EntityType.ORGANIZATION, (ACME,))


def test_opening_word_is_a_name_only_when_the_catalog_knows_it():
    assert [e.name for e in _analyse("Tell me about Boston", catalog=[]).entities] == ["Boston"]
    assert [e.name for e in _analyse("Melanie painted what?").entities] == ["Melanie"]


def test_quoted_phrase():
    assert _analyse('what did she think of "the secret garden"', catalog=[]).entities == (
        QueryEntity(name="the secret garden", type=EntityType.OTHER, confidence=0.8),
    )


def test_entities_deduplicated_by_lower_case_name_keeping_the_most_confident():
    analysis = _analyse("Caroline said 'caroline' to caroline")
    assert [(e.name, e.confidence) for e in analysis.entities] == [("Caroline", 0.9)]


# ---- intent ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "intent"),
    [
        ("who painted the sunrise", I.ENTITY_LOOKUP),
        ("what is the plan", I.ENTITY_LOOKUP),
        ("what are the options", I.ENTITY_LOOKUP),
        ("where did Caroline go", I.ENTITY_LOOKUP),  # capitalised name after the first word
        ("when did she go to the lake", I.TEMPORAL),
        ("how long has she been painting", I.TEMPORAL),
        ("what year did she start", I.TEMPORAL),
        ("what happened yesterday", I.TEMPORAL),  # a parsed date
        ("what happened in 2022", I.TEMPORAL),
        ("how does she know my sister", I.RELATIONAL),
        ("are they friends with each other", I.RELATIONAL),
        ("what links the two of them, between work and home", I.RELATIONAL),
        ("where does she live", I.FACTUAL),
        ("which car did she buy", I.FACTUAL),
        ("how many books did she read", I.FACTUAL),
        ("did she enjoy the concert", I.FACTUAL),
        ("tell me something nice", I.SEMANTIC),
        ("why do people paint", I.SEMANTIC),
    ],
)
def test_intent_rules_entity_first(query, intent):
    assert _analyse(query).intent is intent


def test_entity_first_names_win_over_dates():
    assert _analyse("What did Caroline do yesterday?").intent is I.ENTITY_LOOKUP


def test_temporal_first_dates_win_over_names():
    assert _analyse("What did Caroline do yesterday?", TEMPORAL_FIRST).intent is I.TEMPORAL
    assert _analyse("Who went to the lake last week?", TEMPORAL_FIRST).intent is I.TEMPORAL
    assert _analyse("Who went to the lake?", TEMPORAL_FIRST).intent is I.ENTITY_LOOKUP


@pytest.mark.parametrize("settings", [ENTITY_FIRST, TEMPORAL_FIRST])
def test_june_in_who_is_june_dating_is_a_name(settings):
    for catalog in (CATALOG, []):
        analysis = _analyse("Who is June dating?", settings, catalog)
        assert analysis.temporal_signals == ()
        assert [e.name for e in analysis.entities] == ["June"]
        assert analysis.intent is I.ENTITY_LOOKUP


@pytest.mark.parametrize("settings", [ENTITY_FIRST, TEMPORAL_FIRST])
def test_sun_microsystems_is_a_name(settings):
    analysis = _analyse("When did Sun Microsystems ship Java?", settings, [])
    assert analysis.temporal_signals == ()
    assert [e.name for e in analysis.entities] == ["Sun Microsystems", "Java"]
    expected = I.TEMPORAL if settings is TEMPORAL_FIRST else I.ENTITY_LOOKUP
    assert analysis.intent is expected


@pytest.mark.parametrize("settings", [ENTITY_FIRST, TEMPORAL_FIRST])
def test_one_word_date_that_is_a_catalog_name_is_dropped(settings):
    analysis = _analyse("What did Tuesday say?", settings)
    assert analysis.temporal_signals == ()
    assert [(e.name, e.matched_ids) for e in analysis.entities] == [("Tuesday", (TUESDAY,))]


@pytest.mark.parametrize("settings", [ENTITY_FIRST, TEMPORAL_FIRST])
@pytest.mark.parametrize(("query", "text"), [("What did mel do in June?", "in June"), ("Where was she in May 2023?", "May 2023")])
def test_dates_after_a_preposition_or_with_a_number_stay_dates(settings, query, text):
    analysis = _analyse(query, settings)
    assert [s.text for s in analysis.temporal_signals] == [text]
    assert "June" not in [e.name for e in analysis.entities]
    assert analysis.intent is I.TEMPORAL


def test_temporal_window_of_a_dated_question():
    analysis = _analyse("what did she do last week?")
    assert analysis.temporal_window == (datetime(2023, 8, 7, tzinfo=UTC), datetime(2023, 8, 14, tzinfo=UTC))
    assert analysis.temporal_signals[0].type is TemporalType.RELATIVE


# ---- current state --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "settings", "current"),
    [
        ("Where does Caroline live now?", ENTITY_FIRST, True),
        ("What is Caroline's current job?", ENTITY_FIRST, True),
        ("Is Caroline still painting?", ENTITY_FIRST, True),
        ("what does she do these days", ENTITY_FIRST, True),
        ("does she like jazz", ENTITY_FIRST, True),
        ("Who is Caroline dating since the breakup?", ENTITY_FIRST, True),
        # RFC 3: under temporal_first "since" makes it temporal, which keeps it off the path...
        ("Who is Caroline dating since the breakup?", TEMPORAL_FIRST, False),
        # ...unless it says so explicitly.
        ("Who is Caroline dating now, since the breakup?", TEMPORAL_FIRST, True),
        ("When did Caroline move?", ENTITY_FIRST, False),
        ("How long has she lived there?", ENTITY_FIRST, False),
        ("Where was she living before the move?", ENTITY_FIRST, False),
        ("Where did she live?", ENTITY_FIRST, False),
        ("What is she doing in June?", ENTITY_FIRST, False),
        ("What is she reading now that she moved?", ENTITY_FIRST, False),
        ("What is wrong with Tomas's knee?", ENTITY_FIRST, False),
        ("Where does Tomas work?", ENTITY_FIRST, True),
        ("tell me a story", ENTITY_FIRST, False),
    ],
)
def test_current_state(query, settings, current):
    assert _analyse(query, settings).current_state is current


# ---- aggregation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "aggregation"),
    [
        ("How many books has Melanie read?", AggregationKind.COUNT),
        ("how often does she swim", AggregationKind.COUNT),
        ("what is the number of trips she took", AggregationKind.COUNT),
        ("How many times did she go camping?", AggregationKind.COUNT),
        ("count the concerts she attended", AggregationKind.COUNT),
        ("List the books she read", AggregationKind.LIST),
        ("What are all the places she visited?", AggregationKind.LIST),
        ("Which countries has she visited in all?", AggregationKind.LIST),
        ("Name every pet she has had", AggregationKind.LIST),
        ("What kinds of art has Caroline made?", AggregationKind.LIST),
        ("What activities has Melanie done with her kids?", AggregationKind.LIST),
        ("How many days ago did she paint?", None),
        ("how many weeks passed between the trips", None),
        ("how many months since she moved", None),
        ("how many years until she retires", None),
        ("How long did the trip take?", None),
        ("What book is she reading?", None),
        ("What does she think about art?", None),
    ],
)
def test_aggregation(query, aggregation):
    assert _analyse(query).aggregation == aggregation


@pytest.mark.parametrize(
    ("query", "roles"),
    [
        ("How many items of clothing do I need to return?", ("user",)),
        ("I've been having trouble with my phone. Any tips?", ("user",)),
        ("What's MY favourite colour?", ("user",)),
        ("What was the hotel you recommended for the trip?", ("assistant",)),
        ("Can you remind me of the example you gave in our previous chat?", ("assistant",)),  # not the user
        ("I think we discussed jobs for seniors earlier. What was the 7th?", ("assistant",)),
        ("In our last conversation YOU SUGGESTED three names; which was first?", ("assistant",)),
        ("Can you suggest a hotel for my trip to Miami?", ("user",)),  # a request names no assistant words
        ("Do you have any tips?", ()),
        ("What did my sister say about the trip you planned?", ("user",)),  # "planned" tells nothing said
        ("When did Caroline go to the support group?", ()),
        ("i think so", ()),  # a lower-case i is not read as the pronoun
        ("Is Iowa in the Midwest? Is Yourk a town?", ()),
    ],
)
def test_the_chat_roles_a_question_names(query, roles):
    assert _analyse(query).speaker_roles == roles


# ---- the rest of the record -----------------------------------------------------------------


def test_request_fields_copied():
    request = RetrievalRequest(
        query="hello there", namespaces=("b", "a"), reference_time=REFERENCE, retrieval_mode=RetrievalMode.AUDIT
    )
    analysis = query_analysis(request=request, entity_catalog=EntityCatalog(), settings=ENTITY_FIRST)
    assert analysis == QueryAnalysis(
        raw_query="hello there",
        namespace_scope=("a", "b"),
        retrieval_mode=RetrievalMode.AUDIT,
        reference_time=REFERENCE,
        intent=I.SEMANTIC,
    )


# ---- candidate limits -----------------------------------------------------------------------


def test_limits_as_configured_without_aggregation():
    limits = candidate_limits(query_analysis=_analyse("What book is she reading?"), settings=ENTITY_FIRST)
    assert limits == CandidateLimits(vector_k=300, lexical_k=300, graph_max_candidates=50, widened=False)


def test_limits_widened_for_count_and_list():
    for query in ("How many books has she read?", "List the books she read"):
        limits = candidate_limits(query_analysis=_analyse(query), settings=ENTITY_FIRST)
        assert limits == CandidateLimits(vector_k=900, lexical_k=900, graph_max_candidates=150, widened=True)


def test_widened_limits_capped():
    settings = RetrievalSettings(
        candidates=CandidateSettings(
            vector_k=1000, lexical_k=3000, graph_max_candidates=0, aggregation_k_multiplier=2.5, aggregation_k_max=2000
        )
    )
    limits = candidate_limits(query_analysis=_analyse("How many books has she read?"), settings=settings)
    # The cap never narrows a limit configured above it; a disabled path (0) stays disabled.
    assert limits == CandidateLimits(vector_k=2000, lexical_k=3000, graph_max_candidates=0, widened=True)


@pytest.mark.parametrize("settings", [ENTITY_FIRST, TEMPORAL_FIRST])
def test_driver_runs_stage_one(settings):
    dr = driver.Builder().with_modules(query_analysis_module, candidate_generation_module).build()
    result = dr.execute(
        ["query_analysis", "candidate_limits"],
        inputs={"request": _request("How many times did Caroline swim last week?"), "settings": settings},
        overrides={"entity_catalog": EntityCatalog(CATALOG)},
    )
    assert result["query_analysis"].aggregation is AggregationKind.COUNT
    assert result["candidate_limits"].widened is True
    assert result["query_analysis"].intent is (I.TEMPORAL if settings is TEMPORAL_FIRST else I.ENTITY_LOOKUP)
