"""Ingestion front ends: JSON Lines of MemoryObjects, LoCoMo, and the demo conversation.

Every file is validated whole before anything is written, so a bad line adds nothing; the
store's own `add` is all-or-nothing for what gets past validation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from rms_retrieval.dataflows.locomo import LocomoDataset, conversation_objects, load_locomo
from rms_retrieval.stores.expansion import TurnExpansion
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


def locomo_objects(dataset: LocomoDataset) -> list[MemoryObject]:
    """Every conversation's speaker entities and turns, conversation by conversation."""
    return [obj for conversation in dataset.conversations for obj in conversation_objects(conversation)]


def plain_turns(dataset: LocomoDataset) -> list[MemoryObject]:
    """Every dialogue turn as the plain TURN object a user of `rms ingest` would write: content
    "Speaker: text", session id and position, event time, `metadata["speaker"]`. No ENTITY
    objects: the store spots the speakers' names in the content, as it would for any user."""
    return [obj for obj in locomo_objects(dataset) if obj.node_type is NodeType.TURN]


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
    `expansion` is what an empty store is built with (stores/expansion.py)."""
    from rms_retrieval.stores.embedding import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore

    dataset = load_locomo(path)
    with MemoryStore.open(store_path, encoder=default_encoder(), expansion=expansion) as store:
        report = store.add(locomo_objects(dataset), progress=progress)
    return report, dataset
