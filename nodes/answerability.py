"""The optional post-retrieval answerability evaluator (RFC-0005 Section 9), a DAG of its own.

It runs after retrieval, on the exact packed bundle, and is not one of the six retrieval stages.
A chat model (`stores.protocols.ChatModel`) splits the question, and the draft answer when one is
given, into requirements, and names for each the memories that support it. Everything after the
model's reply is decided here in code:

- Each packed item has a compact label, `m1`, `m2`, ... in bundle order. A citation is valid when
  it is a label of this bundle (`m3`, `[m3]`, any case) or the full id of one of its items; any
  other citation (an unknown label, an id prefix, an id outside the bundle) is kept as invalid
  and counts for nothing.
- A requirement the model calls supported is supported when at least one citation is valid. One
  it calls conflicting is conflicting when it cites two distinct packed items, supported when it
  cites one, and unsupported when none. One it calls unsupported stays unsupported.
- The verdict: `conflicting` when any requirement is, else `answerable` when every requirement is
  supported, `partial` when some are, `insufficient` when none are.
- An empty bundle is `insufficient` without asking the model. A provider failure, and a reply
  that is not the JSON asked for or names no requirement, raise `AnswerabilityError`: they are
  errors, never verdicts.

The assessment records the prompt's version and hash, the model's identity, and the hashes of
the question, the draft answer, the bundle and the reply. It reads the bundle and nothing else:
no store, no log, no receipt is touched.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, ValidationError

from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.stores.protocols import ChatModel

ASSESSMENT_VERSION = 1
PROMPT_VERSION = "answerability-prompt-1"
SYSTEM_PROMPT = (
    "You check whether numbered memories are enough to answer a question. Split the question, and the draft "
    "answer when one is given, into the separate facts a full answer needs: its requirements. For each "
    "requirement say whether the memories support it (supported), say nothing about it (unsupported), or "
    "disagree about it (conflicting), and cite the labels of the memories that show it, such as m3. Reply "
    'with JSON only, in this shape: {"requirements": [{"text": "...", "source": "question" or '
    '"draft_answer", "status": "supported" or "unsupported" or "conflicting", "citations": ["m1"]}]}'
)
_LABEL = re.compile(r"^\[?m(\d+)\]?$", re.IGNORECASE)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


class AnswerabilityError(ValueError):
    """The evaluator has no verdict: the provider failed or its reply is not the JSON asked for."""


class RequirementStatus(StrEnum):
    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    CONFLICTING = "conflicting"


class Verdict(StrEnum):
    ANSWERABLE = "answerable"
    PARTIAL = "partial"
    INSUFFICIENT = "insufficient"
    CONFLICTING = "conflicting"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvaluationPrompt(_Frozen):
    """The two messages the model reads, and what identifies them."""

    version: str
    system: str
    user: str
    sha256: str


class ClaimedRequirement(_Frozen):
    """One requirement as the model's reply states it."""

    text: str
    source: Literal["question", "draft_answer"] = "question"
    status: RequirementStatus
    citations: tuple[str, ...] = ()


class _Reply(_Frozen):
    requirements: tuple[ClaimedRequirement, ...]


class Requirement(_Frozen):
    """One requirement with its citations checked against the bundle and its status decided here."""

    text: str
    source: Literal["question", "draft_answer"]
    claimed_status: RequirementStatus
    status: RequirementStatus
    cited_ids: tuple[UUID, ...]
    invalid_citations: tuple[str, ...]


class AnswerabilityAssessment(_Frozen):
    """Whether the packed bundle answers the question, with what decided it. Versioned JSON."""

    assessment_version: int = ASSESSMENT_VERSION
    verdict: Verdict
    reason: str
    requirements: tuple[Requirement, ...]
    labels: dict[str, UUID]
    question_sha256: str
    draft_answer_sha256: str | None
    bundle_sha256: str
    configuration_fingerprint: str
    prompt_version: str | None
    prompt_sha256: str | None
    model_identity: str | None
    reply_sha256: str | None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def evidence_labels(bundle: MemoryBundle) -> dict[str, UUID]:
    """Each packed item's compact label, `m1` first, in bundle order."""
    return {f"m{number}": item.id for number, item in enumerate(bundle.items, start=1)}


def evaluation_prompt(bundle: MemoryBundle, evidence_labels: dict[str, UUID], question: str,
                      draft_answer: str | None) -> EvaluationPrompt | None:
    """The messages for the model: the question, the draft answer, each memory under its label with
    the day it was stated. None for an empty bundle, which needs no model."""
    if not bundle.items:
        return None
    lines = [f"Question: {question}"]
    if draft_answer is not None:
        lines.append(f"Draft answer: {draft_answer}")
    lines.append("Memories:")
    for label, item in zip(evidence_labels, bundle.items, strict=True):
        day = f"{item.event_time:%Y-%m-%d}" if item.event_time is not None else "undated"
        lines.append(f"[{label}] ({day}) {' '.join(item.content.split())}")
    user = "\n".join(lines)
    return EvaluationPrompt(version=PROMPT_VERSION, system=SYSTEM_PROMPT, user=user,
                            sha256=_sha256(SYSTEM_PROMPT + "\n\n" + user))


