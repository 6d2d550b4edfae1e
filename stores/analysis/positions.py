"""A plain turn's place in its session: a TURN with a `session_id` and no `session_seq` is placed
by arrival.

In the order of the objects given to one add, such a turn gets the position after the largest
its session holds so far: the session's stored turns, then the turns before it in the add (those
given a position and those placed here). So a session written in one add and the same session
written one turn per add get the same positions, and a later add continues where the session
stopped. A turn given a position keeps it. Sessions are keyed by namespace, owner, scope and id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rms_retrieval.stores.models import MemoryObject, NodeType

SessionKey = tuple[str, str, str, str]


def session_key(memory: MemoryObject) -> SessionKey | None:
    """(namespace, owner, scope, session id) of a TURN in a session; None for anything else."""
    if memory.node_type is not NodeType.TURN or memory.session_id is None:
        return None
    return (memory.namespace, memory.owner, memory.scope, memory.session_id)


def placed_turns(objects: Sequence[MemoryObject], stored: Sequence[Any]) -> list[MemoryObject]:
    """`objects` with every positionless session turn given its arrival position; `stored` are the
    committed segments (anything with `session_ends`, as `LoadedSegment`)."""
    last: dict[SessionKey, int] = {}
    placed = []
    for memory in objects:
        key = session_key(memory)
        if key is not None:
            if key not in last:
                ends = [segment.session_ends[key] for segment in stored if key in segment.session_ends]
                last[key] = max(ends, default=-1)
            if memory.session_seq is None:
                memory = memory.model_copy(update={"session_seq": last[key] + 1})
            last[key] = max(last[key], memory.session_seq)
        placed.append(memory)
    return placed
