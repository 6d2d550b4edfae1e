"""Date phrases resolve to UTC windows against a fixed reference time (a Sunday)."""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import dateparser
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rms_retrieval.nodes.helpers import temporal
from rms_retrieval.nodes.models import TemporalType
from rms_retrieval.nodes.helpers.temporal import DATEPARSER_LOCK, date_words_read_as_names, parse_temporal_signals

REFERENCE = datetime(2023, 8, 20, 12, 0, tzinfo=UTC)
A, R, D = TemporalType.ABSOLUTE, TemporalType.RELATIVE, TemporalType.DURATION


def _day(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "text", "kind", "start", "end"),
    [
        ("What did she do yesterday?", "yesterday", R, _day(2023, 8, 19), _day(2023, 8, 20)),
        ("What happened today?", "today", R, _day(2023, 8, 20), _day(2023, 8, 21)),
        ("the day before yesterday", "the day before yesterday", R, _day(2023, 8, 18), _day(2023, 8, 19)),
        # "last week" is the previous Monday-to-Sunday calendar week.
        ("What did I do last week?", "last week", R, _day(2023, 8, 7), _day(2023, 8, 14)),
        ("plans for next week", "next week", R, _day(2023, 8, 21), _day(2023, 8, 28)),
        ("last month", "last month", R, _day(2023, 7, 1), _day(2023, 8, 1)),
        ("last year", "last year", R, _day(2022, 1, 1), _day(2023, 1, 1)),
        ("last weekend", "last weekend", R, _day(2023, 8, 12), _day(2023, 8, 14)),
        ("two months ago", "two months ago", R, _day(2023, 6, 1), _day(2023, 7, 1)),
        ("2 months ago", "2 months ago", R, _day(2023, 6, 1), _day(2023, 7, 1)),
        ("3 days ago", "3 days ago", R, _day(2023, 8, 17), _day(2023, 8, 18)),
        ("3 weeks ago", "3 weeks ago", R, _day(2023, 7, 24), _day(2023, 7, 31)),
        ("a year ago", "a year ago", R, _day(2022, 1, 1), _day(2023, 1, 1)),
        ("a couple of days ago", "a couple of days ago", R, _day(2023, 8, 18), _day(2023, 8, 19)),
        ("What did she do last Tuesday?", "last Tuesday", R, _day(2023, 8, 15), _day(2023, 8, 16)),
        ("on Sunday", "on Sunday", R, _day(2023, 8, 13), _day(2023, 8, 14)),
        ("next Tuesday", "next Tuesday", R, _day(2023, 8, 22), _day(2023, 8, 23)),
        ("What happened in 2022?", "in 2022", A, _day(2022, 1, 1), _day(2023, 1, 1)),
        ("Where was she in June?", "in June", A, _day(2023, 6, 1), _day(2023, 7, 1)),
        ("in August", "in August", A, _day(2023, 8, 1), _day(2023, 9, 1)),
        ("in September", "in September", A, _day(2022, 9, 1), _day(2022, 10, 1)),
        ("in may", "in may", A, _day(2023, 5, 1), _day(2023, 6, 1)),
        ("last August", "last August", R, _day(2022, 8, 1), _day(2022, 9, 1)),
        ("What did she do in May 2023?", "May 2023", A, _day(2023, 5, 1), _day(2023, 6, 1)),
        ("in June 2022", "June 2022", A, _day(2022, 6, 1), _day(2022, 7, 1)),
        ("since March", "since March", D, _day(2023, 3, 1), REFERENCE),
        ("since 2020", "since 2020", D, _day(2020, 1, 1), REFERENCE),
        ("since last week", "since last week", D, _day(2023, 8, 7), REFERENCE),
        ("after June 2022", "after June 2022", R, _day(2022, 7, 1), REFERENCE),
        # Durations end at the reference instant and start exactly N units before it.
        ("over the past month", "over the past month", D, REFERENCE.replace(month=7), REFERENCE),
        ("in the past 3 weeks", "in the past 3 weeks", D, REFERENCE - timedelta(weeks=3), REFERENCE),
        ("last 10 days", "last 10 days", D, REFERENCE - timedelta(days=10), REFERENCE),
        ("the last week", "the last week", D, REFERENCE - timedelta(days=7), REFERENCE),
        ("On 8 May 2023 she sang.", "8 May 2023", A, _day(2023, 5, 8), _day(2023, 5, 9)),
        ("May 7, 2023", "May 7, 2023", A, _day(2023, 5, 7), _day(2023, 5, 8)),
        ("2023-05-07", "2023-05-07", A, _day(2023, 5, 7), _day(2023, 5, 8)),
        ("5/7/2023", "5/7/2023", A, _day(2023, 5, 7), _day(2023, 5, 8)),
        ("the 5th of June", "the 5th of June", A, _day(2023, 6, 5), _day(2023, 6, 6)),
        ("December 25", "December 25", A, _day(2022, 12, 25), _day(2022, 12, 26)),
    ],
)
def test_phrase_resolves_to_window(query, text, kind, start, end):
    (signal,) = parse_temporal_signals(query, REFERENCE)
    assert (signal.text, signal.type, signal.start, signal.end) == (text, kind, start, end)


