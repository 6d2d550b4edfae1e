"""An MCP server over one store: `rms mcp --store DIR --namespace NS` (the [mcp] extra).

Built on the official `mcp` SDK's `MCPServer`, over stdio or streamable HTTP. Its tools:
memory_search, memory_add (through `MemoryStore.add_messages`), memory_explain, memory_scan,
memory_aggregate_assertions, memory_aggregate_quantities, memory_delete and memory_erase. Each tool's arguments are a pydantic model that forbids unknown
fields, and its published JSON schema says so (`additionalProperties: false`, nested objects
included); a bad argument is a one-line tool error and the server goes on serving.

A server is bound to the namespaces it serves: names and glob patterns (`team-*`, `*` for all).
A request naming any other namespace is refused with exactly the words a served namespace that
holds nothing gets ("namespace 'x' not found among the namespaces this server serves"), so a
caller cannot tell a namespace that exists elsewhere in the store from one that does not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
except ImportError as error:  # the integration is optional; say which extra brings it
    raise ModuleNotFoundError("the MCP server needs mcp, part of the [mcp] extra: pip install 'rms-retrieval[mcp]'",
                              name="mcp") from error
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator
from uuid import UUID

from rms_retrieval.dataflows.cli_support import one_line
from rms_retrieval.dataflows.retrieval import as_request, retrieve
from rms_retrieval.integration import bundle_items
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.stores.exact.aggregation import AssertionQuery, QuantityQuery, aggregate_assertions, aggregate_quantities
from rms_retrieval.stores.exact.enumeration import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, scan_objects
from rms_retrieval.stores.errors import EmbeddingError, StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import LifecycleState, NodeType

# The namespace rule of MemoryObject: a requested name outside it can hold nothing.
_NAMESPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
_GLOB_CHARACTERS = frozenset("*?[")
# Bad input from the caller: a one-line tool error. Anything else is the SDK's generic error.
_CALLER_ERRORS = (StoreError, EmbeddingError, ValidationError, ValueError, TypeError)


def not_served(namespace: str) -> str:
    """The one refusal for a namespace this server does not serve or that holds nothing."""
    return f"namespace {namespace!r} not found among the namespaces this server serves"


@dataclass(frozen=True)
class NamespaceBinding:
    """The namespaces a server may serve: exact names and glob patterns (fnmatch, case-sensitive)."""

    names: frozenset[str]
    patterns: tuple[str, ...]

    @classmethod
    def of(cls, values: Iterable[str]) -> NamespaceBinding:
        """A binding from `--namespace` values: a value with `*`, `?` or `[` is a pattern, else a name."""
        names, patterns = set(), []
        for value in values:
            if _GLOB_CHARACTERS & set(value):
                patterns.append(value)
            elif _NAMESPACE_NAME.match(value):
                names.add(value)
            else:
                raise ValueError(f"--namespace {value!r} is neither a namespace name (letters, digits, _ . : -) "
                                 "nor a pattern (with * ? or [)")
        if not names and not patterns:
            raise ValueError("a server needs at least one --namespace (a name, or a pattern such as 'team-*')")
        return cls(frozenset(names), tuple(patterns))

    def serves(self, namespace: str) -> bool:
        return bool(_NAMESPACE_NAME.match(namespace)) and (
            namespace in self.names or any(fnmatchcase(namespace, pattern) for pattern in self.patterns))

    def describe(self) -> str:
        return ", ".join([*sorted(self.names), *self.patterns])


# ----- tool arguments --------------------------------------------------------------------------


class SearchArguments(RetrievalRequest):
    """A retrieval request; `namespaces` defaults to every served namespace that holds memories,
    `reference_time` to now."""

    namespaces: tuple[str, ...] | None = Field(default=None, min_length=1)
    reference_time: AwareDatetime | None = None

    @field_validator("namespaces", mode="before")
    @classmethod
    def _namespaces_sorted(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value


class ExplainArguments(SearchArguments):
    """A retrieval request and the id of the object whose place in it is explained."""

    object_id: UUID


class ScanArguments(BaseModel):
    """One page of every stored object of a namespace, by id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    scope: str | None = None
    node_types: tuple[NodeType, ...] | None = Field(default=None, description="default: every type")
    lifecycle: tuple[LifecycleState, ...] = Field(default=(LifecycleState.ACTIVE,),
                                                  description="an empty list matches nothing")
    after: UUID | None = Field(default=None, description="the next_cursor of the previous page")
    limit: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)


