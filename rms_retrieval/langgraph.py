"""LangGraph integration: `RmsStore`, a LangGraph `BaseStore` over an rms-retrieval store.

Needs the [langgraph] extra (`pip install 'rms-retrieval[langgraph]'`). A LangGraph agent's
long-term memory (`store.put(("users", "alice"), "k", {...})`, `store.search(("users",),
query="...")`) lives in our store, and a search with a `query` is answered by our retrieval
pipeline: the items come in bundle order, with the bundle item's score.

**Namespaces.** A LangGraph namespace tuple is one of our namespaces: `lg.` followed by its
labels joined by `.`, each label with every character other than ASCII letters, digits, `_` and
`-` written as `:` and two upper-case hex digits per UTF-8 byte: `("users", "alice smith")` is
`lg.users.alice:20smith`. LangGraph labels never hold a `.`, so `.` only separates labels and the
mapping reverses exactly (`namespace_of` / `labels_of`). Namespaces that do not start with `lg.`
are not LangGraph's and are never listed or searched here.

**Items.** An item is one FACT object with a fixed id (a UUID5 of its namespace and key), so
`get` is one lookup by id. A search without a query lists the items newest first (by
`updated_at`), one with a query in bundle order; either keeps the items whose value matches the
`filter` (LangGraph's own comparison, `$eq`, `$gt`, ... included) and then applies offset and
limit, so a search with a query returns at most what fits the token budget. Its content, which is what is embedded and indexed, is the value's
fields named in `index` (the put's, else the store's `index_fields`), one per line, or the
whole value as JSON; the value itself is kept in `metadata["langgraph"]`. Every item is indexed:
`index=False` is accepted and indexes the value as JSON. Objects the store derives from an item
(the ENTITY objects of the names in it) are not items and are never returned.

**Changes.** A put on an existing key replaces the item's value through the store's `update`
(content embedded and indexed again), and a delete (a put of None) goes through its `delete`.
New keys of one batch are written as one add. TTLs are not supported (`supports_ttl = False`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

try:
    from langgraph.store.base import (BaseStore, GetOp, Item, ListNamespacesOp, Op, PutOp, Result, SearchItem,
                                      SearchOp)
    from langgraph.store.memory import _compare_values, _does_match
except ImportError as error:  # the integration is optional; say which extra brings it
    raise ModuleNotFoundError("RmsStore needs langgraph, part of the [langgraph] extra: "
                              "pip install 'rms-retrieval[langgraph]'", name=error.name) from error

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.models import DEFAULT_TOKEN_BUDGET
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.exact.enumeration import iter_objects
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.snapshot import StoreSnapshot

PREFIX = "lg"
_SEPARATOR = "."
_ESCAPE = ":"
_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_NAMESPACE = 200  # MemoryObject.namespace's limit
_ID_ROOT = uuid5(NAMESPACE_URL, "https://rms-retrieval/langgraph-item")
_METADATA_KEY = "langgraph"


def _escaped(label: str) -> str:
    return "".join(ch if ch in _KEPT else "".join(f"{_ESCAPE}{byte:02X}" for byte in ch.encode()) for ch in label)


def _unescaped(text: str) -> str:
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == _ESCAPE:
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            out += text[i].encode()
            i += 1
    return out.decode()


def namespace_of(labels: tuple[str, ...]) -> str:
    """Our namespace for a LangGraph namespace tuple (reversed by `labels_of`)."""
    name = _SEPARATOR.join([PREFIX, *map(_escaped, labels)])
    if len(name) > _MAX_NAMESPACE:
        raise StoreError(f"the namespace {labels!r} is {len(name)} characters as {name[:40]}...; "
                         f"at most {_MAX_NAMESPACE} fit: use fewer or shorter labels")
    return name


def labels_of(namespace: str) -> tuple[str, ...] | None:
    """The LangGraph namespace tuple of one of our namespaces, or None when it is not LangGraph's."""
    head, _, rest = namespace.partition(_SEPARATOR)
    if head != PREFIX or not rest:
        return None
    return tuple(_unescaped(label) for label in rest.split(_SEPARATOR))


def item_id(labels: tuple[str, ...], key: str) -> UUID:
    """The fixed object id of the item at (namespace, key)."""
    return uuid5(_ID_ROOT, json.dumps([list(labels), key]))


