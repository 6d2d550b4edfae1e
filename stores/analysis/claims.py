"""Structured claims a memory may carry, and how their text is normalised (RFC-0005, exact operations).

An `Assertion` is a (subject, predicate, object, polarity) claim; a `Quantity` is a decimal amount
of that claim, grounded in the source text that states it. Both are validated when a
`MemoryObject` is built, so ingestion rejects a malformed claim. Aggregation matches claims only
after the normalisations here: exact equality, no aliases, no semantic equivalence.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

QUANTITY_GROUNDING = "object_decimal_v1"
Polarity = Literal["positive", "negative"]

_WHITESPACE = re.compile(r"\s+")
_PREDICATE_SEPARATORS = re.compile(r"[\s\-]+")
# A plain decimal literal: no exponent, no NaN or infinity, no digit separators, no spaces.
_DECIMAL_LITERAL = re.compile(r"[+-]?\d+(?:\.\d+)?")


def normalize_value(text: str) -> str:
    """NFKC, case-fold, trim and fold whitespace runs to one space: how subjects, objects and units match."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def normalize_predicate(text: str) -> str:
    """`normalize_value`, then spaces and hyphens become underscores ("Paid For" -> "paid_for")."""
    return _PREDICATE_SEPARATORS.sub("_", normalize_value(text))


def decimal_value(text: str) -> Decimal:
    """The exact Decimal of a plain decimal literal such as "-12.50"; ValueError for anything else."""
    if not _DECIMAL_LITERAL.fullmatch(text):
        raise ValueError(
            f"{text!r} is not a plain decimal literal; write digits with an optional sign and "
            "fraction, e.g. 1200 or -12.50 (no exponent, separators, spaces, NaN or infinity)"
        )
    try:
        value = Decimal(text)
    except InvalidOperation as error:
        raise ValueError(f"{text!r} is not a decimal number") from error
    if not value.is_finite():
        raise ValueError(f"{text!r} is not a finite decimal number")
    return value


def scaled_integer(value: Decimal) -> tuple[int, int]:
    """`value` as (integer, scale) with value == integer / 10**scale, exactly (no decimal context)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int), "finite decimals only"
    units = int("".join(map(str, digits))) * (-1 if sign else 1)
    return (units * 10**exponent, 0) if exponent >= 0 else (units, -exponent)


def decimal_text(units: int, scale: int) -> str:
    """The plain decimal literal of units / 10**scale, keeping every digit and the scale."""
    digits = str(abs(units)).rjust(scale + 1, "0")
    whole, fraction = (digits[:-scale], digits[-scale:]) if scale else (digits, "")
    return ("-" if units < 0 else "") + whole + ("." + fraction if fraction else "")


class Assertion(BaseModel):
    """A structured claim: `subject` `predicate` `object`, held positively or negatively."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subject: str = Field(min_length=1)
    predicate: str = Field(min_length=1)
    object: str = Field(min_length=1)
    polarity: Polarity = "positive"

    @field_validator("subject", "predicate", "object")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not normalize_value(value):
            raise ValueError("is blank after normalisation; a claim needs a subject, predicate and object")
        return value


class Quantity(BaseModel):
    """A decimal amount of an assertion, as its source text states it.

    `value` is kept as text so it is never rounded; `unit` is verbatim ("$", "USD", "books");
    `source_text` is the quantified text and must contain `value` and `unit` as written.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: str
    unit: str = Field(min_length=1)
    source_text: str = Field(min_length=1)
    grounding: Literal["object_decimal_v1"] = QUANTITY_GROUNDING

    @field_validator("value")
    @classmethod
    def _decimal_literal(cls, value: str) -> str:
        decimal_value(value)
        return value

    @field_validator("unit")
    @classmethod
    def _verbatim_unit(cls, value: str) -> str:
        if not normalize_value(value):
            raise ValueError("is blank; a quantity needs the unit its source text states")
        if value != value.strip():
            raise ValueError(f"{value!r} has surrounding whitespace; store the unit exactly as written")
        return value

    @model_validator(mode="after")
    def _grounded(self) -> Quantity:
        for name, text in (("value", self.value), ("unit", self.unit)):
            if text not in self.source_text:
                raise ValueError(
                    f"source_text {self.source_text!r} does not contain the {name} {text!r} verbatim; "
                    f"a grounded quantity quotes the text that states it"
                )
        return self


def _quantifies_an_assertion(quantity: Quantity | None, info: ValidationInfo) -> Quantity | None:
    if quantity is not None and info.data.get("assertion") is None:
        raise ValueError("a quantity needs an assertion: the claim it quantifies")
    return quantity


# The `quantity` field of a model whose `assertion` field is declared before it.
QuantityOfAssertion = Annotated[Quantity | None, AfterValidator(_quantifies_an_assertion)]