def test_month_duration_clamps_the_day_of_month():
    (signal,) = parse_temporal_signals("over the past month", datetime(2023, 3, 31, tzinfo=UTC))
    assert signal.start == _day(2023, 2, 28)


def test_before_has_no_start():
    (signal,) = parse_temporal_signals("before May 2023", REFERENCE)
    assert (signal.type, signal.start, signal.end) == (R, None, _day(2023, 5, 1))


@pytest.mark.parametrize(
    ("query", "text"),
    [("every Tuesday", "every Tuesday"), ("on Tuesdays", "on Tuesdays"), ("each month", "each month"),
     ("every two weeks", "every two weeks")],
)
def test_recurring_has_no_window(query, text):
    (signal,) = parse_temporal_signals(query, REFERENCE)
    assert (signal.type, signal.text, signal.start, signal.end) == (TemporalType.RECURRING, text, None, None)


@pytest.mark.parametrize(
    "query",
    [
        "Who is June dating?",
        "What does Sun Microsystems make?",
        "I may march with them",
        "What was the second thing she said just now?",
        "3 may be enough",
        "Add 1/2 cup of sugar",
        "Was she on the Today show?",
        'Who sang "Yesterday"?',
        "Who said 'last week' first?",
        "How many days ago did she paint?",
    ],
)
def test_no_false_dates(query):
    assert parse_temporal_signals(query, REFERENCE) == ()


def test_several_phrases_in_order():
    signals = parse_temporal_signals("Between 8 May 2023 and last week, what changed?", REFERENCE)
    assert [s.text for s in signals] == ["8 May 2023", "last week"]


def test_windows_are_utc_days_of_the_reference_instant():
    reference = datetime(2023, 8, 21, 1, 0, tzinfo=timezone(timedelta(hours=5)))  # 2023-08-20T20:00Z
    (signal,) = parse_temporal_signals("yesterday", reference)
    assert (signal.start, signal.end) == (_day(2023, 8, 19), _day(2023, 8, 20))


def test_dateless_query_skips_dateparser(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("dateparser called")

    monkeypatch.setattr(dateparser, "parse", fail)
    assert parse_temporal_signals("What is Caroline's favourite colour?", REFERENCE) == ()


def test_dateparser_runs_under_the_shared_lock(monkeypatch):
    held = []
    real_parse = dateparser.parse

    def spy(*args, **kwargs):
        held.append(DATEPARSER_LOCK.locked())
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(dateparser, "parse", spy)
    parse_temporal_signals("8 May 2023", REFERENCE)
    assert held == [True]
    assert isinstance(DATEPARSER_LOCK, type(threading.Lock()))


def test_month_names_read_as_names():
    assert date_words_read_as_names("Who is June dating? What did May say in April about June 5?") == ("June", "May")


_UNITS = ("day", "week", "month", "year", "decade")


@given(
    count=st.integers(min_value=0, max_value=10**6),
    unit=st.sampled_from(_UNITS),
    phrase=st.sampled_from(("{n} {unit}s ago", "in the past {n} {unit}s", "last {n} {unit}s", "the last {n} {unit}s")),
    reference=st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59)),
)
@settings(max_examples=300, deadline=None)
def test_every_count_unit_and_reference_resolves_quickly_without_raising(count, unit, phrase, reference):
    started = time.perf_counter()
    signals = parse_temporal_signals(f"What did we do {phrase.format(n=count, unit=unit)}?", reference.replace(tzinfo=UTC))
    assert time.perf_counter() - started < 0.5
    for signal in signals:
        if signal.note:
            assert signal.start is None and signal.end is None