class RmsStore(BaseStore):
    """LangGraph's long-term memory store over one rms-retrieval store (see the module docstring).

    `store` is an open `MemoryStore` or the path of one (created when missing, closed by
    `close()`); `token_budget` bounds the bundle a search with a query reads its items from;
    `index_fields` are the value's fields that are embedded when a put names none (None: the
    whole value as JSON); `settings` are the retrieval settings.
    """

    supports_ttl = False

    def __init__(self, store: MemoryStore | str, *, token_budget: int = DEFAULT_TOKEN_BUDGET,
                 index_fields: Sequence[str] | None = None, settings: RetrievalSettings | None = None) -> None:
        self.store = MemoryStore.open(store) if isinstance(store, str) else store
        self.token_budget = token_budget
        self.index_fields = tuple(index_fields) if index_fields else None
        self.settings = settings

    def close(self) -> None:
        self.store.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations: the puts first (new keys as one add, then replacements and deletes), then the reads."""
        ops = list(ops)
        puts = [op for op in ops if isinstance(op, PutOp)]
        if puts:
            self._put(puts)
        return [None if isinstance(op, PutOp) else self._read(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # ----- reads -----------------------------------------------------------------------------------

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            wanted = item_id(op.namespace, op.key)
            found = self.store.snapshot().get_objects([wanted], [namespace_of(op.namespace)]).get(wanted)
            return None if found is None else Item(**_item_fields(found))
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return _listed(self._namespaces(self.store.snapshot()), op)
        raise StoreError(f"RmsStore cannot run a {type(op).__name__}")

    def _namespaces(self, snapshot: StoreSnapshot) -> dict[tuple[str, ...], str]:
        """Every LangGraph namespace the snapshot holds, with our name for it."""
        return {labels: name for name in snapshot.namespaces() if (labels := labels_of(name)) is not None}

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        snapshot = self.store.snapshot()  # one generation for the namespaces, the search and its objects
        scope = sorted(name for labels, name in self._namespaces(snapshot).items() if labels[:len(prefix)] == prefix)
        if not scope:
            return []
        if op.query:
            result = retrieve(snapshot, op.query, namespaces=scope, token_budget=self.token_budget,
                              settings=self.settings)
            ranked = snapshot.get_objects([item.id for item in result.bundle.items], scope)
            found = [(ranked[item.id], item.score) for item in result.bundle.items if item.id in ranked]
        else:
            found = sorted(((memory, None) for name in scope for memory in iter_objects(snapshot, namespace=name)),
                           key=lambda pair: pair[0].updated_at, reverse=True)
        kept = [(memory, score) for memory, score in found if _METADATA_KEY in memory.metadata and _matches(memory, op)]
        return [SearchItem(**_item_fields(memory), score=score) for memory, score in kept[op.offset:op.offset + op.limit]]

    # ----- writes ----------------------------------------------------------------------------------

    def _put(self, puts: Sequence[PutOp]) -> None:
        latest = {(tuple(op.namespace), op.key): op for op in puts}  # the last put of a key wins, as in LangGraph
        ids = {item_id(*where): where for where in latest}
        stored = self.store.snapshot().get_objects(ids, sorted({namespace_of(namespace) for namespace, _ in latest}))
        now = datetime.now(timezone.utc)
        new = [self._object(op, now) for where, op in latest.items() if op.value is not None
               and item_id(*where) not in stored]
        if new:
            self.store.add(new)
        for where, op in latest.items():
            if item_id(*where) not in stored:
                continue
            if op.value is None:
                self.store.delete(namespace_of(where[0]), [item_id(*where)])
            else:
                replaced = self._object(op, now)
                self.store.update(replaced.namespace, replaced.id, content=replaced.content, metadata=replaced.metadata)

    def _object(self, op: PutOp, now: datetime) -> MemoryObject:
        labels = tuple(op.namespace)
        fields = op.index if isinstance(op.index, list) else self.index_fields
        return MemoryObject(
            id=item_id(labels, op.key), namespace=namespace_of(labels), node_type=NodeType.FACT,
            content=_content(op.value, fields), created_at=now, updated_at=now, source_ref=op.key,
            metadata={_METADATA_KEY: {"namespace": list(labels), "key": op.key, "value": op.value}},
        )


def _content(value: dict[str, Any], fields: Sequence[str] | None) -> str:
    """The text embedded and indexed for a value: the named fields, one per line, else its JSON."""
    if fields:
        texts = [value[field] if isinstance(value.get(field), str) else json.dumps(value.get(field), ensure_ascii=False)
                 for field in fields if value.get(field) is not None]
        if texts:
            return "\n".join(texts)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _matches(memory: MemoryObject, op: SearchOp) -> bool:
    value = memory.metadata[_METADATA_KEY]["value"]
    return all(_compare_values(value.get(key), wanted) for key, wanted in (op.filter or {}).items())


def _item_fields(memory: MemoryObject) -> dict[str, Any]:
    held = memory.metadata[_METADATA_KEY]
    return {"value": held["value"], "key": held["key"], "namespace": tuple(held["namespace"]),
            "created_at": memory.created_at, "updated_at": memory.updated_at}


def _listed(namespaces: Iterable[tuple[str, ...]], op: ListNamespacesOp) -> list[tuple[str, ...]]:
    matching = [labels for labels in namespaces if all(_does_match(c, labels) for c in op.match_conditions or ())]
    if op.max_depth is not None:
        matching = {labels[:op.max_depth] for labels in matching}
    return sorted(matching)[op.offset:op.offset + op.limit]
