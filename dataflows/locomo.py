"""The LoCoMo benchmark file, parsed into validated conversations, questions and memory objects.

LoCoMo (Maharana et al., 2024; CC BY-NC 4.0) is read from wherever the caller keeps it and is never
copied into this repository. Its evidence lists have a few defects (ids joined by ";" or spaces,
"D:11:26", "D30:05", a bare "D", ids absent from the conversation, empty lists); they are
repaired or dropped here, and every change is kept on the question as a readable note so a
benchmark report can show exactly which questions were altered or excluded.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from uuid import UUID, uuid5

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from rms_retrieval.stores.models import EpistemicType, MemoryObject, NodeType

# Fixed for good: object ids derive from it, so changing it changes every LoCoMo object id.
LOCOMO_ID_NAMESPACE = UUID("c264d6de-2405-54f7-adae-fbfa4fb2c95b")

CATEGORY_NAMES: Mapping[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
SESSION_TIME_FORMAT = "%I:%M %p on %d %B, %Y"

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
# "D11:26", plus the stray colon of "D:11:26"; leading zeros are removed afterwards.
_DIA_ID = re.compile(r"^D:?(\d+):(\d+)$")

_SAMPLE_KEYS = ("sample_id", "conversation", "qa")
_CONVERSATION_KEYS = ("speaker_a", "speaker_b")
_TURN_KEYS = ("speaker", "dia_id", "text")
_QUESTION_KEYS = ("question", "category", "evidence")


class LocomoFormatError(ValueError):
    """The LoCoMo file is missing, is not JSON, or lacks a field this loader needs."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LocomoTurn(_Frozen):
    dia_id: str
    speaker: str
    text: str
    session: int
    session_seq: int
    image_caption: str | None = None
    image_query: str | None = None


class LocomoSession(_Frozen):
    number: int
    date_time_text: str
    date_time: AwareDatetime

    @property
    def session_id(self) -> str:
        return f"session_{self.number}"


class LocomoConversation(_Frozen):
    sample_id: str
    speakers: tuple[str, ...]
    sessions: tuple[LocomoSession, ...]
    turns: tuple[LocomoTurn, ...]

    @property
    def dia_ids(self) -> frozenset[str]:
        return frozenset(turn.dia_id for turn in self.turns)

    def session(self, number: int) -> LocomoSession:
        """The session numbered `number` (1-based, as in the file)."""
        for session in self.sessions:
            if session.number == number:
                return session
        raise KeyError(f"{self.sample_id} has no session {number}")


class LocomoQuestion(_Frozen):
    sample_id: str
    index: int
    question: str
    answer: str | None
    adversarial_answer: str | None = None
    category: int
    category_name: str
    evidence: tuple[str, ...]
    raw_evidence: tuple[str, ...]
    evidence_issues: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Stable question key, e.g. "conv-26#37"."""
        return f"{self.sample_id}#{self.index}"


class LocomoDataset(_Frozen):
    conversations: tuple[LocomoConversation, ...]
    questions: tuple[LocomoQuestion, ...]

    def conversation(self, sample_id: str) -> LocomoConversation:
        for conversation in self.conversations:
            if conversation.sample_id == sample_id:
                return conversation
        raise KeyError(f"no conversation {sample_id!r}")

    def evidence_report(self) -> list[LocomoQuestion]:
        """Questions whose evidence was repaired, trimmed or is missing, in file order."""
        return [question for question in self.questions if question.evidence_issues]


def parse_session_time(text: str) -> datetime:
    """A LoCoMo session time such as "1:56 pm on 8 May, 2023", as a UTC datetime."""
    try:
        parsed = datetime.strptime(text, SESSION_TIME_FORMAT)
    except (TypeError, ValueError) as exc:
        raise LocomoFormatError(
            f"session time {text!r} does not match {SESSION_TIME_FORMAT!r}"
        ) from exc
    return parsed.replace(tzinfo=timezone.utc)


def normalise_evidence(
    raw_ids: Iterable[str], known_ids: Collection[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Evidence ids made canonical and resolvable, and a note for every change made.

    Order is kept and duplicates are removed. Nothing is dropped without a note.
    """
    ids: list[str] = []
    issues: list[str] = []
    raw_list = list(raw_ids)
    for raw in raw_list:
        pieces = [piece for piece in _EVIDENCE_SEPARATORS.split(raw.strip()) if piece]
        if len(pieces) > 1:
            issues.append(f"split {raw!r} into {', '.join(pieces)}")
        for piece in pieces:
            match = _DIA_ID.match(piece)
            if match is None:
                issues.append(f"dropped malformed id {piece!r}")
                continue
            canonical = f"D{int(match.group(1))}:{int(match.group(2))}"
            if canonical != piece:
                issues.append(f"normalised {piece!r} to {canonical}")
            if canonical not in known_ids:
                issues.append(f"dropped unknown id {canonical}")
            elif canonical in ids:
                issues.append(f"dropped duplicate id {canonical}")
            else:
                ids.append(canonical)
        if not pieces:
            issues.append(f"dropped empty id {raw!r}")
    if not raw_list:
        issues.append("no evidence")
    elif not ids:
        issues.append("no resolvable evidence")
    return tuple(ids), tuple(issues)


