from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from rms_retrieval.stores.analysis.claims import (
    Assertion,
    Quantity,
    decimal_text,
    decimal_value,
    normalize_predicate,
    normalize_value,
    scaled_integer,
)
from rms_retrieval.stores.models import MemoryObject


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("  Coffee   Beans ", "coffee beans"),
        ("CAFÉ", "café"),
        ("Straße", "strasse"),  # case-folding, not lower-casing
        ("ｃｏｆｆｅｅ", "coffee"),  # NFKC folds full-width forms
        ("tea\u00a0\tpot\n", "tea pot"),
        ("ﬁsh", "fish"),  # NFKC splits the ligature
    ],
)
def test_normalize_value(raw, normalised):
    assert normalize_value(raw) == normalised


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [("Paid For", "paid_for"), ("raised-amount  for", "raised_amount_for"), (" spent_on ", "spent_on"), ("re - paid", "re_paid")],
)
def test_normalize_predicate_maps_spaces_and_hyphens_to_underscores(raw, normalised):
    assert normalize_predicate(raw) == normalised


def test_assertion_defaults_to_positive_and_rejects_blank_or_unknown_fields():
    assert Assertion(subject="I", predicate="bought", object="books").polarity == "positive"
    with pytest.raises(ValidationError, match="blank"):
        Assertion(subject=" \t", predicate="bought", object="books")
    with pytest.raises(ValidationError):
        Assertion(subject="I", predicate="bought", object="books", polarity="maybe")
    with pytest.raises(ValidationError):
        Assertion(subject="I", predicate="bought", object="books", confidence=1)


def _quantity(**fields) -> Quantity:
    values = {"value": "4.50", "unit": "$", "source_text": "I spent $4.50 on coffee"}
    return Quantity(**{**values, **fields})


def test_a_quantity_is_grounded_in_its_source_text():
    assert _quantity().grounding == "object_decimal_v1"
    with pytest.raises(ValidationError, match="does not contain the value '4.5' verbatim"):
        _quantity(value="4.5", source_text="I spent 4,5 $")
    with pytest.raises(ValidationError, match="does not contain the unit 'USD'"):
        _quantity(unit="USD")
    with pytest.raises(ValidationError):
        _quantity(grounding="model_guess")
    with pytest.raises(ValidationError, match="surrounding whitespace"):
        _quantity(unit="$ ")


@pytest.mark.parametrize("value", ["1e3", "NaN", "Infinity", "1_000", "1,000", " 4.50", "4.", ".5", "", "0x10"])
def test_only_plain_decimal_literals_are_values(value):
    with pytest.raises(ValidationError, match="plain decimal literal"):
        _quantity(value=value, source_text=f"paid {value} $")


def test_signed_values_are_literals():
    assert decimal_value("-12.50") == Decimal("-12.50") and decimal_value("+3") == 3


def test_a_memory_quantity_needs_an_assertion():
    quantity = _quantity()
    with pytest.raises(ValidationError, match="a quantity needs an assertion"):
        MemoryObject(namespace="a", content="coffee", quantity=quantity)
    claim = Assertion(subject="I", predicate="spent on", object="coffee")
    memory = MemoryObject(namespace="a", content="coffee", assertion=claim, quantity=quantity)
    assert MemoryObject.model_validate_json(memory.model_dump_json()) == memory


def test_ingestion_rejects_an_ungrounded_quantity_in_json():
    line = ('{"namespace": "a", "content": "coffee", "assertion": {"subject": "I", "predicate": "spent", '
            '"object": "coffee"}, "quantity": {"value": "5", "unit": "$", "source_text": "coffee was cheap", '
            '"grounding": "object_decimal_v1"}}')
    with pytest.raises(ValidationError, match="verbatim"):
        MemoryObject.model_validate_json(line)


@pytest.mark.parametrize(
    ("text", "scaled", "printed"),
    [("4.50", (450, 2), "4.50"), ("-0.05", (-5, 2), "-0.05"), ("120", (120, 0), "120"), ("0", (0, 0), "0"),
     ("-7.000", (-7000, 3), "-7.000")],
)
def test_scaled_integers_round_trip(text, scaled, printed):
    assert scaled_integer(Decimal(text)) == scaled
    assert decimal_text(*scaled) == printed


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_decimal_text_is_exact_for_any_finite_decimal(value):
    units, scale = scaled_integer(value)
    assert Decimal(decimal_text(units, scale)) == value
