"""LoCoMo loader: a hand-made LoCoMo-shaped fixture, plus one check against the real file."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from uuid import uuid5

import pytest

from rms_retrieval.dataflows.locomo import (
    LOCOMO_ID_NAMESPACE,
    LocomoFormatError,
    conversation_objects,
    evidence_object_ids,
    load_locomo,
    normalise_evidence,
    parse_session_time,
    questions_for,
    reference_time,
    speaker_object_id,
    turn_object_id,
)
from rms_retrieval.stores.models import EpistemicType, NodeType

LOCOMO_FILE = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"

KNOWN = {"D1:1", "D1:2", "D1:3", "D2:1", "D2:2"}

SAMPLE = {
    "sample_id": "conv-t1",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat."},
            {
                "speaker": "Ben",
                "dia_id": "D1:2",
                "text": "Look at my garden!",
                "img_url": ["https://example.invalid/x.jpg"],
                "blip_caption": "a photo of tomato plants",
                "query": "tomato garden",
            },
            {"speaker": "Ana", "dia_id": "D1:3", "text": "Lovely."},
        ],
        "session_2_date_time": "9:05 am on 12 June, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "How is the cat?"},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Sleeping all day."},
        ],
        # Some real samples date sessions that hold no turns; they are not sessions.
        "session_3_date_time": "10:00 am on 1 July, 2023",
    },
    "qa": [
        {"question": "What pet?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
        {"question": "Joined?", "answer": "x", "evidence": ["D1:1; D2:2"], "category": 1},
        {"question": "Spaced?", "answer": "x", "evidence": ["D2:1 D1:3 D1:2"], "category": 3},
        {"question": "Colon?", "answer": "x", "evidence": ["D:2:1"], "category": 1},
        {"question": "Zero?", "answer": 2023, "evidence": ["D02:01"], "category": 2},
        {"question": "Junk?", "answer": "x", "evidence": ["D1:1", "D", "D1:3"], "category": 4},
        {"question": "Unknown?", "answer": "x", "evidence": ["D9:9", "D1:2"], "category": 1},
        {"question": "Empty?", "answer": "x", "evidence": [], "category": 3},
        {"question": "Twice?", "answer": "x", "evidence": ["D1:2", "D1:2"], "category": 4},
        {"question": "Gone?", "answer": "x", "evidence": ["D7:1"], "category": 2},
        {"question": "Trap?", "adversarial_answer": "a dog", "evidence": ["D1:1"], "category": 5},
    ],
}


def _write(tmp_path: Path, samples: object) -> Path:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


@pytest.fixture
def dataset(tmp_path):
    return load_locomo(_write(tmp_path, [SAMPLE]))


def test_parse_session_time_is_utc():
    assert parse_session_time("1:56 pm on 8 May, 2023") == datetime(
        2023, 5, 8, 13, 56, tzinfo=timezone.utc
    )
    assert parse_session_time("12:37 am on 31 October, 2022") == datetime(
        2022, 10, 31, 0, 37, tzinfo=timezone.utc
    )


def test_parse_session_time_names_bad_text():
    with pytest.raises(LocomoFormatError, match="8th of May"):
        parse_session_time("8th of May")


@pytest.mark.parametrize(
    ("raw", "ids", "issues"),
    [
        (["D1:1", "D2:2"], ("D1:1", "D2:2"), ()),
        (["D1:1; D2:2"], ("D1:1", "D2:2"), ("split 'D1:1; D2:2' into D1:1, D2:2",)),
        (["D1:1,D2:2"], ("D1:1", "D2:2"), ("split 'D1:1,D2:2' into D1:1, D2:2",)),
        (
            ["D2:1 D1:3 D1:2"],
            ("D2:1", "D1:3", "D1:2"),
            ("split 'D2:1 D1:3 D1:2' into D2:1, D1:3, D1:2",),
        ),
        (["D:2:1"], ("D2:1",), ("normalised 'D:2:1' to D2:1",)),
        (["D02:01"], ("D2:1",), ("normalised 'D02:01' to D2:1",)),
        (["D1:1", "D", "D1:3"], ("D1:1", "D1:3"), ("dropped malformed id 'D'",)),
        (["D9:9", "D1:2"], ("D1:2",), ("dropped unknown id D9:9",)),
        (["D1:2", "D1:2"], ("D1:2",), ("dropped duplicate id D1:2",)),
        (["  "], (), ("dropped empty id '  '", "no resolvable evidence")),
        ([], (), ("no evidence",)),
        (["D7:1"], (), ("dropped unknown id D7:1", "no resolvable evidence")),
    ],
)
def test_normalise_evidence(raw, ids, issues):
    assert normalise_evidence(raw, KNOWN) == (ids, issues)


def test_normalise_evidence_notes_every_step_of_a_combined_repair():
    ids, issues = normalise_evidence(["D1:02; D:9:1"], KNOWN)
    assert ids == ("D1:2",)
    assert issues == (
        "split 'D1:02; D:9:1' into D1:02, D:9:1",
        "normalised 'D1:02' to D1:2",
        "normalised 'D:9:1' to D9:1",
        "dropped unknown id D9:1",
    )


def test_load_parses_conversation(dataset):
    (conversation,) = dataset.conversations
    assert conversation.sample_id == "conv-t1"
    assert conversation.speakers == ("Ana", "Ben")
    assert [s.number for s in conversation.sessions] == [1, 2]
    assert conversation.session(2).date_time == datetime(2023, 6, 12, 9, 5, tzinfo=timezone.utc)
    assert conversation.session(2).session_id == "session_2"
    assert [t.dia_id for t in conversation.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert [t.session_seq for t in conversation.turns] == [0, 1, 2, 0, 1]
    assert conversation.turns[1].image_caption == "a photo of tomato plants"
    assert conversation.turns[1].image_query == "tomato garden"


def test_load_parses_questions(dataset):
    questions = dataset.questions
    assert [q.index for q in questions] == list(range(11))
    assert questions[0].key == "conv-t1#0"
    assert questions[0].category_name == "single-hop"
    assert questions[4].answer == "2023"
    assert questions[4].category_name == "temporal"
    assert questions[10].answer is None
    assert questions[10].adversarial_answer == "a dog"
    assert questions[10].category_name == "adversarial"
    assert questions[1].raw_evidence == ("D1:1; D2:2",)
    assert questions[1].evidence == ("D1:1", "D2:2")
    assert questions[7].evidence == ()
    assert questions[7].evidence_issues == ("no evidence",)


def test_evidence_report_lists_every_changed_question(dataset):
    assert [q.index for q in dataset.evidence_report()] == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_questions_for_excludes_unresolvable_and_other_categories(dataset):
    assert [q.index for q in questions_for(dataset)] == [0, 1, 2, 3, 4, 5, 6, 8]
    assert [q.index for q in questions_for(dataset, categories=(2,))] == [4]
    assert [q.index for q in questions_for(dataset, (2,), require_evidence=False)] == [4, 9]
    assert [q.index for q in questions_for(dataset, (5,))] == [10]


def test_conversation_objects(dataset):
    (conversation,) = dataset.conversations
    objects = conversation_objects(conversation)
    may_8 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    june_12 = datetime(2023, 6, 12, 9, 5, tzinfo=timezone.utc)

    assert [o.node_type for o in objects] == [NodeType.ENTITY] * 2 + [NodeType.TURN] * 5
    ana, ben = objects[:2]
    assert (ana.content, ana.entity_canonical_name, ana.metadata) == (
        "Ana",
        "Ana",
        {"entity_type": "PERSON"},
    )
    assert ben.id == uuid5(LOCOMO_ID_NAMESPACE, "locomo/conv-t1/speaker/Ben")
    assert ben.id == speaker_object_id("conv-t1", "Ben")
    assert ana.created_at == may_8

    turns = objects[2:]
    assert [o.source_ref for o in turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert all(o.namespace == "conv-t1" for o in objects)
    garden = turns[1]
    assert garden.id == uuid5(LOCOMO_ID_NAMESPACE, "locomo/conv-t1/D1:2")
    assert garden.id == turn_object_id("conv-t1", "D1:2")
    assert garden.content == "Ben: Look at my garden! [image: a photo of tomato plants]"
    assert garden.metadata == {"speaker": "Ben", "dia_id": "D1:2", "image_query": "tomato garden"}
    assert (garden.session_id, garden.session_seq) == ("session_1", 1)
    assert garden.epistemic_type is EpistemicType.OBSERVED
    assert garden.salience == 0.5
    assert turns[0].content == "Ana: I adopted a cat."
    assert turns[0].metadata == {"speaker": "Ana", "dia_id": "D1:1"}
    last = turns[4]
    assert (last.session_id, last.session_seq) == ("session_2", 1)
    assert last.event_time == last.created_at == last.updated_at == june_12


def test_conversation_objects_rebuild_identically(tmp_path, dataset):
    again = load_locomo(_write(tmp_path, [SAMPLE]))
    assert conversation_objects(again.conversations[0]) == conversation_objects(
        dataset.conversations[0]
    )


def test_reference_time_is_last_session_with_turns(dataset):
    assert reference_time(dataset.conversations[0]) == datetime(
        2023, 6, 12, 9, 5, tzinfo=timezone.utc
    )


def test_evidence_object_ids_follow_normalised_evidence(dataset):
    assert evidence_object_ids(dataset.questions[3]) == (turn_object_id("conv-t1", "D2:1"),)


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(LocomoFormatError, match="nope.json: file not found"):
        load_locomo(missing)


def test_invalid_json_is_named(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(LocomoFormatError, match="broken.json: invalid JSON"):
        load_locomo(path)


def test_top_level_must_be_a_list(tmp_path):
    with pytest.raises(LocomoFormatError, match="expected a list of samples"):
        load_locomo(_write(tmp_path, {"sample_id": "x"}))


def _broken(edit) -> list:
    sample = copy.deepcopy(SAMPLE)
    edit(sample)
    return [sample]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("qa"), r"sample 0: sample lacks 'qa'"),
        (
            lambda s: s["conversation"].pop("speaker_b"),
            r"\(conv-t1\) conversation lacks 'speaker_b'",
        ),
        (lambda s: s["conversation"].pop("session_2_date_time"), r"lacks 'session_2_date_time'"),
        (lambda s: s["conversation"]["session_1"][0].pop("text"), r"session_1 turn 0 lacks 'text'"),
        (lambda s: s["qa"][2].pop("evidence"), r"qa 2 lacks 'evidence'"),
        (lambda s: s["qa"][0].update(category=9), r"qa 0 has unknown category 9"),
        (
            lambda s: s["conversation"].update(session_1_date_time="May 8"),
            r"session_1_date_time: session time 'May 8'",
        ),
        (
            lambda s: s["conversation"]["session_2"][0].update(dia_id="D1:1"),
            r"duplicate dia_ids D1:1",
        ),
        (
            lambda s: s["conversation"]["session_2"][0].update(text=7),
            r"session_2 turn 0: LocomoTurn.text",
        ),
    ],
)
def test_malformed_sample_is_named(tmp_path, edit, message):
    path = _write(tmp_path, _broken(edit))
    with pytest.raises(LocomoFormatError, match=message) as raised:
        load_locomo(path)
    assert str(path) in str(raised.value)


@pytest.mark.locomo
def test_real_locomo_file():
    if not LOCOMO_FILE.exists():
        pytest.skip(f"{LOCOMO_FILE} is absent")
    dataset = load_locomo(LOCOMO_FILE)

    assert len(dataset.conversations) == 10
    turn_objects = [
        o
        for conversation in dataset.conversations
        for o in conversation_objects(conversation)
        if o.node_type is NodeType.TURN
    ]
    assert len(turn_objects) == 5882
    assert len({o.id for o in turn_objects}) == 5882
    assert len(dataset.questions) == 1986

    report = dataset.evidence_report()
    empty = [q.key for q in report if not q.raw_evidence]
    repaired_or_dropped = [
        q.key
        for q in report
        if any(not note.startswith("dropped duplicate") for note in q.evidence_issues)
        and q.raw_evidence
    ]
    assert empty == ["conv-26#30", "conv-26#46", "conv-50#39", "conv-50#42"]
    assert repaired_or_dropped == [
        "conv-26#37",  # 'D8:6; D9:17'
        "conv-42#58",  # unknown D10:19
        "conv-42#88",  # 'D'
        "conv-43#18",  # 'D:11:26'
        "conv-47#38",  # unknown D4:36
        "conv-49#31",  # space-joined
        "conv-49#38",
        "conv-49#46",
        "conv-50#69",  # 'D30:05'
    ]
    duplicated = [q.key for q in report if q.key not in empty + repaired_or_dropped]
    assert duplicated == ["conv-50#5"]

    assert len(questions_for(dataset)) == 1536
    assert len(questions_for(dataset, require_evidence=False)) == 1540
