"""The answerability evaluator (RFC-0005 Section 9): a real chat-completions server on 127.0.0.1
answers as the model; labels, citations, the verdict rules, failures and the recorded hashes."""

from __future__ import annotations

import hashlib
import json

import pytest

from rms_retrieval.dataflows.answerability import answerability_driver, assess_answerability
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.answerability import (PROMPT_VERSION, AnswerabilityError, RequirementStatus, Verdict,
                                               checked_requirements, claimed_requirements, evaluation_prompt,
                                               evidence_labels)
from rms_retrieval.stores.providers.chat_completions import ChatCompletionsModel
from tests.chat_server import running_chat_server
from tests.factories import BASE_TIME, FakeEncoder, conversation_store


@pytest.fixture(scope="module")
def bundle():
    return retrieve(conversation_store(), "What did Caroline do at the support group?", namespaces=["ns"],
                    reference_time=BASE_TIME, encoder=FakeEncoder(), log=False).bundle


@pytest.fixture
def chat():
    with running_chat_server() as server:
        yield server


def _model(chat) -> ChatCompletionsModel:
    return ChatCompletionsModel(chat.url, "judge", timeout_seconds=5)


def _reply(*requirements: dict) -> str:
    return json.dumps({"requirements": list(requirements)})


def _req(status: str, *citations: str, text: str = "what Caroline did", source: str = "question") -> dict:
    return {"text": text, "source": source, "status": status, "citations": list(citations)}


def test_every_packed_item_has_a_compact_label_in_bundle_order(bundle):
    labels = evidence_labels(bundle)
    assert list(labels) == [f"m{i}" for i in range(1, len(bundle.items) + 1)]
    assert list(labels.values()) == [item.id for item in bundle.items]


def test_the_prompt_shows_each_memory_under_its_label_with_its_day_and_the_draft_answer(bundle):
    labels = evidence_labels(bundle)
    prompt = evaluation_prompt(bundle, labels, "What did Caroline do?", "She went to a support group.")
    first = bundle.items[0]
    assert f"[m1] ({first.event_time:%Y-%m-%d}) {first.content}" in prompt.user
    assert "Draft answer: She went to a support group." in prompt.user
    assert prompt.version == PROMPT_VERSION
    assert prompt.sha256 == hashlib.sha256((prompt.system + "\n\n" + prompt.user).encode()).hexdigest()
    assert "Draft answer" not in evaluation_prompt(bundle, labels, "What did Caroline do?", None).user


def test_citations_resolve_by_label_or_full_id_of_a_packed_item_only(bundle):
    labels = evidence_labels(bundle)
    first, second = bundle.items[0].id, bundle.items[1].id
    claims = claimed_requirements(_reply(_req("supported", "m1", "[M2]", str(first), "m99", str(first)[:8],
                                              "00000000-0000-0000-0000-000000000000", "memory one")))
    (requirement,) = checked_requirements(claims, labels)
    assert requirement.cited_ids == (first, second)
    assert requirement.invalid_citations == ("m99", str(first)[:8], "00000000-0000-0000-0000-000000000000",
                                             "memory one")
    assert requirement.status is RequirementStatus.SUPPORTED


@pytest.mark.parametrize(("claimed", "citations", "decided"), [
    ("supported", ("m1",), "supported"),
    ("supported", ("m99",), "unsupported"),        # no valid citation: not supported
    ("supported", (), "unsupported"),
    ("conflicting", ("m1", "m2"), "conflicting"),
    ("conflicting", ("m1", "[m1]"), "supported"),  # one packed item cannot disagree with itself
    ("conflicting", ("m42",), "unsupported"),
    ("unsupported", ("m1",), "unsupported"),
])
def test_the_status_is_decided_in_code_from_the_valid_citations(bundle, claimed, citations, decided):
    (requirement,) = checked_requirements(claimed_requirements(_reply(_req(claimed, *citations))),
                                          evidence_labels(bundle))
    assert requirement.claimed_status == claimed and requirement.status == decided


@pytest.mark.parametrize(("statuses", "verdict"), [
    (("supported", "supported"), Verdict.ANSWERABLE),
    (("supported", "unsupported"), Verdict.PARTIAL),
    (("unsupported", "unsupported"), Verdict.INSUFFICIENT),
    (("supported", "conflicting"), Verdict.CONFLICTING),
])
def test_the_verdict_follows_from_the_requirements(bundle, chat, statuses, verdict):
    citations = {"supported": ("m1",), "unsupported": (), "conflicting": ("m1", "m2")}
    chat.reply = _reply(*(_req(s, *citations[s], text=f"part {i}") for i, s in enumerate(statuses)))
    assessment = assess_answerability(bundle, _model(chat))
    assert assessment.verdict is verdict
    assert [r.status for r in assessment.requirements] == list(statuses)


