"""How a MemoryObject becomes a segment row and back.

A row has two forms side by side: typed columns (what aggregation and enumeration filter and
group on in SQL) and `record`, the whole object as one JSON text, which is what readers keep in
memory and decode on demand (one string per object instead of two dozen Python values).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any
from uuid import UUID

import orjson

from rms_retrieval.stores.analysis.claims import Assertion, Quantity, normalize_predicate, normalize_value
from rms_retrieval.stores.models import EpistemicType, LifecycleState, MemoryObject, NodeType
from rms_retrieval.stores.log.retrieval_log import json_default

OBJECT_FIELDS = tuple(MemoryObject.model_fields)
_EVERY_FIELD = set(OBJECT_FIELDS)
_new, _set = object.__new__, object.__setattr__
# orjson reads an integer literal beyond 64 bits as a float at least this large (`record_fields`).
_HUGE = float(1 << 63)
# Written beside the claim JSON so exact aggregation can match and group in SQL.
ASSERTION_NORM_COLUMNS = (
    "assertion_subject_norm", "assertion_predicate_norm", "assertion_object_norm", "assertion_polarity",
)
ROW_COLUMNS = (*OBJECT_FIELDS, *ASSERTION_NORM_COLUMNS, "record")
_TIME_FIELDS = ("created_at", "updated_at", "event_time", "valid_from", "valid_to")
# Enum members by value: a dictionary lookup, where calling the enum goes through Python code.
_NODE_TYPES = {member.value: member for member in NodeType}
_EPISTEMIC_TYPES = {member.value: member for member in EpistemicType}
_LIFECYCLE_STATES = {member.value: member for member in LifecycleState}
# What a record leaves out where the object holds it (`memory_object` puts it back): the values
# most objects have. A record also leaves out `updated_at` where it equals `created_at`, and the
# id, namespace and entity name, which its row's columns hold. A name the store spotted takes about
# 200 bytes instead of 610; records written with every field (segments before format 6) read the same.
_RECORD_DEFAULTS: dict[str, Any] = {
    "assertion": None, "confidence": 1.0, "epistemic_type": "OBSERVED",
    "event_time": None, "evidence_refs": [], "lifecycle_state": "ACTIVE", "metadata": {}, "node_type": "TURN",
    "owner": "default", "quantity": None, "salience": 0.5, "scope": "default", "session_id": None,
    "session_seq": None, "source_ref": None, "valid_from": None, "valid_to": None,
}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def object_record(memory: MemoryObject) -> str:
    """The object as one JSON text; `memory_object(record, memory.id, memory.namespace,
    memory.entity_canonical_name)` gives it back equal (MemoryObject admits JSON metadata only, so
    every validated object encodes)."""
    fields = {name: getattr(memory, name) for name in OBJECT_FIELDS}
    fields.update({name: _iso(fields[name]) for name in _TIME_FIELDS})
    fields["assertion"] = None if memory.assertion is None else memory.assertion.model_dump(mode="json")
    fields["quantity"] = None if memory.quantity is None else memory.quantity.model_dump(mode="json")
    fields["evidence_refs"] = list(memory.evidence_refs)
    fields.update(node_type=memory.node_type.value, epistemic_type=memory.epistemic_type.value,
                  lifecycle_state=memory.lifecycle_state.value)
    kept = {name: value for name, value in fields.items()
            if name not in _RECORD_DEFAULTS or value != _RECORD_DEFAULTS[name] or type(value) is not type(_RECORD_DEFAULTS[name])}
    if kept["updated_at"] == kept["created_at"]:
        del kept["updated_at"]
    del kept["id"], kept["namespace"], kept["entity_canonical_name"]
    return json.dumps(kept, default=json_default, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@lru_cache(maxsize=65_536)  # the turns of a session share their times; a datetime never changes
def _utc(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text).astimezone(timezone.utc)


def _holds_huge_float(value: Any) -> bool:
    """Whether `value` (parsed JSON) holds a float of magnitude 2**63 or more, or NaN, anywhere:
    what orjson makes of an integer literal beyond 64 bits (`json` keeps it an int)."""
    kind = type(value)
    if kind is float:
        return not -_HUGE < value < _HUGE
    if kind is dict:
        value = value.values()
    elif kind is not list:
        return False
    for item in value:
        kind = type(item)
        if kind is float:
            if not -_HUGE < item < _HUGE:
                return True
        elif (kind is dict or kind is list) and _holds_huge_float(item):
            return True
    return False


def record_fields(record: str) -> dict[str, Any]:
    """A stored record's JSON object, exactly as `json.loads` reads it: parsed by orjson (three
    times as fast on a LongMemEval-S turn's record), and again by `json` where orjson refuses the
    text (NaN, infinities, a lone surrogate) or may have read an integer beyond 64 bits as a float."""
    try:
        stored = orjson.loads(record)
    except orjson.JSONDecodeError:
        return json.loads(record)
    return json.loads(record) if _holds_huge_float(stored) else stored


def _assertion(value: dict[str, Any] | None) -> Assertion | None:
    return None if value is None else Assertion.model_construct(**value)


def _quantity(value: dict[str, Any] | None) -> Quantity | None:
    return None if value is None else Quantity.model_construct(**value)


# How a record's value becomes the object's, by field (the others are taken as they are).
_DECODE: dict[str, Any] = {
    "id": UUID, "node_type": _NODE_TYPES.__getitem__, "epistemic_type": _EPISTEMIC_TYPES.__getitem__,
    "lifecycle_state": _LIFECYCLE_STATES.__getitem__, **dict.fromkeys(_TIME_FIELDS, _utc), "evidence_refs": tuple,
    "assertion": _assertion, "quantity": _quantity,
}
# A decoded object's fields before its record's values are put in, in model order: the
# `_RECORD_DEFAULTS` decoded (metadata aside: each object gets a dictionary of its own).
_TEMPLATE: dict[str, Any] = {name: _DECODE.get(name, lambda value: value)(_RECORD_DEFAULTS[name])
                             if name in _RECORD_DEFAULTS and name != "metadata" else None for name in OBJECT_FIELDS}


def memory_object(record: str, object_id: UUID | None = None, namespace: str | None = None,
                  entity_name: str | None = None) -> MemoryObject:
    """A MemoryObject from a stored record (validated when it was added), without re-validating;
    `object_id`, `namespace` and `entity_name` (`entity_canonical_name`): its row's columns (a
    record written before format 6 holds them itself). A field the record leaves out takes its
    `_RECORD_DEFAULTS` value (`updated_at`: `created_at`)."""
    stored = record_fields(record)
    for required in ("content", "created_at"):  # every record holds them
        if required not in stored:
            raise KeyError(required)
    # What `model_construct` does for a record, without its per-field search for aliases and
    # defaults: a copy of the decoded defaults in model order (OBJECT_FIELDS; tests/test_segment_files.py
    # checks the result against `model_construct`'s) with the record's few values decoded into it,
    # and one shared set of the names they set (pydantic would make one per object, one more
    # container for the garbage collector to scan in each of the tens of thousands a reader keeps
    # decoded; frozen objects never add to it, and a copy gets its own).
    fields = _TEMPLATE.copy()
    decode = _DECODE.get
    for name, value in stored.items():
        if name in fields:
            convert = decode(name)
            fields[name] = value if convert is None else convert(value)
    if object_id is not None:
        fields["id"] = object_id
    elif "id" not in stored:
        raise KeyError("id")
    if namespace is not None:
        fields["namespace"] = namespace
    elif "namespace" not in stored:
        raise KeyError("namespace")
    if "entity_canonical_name" not in stored:
        fields["entity_canonical_name"] = entity_name
    if "updated_at" not in stored:
        fields["updated_at"] = fields["created_at"]
    if "metadata" not in stored:
        fields["metadata"] = {}
    memory = _new(MemoryObject)
    _set(memory, "__dict__", fields)
    _set(memory, "__pydantic_fields_set__", _EVERY_FIELD)
    _set(memory, "__pydantic_extra__", None)
    _set(memory, "__pydantic_private__", None)
    return memory


def row_values(memory: MemoryObject) -> dict[str, Any]:
    """One object as the ROW_COLUMNS values the segment writer casts (text for ids, times and JSON)."""
    record = object_record(memory)
    values: dict[str, Any] = {name: getattr(memory, name) for name in OBJECT_FIELDS}
    values.update({name: _iso(values[name]) for name in _TIME_FIELDS})
    values.update(
        id=str(memory.id),
        node_type=memory.node_type.value,
        epistemic_type=memory.epistemic_type.value,
        lifecycle_state=memory.lifecycle_state.value,
        evidence_refs=json.dumps(list(memory.evidence_refs)),
        metadata=json.dumps(memory.metadata, sort_keys=True),
        assertion=None if memory.assertion is None else memory.assertion.model_dump_json(),
        quantity=None if memory.quantity is None else memory.quantity.model_dump_json(),
        record=record,
    )
    values.update(_assertion_norms(memory.assertion))
    return values


def _assertion_norms(assertion: Assertion | None) -> Mapping[str, str | None]:
    if assertion is None:
        return dict.fromkeys(ASSERTION_NORM_COLUMNS)
    return {
        "assertion_subject_norm": normalize_value(assertion.subject),
        "assertion_predicate_norm": normalize_predicate(assertion.predicate),
        "assertion_object_norm": normalize_value(assertion.object),
        "assertion_polarity": assertion.polarity,
    }
