"""Two values of one DAG node compared: whether they are equal, which objects entered or left, how
ranks and scores moved in the scored nodes, which bundle items came or went (what `whatif` reports
node by node)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import numpy as np

from rms_retrieval.dataflows.node_types import value_summary
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import CandidatePool, ChannelResult, FilteredPool, RankedCandidates, Selection
from rms_retrieval.nodes.scored_pool import ScoredPool

# Rank moves shown per node in the text report (the JSON has them all).
SHOWN_MOVES = 5


def same_value(a: Any, b: Any) -> bool:
    """Whether two node values are equal, numpy columns and nested records included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if dataclasses.is_dataclass(a):
        return all(same_value(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(same_value(a[key], b[key]) for key in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


def object_order(value: Any) -> tuple[UUID, ...] | None:
    """The objects a node value holds, in its order; None for a value that holds no objects."""
    if isinstance(value, ChannelResult):
        return tuple(hit.object_id for hit in value.hits)
    if isinstance(value, CandidatePool | FilteredPool):
        return tuple(candidate.object_id for candidate in value.candidates)
    if isinstance(value, ScoredPool):
        return value.object_ids
    if isinstance(value, RankedCandidates | Selection):
        return value.pool.object_ids
    if isinstance(value, MemoryBundle):
        return tuple(item.id for item in value.items)
    if isinstance(value, Mapping | Set) and value and all(isinstance(key, UUID) for key in value):
        return tuple(value) if isinstance(value, Mapping) else tuple(sorted(value))
    return None


@dataclass(frozen=True)
class RankMove:
    """One object in both scored pools whose rank or score changed (ranks from 1)."""

    object_id: str
    rank_before: int
    rank_after: int
    score_before: float
    score_after: float


@dataclass(frozen=True)
class ItemChange:
    """A bundle item that came in (before None), went out (after None) or changed place, tier or tokens."""

    object_id: str
    position_before: int | None
    position_after: int | None
    tier_before: int | None
    tier_after: int | None
    tokens_before: int | None
    tokens_after: int | None
    text: str


@dataclass(frozen=True)
class NodeChange:
    """One node of the DAG under both settings: whether its value differs, and how."""

    node: str
    stage: str
    changed: bool
    before: str
    after: str
    entered: tuple[str, ...] = ()
    left: tuple[str, ...] = ()
    moves: tuple[RankMove, ...] = ()
    items: tuple[ItemChange, ...] = ()

    def to_text(self) -> str:
        head = f"  {self.node} ({self.stage}): {self.before} -> {self.after}"
        lines = [head]
        if self.entered or self.left:
            lines.append(f"      {len(self.entered)} objects entered ({_ids(self.entered)}), "
                         f"{len(self.left)} left ({_ids(self.left)})")
        if self.moves:
            lines.append(f"      {len(self.moves)} moved in rank or score; largest moves:")
            largest = sorted(self.moves, key=lambda m: (-abs(m.rank_after - m.rank_before), m.rank_before))
            lines += [f"        {m.object_id[:8]} rank {m.rank_before} -> {m.rank_after}, "
                      f"score {m.score_before:.4f} -> {m.score_after:.4f}" for m in largest[:SHOWN_MOVES]]
        for item in self.items:
            lines.append("      " + _item_text(item))
        return "\n".join(lines)


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(object_id[:8] for object_id in ids[:3])
    return shown + (", ..." if len(ids) > 3 else "") if ids else "none"


def _item_text(item: ItemChange) -> str:
    quoted = json.dumps(item.text[:60])
    if item.position_before is None:
        return f"+ {item.object_id[:8]} in at {item.position_after}: tier {item.tier_after}, {item.tokens_after} tokens {quoted}"
    if item.position_after is None:
        return f"- {item.object_id[:8]} out from {item.position_before}: tier {item.tier_before}, {item.tokens_before} tokens {quoted}"
    return (f"~ {item.object_id[:8]} position {item.position_before} -> {item.position_after}, tier {item.tier_before} "
            f"-> {item.tier_after}, tokens {item.tokens_before} -> {item.tokens_after}")


def _rank_moves(before: ScoredPool, after: ScoredPool) -> tuple[RankMove, ...]:
    where_after = {object_id: rank for rank, object_id in enumerate(after.object_ids)}
    moves = []
    for rank, object_id in enumerate(before.object_ids):
        other = where_after.get(object_id)
        if other is not None and (other != rank or before.score[rank] != after.score[other]):
            moves.append(RankMove(str(object_id), rank + 1, other + 1, float(before.score[rank]), float(after.score[other])))
    return tuple(moves)


def _item_changes(before: MemoryBundle, after: MemoryBundle) -> tuple[ItemChange, ...]:
    old = {item.id: (position, item) for position, item in enumerate(before.items, start=1)}
    new = {item.id: (position, item) for position, item in enumerate(after.items, start=1)}
    changes = [ItemChange(str(object_id), None, position, None, item.tier, None, item.tokens, item.text)
               for object_id, (position, item) in new.items() if object_id not in old]
    changes += [ItemChange(str(object_id), position, None, item.tier, None, item.tokens, None, item.text)
                for object_id, (position, item) in old.items() if object_id not in new]
    for object_id, (position, item) in new.items():
        if object_id in old:
            was_at, was = old[object_id]
            if (was_at, was.tier, was.tokens) != (position, item.tier, item.tokens):
                changes.append(ItemChange(str(object_id), was_at, position, was.tier, item.tier, was.tokens,
                                          item.tokens, item.text))
    return tuple(changes)


def _pool_of(value: Any) -> ScoredPool | None:
    if isinstance(value, ScoredPool):
        return value
    return value.pool if isinstance(value, RankedCandidates | Selection) else None


def compare_node(node: str, stage: str, before: Any, after: Any) -> NodeChange:
    """How one node's value differs between the two runs (a node only one DAG has is None in the other)."""
    if same_value(before, after):
        return NodeChange(node, stage, False, value_summary(before), value_summary(after))
    held_before, held_after = object_order(before), object_order(after)
    entered = left = ()
    if held_before is not None and held_after is not None:
        entered = tuple(str(o) for o in held_after if o not in set(held_before))
        left = tuple(str(o) for o in held_before if o not in set(held_after))
    pools = _pool_of(before), _pool_of(after)
    moves = _rank_moves(*pools) if pools[0] is not None and pools[1] is not None else ()
    items = _item_changes(before, after) if isinstance(before, MemoryBundle) and isinstance(after, MemoryBundle) else ()
    return NodeChange(node, stage, True, value_summary(before), value_summary(after), entered, left, moves, items)