def model_reply(evaluation_prompt: EvaluationPrompt | None, chat_model: ChatModel) -> str | None:
    """The model's reply to the prompt; None when there is no prompt. A provider failure raises."""
    if evaluation_prompt is None:
        return None
    try:
        return chat_model.reply(evaluation_prompt.system, evaluation_prompt.user)
    except Exception as exc:  # noqa: BLE001 - any provider failure is an error, never a verdict
        raise AnswerabilityError(f"the answerability model {chat_model.identity} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc


def claimed_requirements(model_reply: str | None) -> tuple[ClaimedRequirement, ...]:
    """The requirements the reply states; none without a reply. A reply that is not the JSON the
    prompt asks for, or names no requirement, raises."""
    if model_reply is None:
        return ()
    text = _FENCE.sub("", model_reply.strip())
    try:
        parsed = _Reply.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise AnswerabilityError(f"the answerability model's reply is not the JSON asked for ({first}): "
                                 f"{model_reply[:200]!r}") from None
    if not parsed.requirements:
        raise AnswerabilityError("the answerability model's reply names no requirement")
    return parsed.requirements


def _resolved(citation: str, evidence_labels: dict[str, UUID], packed: frozenset[UUID]) -> UUID | None:
    token = citation.strip()
    if (match := _LABEL.match(token)) is not None:
        return evidence_labels.get(f"m{int(match.group(1))}")
    try:
        object_id = UUID(token)
    except ValueError:
        return None
    return object_id if len(token.replace("-", "")) >= 32 and object_id in packed else None


def _decided(claimed: RequirementStatus, cited: int) -> RequirementStatus:
    if claimed is RequirementStatus.UNSUPPORTED or cited == 0:
        return RequirementStatus.UNSUPPORTED
    if claimed is RequirementStatus.CONFLICTING and cited >= 2:
        return RequirementStatus.CONFLICTING
    return RequirementStatus.SUPPORTED


def checked_requirements(claimed_requirements: tuple[ClaimedRequirement, ...],
                         evidence_labels: dict[str, UUID]) -> tuple[Requirement, ...]:
    """Each claimed requirement with its citations resolved to packed items and its status decided."""
    packed = frozenset(evidence_labels.values())
    checked = []
    for claim in claimed_requirements:
        cited: list[UUID] = []
        invalid: list[str] = []
        for citation in claim.citations:
            object_id = _resolved(citation, evidence_labels, packed)
            if object_id is None:
                invalid.append(citation)
            elif object_id not in cited:
                cited.append(object_id)
        checked.append(Requirement(text=claim.text, source=claim.source, claimed_status=claim.status,
                                   status=_decided(claim.status, len(cited)), cited_ids=tuple(cited),
                                   invalid_citations=tuple(invalid)))
    return tuple(checked)


def _verdict(requirements: tuple[Requirement, ...]) -> tuple[Verdict, str]:
    statuses = [requirement.status for requirement in requirements]
    supported = statuses.count(RequirementStatus.SUPPORTED)
    if not requirements:
        return Verdict.INSUFFICIENT, "the bundle holds no memories"
    if RequirementStatus.CONFLICTING in statuses:
        return Verdict.CONFLICTING, (f"{statuses.count(RequirementStatus.CONFLICTING)} of {len(statuses)} "
                                     "requirements cite packed memories that disagree")
    if supported == len(statuses):
        return Verdict.ANSWERABLE, f"all {len(statuses)} requirements cite packed memories"
    if supported:
        return Verdict.PARTIAL, f"{supported} of {len(statuses)} requirements cite packed memories"
    return Verdict.INSUFFICIENT, f"none of {len(statuses)} requirements cites a packed memory"


def answerability_assessment(checked_requirements: tuple[Requirement, ...], evidence_labels: dict[str, UUID],
                             bundle: MemoryBundle, question: str, draft_answer: str | None,
                             evaluation_prompt: EvaluationPrompt | None, model_reply: str | None,
                             chat_model: ChatModel) -> AnswerabilityAssessment:
    """The verdict, derived from the checked requirements, with the identities and hashes behind it."""
    verdict, reason = _verdict(checked_requirements)
    asked = evaluation_prompt is not None
    return AnswerabilityAssessment(
        verdict=verdict, reason=reason, requirements=checked_requirements, labels=evidence_labels,
        question_sha256=_sha256(question),
        draft_answer_sha256=_sha256(draft_answer) if draft_answer is not None else None,
        bundle_sha256=_sha256(bundle.to_json()),
        configuration_fingerprint=bundle.retrieval_metadata.configuration_fingerprint,
        prompt_version=evaluation_prompt.version if asked else None,
        prompt_sha256=evaluation_prompt.sha256 if asked else None,
        model_identity=chat_model.identity if asked else None,
        reply_sha256=_sha256(model_reply) if model_reply is not None else None,
    )
