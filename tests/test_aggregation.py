from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from rms_retrieval.stores.exact import aggregation
from rms_retrieval.stores.exact.aggregation import (
    AssertionQuery,
    QuantityQuery,
    aggregate_assertions,
    aggregate_quantities,
)
from rms_retrieval.stores.analysis.claims import Quantity
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import EpistemicType, LifecycleState, MemoryObject, NodeType
from rms_retrieval.stores.visibility import RetrievalMode
from tests.factories import BASE_TIME, FakeEncoder, claim, make_object, oid

ALL_STATES = tuple(LifecycleState)


def name_of(object_id) -> str:
    return NAMES[object_id]


# ----- assertions --------------------------------------------------------------------------------

ASSERTIONS = [
    claim("b1", "I", "bought", "books", days=1),
    claim("b2", "  i ", "BOUGHT", " Books ", days=2, evidence=("dia-b2", "dia-shared")),
    claim("b3", "I", "bought", "books", days=3, evidence=("dia-shared",)),
    claim("b_not", "I", "bought", "books", polarity="negative", days=4),
    claim("we_b", "we", "bought", "books", node_type=NodeType.DECISION, days=5),
    claim("book", "I", "bought", "book", days=6),
    claim("likes", "I", "likes", "green   tea", node_type=NodeType.PREFERENCE, days=7),
    claim("paid", "I", "Paid-For", "the car", days=8),
    claim("turn", "I", "bought", "books", node_type=NodeType.TURN, days=9),
    claim("archived", "I", "bought", "books", lifecycle_state=LifecycleState.ARCHIVED, days=10),
    claim("tentative", "I", "bought", "books", lifecycle_state=LifecycleState.TENTATIVE, days=11),
    claim("deleted", "I", "bought", "books", lifecycle_state=LifecycleState.DELETED, days=12),
    claim("deprecated", "I", "bought", "books", epistemic_type=EpistemicType.DEPRECATED, days=13),
    claim("hypothetical", "I", "bought", "books", epistemic_type=EpistemicType.HYPOTHETICAL, days=14),
    claim("unverified", "I", "bought", "books", epistemic_type=EpistemicType.UNVERIFIED, confidence=0.3, days=15),
    claim("valid", "I", "bought", "books", days=16, valid_from=BASE_TIME + timedelta(days=20),
          valid_to=BASE_TIME + timedelta(days=30)),
    claim("work", "I", "bought", "books", scope="work", days=17),
    make_object("plain", "memory plain", node_type=NodeType.FACT, days=18),
    claim("elsewhere", "I", "bought", "books", namespace="other", days=1),
]
DEFAULT_BOOKS = ["b1", "b2", "b3", "valid", "work"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with MemoryStore.open(tmp_path_factory.mktemp("aggregation") / "store", FakeEncoder()) as opened:
        opened.add(ASSERTIONS)
        yield opened


def books(store, **fields) -> list[str]:
    """The records counted for "I bought books" under the query fields, by name."""
    values = {"namespace": "ns", "subjects": ("I",), "predicates": ("bought",), "objects": ("books",),
              "max_samples": 100, **fields}
    result = aggregate_assertions(store, AssertionQuery(**values))
    return sorted(name_of(sample.object_id) for group in result.groups for sample in group.samples)


def test_counts_occurrences_and_distinct_groups_apart(store):
    result = aggregate_assertions(store, AssertionQuery(namespace="ns", max_samples=2))
    keys = [(group.subject, group.predicate, group.object, group.polarity, group.occurrence_count) for group in result.groups]
    assert keys == [
        ("i", "bought", "books", "positive", 5),
        ("i", "bought", "book", "positive", 1),
        ("i", "likes", "green tea", "positive", 1),
        ("i", "paid_for", "the car", "positive", 1),
        ("we", "bought", "books", "positive", 1),
    ]
    assert result.occurrence_count == 9 and result.distinct_group_count == 5 and not result.groups_truncated
    top = result.groups[0]
    assert top.samples_truncated and [name_of(sample.object_id) for sample in top.samples] == sorted(
        ["b1", "b2", "b3", "valid", "work"], key=lambda name: oid(name))[:2]
    sample = next(sample for group in result.groups for sample in group.samples if name_of(sample.object_id) == "paid")
    assert sample.evidence_refs == ("dia-paid",) and sample.assertion.predicate == "Paid-For"
    assert sample.stated_time == BASE_TIME + timedelta(days=8)
    assert (result.stored_set_exhaustive, result.source_extraction_coverage, result.semantic_equivalence,
            result.real_world_coverage) == (True, "unknown", "normalized_exact_only", "unknown")


def test_reports_every_exclusion_reason(store):
    result = aggregate_assertions(store, AssertionQuery(namespace="ns"))
    assert result.exclusions == {
        "DEPRECATED": 1, "HYPOTHETICAL": 1, "UNVERIFIED_BELOW_THRESHOLD": 1, "lifecycle:ARCHIVED": 1,
        "lifecycle:DELETED": 1, "lifecycle:TENTATIVE": 1, "no_assertion": 1,
    }
    negative_only = aggregate_assertions(store, AssertionQuery(namespace="ns", polarities=("negative",)))
    assert negative_only.occurrence_count == 1 and negative_only.exclusions["no_assertion"] == 1


def test_group_truncation(store):
    result = aggregate_assertions(store, AssertionQuery(namespace="ns", max_groups=2, max_samples=0))
    assert len(result.groups) == 2 and result.groups_truncated and result.distinct_group_count == 5
    assert result.occurrence_count == 9 and all(group.samples == () for group in result.groups)


def test_selectors_and_across_fields_or_within_and_normalise(store):
    assert books(store) == DEFAULT_BOOKS
    assert books(store, subjects=(" I ",), predicates=("BOUGHT",), objects=("ＢＯＯＫＳ",)) == books(store)
    both = aggregate_assertions(store, AssertionQuery(namespace="ns", subjects=("i", "WE"), objects=("books",)))
    assert both.occurrence_count == 6 and both.distinct_group_count == 2
    paid = aggregate_assertions(store, AssertionQuery(namespace="ns", predicates=("paid for",), objects=("The  Car",)))
    assert paid.occurrence_count == 1 and paid.groups[0].predicate == "paid_for"
    tea = aggregate_assertions(store, AssertionQuery(namespace="ns", objects=("green tea",)))
    assert tea.occurrence_count == 1


def test_matching_is_exact_after_normalisation(store):
    for fields in ({"objects": ("book s",)}, {"objects": ("boo",)}, {"predicates": ("buy",)}, {"subjects": ("me",)}):
        assert aggregate_assertions(store, AssertionQuery(namespace="ns", **fields)).occurrence_count == 0
    single = aggregate_assertions(store, AssertionQuery(namespace="ns", objects=("book",)))
    assert [name_of(sample.object_id) for sample in single.groups[0].samples] == ["book"]


def test_polarity_defaults_to_positive_and_empty_matches_both(store):
    assert "b_not" not in books(store)
    assert books(store, polarities=("negative",)) == ["b_not"]
    assert "b_not" in books(store, polarities=())


def test_empty_selectors_match_every_value(store):
    everything = aggregate_assertions(store, AssertionQuery(namespace="ns", subjects=(), predicates=(), objects=()))
    assert everything.occurrence_count == aggregate_assertions(store, AssertionQuery(namespace="ns")).occurrence_count == 9


def test_node_types_default_to_claims(store):
    assert "turn" not in books(store)
    assert books(store, node_types=(NodeType.TURN,)) == ["turn"]
    with pytest.raises(ValidationError):
        AssertionQuery(namespace="ns", node_types=())


def test_epistemic_modes(store):
    assert books(store, mode=RetrievalMode.EXPLICIT) == ["b1", "b2", "b3", "hypothetical", "tentative", "unverified",
                                                         "valid", "work"]
    assert books(store, mode=RetrievalMode.AUDIT) == sorted(
        ["b1", "b2", "b3", "archived", "deprecated", "hypothetical", "tentative", "unverified", "valid", "work"])
    assert "unverified" in books(store, unverified_min_confidence=0.3)


def test_explicit_lifecycle_is_authoritative(store):
    assert books(store, lifecycle=(LifecycleState.ARCHIVED,)) == ["archived"]
    assert books(store, lifecycle=(LifecycleState.DELETED,), mode=RetrievalMode.AUDIT) == ["deleted"]
    assert books(store, lifecycle=()) == []
    empty = aggregate_assertions(store, AssertionQuery(namespace="ns", lifecycle=()))
    assert empty.occurrence_count == 0 and empty.exclusions["lifecycle:ACTIVE"] == 9


def test_scope_namespace_and_time_filters(store):
    assert books(store, scope="work") == ["work"]
    assert books(store, namespace="other") == ["elsewhere"]
    day = lambda days: BASE_TIME + timedelta(days=days)  # noqa: E731
    assert books(store, event_time_from=day(2), event_time_to=day(16)) == ["b2", "b3", "valid"]
    assert books(store, event_time_from=day(3), event_time_to=day(3)) == ["b3"]  # inclusive bounds
    assert books(store, valid_at=day(20)) == DEFAULT_BOOKS
    assert books(store, valid_at=day(31)) == ["b1", "b2", "b3", "work"]
    assert books(store, valid_at=day(19)) == ["b1", "b2", "b3", "work"]
    assert books(store, knowledge_at=day(2)) == ["b1", "b2"]
    reasons = aggregate_assertions(store, AssertionQuery(namespace="ns", valid_at=day(31), knowledge_at=day(16)))
    assert reasons.exclusions["valid_before_valid_at"] == 1 and reasons.exclusions["ingested_after_knowledge_at"] == 1


def test_query_validation():
    with pytest.raises(ValidationError, match="blank"):
        AssertionQuery(namespace="ns", objects=("  ",))
    with pytest.raises(ValidationError, match="before event_time_from"):
        AssertionQuery(namespace="ns", event_time_from=BASE_TIME, event_time_to=BASE_TIME - timedelta(days=1))
    with pytest.raises(ValidationError):
        AssertionQuery(namespace="ns", event_time_from="2024-01-01T00:00:00")  # no timezone
    with pytest.raises(ValidationError):
        AssertionQuery(namespace="ns", unknown=1)


# ----- quantities --------------------------------------------------------------------------------

FORTY_DIGITS = "1234567890123456789012345678901234567890"
QUANTITIES = [
    claim("c1", "I", "spent on", "coffee", value="0.10", unit="$", days=1),
    claim("c2", "I", "spent-on", "Coffee", value="0.20", unit="$", days=2, evidence=("dia-c2", "dia-c3")),
    claim("c3", "I", "spent", "coffee", value="0.30", unit="$", days=3, evidence=("dia-c3",)),
    claim("c_usd", "I", "spent", "coffee", value="3", unit="USD", days=4),
    claim("c_usd2", "I", "spent", "coffee", value="2.25", unit="usd", days=5),
    claim("c_not", "I", "spent", "coffee", polarity="negative", value="100", unit="$", days=6),
    claim("big1", "I", "saved", "pension", value=FORTY_DIGITS, unit="€", days=7),
    claim("big2", "I", "saved", "pension", value="0." + "0" * 38 + "1", unit="€", days=8),
    claim("big3", "I", "saved", "pension", value=FORTY_DIGITS, unit="€", days=9),
    claim("r1", "we", "raised", "shelter", value="3", unit="$", days=10),
    claim("r2", "we", "raised amount for", "shelter", value="5", unit="$", days=11),
    claim("r3", "we", "fundraised", "shelter", value="100", unit="$", days=12),
    claim("r4", "we", "raisedx", "shelter", value="1000", unit="$", days=13),
    claim("missing", "I", "spent", "coffee", days=14),
    claim("no_evidence", "I", "spent", "coffee", value="7", unit="$", days=15, evidence=()),
    MemoryObject.model_construct(
        **{**claim("forged", "I", "spent", "coffee", value="1", unit="$", days=16).__dict__,
           "quantity": Quantity.model_construct(value="1e3", unit="$", source_text="1e3 $", grounding="object_decimal_v1")}
    ),
    MemoryObject.model_construct(
        **{**claim("guessed", "I", "spent", "coffee", value="2", unit="$", days=17).__dict__,
           "quantity": Quantity.model_construct(value="2", unit="$", source_text="2 $", grounding="model_guess")}
    ),
]

NAMES = {memory.id: memory.content.removeprefix("memory ") for memory in (*ASSERTIONS, *QUANTITIES)}


@pytest.fixture(scope="module")
def quantity_store(tmp_path_factory):
    with MemoryStore.open(tmp_path_factory.mktemp("quantities") / "store", FakeEncoder()) as opened:
        opened.add(QUANTITIES)
        yield opened


def totals(result) -> dict[str, str]:
    return {group.unit: group.total for group in result.groups}


def test_exact_totals_per_normalised_unit_without_conversion(quantity_store):
    result = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", objects=("coffee",)))
    assert totals(result) == {"$": "0.60", "usd": "5.25"}
    assert 0.10 + 0.20 + 0.30 != 0.60  # a float sum would not be exact
    dollars = result.groups[0]
    assert (dollars.minimum, dollars.maximum, dollars.contribution_count, dollars.distinct_evidence_count) == (
        "0.10", "0.30", 3, 3)
    assert (dollars.earliest_event_time, dollars.latest_event_time) == (
        BASE_TIME + timedelta(days=1), BASE_TIME + timedelta(days=3))
    assert [name_of(sample.object_id) for sample in dollars.samples] == sorted(["c1", "c2", "c3"], key=oid)
    assert {(sample.value, sample.unit, sample.source_text) for sample in dollars.samples} >= {
        ("0.30", "$", "it came to 0.30 $ in all")}
    assert {sample.unit for sample in result.groups[1].samples} == {"USD", "usd"}
    assert result.contribution_count == 5 and result.semantic_equivalence == "normalized_exact_only"


def test_forty_digit_total_is_exact(quantity_store):
    result = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", predicates=("saved",)))
    [euros] = result.groups
    assert euros.total == "2469135780246913578024691357802469135780." + "0" * 38 + "1"
    assert euros.minimum == "0." + "0" * 38 + "1" and euros.maximum == FORTY_DIGITS
    assert float(FORTY_DIGITS) * 2 != int(FORTY_DIGITS) * 2


def test_missing_and_invalid_quantities_are_counted_apart(quantity_store):
    result = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", objects=("coffee",)))
    assert result.missing_quantity_count == 1 and result.invalid_quantity_count == 3
    assert {reason: count for reason, count in result.exclusions.items() if reason.startswith("quantity")} == {
        "quantity_missing": 1, "quantity_invalid:evidence": 1, "quantity_invalid:value": 1,
        "quantity_invalid:grounding": 1,
    }


def test_negative_claims_are_not_summed_by_default(quantity_store):
    negative = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", objects=("coffee",),
                                                                  polarities=("negative",)))
    assert totals(negative) == {"$": "100"}


