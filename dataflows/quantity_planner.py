"""A fail-closed planner from a few amount and count questions to an exact quantity aggregation.

Supported shapes (case-insensitive, one optional trailing "?", nothing else):

    how much [money] did I|we <action> [on|for|to|from <object>]
    how much [money] have I|we <action> [on|for|to|from <object>]
    how many <unit> did I|we <action> [on|for|to|from <object>]
    how many <unit> have I|we <action> [on|for|to|from <object>]

e.g. "How much did I spend on coffee?", "How much money have we raised for the shelter?",
"How many books did I buy?", "How many hours did I spend on homework?".

The plan is a `QuantityQuery`: the subject is the question's own "I" or "we" (never widened to
the other), the action maps through `ACTION_PREDICATE_PREFIXES` to a predicate prefix, the object
(after a leading "the", "a", "an", "my" or "our" is dropped) is an exact object selector, and a
"how many" unit is an exact unit selector. "How much" questions report every stored unit
separately. Anything else is refused with a reason code and no scan: negation, future or
intention wording, a named or third-person subject, an action outside the table, a currency or
"times" unit, a trailing qualifier (time, place, company, comparison, a second object) and any
other shape. The object is at most `MAX_OBJECT_WORDS` plain words.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rms_retrieval.stores.exact.aggregation import QuantityAggregation, QuantityQuery, aggregate_quantities
from rms_retrieval.stores.protocols import RecordReader

# Every accepted inflection and the predicate prefix it selects (underscore-suffix rule).
ACTION_PREDICATE_PREFIXES: dict[str, str] = {
    "spend": "spent", "spent": "spent",
    "pay": "paid", "paid": "paid",
    "buy": "bought", "bought": "bought",
    "raise": "raised", "raised": "raised",
    "donate": "donated", "donated": "donated",
    "earn": "earned", "earned": "earned",
    "save": "saved", "saved": "saved",
    "sell": "sold", "sold": "sold",
    "read": "read",
    "eat": "ate", "ate": "ate", "eaten": "ate",
    "drink": "drank", "drank": "drank", "drunk": "drank",
    "run": "ran", "ran": "ran",
    "walk": "walked", "walked": "walked",
}
FIRST_PERSON_SUBJECTS = frozenset({"i", "we"})
MAX_OBJECT_WORDS = 4
# Naming a currency would need currency inference to match "$" or "USD"; "times" counts events.
UNSUPPORTED_UNITS = frozenset(
    {"dollars", "dollar", "bucks", "euros", "euro", "pounds", "pound", "yen", "cents", "usd", "eur", "gbp",
     "times", "time"}
)
_LEADING_DETERMINERS = frozenset({"the", "a", "an", "my", "our"})
_NEGATION = frozenset({"not", "never", "no", "none", "nothing", "without"})
_FUTURE = re.compile(r"\b(?:will|shall|gonna|(?:going|plan|planning|intend|intending|want|hope|hoping) to)\b")
_QUALIFIERS = frozenset(
    """
    in at on for to from with by during before after since until till per each every last this next
    ago yesterday today tonight week weeks month months year years weekend day days when while because
    than or and but including excluding except total altogether overall so far
    monday tuesday wednesday thursday friday saturday sunday january february march april may june
    july august september october november december
    """.split()
)
_WORD = re.compile(r"[a-z][a-z'\-]*")
_SHAPE = re.compile(
    r"how (?:(?P<much>much)(?: (?P<noun>[^ ]+))?|many (?P<unit>[^ ]+)) (?P<auxiliary>did|have|has) "
    r"(?P<subject>[^ ]+) (?P<action>[^ ]+)(?: (?P<rest>.+))?",
    re.IGNORECASE,
)
_OBJECT = re.compile(r"(?:on|for|to|from) (?P<object>.+)", re.IGNORECASE)

UnsupportedReason = Literal[
    "empty_question", "negation", "future_wording", "unsupported_shape", "named_subject", "unknown_action",
    "unsupported_unit", "trailing_qualifier",
]


class QuantityPlan(BaseModel):
    """What a question was read as: the query and its assumptions, or why it was refused."""

    model_config = ConfigDict(frozen=True)

    question: str
    shape: Literal["amount", "count"] | None = None
    action: str | None = None
    predicate_prefix: str | None = None
    query: QuantityQuery | None = None
    assumptions: tuple[str, ...] = ()
    unsupported_reason: UnsupportedReason | None = None
    unsupported_detail: str | None = None


class QuantityAnswer(BaseModel):
    """A plan and, when it is supported, the aggregation it ran."""

    model_config = ConfigDict(frozen=True)

    plan: QuantityPlan
    aggregation: QuantityAggregation | None


class _Refused(Exception):
    def __init__(self, reason: UnsupportedReason, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def aggregate_quantities_from_text(store: RecordReader, question: str, *, namespace: str) -> QuantityAnswer:
    """Plan `question`; run the aggregation only when the plan is supported."""
    plan = plan_quantity_question(question, namespace=namespace)
    return QuantityAnswer(plan=plan, aggregation=None if plan.query is None else aggregate_quantities(store, plan.query))


def plan_quantity_question(question: str, *, namespace: str) -> QuantityPlan:
    """The QuantityPlan of one question; pure, reads no store."""
    try:
        return _plan(question, namespace)
    except _Refused as refused:
        return QuantityPlan(question=question, unsupported_reason=refused.reason, unsupported_detail=refused.detail)


def _plan(question: str, namespace: str) -> QuantityPlan:
    text = " ".join(question.split()).removesuffix("?").rstrip()
    if not text:
        raise _Refused("empty_question", "the question is empty")
    folded = text.casefold().replace("n't", " not").replace("'ll", " will")
    if found := _NEGATION.intersection(folded.split()):
        raise _Refused("negation", f"negated questions are not planned ({', '.join(sorted(found))})")
    if found := _FUTURE.search(folded):
        raise _Refused("future_wording", f"future or intended amounts are not stored facts ({found[0]!r})")
    match = _SHAPE.fullmatch(text)
    if match is None:
        raise _Refused("unsupported_shape", "not one of the listed question shapes; see dataflows/quantity_planner.py")
    subject = match["subject"]
    if subject.casefold() not in FIRST_PERSON_SUBJECTS or match["auxiliary"].casefold() == "has":
        raise _Refused("named_subject", f"only first-person questions (I, we) are planned, not {subject!r}")
    action = match["action"].casefold()
    if action not in ACTION_PREDICATE_PREFIXES:
        raise _Refused("unknown_action", f"{match['action']!r} is not in ACTION_PREDICATE_PREFIXES")
    shape, assumptions, units = _amount_or_count(match)
    object_selector, object_assumptions = _object(match["rest"])
    prefix = ACTION_PREDICATE_PREFIXES[action]
    query = QuantityQuery(
        namespace=namespace, subjects=(subject,), predicate_prefixes=(prefix,), units=units,
        objects=object_selector,
    )
    assumptions = (
        f"subject is exactly {subject!r} as asked; other people and the other first-person form are not counted",
        f"action {action!r} selects predicates {prefix!r} and {prefix}_…",
        *assumptions,
        *object_assumptions,
        "only positive, grounded quantities of ACTIVE FACT, DECISION and PREFERENCE records count",
    )
    return QuantityPlan(
        question=question, shape=shape, action=action, predicate_prefix=prefix, query=query, assumptions=assumptions,
    )


def _amount_or_count(match: re.Match[str]) -> tuple[Literal["amount", "count"], tuple[str, ...], tuple[str, ...]]:
    """The shape, its assumptions and its unit selector."""
    if match["much"]:
        if match["noun"] is not None and match["noun"].casefold() != "money":
            raise _Refused("unsupported_unit", f"'how much {match['noun']}' names no unit this planner reads; "
                           "ask 'how much did I …' or 'how many <unit> did I …'")
        return "amount", ("every stored unit is totalled separately; no currency is inferred or converted",), ()
    unit = match["unit"]
    if unit.casefold() in UNSUPPORTED_UNITS or not _WORD.fullmatch(unit.casefold()):
        raise _Refused("unsupported_unit", f"unit {unit!r} is not planned (currencies need inference, "
                       "'times' counts events: use aggregate_assertions)")
    return "count", (f"unit is exactly {unit!r} after normalisation; singular and other spellings are not counted",), (unit,)


def _object(rest: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The object selector after the action, with its assumptions; a qualifier anywhere refuses."""
    if rest is None:
        return (), ("no object given: every object counts",)
    found = _OBJECT.fullmatch(rest)
    if found is None:
        raise _Refused("trailing_qualifier", f"{rest!r} after the action is a qualifier this planner does not apply")
    words = found["object"].split()
    assumptions = ()
    if words[0].casefold() in _LEADING_DETERMINERS and len(words) > 1:
        assumptions = (f"dropped the leading {words[0]!r} from the object",)
        words = words[1:]
    qualifiers = [word for word in words if word.casefold() in _QUALIFIERS or not _WORD.fullmatch(word.casefold())]
    if qualifiers or len(words) > MAX_OBJECT_WORDS:
        raise _Refused("trailing_qualifier", f"{found['object']!r} carries a qualifier ({', '.join(qualifiers) or 'too long'})")
    object_ = " ".join(words)
    return (object_,), (f"object is exactly {object_!r} after normalisation; no aliases or synonyms", *assumptions)