def load_locomo(path: str | Path) -> LocomoDataset:
    """The LoCoMo file at `path`, parsed and checked; evidence normalised per question."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise LocomoFormatError(f"{path}: file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise LocomoFormatError(f"{path}: cannot be read ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise LocomoFormatError(f"{path}: invalid JSON ({exc})") from exc
    return parse_locomo(raw, source=str(path))


def parse_locomo(raw: Any, *, source: str) -> LocomoDataset:
    """LoCoMo-shaped samples (already decoded JSON), checked; `source` names them in errors."""
    if not isinstance(raw, list):
        raise LocomoFormatError(f"{source}: expected a list of samples, got {type(raw).__name__}")
    conversations: list[LocomoConversation] = []
    questions: list[LocomoQuestion] = []
    seen: set[str] = set()
    for position, sample in enumerate(raw):
        where = f"{source}: sample {position}"
        try:
            conversation, sample_questions = _parse_sample(sample)
        except LocomoFormatError as exc:
            raise LocomoFormatError(f"{where}: {exc}") from exc
        except ValidationError as exc:
            raise LocomoFormatError(f"{where}: {_first_error(exc)}") from exc
        if conversation.sample_id in seen:
            raise LocomoFormatError(f"{where}: duplicate sample_id {conversation.sample_id!r}")
        seen.add(conversation.sample_id)
        conversations.append(conversation)
        questions.extend(sample_questions)
    return LocomoDataset(conversations=tuple(conversations), questions=tuple(questions))


def questions_for(
    dataset: LocomoDataset,
    categories: Collection[int] = (1, 2, 3, 4),
    *,
    require_evidence: bool = True,
) -> list[LocomoQuestion]:
    """Questions in `categories`, in file order; by default only those with resolvable evidence.

    The excluded ones are listed by `LocomoDataset.evidence_report()`.
    """
    return [
        question
        for question in dataset.questions
        if question.category in categories and (question.evidence or not require_evidence)
    ]


def turn_object_id(sample_id: str, dia_id: str) -> UUID:
    """The memory object id of dialogue turn `dia_id` in conversation `sample_id`."""
    return uuid5(LOCOMO_ID_NAMESPACE, f"locomo/{sample_id}/{dia_id}")


def speaker_object_id(sample_id: str, name: str) -> UUID:
    """The memory object id of the ENTITY object for speaker `name`."""
    return uuid5(LOCOMO_ID_NAMESPACE, f"locomo/{sample_id}/speaker/{name}")


def evidence_object_ids(question: LocomoQuestion) -> tuple[UUID, ...]:
    """The memory object ids of a question's (normalised) evidence turns."""
    return tuple(turn_object_id(question.sample_id, dia_id) for dia_id in question.evidence)


def reference_time(conversation: LocomoConversation) -> datetime:
    """The date of the conversation's last session: "now" for retrieval over it."""
    return max(session.date_time for session in conversation.sessions)


def conversation_objects(conversation: LocomoConversation) -> list[MemoryObject]:
    """One ENTITY per speaker, then one TURN per dialogue turn in conversation order.

    Ids and times derive from the file alone, so rebuilding gives identical objects.
    """
    first_date = min(session.date_time for session in conversation.sessions)
    dates = {session.number: session.date_time for session in conversation.sessions}
    speakers = [
        MemoryObject(
            id=speaker_object_id(conversation.sample_id, name),
            namespace=conversation.sample_id,
            node_type=NodeType.ENTITY,
            content=name,
            entity_canonical_name=name,
            epistemic_type=EpistemicType.OBSERVED,
            salience=0.5,
            created_at=first_date,
            updated_at=first_date,
            metadata={"entity_type": "PERSON"},
        )
        for name in dict.fromkeys(conversation.speakers)
    ]
    turns = [_turn_object(conversation.sample_id, turn, dates) for turn in conversation.turns]
    return speakers + turns


def _turn_object(sample_id: str, turn: LocomoTurn, dates: Mapping[int, datetime]) -> MemoryObject:
    content = f"{turn.speaker}: {turn.text}"
    if turn.image_caption:
        content += f" [image: {turn.image_caption}]"
    metadata: dict[str, Any] = {"speaker": turn.speaker, "dia_id": turn.dia_id}
    if turn.image_query:
        metadata["image_query"] = turn.image_query
    date = dates[turn.session]
    return MemoryObject(
        id=turn_object_id(sample_id, turn.dia_id),
        namespace=sample_id,
        session_id=f"session_{turn.session}",
        session_seq=turn.session_seq,
        node_type=NodeType.TURN,
        content=content,
        epistemic_type=EpistemicType.OBSERVED,
        salience=0.5,
        created_at=date,
        updated_at=date,
        event_time=date,
        source_ref=turn.dia_id,
        metadata=metadata,
    )