def test_a_model_that_cites_nothing_valid_makes_no_answerable_verdict(bundle, chat):
    chat.reply = _reply(_req("supported", "m77"), _req("supported", "the first memory", text="when"))
    assessment = assess_answerability(bundle, _model(chat))
    assert assessment.verdict is Verdict.INSUFFICIENT
    assert "none of 2 requirements" in assessment.reason


def test_an_empty_bundle_is_insufficient_without_asking_the_model(chat):
    empty = retrieve(conversation_store(), "What did Caroline do?", namespaces=["nobody"], reference_time=BASE_TIME,
                     encoder=FakeEncoder(), log=False).bundle
    assert empty.items == ()
    assessment = assess_answerability(empty, _model(chat))
    assert assessment.verdict is Verdict.INSUFFICIENT and assessment.requirements == ()
    assert chat.requests == []
    assert assessment.model_identity is None and assessment.prompt_sha256 is None and assessment.reply_sha256 is None


@pytest.mark.parametrize("break_it", ["http_error", "timeout", "not_json", "wrong_shape", "no_requirements"])
def test_provider_failures_and_unreadable_replies_are_errors_not_verdicts(bundle, chat, break_it):
    model = ChatCompletionsModel(chat.url, "judge", timeout_seconds=0.3)
    if break_it == "http_error":
        chat.status = 500
    elif break_it == "timeout":
        chat.delay = 1.0
    elif break_it == "not_json":
        chat.reply = "The memories answer it."
    elif break_it == "wrong_shape":
        chat.reply = _reply({"text": "x", "status": "probably", "citations": ["m1"]})
    else:
        chat.reply = _reply()
    with pytest.raises(AnswerabilityError):
        assess_answerability(bundle, model)


def test_the_assessment_records_identities_and_hashes_and_changes_nothing(bundle, chat):
    before = bundle.to_json()
    chat.reply = "```json\n" + _reply(_req("supported", "m1"), _req("unsupported", text="x", source="draft_answer")) + "\n```"
    assessment = assess_answerability(bundle, _model(chat), draft_answer="She spoke at a school.")
    assert bundle.to_json() == before
    sha = lambda text: hashlib.sha256(text.encode()).hexdigest()  # noqa: E731
    assert assessment.bundle_sha256 == sha(before)
    assert assessment.question_sha256 == sha(bundle.query)
    assert assessment.draft_answer_sha256 == sha("She spoke at a school.")
    assert assessment.reply_sha256 == sha(chat.reply)
    assert assessment.model_identity == f"openai_chat:judge@{chat.url}/chat/completions"
    assert assessment.configuration_fingerprint == bundle.retrieval_metadata.configuration_fingerprint
    assert assessment.verdict is Verdict.PARTIAL and assessment.requirements[1].source == "draft_answer"
    _, _, body = chat.requests[0]
    assert body["messages"][1]["content"].startswith(f"Question: {bundle.query}\nDraft answer: She spoke")
    again = type(assessment).model_validate_json(assessment.model_dump_json())
    assert again == assessment


def test_another_question_and_blank_inputs(bundle, chat):
    chat.reply = _reply(_req("supported", "m1"))
    assess_answerability(bundle, _model(chat), question="Who painted a sunrise?")
    assert chat.requests[0][2]["messages"][1]["content"].startswith("Question: Who painted a sunrise?")
    with pytest.raises(ValueError, match="question to assess is empty"):
        assess_answerability(bundle, _model(chat), question="  ")
    with pytest.raises(ValueError, match="draft answer is empty"):
        assess_answerability(bundle, _model(chat), draft_answer="")


def test_the_driver_exposes_each_step(bundle, chat):
    chat.reply = _reply(_req("supported", "m2"))
    inputs = {"bundle": bundle, "chat_model": _model(chat), "question": bundle.query, "draft_answer": None}
    nodes = answerability_driver().execute(["evaluation_prompt", "checked_requirements"], inputs=inputs)
    assert nodes["checked_requirements"][0].cited_ids == (bundle.items[1].id,)
    assert nodes["evaluation_prompt"].user.startswith("Question: ")