def test_predicate_prefix_matches_itself_and_underscore_suffixes_only(quantity_store):
    result = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", predicate_prefixes=("Raised",)))
    assert totals(result) == {"$": "8"} and result.contribution_count == 2
    assert result.semantic_equivalence == "normalized_exact_and_predicate_prefix"
    ored = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", predicates=("fundraised",),
                                                              predicate_prefixes=("raised",)))
    assert totals(ored) == {"$": "108"}
    anded = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", subjects=("I",), predicate_prefixes=("raised",)))
    assert anded.groups == () and anded.contribution_count == 0


def test_unit_selector_and_group_by(quantity_store):
    usd = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", units=(" USD ",)))
    assert totals(usd) == {"usd": "5.25"}
    grouped = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", units=("$",), group_by=("object", "predicate")))
    keys = [(group.unit, group.object, group.predicate, group.subject, group.total) for group in grouped.groups]
    assert keys == [
        ("$", "coffee", "spent_on", None, "0.30"),
        ("$", "coffee", "spent", None, "0.30"),
        ("$", "shelter", "fundraised", None, "100"),
        ("$", "shelter", "raised", None, "3"),
        ("$", "shelter", "raised_amount_for", None, "5"),
        ("$", "shelter", "raisedx", None, "1000"),
    ]


def test_bounded_groups_and_samples(quantity_store):
    result = aggregate_quantities(quantity_store, QuantityQuery(namespace="ns", max_groups=1, max_samples=1))
    assert result.groups_truncated and result.distinct_group_count == 3 and len(result.groups) == 1
    assert result.groups[0].samples_truncated and len(result.groups[0].samples) == 1


def test_keyset_pages_give_the_same_answer(quantity_store, monkeypatch):
    query = QuantityQuery(namespace="ns", max_samples=100)
    whole = aggregate_quantities(quantity_store, query)
    monkeypatch.setattr(aggregation, "QUANTITY_BATCH_SIZE", 2)
    assert aggregate_quantities(quantity_store, query) == whole