@given(
    which=st.sampled_from(("last", "next", "this", "previous")),
    unit=st.sampled_from(("week", "weekend", "month", "year", "decade")),
    reference=st.sampled_from((datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, tzinfo=UTC))),
)
@settings(max_examples=60, deadline=None)
def test_calendar_phrases_at_the_ends_of_the_calendar_never_raise(which, unit, reference):
    parse_temporal_signals(f"What happened {which} {unit}?", reference)


@pytest.mark.parametrize(
    ("query", "reference"),
    [
        ("What did we do 300 decades ago?", REFERENCE),
        ("What did we do 3 years ago?", datetime(1, 1, 1, tzinfo=UTC)),
        ("What did we do last week?", datetime(1, 1, 1, tzinfo=UTC)),
        ("What will we do next week?", datetime(9999, 12, 31, tzinfo=UTC)),
        ("What happened this year?", datetime(9999, 12, 31, tzinfo=UTC)),
    ],
)
def test_a_window_outside_the_calendar_is_dropped_with_a_reason(query, reference):
    (signal,) = parse_temporal_signals(query, reference)
    assert (signal.start, signal.end, signal.note) == (None, None, temporal.OUT_OF_RANGE_NOTE)


def test_a_month_shift_clamps_the_day_of_month():
    (signal,) = parse_temporal_signals("over the past month", datetime(2024, 3, 31, tzinfo=UTC))
    assert signal.start == datetime(2024, 2, 29, tzinfo=UTC)


def _scalar_affinity(when: datetime, window: tuple[datetime, datetime]) -> float:
    """The affinity as datetime arithmetic gives it, one time at a time."""
    start, end = window
    if start <= when < end:
        return 1.0
    distance = ((start - when) if when < start else (when - end)).total_seconds() / 86400.0
    return math.exp(-distance / 7.0)


def test_temporal_affinity_is_one_inside_the_window_and_decays_a_week_per_e_fold_outside():
    window = (REFERENCE, REFERENCE + timedelta(days=1))
    times = [REFERENCE - timedelta(days=7), REFERENCE, REFERENCE + timedelta(hours=23), REFERENCE + timedelta(days=1)]
    values = temporal.temporal_affinities(np.array([temporal.micros(when) for when in times]), window)
    assert values.tolist() == [pytest.approx(math.exp(-1.0)), 1.0, 1.0, 1.0]  # the end is exclusive: 0 days after it
    assert temporal.temporal_affinities(np.array([temporal.micros(REFERENCE)]), None).tolist() == [0.0]


@given(st.lists(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
                max_size=20),
       st.datetimes(min_value=datetime(1950, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),
       st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=4000)))
@settings(max_examples=200, deadline=None)
def test_temporal_affinities_are_the_floats_datetime_arithmetic_gives(times, start, length):
    window = (start, start + length)
    stated = np.array([temporal.micros(when) for when in times], dtype=np.int64)
    assert temporal.temporal_affinities(stated, window).tolist() == [_scalar_affinity(when, window) for when in times]


def test_micros_counts_from_the_epoch_whatever_the_offset():
    assert temporal.micros(datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=UTC)) == 1_000_005
    assert temporal.micros(datetime(1970, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=2)))) == 0