class ChatMessage(BaseModel):
    """One chat message: who said it, what, and when (default: when it is added)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(min_length=1)
    name: str | None = Field(default=None, min_length=1, description="the speaker's name, e.g. Caroline")
    timestamp: AwareDatetime | None = None


class AddArguments(BaseModel):
    """Chat messages of one session, stored in order after the session's earlier turns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    session_id: str = Field(min_length=1)
    messages: tuple[ChatMessage, ...] = Field(min_length=1, max_length=10_000)


class DeleteArguments(BaseModel):
    """Objects of one namespace to delete, all or none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    ids: tuple[UUID, ...] = Field(min_length=1, max_length=10_000)


class EraseArguments(BaseModel):
    """Every object of one namespace (of one owner, matching `where`) erased: deleted, compacted out
    of the store's files and out of the retrieval log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    owner: str | None = Field(default=None, min_length=1)
    where: dict[str, str | int | float | bool] | None = Field(
        default=None, description="exact matches on object fields or metadata.<key>, e.g. {\"metadata.user\": \"u1\"}")


# ----- the server ------------------------------------------------------------------------------


class MemoryServer:
    """The tools over one open store and one namespace binding; `server` is the MCPServer."""

    def __init__(self, store: MemoryStore, binding: NamespaceBinding) -> None:
        self.store = store
        self.binding = binding
        tools = [
            _tool("memory_search", SearchArguments, self.search,
                  "Search memory: the Memory Bundle for a question (packed context and ranked items)."),
            _tool("memory_add", AddArguments, self.add,
                  "Store chat messages of one session (role, content, optional speaker name and time)."),
            _tool("memory_explain", ExplainArguments, self.explain,
                  "How one object's place in the bundle for a question was decided, node by node."),
            _tool("memory_scan", ScanArguments, self.scan,
                  "Every stored object of a namespace by id, one page at a time (exact, no ranking)."),
            _tool("memory_aggregate_assertions", AssertionQuery, self.aggregate_assertions,
                  "Exact counts of structured claims by normalised subject, predicate, object, polarity."),
            _tool("memory_aggregate_quantities", QuantityQuery, self.aggregate_quantities,
                  "Exact per-unit totals of grounded quantities."),
            _tool("memory_delete", DeleteArguments, self.delete,
                  "Delete stored objects of a namespace by id (all or none)."),
            _tool("memory_erase", EraseArguments, self.erase,
                  "Erase a namespace's objects (optionally of one owner or matching fields): no byte of them is left."),
        ]
        self.server = MCPServer(
            name="rms-retrieval", tools=tools,
            instructions=f"Long-term memory. This server serves the namespaces {binding.describe()}.",
        )

    def _readable(self, namespaces: Sequence[str]) -> tuple[str, ...]:
        """The namespaces, each served and holding memories, else the one refusal for the first that is not."""
        held = set(self.store.snapshot().namespaces())
        for namespace in namespaces:
            if not (self.binding.serves(namespace) and namespace in held):
                raise ToolError(not_served(namespace))
        return tuple(namespaces)

    def _request(self, arguments: SearchArguments) -> RetrievalRequest:
        if arguments.namespaces is None:
            namespaces = tuple(ns for ns in self.store.snapshot().namespaces() if self.binding.serves(ns))
            if not namespaces:
                raise ToolError(f"no namespace this server serves ({self.binding.describe()}) holds memories yet")
        else:
            namespaces = self._readable(arguments.namespaces)
        self._readable(arguments.cross_scope_namespaces)  # hints, too, come only from served namespaces
        fields = arguments.model_dump(exclude={"query", "namespaces", "reference_time", "object_id"}, exclude_none=True)
        return as_request(arguments.query, namespaces=namespaces, reference_time=arguments.reference_time, **fields)

    def search(self, arguments: SearchArguments) -> dict[str, Any]:
        result = retrieve(self.store, self._request(arguments))
        bundle = result.bundle
        return {
            "request_id": str(result.request_id), "namespaces": list(bundle.namespaces),
            "token_budget": bundle.token_budget, "tokens_used": bundle.tokens_used, "context": bundle.context,
            "items": [{"content": item.content, **metadata} for item, metadata in bundle_items(result)],
            **({} if bundle.cross_scope_hints is None else
               {"cross_scope_hints": [hint.model_dump(mode="json") for hint in bundle.cross_scope_hints]}),
        }

    def add(self, arguments: AddArguments) -> dict[str, Any]:
        if not self.binding.serves(arguments.namespace):
            raise ToolError(not_served(arguments.namespace))
        messages = [{"role": message.role, "content": message.content,
                     **({"name": message.name} if message.name else {}),
                     **({"created_at": message.timestamp} if message.timestamp else {})} for message in arguments.messages]
        report = self.store.add_messages(arguments.namespace, arguments.session_id, messages)
        return {"added": report.objects_added, "generation": report.details["generation"]}

    def delete(self, arguments: DeleteArguments) -> dict[str, Any]:
        self._readable([arguments.namespace])
        report = self.store.delete(arguments.namespace, arguments.ids)
        return {"deleted": [str(object_id) for object_id in report.object_ids], "generation": report.generation}

    def erase(self, arguments: EraseArguments) -> dict[str, Any]:
        self._readable([arguments.namespace])
        report = self.store.erase(arguments.namespace, owner=arguments.owner, where=arguments.where)
        return {"erased": len(report.object_ids), "generation": report.generation}

    def explain(self, arguments: ExplainArguments) -> dict[str, Any]:
        from rms_retrieval.dataflows.explain import explain, not_found

        request = self._request(arguments)
        explanation = explain(self.store, request, arguments.object_id)
        if explanation.object is None:
            raise ToolError(not_found(arguments.object_id, request.namespaces))
        return explanation.to_dict()

    def scan(self, arguments: ScanArguments) -> dict[str, Any]:
        self._readable([arguments.namespace])
        page = scan_objects(self.store, namespace=arguments.namespace, scope=arguments.scope,
                            node_type=arguments.node_types, lifecycle=arguments.lifecycle,
                            after_id=arguments.after, limit=arguments.limit)
        return page.model_dump(mode="json")

    def aggregate_assertions(self, query: AssertionQuery) -> dict[str, Any]:
        self._readable([query.namespace])
        return aggregate_assertions(self.store, query).model_dump(mode="json")

    def aggregate_quantities(self, query: QuantityQuery) -> dict[str, Any]:
        self._readable([query.namespace])
        return aggregate_quantities(self.store, query).model_dump(mode="json")


class _RawArguments(ArgModelBase):
    """The SDK's argument model, left open: the tool's own model validates, with a one-line error."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def _tool(name: str, model: type[BaseModel], run: Callable[[Any], dict[str, Any]], description: str) -> Tool:
    """An MCP tool whose published schema is `model`'s and whose call validates against it."""

    def call(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return run(model.model_validate(arguments))
        except ToolError:
            raise
        except _CALLER_ERRORS as error:
            raise ToolError(one_line(error)) from error

    return Tool(fn=call, name=name, description=description, parameters=model.model_json_schema(),
                fn_metadata=FuncMetadata(arg_model=_RawArguments), is_async=False)


def serve(store: MemoryStore, namespaces: Iterable[str], http: tuple[str, int] | None = None) -> None:
    """Serve `store` over stdio, or streamable HTTP on (host, port) at /mcp, until stopped."""
    server = MemoryServer(store, NamespaceBinding.of(namespaces)).server
    if http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=http[0], port=http[1])
