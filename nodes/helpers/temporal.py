"""Date phrases in a question and the windows they resolve to (RFC-0005 section 3).

A plain helper module, not a Hamilton module. Windows start inclusive and end exclusive, in UTC,
counted from the request's reference time (never the wall clock, RFC 11). They are a scoring
signal only: nothing here filters.

How phrases resolve (reference 2023-08-20, a Sunday):

- "yesterday", "today", "3 days ago", "Tuesday", "last Tuesday": that UTC day. A bare or "last"
  weekday is the most recent such day strictly before the reference day (2023-08-15 here);
  "this Tuesday" is the one in the reference's week, "next Tuesday" the first after it.
- "last week" is the previous Monday-to-Sunday calendar week (2023-08-07 to 2023-08-14), like
  "last month" and "last year"; "this week" is the whole current week. "N weeks/months/years ago"
  is the calendar week/month/year holding the reference minus N units ("two months ago" is June).
  These are RELATIVE.
- "the past month", "over the last week", "in the past 3 weeks", "last 10 days": a DURATION
  window of that length ending at the reference time. "the last week" (with the article) is such
  a duration; "last week" (without it) is the calendar week.
- "in 2022", "May 2023", "in June": the year or month, ABSOLUTE. A month without a year is the
  most recent such month that starts no later than the reference time. A month name alone is a
  date only after a preposition or date word ("in", "during", "since", "last", ...); bare "June"
  is too often a name and bare "may"/"march" a verb.
- "8 May 2023", "May 7, 2023", "2023-05-07", "5/7/2023": that day, ABSOLUTE, parsed by dateparser.
- "since X" is a DURATION from the start of X to the reference time; "after X" runs from the end
  of X to the reference time; "before X" and "until X" have no start (RELATIVE).
- "every Tuesday", "each month", "on Tuesdays": RECURRING, without a window.

Words that are never dates here: "now" (current-state wording, not a window), "second",
"sun"/"mon"/"sat" and other weekday abbreviations, capitalised "Today"/"Yesterday" inside a
sentence ("USA Today", the song), and anything inside quotation marks (a title).

dateparser only reads day-level dates our patterns have already found: its own search finds
"may" and "second" everywhere. All its calls hold DATEPARSER_LOCK, because dateparser keeps
shared mutable settings and locale caches (RFC 11); ingestion code takes the same lock.
"""

from __future__ import annotations

import calendar
import math
import re
import threading
from collections.abc import Callable
from datetime import MAXYEAR, MINYEAR, UTC, date, datetime, timedelta

import numpy as np

from rms_retrieval.nodes.models import TemporalSignal, TemporalType

DATEPARSER_LOCK = threading.Lock()

_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)
_MONTH_ABBREVIATIONS = {"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8,
                        "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12}
_MONTH_NUMBER = {name: i + 1 for i, name in enumerate(_MONTHS)} | _MONTH_ABBREVIATIONS
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3, "few": 3,
}

_MONTH = r"(?:" + "|".join(_MONTHS) + r")"
_MONTH_SHORT = r"(?:" + "|".join(list(_MONTHS) + list(_MONTH_ABBREVIATIONS)) + r")"
_WEEKDAY = r"(?:" + "|".join(_WEEKDAYS) + r")"
_NUMBER = r"(?:\d{1,3}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")"
_UNIT = r"(?:day|week|month|year|decade)"
_YEAR = r"(?:19|20)\d\d"
_MONTH_CONTEXT = (
    r"in|during|by|from|through|throughout|around|last|this|next|early|late|mid|of|"
    r"since|before|after|until|till"
)

# Any word a date phrase needs. A question without one never reaches the patterns below.
_DATE_WORD = re.compile(
    r"\d|\b(?:" + "|".join(_MONTH_NUMBER) + r"|" + _WEEKDAY + r"s?|yesterday|today|tonight|ago|"
    r"days?|weeks?|weekends?|months?|years?|decades?)\b",
    re.IGNORECASE,
)
_MODIFIER_BEFORE = re.compile(r"\b(since|before|after|until|till)\s+$", re.IGNORECASE)
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|(?<!\w)'[^']+'(?!\w)")


