from rms_retrieval.nodes.helpers.formatting import format_item, group_header
from tests.factories import make_object


def test_reader_lines_carry_their_date_and_other_formats_do_not():
    obj = make_object("r", "Caroline: hello")
    assert format_item(obj, "reader") == "[2025-06-01] Caroline: hello"
    assert format_item(obj, "dated_groups") == format_item(obj, "plain") == "Caroline: hello"


def test_the_group_header_is_the_day_the_memory_was_stated():
    assert group_header(make_object("r", event_time=None, days=3)) == "[2025-06-04]"
