"""Who said a turn: metadata, the leading-name rule and what it must not take for a name."""

from __future__ import annotations

import pytest

from rms_retrieval.stores.analysis.speakers import SpeakerRules, leading_speaker, role_of, speaker_of, spoken_text
from factories import make_object


@pytest.mark.parametrize(("content", "speaker"), [
    ("Caroline: I went to the LGBTQ support group yesterday.", "Caroline"),
    ("Mary Jane: hi!", "Mary Jane"),
    ("  Jo-Ann:   see you at 10:30", "Jo-Ann"),
    ("Dr. Okafor: take two a day", "Dr. Okafor"),
    ("José: ¡hola!", "José"),
    ("O'Brien: right so", "O'Brien"),
])
def test_a_leading_name_names_the_speaker(content, speaker):
    assert leading_speaker(content) == speaker


@pytest.mark.parametrize("content", [
    "Note: the meeting moved to Friday",           # a label word
    "Quick Note: bring the charger",               # a label word anywhere in the label
    "Update: Caroline got the job",
    "Step 2: mix the flour",                       # digits
    "10:30 works for me",                          # a time
    "Meeting at 10:30: room 4",                    # lower-case words, a time
    "https://example.com/caroline is her blog",    # a URL: no space after the colon
    "Caroline:no space after the colon",
    "FYI: the shop closes early",                  # all capitals
    "TODO: call the bank",
    "Q: what is it?",                              # one letter
    "Hi: it's me",                                 # a greeting, never a name
    "Monday: gym",                                 # a weekday
    "the plan: go early",
    "I said: no",
    "Caroline went to the group: it was great",    # more than three words
    "Caroline:",                                   # nothing said
])
def test_what_the_leading_name_rule_must_not_match(content):
    assert leading_speaker(content) is None


def test_the_rule_is_a_setting_and_metadata_wins():
    plain = make_object("t", "Caroline: I painted a lake")
    assert speaker_of(plain) == "Caroline"
    assert speaker_of(plain, SpeakerRules(leading_name=False)) is None
    assert speaker_of(plain, SpeakerRules(max_name_words=1)) == "Caroline"
    assert leading_speaker("Mary Jane: hi", SpeakerRules(max_name_words=1)) is None
    given = make_object("t", "Caroline: I painted a lake", metadata={"speaker": "Mel"})
    assert speaker_of(given, SpeakerRules(leading_name=False)) == "Mel"
    fact = make_object("f", "Caroline: a painter", node_type="FACT")
    assert speaker_of(fact) is None  # the rule reads turns only
    with pytest.raises(ValueError):
        SpeakerRules(max_name_words=0)


def test_spoken_text_names_a_speaker_the_content_does_not():
    assert spoken_text(make_object("a", "I went to the group", metadata={"speaker": "Caroline"})) == \
        "Caroline: I went to the group"
    assert spoken_text(make_object("b", "Caroline: I went", metadata={"speaker": "Caroline"})) == "Caroline: I went"
    assert spoken_text(make_object("c", "I went")) == "I went"
    assert spoken_text(make_object("d", "Caroline: I went")) == "Caroline: I went"


@pytest.mark.parametrize(("content", "metadata", "role"), [
    ("I moved to Lisbon", {"role": "user"}, "user"),           # what add_messages records
    ("assistant: I moved to Lisbon", {"role": "tool"}, "tool"),  # metadata wins
    ("user: I moved to Lisbon", {}, "user"),
    ("  Human : hi", {}, "user"),
    ("Assistant: Lisbon is lovely", {}, "assistant"),
    ("AI: sure", {}, "assistant"),
    ("Caroline: I moved to Lisbon", {}, None),                  # a speaker's name is no role
    ("username: caro", {}, None),
    ("user:no space", {}, None),
])
def test_role_of_reads_the_metadata_else_a_leading_role_label(content, metadata, role):
    assert role_of(make_object("t", content, metadata=metadata)) == role


def test_only_turns_have_a_role_label():
    assert role_of(make_object("f", "user: likes tea", node_type="FACT")) is None