def _utc_day(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _day_window(day: date) -> tuple[datetime, datetime]:
    return _utc_day(day), _utc_day(day + timedelta(days=1))


def _add_months(year: int, month: int, months: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + months
    return index // 12, index % 12 + 1


def _month_window(year: int, month: int) -> tuple[datetime, datetime]:
    next_year, next_month = _add_months(year, month, 1)
    return datetime(year, month, 1, tzinfo=UTC), datetime(next_year, next_month, 1, tzinfo=UTC)


def _year_window(year: int) -> tuple[datetime, datetime]:
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)


def _week_window(day: date) -> tuple[datetime, datetime]:
    monday = day - timedelta(days=day.weekday())
    return _utc_day(monday), _utc_day(monday + timedelta(days=7))


def _unit_window(unit: str, day: date) -> tuple[datetime, datetime]:
    """The calendar day, week, month, year or decade holding `day`."""
    if unit == "day":
        return _day_window(day)
    if unit == "week":
        return _week_window(day)
    if unit == "month":
        return _month_window(day.year, day.month)
    if unit == "year":
        return _year_window(day.year)
    decade = day.year - day.year % 10
    return _year_window(decade)[0], _year_window(decade + 9)[1]


def _shift(reference: datetime, unit: str, count: int) -> datetime:
    """`reference` moved `count` units back (forward when negative), clamping the day of month."""
    if unit in ("day", "week"):
        return reference - timedelta(days=count * (7 if unit == "week" else 1))
    months = count * {"month": 1, "year": 12, "decade": 120}[unit]
    year, month = _add_months(reference.year, reference.month, -months)
    if not MINYEAR <= year <= MAXYEAR:
        raise OverflowError(f"year {year} is outside {MINYEAR}-{MAXYEAR}")
    return reference.replace(year=year, month=month, day=min(reference.day, calendar.monthrange(year, month)[1]))


def _number(word: str | None) -> int:
    if not word:
        return 1
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBER_WORDS[word]


def _unit(word: str) -> str:
    return word.lower().removesuffix("s")


def _recent_month(month: int, reference: datetime, strictly_before: bool) -> tuple[int, int]:
    """The most recent (year, month) starting no later than the reference, or before its month."""
    year = reference.year
    if month > reference.month or (strictly_before and month == reference.month):
        year -= 1
    return year, month


def _dateparser_day(phrase: str, reference: datetime) -> date | None:
    """A day-level date through dateparser; None when it is not a valid day."""
    settings = {
        "RELATIVE_BASE": reference.replace(tzinfo=None),
        "PREFER_DATES_FROM": "past",
        "REQUIRE_PARTS": ["day", "month"],
        "TIMEZONE": "UTC",
        "RETURN_AS_TIMEZONE_AWARE": False,
    }
    import dateparser  # 65 ms of a cold process's imports, for the few questions that name a date

    with DATEPARSER_LOCK:
        parsed = dateparser.parse(phrase, languages=["en"], settings=settings)
    return parsed.date() if parsed else None


# A handler turns one regex match into (type, start, end), or None to reject the match; a
# window that could not be resolved carries a fourth element, the note that says why.
_Window = tuple[TemporalType, datetime | None, datetime | None] | tuple[TemporalType, None, None, str]
OUT_OF_RANGE_NOTE = "out_of_range: the window falls outside years 1-9999 and was dropped"
_Handler = Callable[[re.Match[str], datetime], _Window | None]


def _absolute_day(match: re.Match[str], reference: datetime) -> _Window | None:
    if re.search(r"\b(?:may|march)\b", match.group(0)) and not re.search(r"\d{4}", match.group(0)):
        return None  # lower-case "3 may be" or "may 5" without a year reads as the verb
    day = _dateparser_day(match.group(0), reference)
    if day is None:
        return None
    return (TemporalType.ABSOLUTE, *_day_window(day))


def _month_year(match: re.Match[str], reference: datetime) -> _Window | None:
    month = _MONTH_NUMBER[match.group("month").lower().rstrip(".")]
    return (TemporalType.ABSOLUTE, *_month_window(int(match.group("year")), month))


def _month_alone(match: re.Match[str], reference: datetime) -> _Window | None:
    context = (match.group("ctx") or "").lower()
    month = _MONTH_NUMBER[match.group("month").lower()]
    if context == "next":
        year = reference.year + (1 if month <= reference.month else 0)
        return (TemporalType.RELATIVE, *_month_window(year, month))
    if context in ("last", "this"):
        kind = TemporalType.RELATIVE
    else:
        kind = TemporalType.ABSOLUTE
    year, month = _recent_month(month, reference, strictly_before=context == "last")
    return (kind, *_month_window(year, month))


def _year(match: re.Match[str], reference: datetime) -> _Window | None:
    return (TemporalType.ABSOLUTE, *_year_window(int(match.group("year"))))


def _named_day(match: re.Match[str], reference: datetime) -> _Window | None:
    word = match.group(0)
    at_sentence_start = match.start() == 0 or match.string[: match.start()].rstrip()[-1:] in (".", "!", "?", "")
    if word[0].isupper() and not at_sentence_start:
        return None  # "USA Today", the Beatles' "Yesterday": a name, not a date
    back = {"today": 0, "tonight": 0, "yesterday": 1}.get(word.lower(), 2)
    return (TemporalType.RELATIVE, *_day_window(reference.date() - timedelta(days=back)))


def _ago(match: re.Match[str], reference: datetime) -> _Window | None:
    unit = _unit(match.group("unit"))
    moment = _shift(reference, unit, _number(match.group("n")))
    return (TemporalType.RELATIVE, *_unit_window(unit, moment.date()))


def _duration(match: re.Match[str], reference: datetime) -> _Window | None:
    unit = _unit(match.group("unit"))
    return (TemporalType.DURATION, _shift(reference, unit, _number(match.group("n"))), reference)


def _calendar_relative(match: re.Match[str], reference: datetime) -> _Window | None:
    which = " ".join(match.group("which").lower().split())
    unit = match.group("unit").lower()
    step = {"last": 1, "previous": 1, "this past": 1, "this": 0, "next": -1}[which]
    if unit == "weekend":
        saturday = _week_window(reference.date())[0] + timedelta(days=5 - 7 * step)
        return (TemporalType.RELATIVE, saturday, saturday + timedelta(days=2))
    moment = _shift(reference, unit, step)
    return (TemporalType.RELATIVE, *_unit_window(unit, moment.date()))


def _weekday(match: re.Match[str], reference: datetime) -> _Window | None:
    which = (match.group("which") or "").lower()
    target = _WEEKDAYS.index(match.group("day").lower())
    today = reference.date()
    if which == "this":
        day = today + timedelta(days=target - today.weekday())
    elif which == "next":
        day = today + timedelta(days=(target - today.weekday() - 1) % 7 + 1)
    else:
        day = today - timedelta(days=(today.weekday() - target - 1) % 7 + 1)
    return (TemporalType.RELATIVE, *_day_window(day))


def _recurring(match: re.Match[str], reference: datetime) -> _Window | None:
    return (TemporalType.RECURRING, None, None)


def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


# Longer matches win over shorter ones; on equal length the earlier pattern wins.
_PATTERNS: tuple[tuple[re.Pattern[str], _Handler], ...] = (
    (_pattern(r"\b(?:every|each)\s+(?:other\s+|" + _NUMBER + r"\s+)?(?:" + _WEEKDAY
              + r"|day|morning|evening|night|week|weekend|month|year|summer|winter)s?\b"), _recurring),
    (_pattern(r"\bon\s+" + _WEEKDAY + r"s\b"), _recurring),
    (_pattern(r"\b" + _YEAR + r"-\d{1,2}-\d{1,2}\b"), _absolute_day),
    (_pattern(r"\b\d{1,2}/\d{1,2}/(?:\d{4}|\d{2})\b"), _absolute_day),
    (_pattern(r"\b(?:the\s+)?\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH_SHORT
              + r"\b\.?(?:,?\s+" + _YEAR + r"\b)?"), _absolute_day),
    (_pattern(r"\b" + _MONTH_SHORT + r"\.?\s+\d{1,2}(?:st|nd|rd|th)?\b(?:,?\s+" + _YEAR + r"\b)?"),
     _absolute_day),
    (_pattern(r"\b(?P<month>" + _MONTH_SHORT + r")\.?,?\s+(?:of\s+)?(?P<year>" + _YEAR + r")\b"), _month_year),
    (_pattern(r"\b(?:(?P<ctx>" + _MONTH_CONTEXT + r")\s+)(?:the\s+(?:month|end|beginning|start|middle)\s+of\s+)?"
              r"(?P<month>" + _MONTH + r")\b(?!\.?,?\s*(?:of\s+)?\d)"), _month_alone),
    (_pattern(r"\b(?:in|during|of|from|by|throughout|around|since|before|after|until|till)\s+"
              r"(?:the\s+year\s+)?(?P<year>" + _YEAR + r")\b"), _year),
    (_pattern(r"\b(?:the\s+day\s+before\s+yesterday|yesterday|today|tonight)\b"), _named_day),
    (_pattern(r"\b(?P<n>" + _NUMBER + r")\s+(?P<unit>" + _UNIT + r")s?\s+ago\b"), _ago),
    (_pattern(r"\bthe\s+(?:past|last|previous)\s+(?:(?P<n>" + _NUMBER + r")\s+)?(?P<unit>" + _UNIT + r")s?\b"),
     _duration),
    (_pattern(r"\b(?:past|last)\s+(?P<n>" + _NUMBER + r")\s+(?P<unit>" + _UNIT + r")s\b"), _duration),
    (_pattern(r"\b(?:over|in|during|within)\s+(?:the\s+)?past\s+(?:(?P<n>" + _NUMBER + r")\s+)?(?P<unit>" + _UNIT + r")s?\b"),
     _duration),
    (_pattern(r"\b(?P<which>last|previous|this\s+past|this|next)\s+(?P<unit>week|weekend|month|year|decade)\b"),
     _calendar_relative),
    (_pattern(r"\b(?:(?P<which>last|this|next)\s+|on\s+)?(?P<day>" + _WEEKDAY + r")\b"), _weekday),
)


def _modified(
    modifier: str, kind: TemporalType, start: datetime | None, end: datetime | None, reference: datetime
) -> _Window:
    """The window of "since/after/before/until X" from the window of X."""
    if modifier == "since":
        return TemporalType.DURATION, start, reference
    if modifier == "after":
        return TemporalType.RELATIVE, end, reference if end and end < reference else None
    if modifier == "before":
        return TemporalType.RELATIVE, None, start
    return TemporalType.RELATIVE, None, end


def _inside(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    return any(a <= span[0] and span[1] <= b for a, b in spans)


def _overlaps(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    return any(span[0] < b and a < span[1] for a, b in spans)


def _resolved(handler: _Handler, match: re.Match[str], reference: datetime) -> _Window | None:
    """The handler's window; a window that leaves the calendar (years 1-9999) resolves to none.

    Every handler is plain calendar arithmetic over at most three-digit counts, so this is
    bounded in time; the signal is kept with OUT_OF_RANGE_NOTE so the analysis says why.
    """
    try:
        return handler(match, reference)
    except (OverflowError, ValueError):
        return (TemporalType.RELATIVE, None, None, OUT_OF_RANGE_NOTE)


def _candidates(text: str, reference: datetime) -> list[tuple[int, int, int, _Window]]:
    """Every accepted pattern match: (start, end, pattern index, window)."""
    quoted = [m.span() for m in _QUOTED.finditer(text)]
    found = []
    for index, (pattern, handler) in enumerate(_PATTERNS):
        for match in pattern.finditer(text):
            if _inside(match.span(), quoted):
                continue
            window = _resolved(handler, match, reference)
            if window is not None:
                found.append((match.start(), match.end(), index, window))
    return found


def parse_temporal_signals(text: str, reference_time: datetime) -> tuple[TemporalSignal, ...]:
    """The date phrases in `text`, in order, each resolved against `reference_time` (UTC windows)."""
    if not _DATE_WORD.search(text):
        return ()
    reference = reference_time.astimezone(UTC)
    chosen: list[tuple[int, int, _Window]] = []
    for start, end, _, window in sorted(
        _candidates(text, reference), key=lambda c: (-(c[1] - c[0]), c[2], c[0])
    ):
        if not _overlaps((start, end), [(s, e) for s, e, _ in chosen]):
            chosen.append((start, end, window))
    signals = []
    for start, end, (kind, window_start, window_end, *note) in sorted(chosen, key=lambda c: c[0]):
        modifier = _MODIFIER_BEFORE.search(text, 0, start)
        leading = re.match(r"(since|before|after|until|till)\s", text[start:end], re.IGNORECASE)
        if not note and kind is not TemporalType.RECURRING and (modifier or leading):
            if modifier:
                start = modifier.start()
            kind, window_start, window_end = _modified(
                (modifier or leading).group(1).lower(), kind, window_start, window_end, reference
            )
        signals.append(
            TemporalSignal(
                type=kind,
                text=" ".join(text[start:end].split()),
                start=window_start,
                end=window_end,
                note=note[0] if note else None,
            )
        )
    return tuple(signals)


def date_words_read_as_names(text: str) -> tuple[str, ...]:
    """Capitalised month names used as names: not first, no date word before, no number beside.

    "June" in "Who is June dating?"; never "in June", "June 5" or "May 2023".
    """
    names = []
    for match in re.finditer(r"\b(" + "|".join(m.capitalize() for m in _MONTHS) + r")\b", text):
        before = text[: match.start()].rstrip()
        after = text[match.end():].lstrip()
        if not before or before[-1] in ".!?\"“(":
            continue
        if re.search(r"\b(?:" + _MONTH_CONTEXT + r"|the|on|\d+(?:st|nd|rd|th)?)$", before, re.IGNORECASE):
            continue
        if re.match(r"\d", after):
            continue
        if match.group(1) not in names:
            names.append(match.group(1))
    return tuple(names)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(when: datetime) -> int:
    """`when` in microseconds since the epoch: differences and comparisons stay exact, as a
    datetime's are."""
    return (when - _EPOCH) // _MICROSECOND


def temporal_affinities(stated: np.ndarray, window: tuple[datetime, datetime] | None) -> np.ndarray:
    """Per stated time (epoch microseconds): 1.0 inside the query's date window, decaying by a week
    per e-fold outside it; 0.0 everywhere without a window. The days outside are the microseconds
    over 1e6 over 86400, as `timedelta.total_seconds() / 86400.0` gives them (both exact roundings
    of the same integers, below 2**53), and each exp is `math.exp`'s."""
    if window is None:
        return np.zeros(len(stated))
    start, end = micros(window[0]), micros(window[1])
    before, after = stated < start, stated >= end
    values = np.ones(len(stated))
    outside = before | after
    days = np.where(before, start - stated, stated - end)[outside] / 1e6 / 86400.0
    values[outside] = [math.exp(-value / 7.0) for value in days.tolist()]
    return values
