"""`rms mcp` as an MCP host runs it: a subprocess driven by the mcp SDK's own client session,
over stdio and over streamable HTTP on 127.0.0.1, including a hostile client."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from rms_retrieval.mcp_server import NamespaceBinding, not_served
from rms_retrieval.stores.memory_store import MemoryStore

TOOLS = {"memory_search", "memory_add", "memory_explain", "memory_scan", "memory_aggregate_assertions",
         "memory_aggregate_quantities", "memory_delete", "memory_erase"}
OTHER = "demo-other-conversation"  # in the demo store, not served
QUESTION = "Where does Tomas work now?"


def _command(store: Path, *options: str) -> list[str]:
    return ["-m", "rms_retrieval.dataflows.cli", "mcp", "--store", str(store), *options]


@asynccontextmanager
async def stdio_session(store: Path, *options: str):
    params = StdioServerParameters(command=sys.executable, args=_command(store, *options))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@asynccontextmanager
async def http_session(store: Path, *options: str):
    port = _free_port()
    server = subprocess.Popen([sys.executable, *_command(store, *options, "--http", f"127.0.0.1:{port}")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start listening"
                await asyncio.sleep(0.2)
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session, server
    finally:
        server.terminate()
        server.wait(timeout=30)


async def call(session: ClientSession, tool: str, arguments: dict) -> tuple[bool, object]:
    """(is_error, the JSON result or the error text)."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text
    return result.is_error, (text if result.is_error else json.loads(text))


async def _session_scenario(session: ClientSession, demo_store) -> None:
    """What every transport must do: tools, a search, a bad argument, a forbidden namespace, add then search."""
    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        assert tool.input_schema["additionalProperties"] is False, tool.name

    failed, found = await call(session, "memory_search", {"query": QUESTION, "token_budget": 300,
                                                           "reference_time": demo_store.reference_time.isoformat()})
    assert not failed and found["namespaces"] == [demo_store.namespace]
    assert "Northwind" in found["context"] and found["tokens_used"] <= 300
    assert [item["position"] for item in found["items"]] == list(range(1, len(found["items"]) + 1))

    failed, error = await call(session, "memory_search", {"query": QUESTION, "no_such_field": 1})
    assert failed and error.endswith("no_such_field: Extra inputs are not permitted") and "\n" not in error
    failed, error = await call(session, "memory_search", {"query": QUESTION, "token_budget": 0})
    assert failed and "token_budget: Input should be greater than or equal to 1" in error

    failed, error = await call(session, "memory_search", {"query": QUESTION, "namespaces": [OTHER]})
    assert failed and error.endswith(not_served(OTHER))

    failed, added = await call(session, "memory_add", {
        "namespace": demo_store.namespace, "session_id": "mcp-session",
        "messages": [{"role": "user", "name": "Priya", "content": "My cousin Ilse breeds alpacas in Patagonia.",
                      "timestamp": demo_store.reference_time.isoformat()},
                     {"role": "assistant", "content": "Alpacas in Patagonia, noted."}]})
    assert not failed and added["added"] == 2
    failed, found = await call(session, "memory_search", {"query": "Who breeds alpacas?", "token_budget": 200})
    assert not failed and "My cousin Ilse breeds alpacas in Patagonia." in [item["content"] for item in found["items"]]


