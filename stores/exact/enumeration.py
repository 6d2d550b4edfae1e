"""Stored-record enumeration (RFC-0005): every matching object, in immutable-id order, page by page.

Top-k retrieval is not a way to list or count. `scan_objects` returns one page after an optional
id cursor; `iter_objects` walks every page. The namespace, scope, node-type and lifecycle
filters run in SQL before the page limit, and pages are keyset-paginated on the object id, so
memory stays bounded by the page size whatever the store size. Enumeration is complete for an
unchanged store; it is not a snapshot across pages (each page reads the generation that is
live when it runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from rms_retrieval.stores.models import LifecycleState, MemoryObject, NodeType
from rms_retrieval.stores.protocols import RecordReader, ScanSelection, SnapshotSource, snapshot_of

MAX_PAGE_SIZE = 10_000
DEFAULT_PAGE_SIZE = 100
DEFAULT_LIFECYCLE = frozenset({LifecycleState.ACTIVE})
_Member = TypeVar("_Member", NodeType, LifecycleState)


class ScanPage(BaseModel):
    """One page of a scan. `next_cursor` is the `after_id` of the next page, None after the last."""

    model_config = ConfigDict(frozen=True)

    objects: tuple[MemoryObject, ...]
    has_more: bool
    next_cursor: UUID | None


def scan_objects(
    store: RecordReader | SnapshotSource,
    *,
    namespace: str,
    scope: str | None = None,
    node_type: NodeType | Iterable[NodeType] | None = None,
    lifecycle: LifecycleState | Iterable[LifecycleState] = DEFAULT_LIFECYCLE,
    after_id: UUID | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
) -> ScanPage:
    """The matching objects with ids after `after_id`, at most `limit`, by id.

    `node_type` None means every type; `lifecycle` defaults to ACTIVE, and an empty set matches
    nothing.
    """
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
    objects = snapshot_of(store).scan_page(ScanSelection(
        namespace=namespace,
        scope=scope,
        node_types=tuple(member.value for member in _members(NodeType, node_type, default=NodeType)),
        lifecycles=tuple(member.value for member in _members(LifecycleState, lifecycle, default=())),
        after_id=after_id,
        limit=limit,
    ))
    has_more = len(objects) > limit
    page = tuple(objects[:limit])
    return ScanPage(objects=page, has_more=has_more, next_cursor=page[-1].id if has_more else None)


def iter_objects(
    store: RecordReader | SnapshotSource,
    *,
    namespace: str,
    scope: str | None = None,
    node_type: NodeType | Iterable[NodeType] | None = None,
    lifecycle: LifecycleState | Iterable[LifecycleState] = DEFAULT_LIFECYCLE,
    batch_size: int = DEFAULT_PAGE_SIZE,
) -> Iterator[MemoryObject]:
    """Every matching object by id, read `batch_size` at a time."""
    node_type = _members(NodeType, node_type, default=NodeType)
    lifecycle = _members(LifecycleState, lifecycle, default=())
    store = snapshot_of(store)  # every page from one generation
    after_id = None
    while True:
        page = scan_objects(
            store, namespace=namespace, scope=scope, node_type=node_type, lifecycle=lifecycle,
            after_id=after_id, limit=batch_size,
        )
        yield from page.objects
        if not page.has_more:
            return
        after_id = page.next_cursor


def _members(
    kind: type[_Member], values: _Member | Iterable[_Member] | None, *, default: Iterable[_Member]
) -> tuple[_Member, ...]:
    """Validated enum members, sorted; a lone member or string counts as a one-element set."""
    if values is None:
        values = default
    elif isinstance(values, str):
        values = (values,)
    return tuple(sorted({kind(value) for value in values}))
