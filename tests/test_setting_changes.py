"""Changes by dotted path: parsed as JSON else text, applied to settings and validated, one line when wrong."""

from __future__ import annotations

import pytest

from rms_retrieval.dataflows.setting_changes import WhatIfError, changed_settings, parse_change
from rms_retrieval.nodes.settings import RetrievalSettings


@pytest.mark.parametrize("changes, message", [
    ({"scoring.speeker_boost": 0}, "--set scoring.speeker_boost: there is no such setting; did you mean scoring.speaker_boost?"),
    ({"nosuch": 1}, "--set nosuch: there is no such setting; settings are candidates.vector_k"),
    ({"scoring.speaker_boost.x": 1}, "--set scoring.speaker_boost.x: there is no such setting"),
    ({"scoring.speaker_boost": 20}, "--set scoring.speaker_boost=20: scoring.speaker_boost: Input should be less than or equal to 10"),
    ({"candidates.enabled_paths": ["SESSION_CONTEXT"]}, "are not primary paths"),
])
def test_an_unknown_or_invalid_setting_is_one_line(changes, message):
    with pytest.raises(WhatIfError) as caught:
        changed_settings(RetrievalSettings(), changes)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_changes_are_parsed_as_json_else_text_and_mapping_keys_can_be_set():
    assert parse_change("scoring.speaker_boost=0") == ("scoring.speaker_boost", 0)
    assert parse_change("packing.tier_path_depth=null") == ("packing.tier_path_depth", None)
    assert parse_change("packing.item_format=plain") == ("packing.item_format", "plain")
    with pytest.raises(WhatIfError, match="section.field=value"):
        parse_change("scoring.speaker_boost")
    changed = changed_settings(RetrievalSettings(), {"scoring.epistemic_weights.OBSERVED": 0.5,
                                                     "scoring.node_type_boosts.FACT": 1.5})
    assert changed.scoring.epistemic_weights["OBSERVED"] == 0.5 and changed.scoring.node_type_boosts["FACT"] == 1.5