async def _other_tools_scenario(session: ClientSession, demo_store) -> None:
    """Explain, scan, the two aggregations, a bad message; then delete and erase, in the served namespace only."""
    arguments = {"query": QUESTION, "reference_time": demo_store.reference_time.isoformat(), "token_budget": 300}
    _, found = await call(session, "memory_search", arguments)
    first = found["items"][0]["id"]
    failed, explained = await call(session, "memory_explain", {**arguments, "object_id": first})
    assert not failed and explained["outcome"] == "INCLUDED" and explained["object_id"] == first
    failed, page = await call(session, "memory_scan", {"namespace": demo_store.namespace, "limit": 2})
    assert not failed and len(page["objects"]) == 2 and page["has_more"] and page["next_cursor"]
    failed, counted = await call(session, "memory_aggregate_assertions", {"namespace": demo_store.namespace})
    assert not failed and counted["stored_set_exhaustive"] is True
    failed, totals = await call(session, "memory_aggregate_quantities",
                                {"namespace": demo_store.namespace, "units": ["usd"]})
    assert not failed and totals["query"]["units"] == ["usd"]
    failed, error = await call(session, "memory_add", {"namespace": demo_store.namespace, "session_id": "s",
                                                       "messages": [{"role": "user", "content": "x", "mood": 1}]})
    assert failed and "messages.0.mood: Extra inputs are not permitted" in error
    failed, added = await call(session, "memory_add", {
        "namespace": demo_store.namespace, "session_id": "mcp-erase",
        "messages": [{"role": "user", "name": "Priya", "content": "My locker code is 4417."},
                     {"role": "user", "name": "Priya", "content": "The spare key hangs by the door."}]})
    assert not failed and added["added"] == 2
    _, page = await call(session, "memory_scan", {"namespace": demo_store.namespace, "limit": 500})
    ids = {obj["content"]: obj["id"] for obj in page["objects"]}
    failed, deleted = await call(session, "memory_delete", {"namespace": demo_store.namespace,
                                                            "ids": [ids["My locker code is 4417."]]})
    assert not failed and deleted["deleted"] == [ids["My locker code is 4417."]]
    failed, error = await call(session, "memory_delete", {"namespace": demo_store.namespace,
                                                          "ids": [ids["My locker code is 4417."]]})
    assert failed and "\n" not in error  # gone already: a one-line error
    failed, error = await call(session, "memory_delete", {"namespace": OTHER, "ids": [ids["The spare key hangs by the door."]]})
    assert failed and error.endswith(not_served(OTHER))
    failed, error = await call(session, "memory_erase", {"namespace": OTHER})
    assert failed and error.endswith(not_served(OTHER))
    failed, erased = await call(session, "memory_erase", {"namespace": demo_store.namespace,
                                                          "where": {"session_id": "mcp-erase"}})
    assert not failed and erased["erased"] >= 1
    _, page = await call(session, "memory_scan", {"namespace": demo_store.namespace, "limit": 500})
    assert not {"My locker code is 4417.", "The spare key hangs by the door."} & {o["content"] for o in page["objects"]}


def test_stdio_lists_searches_refuses_adds_and_runs_every_other_tool(demo_store, demo_copy):
    async def scenario():
        async with stdio_session(demo_copy, "--namespace", demo_store.namespace) as session:
            await _session_scenario(session, demo_store)
            await _other_tools_scenario(session, demo_store)
        with MemoryStore.open(demo_copy, create=False) as store:
            assert store.snapshot().count_objects([OTHER]) > 0  # the other namespace is untouched

    asyncio.run(scenario())


@pytest.mark.slow
def test_streamable_http_on_loopback(demo_store, demo_copy):
    async def scenario():
        async with http_session(demo_copy, "--namespace", demo_store.namespace) as (session, server):
            await _session_scenario(session, demo_store)
            assert server.poll() is None

    asyncio.run(scenario())


def test_a_hostile_client_learns_nothing_of_other_namespaces(demo_store, demo_copy):
    """Every tool, every way of naming a namespace: the refusal reads exactly like a missing one."""
    served = demo_store.namespace
    probes = [OTHER, "no-such-namespace", OTHER.upper(), f"{OTHER} ", "*", "demo-*", "../demo-other-conversation"]
    when = demo_store.reference_time.isoformat()

    async def scenario():
        async with stdio_session(demo_copy, "--namespace", served) as session:
            for probe in probes:
                expected = not_served(probe)
                asks = [
                    ("memory_search", {"query": "Tomas", "namespaces": [probe]}),
                    ("memory_search", {"query": "Tomas", "namespaces": [served, probe]}),
                    ("memory_search", {"query": "Tomas", "namespaces": probe}),
                    ("memory_search", {"query": "Tomas", "namespaces": [served], "cross_scope_namespaces": [probe]}),
                    ("memory_explain", {"query": "Tomas", "namespaces": [probe],
                                        "object_id": str(demo_store.other_namespace_id)}),
                    ("memory_scan", {"namespace": probe}),
                    ("memory_aggregate_assertions", {"namespace": probe}),
                    ("memory_aggregate_quantities", {"namespace": probe}),
                    ("memory_add", {"namespace": probe, "session_id": "s",
                                    "messages": [{"role": "user", "content": "planted"}]}),
                ]
                for tool, arguments in asks:
                    failed, error = await call(session, tool, arguments)
                    assert failed and error == f"Error executing tool {tool}: {expected}", (tool, probe, error)
            # An object of another namespace, asked for by id from a served one, reads like a missing id.
            failed, error = await call(session, "memory_explain", {"query": "Tomas", "reference_time": when,
                                                                   "object_id": str(demo_store.other_namespace_id)})
            assert failed and error.endswith(f"object {demo_store.other_namespace_id} not found in namespaces [{served}]")
            failed, page = await call(session, "memory_scan", {"namespace": served, "limit": 10_000})
            assert not failed and {o["namespace"] for o in page["objects"]} == {served}
            # Nothing planted anywhere.
            failed, found = await call(session, "memory_search", {"query": "planted", "token_budget": 4000})
            assert not failed and all("planted" not in item["content"] for item in found["items"])

    before = _counts(demo_copy)
    asyncio.run(scenario())
    assert _counts(demo_copy) == before


