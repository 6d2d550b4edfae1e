from datetime import datetime, timedelta, timezone

from hypothesis import given, strategies as st

from rms_retrieval.nodes.helpers.formatting import format_item, group_header, stated_day
from tests.factories import make_object


def test_reader_lines_carry_their_date_and_other_formats_do_not():
    obj = make_object("r", "Caroline: hello")
    assert format_item(obj, "reader") == "[2025-06-01] Caroline: hello"
    assert format_item(obj, "dated_groups") == format_item(obj, "plain") == "Caroline: hello"


def test_the_group_header_is_the_day_the_memory_was_stated():
    assert group_header(make_object("r", event_time=None, days=3)) == "[2025-06-04]"


@given(st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)),
       st.integers(min_value=-23 * 60, max_value=23 * 60))
def test_the_stated_day_is_strftimes_date_where_the_time_was_given(when, minutes):
    stated = when.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    obj = make_object("d", created_at=stated, updated_at=stated, event_time=stated)
    assert stated_day(obj) == stated.strftime("%Y-%m-%d") == stated_day(obj)  # once made, once from the cache
    # The same instant given at another offset can fall on another day; each is written as given.
    elsewhere = stated.astimezone(timezone(timedelta(minutes=-minutes or 60)))
    moved = make_object("d", created_at=elsewhere, updated_at=elsewhere, event_time=elsewhere)
    assert stated_day(moved) == elsewhere.strftime("%Y-%m-%d")
