"""Ingestion front ends: JSON Lines of MemoryObjects or of chat messages, LoCoMo, and the demo conversation.

Every file is validated whole before anything is written, so a bad line adds nothing; the
store's own `add` is all-or-nothing for what gets past validation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from rms_retrieval.dataflows.locomo import (LocomoConversation, LocomoDataset, LocomoTurn, conversation_objects,
                                            load_locomo, turn_object_id)
from rms_retrieval.stores.analysis.expansion import TurnExpansion
from rms_retrieval.stores.analysis.messages import message_turn
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import IngestReport


T = TypeVar("T")


class IngestError(ValueError):
    """A file that cannot be ingested; the message names the file, line and field."""


def read_validated_lines(path: Path, parse: Callable[[int, str], T], error: type[ValueError], *,
                         nothing_done: str, when_empty: str) -> list[T]:
    """`parse(line_number, line)` for every non-blank line of a JSON Lines file, validated whole:
    every bad line is reported, with its field, in one `error` and nothing comes back."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as failure:
        raise error(f"{path}: cannot be read ({failure})") from failure
    parsed, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed.append(parse(number, line))
        except ValidationError as failure:
            problems += [f"line {number}, {'.'.join(str(p) for p in detail['loc']) or 'line'}: {detail['msg']}"
                         for detail in failure.errors()]
        except ValueError as failure:
            problems.append(f"line {number}: {failure}")
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise error(f"{path}: {nothing_done}, fix these first: {shown}")
    if not parsed:
        raise error(f"{path}: {when_empty}")
    return parsed


def read_jsonl(path: Path) -> list[MemoryObject]:
    """MemoryObjects, one JSON object per line; every bad line is reported, none is added."""
    return read_validated_lines(path, lambda _, line: MemoryObject.model_validate_json(line), IngestError,
                                nothing_done="nothing was added",
                                when_empty="no objects found (expected one JSON MemoryObject per line)")


def read_message_lines(path: Path) -> list[MemoryObject]:
    """Chat messages, one JSON object per line: `namespace`, `session_id` and a message
    (stores/analysis/messages.py: `role`, `content`, optional `name`, `created_at`, `metadata`,
    `source_ref`, `id`), as TURN objects in file order; every bad line is reported, none is added."""
    return read_validated_lines(path, _message_line, IngestError, nothing_done="nothing was added",
                                when_empty="no messages found (expected one JSON message per line)")


def _message_line(_: int, line: str) -> MemoryObject:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict) or not isinstance(record.get("namespace"), str) \
            or not isinstance(record.get("session_id"), str):
        raise ValueError('a message line is an object with "namespace" and "session_id" strings and the message\'s '
                         'fields, e.g. {"namespace": "chat", "session_id": "s1", "role": "user", "content": "hi"}')
    namespace, session_id = record.pop("namespace"), record.pop("session_id")
    return message_turn(record, namespace, session_id)


def locomo_objects(dataset: LocomoDataset) -> list[MemoryObject]:
    """Every conversation's speaker entities and turns, conversation by conversation."""
    return [obj for conversation in dataset.conversations for obj in conversation_objects(conversation)]


def plain_turns(dataset: LocomoDataset) -> list[MemoryObject]:
    """Every dialogue turn as the plain TURN object a user of `rms ingest` would write: content
    "Speaker: text", session id and position, event time, `metadata["speaker"]`. No ENTITY
    objects: the store spots the speakers' names in the content, as it would for any user."""
    return [obj for obj in locomo_objects(dataset) if obj.node_type is NodeType.TURN]


def _chat_line(turn: LocomoTurn) -> str:
    """A LoCoMo turn as a chat log shows it: its text, and what it shares."""
    return turn.text + (f" [shares image: {turn.image_caption}]" if turn.image_caption else "")


def plain_chat_turns(dataset: LocomoDataset) -> list[MemoryObject]:
    """Every dialogue turn as the plainest TURN a new user writes through `MemoryStore.add`:
    content "Speaker: text" (plus "[shares image: ...]"), the session id, the session's time as
    created, updated and event time, the dia_id as `source_ref`, and nothing else: no position, no
    metadata, no ENTITY objects. The id derives from the dia_id only so the benchmark can find
    the evidence; nothing reads ids for ranking."""
    dates = {(c.sample_id, s.number): s.date_time for c in dataset.conversations for s in c.sessions}
    return [MemoryObject(id=turn_object_id(c.sample_id, turn.dia_id), namespace=c.sample_id,
                         session_id=f"session_{turn.session}", content=f"{turn.speaker}: {_chat_line(turn)}",
                         created_at=(date := dates[(c.sample_id, turn.session)]), updated_at=date, event_time=date,
                         source_ref=turn.dia_id)
            for c in dataset.conversations for turn in c.turns]


def chat_sessions(conversation: LocomoConversation) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each session of a LoCoMo conversation as (session id, messages in the OpenAI/mem0 shape):
    the first speaker's turns are the user's, the other's the assistant's, each with its name,
    text, session time, dia_id as `source_ref` and an id derived from it (for the benchmark)."""
    first = conversation.speakers[0]
    sessions: dict[int, list[dict[str, Any]]] = {}
    for turn in conversation.turns:
        sessions.setdefault(turn.session, []).append({
            "id": str(turn_object_id(conversation.sample_id, turn.dia_id)),
            "role": "user" if turn.speaker == first else "assistant", "name": turn.speaker,
            "content": _chat_line(turn), "created_at": conversation.session(turn.session).date_time.isoformat(),
            "source_ref": turn.dia_id})
    return [(f"session_{number}", messages) for number, messages in sessions.items()]


def write_jsonl(objects: list[MemoryObject], path: Path) -> int:
    """`objects` as JSON Lines that `read_jsonl` (and `rms ingest`) reads back; the count written."""
    staged = path.with_name(path.name + ".tmp")
    staged.write_text("".join(obj.model_dump_json() + "\n" for obj in objects), encoding="utf-8")
    staged.replace(path)
    return len(objects)


def ingest_locomo(
    path: Path, store_path: str, *, progress: bool = True, expansion: TurnExpansion | None = None
) -> tuple[IngestReport, LocomoDataset]:
    """Build (or extend) a store from the LoCoMo file at `path`; one namespace per conversation;
    `expansion` is what an empty store is built with (stores/analysis/expansion.py)."""
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore

    dataset = load_locomo(path)
    with MemoryStore.open(store_path, encoder=default_encoder(), expansion=expansion) as store:
        report = store.add(locomo_objects(dataset), progress=progress)
    return report, dataset