def _counts(store_path: Path) -> dict[str, int]:
    with MemoryStore.open(store_path, create=False, read_only=True) as store:
        return {namespace: store.snapshot().count_objects([namespace]) for namespace in store.snapshot().namespaces()}


@pytest.mark.slow
def test_a_pattern_serves_matching_namespaces_only(demo_store, demo_copy):
    async def scenario():
        async with stdio_session(demo_copy, "--namespace", "demo-priya-*", "--namespace", "team-*") as session:
            failed, found = await call(session, "memory_search", {"query": QUESTION})
            assert not failed and found["namespaces"] == [demo_store.namespace]
            failed, error = await call(session, "memory_scan", {"namespace": "team-red"})
            assert failed and error.endswith(not_served("team-red"))  # served, but holds nothing yet
            failed, added = await call(session, "memory_add", {"namespace": "team-red", "session_id": "s1",
                                                               "messages": [{"role": "user", "content": "Standup at 9."}]})
            assert not failed and added["added"] == 1
            failed, page = await call(session, "memory_scan", {"namespace": "team-red", "node_types": ["TURN"]})
            assert not failed and [o["content"] for o in page["objects"]] == ["Standup at 9."]
            failed, error = await call(session, "memory_scan", {"namespace": OTHER})
            assert failed and error.endswith(not_served(OTHER))

    asyncio.run(scenario())


def test_a_binding_is_names_and_patterns():
    binding = NamespaceBinding.of(["alpha", "team-*"])
    assert binding.serves("alpha") and binding.serves("team-red")
    assert not binding.serves("alphabet") and not binding.serves("Alpha") and not binding.serves("team-*")
    assert not NamespaceBinding.of(["*"]).serves("../x") and NamespaceBinding.of(["*"]).serves("x")
    with pytest.raises(ValueError, match="neither a namespace name"):
        NamespaceBinding.of(["a b"])
    with pytest.raises(ValueError, match="at least one --namespace"):
        NamespaceBinding.of([])


def test_the_cli_refuses_a_bad_binding_in_one_line(capsys, tmp_path):
    from rms_retrieval.dataflows.cli import main

    assert main(_command(tmp_path / "store", "--namespace", "a/b")[2:]) == 2
    assert capsys.readouterr().err == (
        "error: --namespace 'a/b' is neither a namespace name (letters, digits, _ . : -) nor a pattern (with * ? or [)\n")
    assert not (tmp_path / "store").exists()


def test_without_the_mcp_package_the_extra_is_named_in_one_line(capsys, monkeypatch, tmp_path):
    import rms_retrieval
    from rms_retrieval.dataflows.cli import main

    for name in [name for name in sys.modules if name == "mcp" or name.startswith("mcp.")] + ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the [mcp] extra were not installed
    monkeypatch.delitem(sys.modules, "rms_retrieval.mcp_server")
    monkeypatch.delattr(rms_retrieval, "mcp_server", raising=False)
    assert main(["mcp", "--store", str(tmp_path / "store"), "--namespace", "a"]) == 2
    assert capsys.readouterr().err == "error: `rms mcp` needs mcp, part of the [mcp] extra: pip install 'rms-retrieval[mcp]'\n"
