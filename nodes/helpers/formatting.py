"""How a memory is written into the context: its line, and the date line over its group."""

from __future__ import annotations

from datetime import date
from functools import lru_cache

from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.analysis.speakers import spoken_text


def format_item(obj: MemoryObject, item_format: str) -> str:
    """The line an item takes in the context. "reader" dates every line; "dated_groups" dates
    the group of lines it heads (see `group_header`), so "when" questions stay answerable. A turn
    whose content does not name its speaker is written "Speaker: content" (stores/analysis/speakers.py)."""
    if item_format == "reader":
        return reader_line([stated_day(obj)], spoken_text(obj))
    return spoken_text(obj)


def stated_day(obj: MemoryObject) -> str:
    """The day a memory was stated, as the context writes it: the date of its stated time where
    that time was given (its own offset, not UTC's)."""
    return _written_day(obj.stated_time.date())


@lru_cache(maxsize=65_536)  # the same days recur in every request, and strftime takes about 2 µs
def _written_day(day: date) -> str:
    return f"{day:%Y-%m-%d}"


def reader_line(days: list[str], text: str) -> str:
    """A "reader" line: the text after its days; several when repeated text was folded into one line."""
    return f"[{', '.join(sorted(days))}] {text}"


def group_header(obj: MemoryObject) -> str:
    """The date line that heads an item's group under "dated_groups": the day it was stated."""
    return f"[{stated_day(obj)}]"
