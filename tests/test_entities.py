from __future__ import annotations

from rms_retrieval.stores.entities import extract_entities


def _names(text: str) -> list[tuple[str, str]]:
    return [(found.name, found.entity_type) for found in extract_entities(text)]


def test_capitalised_runs_possessives_and_joiners():
    # The organisation cue reads the last word only, so "Bank of America" stays OTHER.
    assert _names("Caroline's sister moved to New York with Bank of America.") == [
        ("Caroline", "OTHER"),
        ("New York", "PLACE"),
        ("Bank of America", "OTHER"),
    ]
    assert _names("She studies at Boston University") == [("Boston University", "ORGANIZATION")]


def test_function_words_weekdays_and_repeats_are_skipped():
    assert _names("Hey Mel! Monday I met Mel and Oh, Yes. I went.") == [("Mel", "OTHER")]
    assert _names("she met caroline") == []


def test_acronyms_are_organisations():
    assert _names("I joined the LGBTQ support group") == [("LGBTQ", "ORGANIZATION")]