def _require(record: Any, keys: Sequence[str], what: str) -> Mapping[str, Any]:
    if not isinstance(record, Mapping):
        raise LocomoFormatError(f"{what} is a {type(record).__name__}, not an object")
    missing = [key for key in keys if key not in record]
    if missing:
        raise LocomoFormatError(f"{what} lacks {', '.join(repr(key) for key in missing)}")
    return record


def _parse_sample(sample: Any) -> tuple[LocomoConversation, list[LocomoQuestion]]:
    sample = _require(sample, _SAMPLE_KEYS, "sample")
    sample_id = sample["sample_id"]
    try:
        conversation = _parse_conversation(sample_id, sample["conversation"])
        questions = _parse_questions(sample_id, sample["qa"], conversation.dia_ids)
    except (LocomoFormatError, ValidationError) as exc:
        detail = _first_error(exc) if isinstance(exc, ValidationError) else str(exc)
        raise LocomoFormatError(f"({sample_id}) {detail}") from exc
    return conversation, questions


def _parse_conversation(sample_id: str, raw: Any) -> LocomoConversation:
    raw = _require(raw, _CONVERSATION_KEYS, "conversation")
    numbers = sorted(int(m.group(1)) for key in raw if (m := _SESSION_KEY.match(key)))
    if not numbers:
        raise LocomoFormatError("conversation has no session_N turn lists")
    sessions: list[LocomoSession] = []
    turns: list[LocomoTurn] = []
    for number in numbers:
        date_key = f"session_{number}_date_time"
        _require(raw, (date_key,), "conversation")
        try:
            date_time = parse_session_time(raw[date_key])
        except LocomoFormatError as exc:
            raise LocomoFormatError(f"{date_key}: {exc}") from exc
        sessions.append(
            LocomoSession(number=number, date_time_text=raw[date_key], date_time=date_time)
        )
        session_turns = raw[f"session_{number}"]
        if not isinstance(session_turns, list):
            raise LocomoFormatError(f"session_{number} is not a list of turns")
        for seq, turn in enumerate(session_turns):
            where = f"session_{number} turn {seq}"
            turn = _require(turn, _TURN_KEYS, where)
            try:
                turns.append(
                    LocomoTurn(
                        dia_id=turn["dia_id"],
                        speaker=turn["speaker"],
                        text=turn["text"],
                        session=number,
                        session_seq=seq,
                        image_caption=turn.get("blip_caption") or None,
                        image_query=turn.get("query") or None,
                    )
                )
            except ValidationError as exc:
                raise LocomoFormatError(f"{where}: {_first_error(exc)}") from exc
    duplicates = sorted(dia_id for dia_id, n in Counter(t.dia_id for t in turns).items() if n > 1)
    if duplicates:
        raise LocomoFormatError(f"duplicate dia_ids {', '.join(duplicates)}")
    return LocomoConversation(
        sample_id=sample_id,
        speakers=(raw["speaker_a"], raw["speaker_b"]),
        sessions=tuple(sessions),
        turns=tuple(turns),
    )


def _parse_questions(sample_id: str, raw: Any, known_ids: frozenset[str]) -> list[LocomoQuestion]:
    if not isinstance(raw, list):
        raise LocomoFormatError("qa is not a list")
    questions = []
    for index, item in enumerate(raw):
        item = _require(item, _QUESTION_KEYS, f"qa {index}")
        category = item["category"]
        if category not in CATEGORY_NAMES:
            raise LocomoFormatError(f"qa {index} has unknown category {category!r}")
        raw_evidence = item["evidence"]
        if not isinstance(raw_evidence, list) or not all(isinstance(e, str) for e in raw_evidence):
            raise LocomoFormatError(f"qa {index} evidence is not a list of strings")
        evidence, issues = normalise_evidence(raw_evidence, known_ids)
        questions.append(
            LocomoQuestion(
                sample_id=sample_id,
                index=index,
                question=item["question"],
                answer=_answer_text(item.get("answer")),
                adversarial_answer=_answer_text(item.get("adversarial_answer")),
                category=category,
                category_name=CATEGORY_NAMES[category],
                evidence=evidence,
                raw_evidence=tuple(raw_evidence),
                evidence_issues=issues,
            )
        )
    return questions


def _answer_text(value: Any) -> str | None:
    # A few gold answers are bare numbers (years, counts); answers are compared as text.
    return None if value is None else str(value)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"])
    return f"{exc.title}.{location}: {error['msg']}"
