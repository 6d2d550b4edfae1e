from __future__ import annotations

import pytest

from rms_retrieval.dataflows import quantity_planner
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.dataflows.quantity_planner import (
    ACTION_PREDICATE_PREFIXES,
    aggregate_quantities_from_text,
    plan_quantity_question,
)
from tests.factories import FakeEncoder, claim


def plan(question: str):
    return plan_quantity_question(question, namespace="ns")


@pytest.mark.parametrize(
    ("question", "shape", "subjects", "prefix", "objects", "units"),
    [
        ("How much did I spend on coffee?", "amount", ("I",), "spent", ("coffee",), ()),
        ("how much money have we raised for the shelter", "amount", ("we",), "raised", ("shelter",), ()),
        ("How much did We pay for my old car?", "amount", ("We",), "paid", ("old car",), ()),
        ("how much did I earn from tutoring", "amount", ("I",), "earned", ("tutoring",), ()),
        ("How much have I spent?", "amount", ("I",), "spent", (), ()),
        ("How many books did I buy?", "count", ("I",), "bought", (), ("books",)),
        ("how many hours did I spend on homework", "count", ("I",), "spent", ("homework",), ("hours",)),
        ("How many cups have we drunk?", "count", ("we",), "drank", (), ("cups",)),
        ("  how   many  books did i  read ? ", "count", ("i",), "read", (), ("books",)),
    ],
)
def test_supported_shapes(question, shape, subjects, prefix, objects, units):
    planned = plan(question)
    assert planned.unsupported_reason is None and planned.shape == shape and planned.predicate_prefix == prefix
    query = planned.query
    assert (query.subjects, query.predicate_prefixes, query.objects, query.units) == (subjects, (prefix,), objects, units)
    assert query.predicates == () and query.namespace == "ns" and planned.assumptions


def test_assumptions_say_what_was_read():
    planned = plan("How much did I pay for the car?")
    text = " ".join(planned.assumptions)
    assert "exactly 'I'" in text and "'paid' and paid_" in text and "no currency is inferred" in text
    assert "dropped the leading 'the'" in text and "exactly 'car'" in text


@pytest.mark.parametrize(
    ("question", "reason"),
    [
        ("how much did I spend on coffee last month?", "trailing_qualifier"),
        ("how much did I spend last month", "trailing_qualifier"),
        ("how much did I spend in 2023", "trailing_qualifier"),
        ("how much did I spend on coffee at work", "trailing_qualifier"),
        ("how much did I spend on coffee and tea", "trailing_qualifier"),
        ("how much did I spend on coffee, roughly", "trailing_qualifier"),
        ("how much did I spend on a very fancy new espresso machine", "trailing_qualifier"),
        ("how much didn't I spend on coffee", "negation"),
        ("how much did I not spend on coffee", "negation"),
        ("how many books did I never read", "negation"),
        ("how much will I spend on rent", "future_wording"),
        ("how much I'll spend on rent", "future_wording"),
        ("how much am I going to spend on rent", "future_wording"),
        ("how much do we plan to raise", "future_wording"),
        ("how much did Alice spend on coffee", "named_subject"),
        ("how much has she spent on coffee", "named_subject"),
        ("how many books have they read", "named_subject"),
        ("how much did my wife spend on coffee", "named_subject"),
        ("how much did I splurge on coffee", "unknown_action"),
        ("how many books did I borrow", "unknown_action"),
        ("how many dollars did I spend on coffee", "unsupported_unit"),
        ("how many USD did I spend", "unsupported_unit"),
        ("how many times did I run", "unsupported_unit"),
        ("how much water did I drink", "unsupported_unit"),
        ("how many m2 did I buy", "unsupported_unit"),
        ("what did I spend on coffee", "unsupported_shape"),
        ("how much do I spend on coffee", "unsupported_shape"),
        ("   ?", "empty_question"),
    ],
)
def test_refusals(question, reason):
    planned = plan(question)
    assert planned.unsupported_reason == reason and planned.query is None and planned.unsupported_detail


def test_the_action_table_maps_every_inflection_to_a_past_prefix():
    assert ACTION_PREDICATE_PREFIXES["spend"] == ACTION_PREDICATE_PREFIXES["spent"] == "spent"
    assert set(ACTION_PREDICATE_PREFIXES.values()) <= set(ACTION_PREDICATE_PREFIXES)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with MemoryStore.open(tmp_path_factory.mktemp("planner") / "store", FakeEncoder()) as opened:
        opened.add([
            claim("p1", "I", "spent on", "coffee", value="0.10", unit="$"),
            claim("p2", "I", "spent_money_on", "coffee", value="0.20", unit="$"),
            claim("p3", "we", "spent on", "coffee", value="9", unit="$"),
            claim("p4", "I", "overspent", "coffee", value="50", unit="$"),
            claim("p5", "I", "bought", "novels", value="3", unit="books"),
            claim("p6", "I", "bought", "comics", value="2", unit="Books"),
        ])
        yield opened


def test_a_supported_question_runs_the_exact_aggregation(store):
    answer = aggregate_quantities_from_text(store, "How much did I spend on coffee?", namespace="ns")
    assert answer.plan.unsupported_reason is None
    assert [(group.unit, group.total) for group in answer.aggregation.groups] == [("$", "0.30")]
    assert answer.aggregation.semantic_equivalence == "normalized_exact_and_predicate_prefix"
    counted = aggregate_quantities_from_text(store, "How many books did I buy?", namespace="ns")
    assert [(group.unit, group.total) for group in counted.aggregation.groups] == [("books", "5")]


def test_a_refused_question_does_not_scan(store, monkeypatch):
    def no_scan(*arguments):
        raise AssertionError("the store was scanned")

    monkeypatch.setattr(quantity_planner, "aggregate_quantities", no_scan)
    answer = aggregate_quantities_from_text(store, "how much will we spend on coffee", namespace="ns")
    assert answer.aggregation is None and answer.plan.unsupported_reason == "future_wording"
