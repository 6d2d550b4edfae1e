"""Assembly of the retrieval DAG: the Hamilton driver and the inputs every request needs.

The driver is public: `build_driver()` and `pipeline_inputs()` let a caller (a notebook, an
audit) execute any intermediate node, e.g. `merged_candidates` or `fused_scores`, for the same
inputs `retrieve()` uses.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from importlib import import_module
from typing import Any

import numpy as np

from hamilton import driver, graph, node
from hamilton.execution import graph_functions
from hamilton.plugins.h_threadpool import FutureAdapter

from rms_retrieval.nodes import (candidate_generation, cross_scope, filtering, merging, packing, query_analysis,
                                 reformulation, reranking, scoring, session_context)
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.providers.cross_encoder import default_cross_encoder
from rms_retrieval.stores.providers.chat_reformulator import ChatCompletionsReformulator
from rms_retrieval.stores.protocols import (CrossEncoder, EmbeddingIdentity, QueryEncoder, QueryReformulator, ReadableStore,
                                            snapshot_of)

STAGE_MODULES = (
    query_analysis,
    candidate_generation,
    reformulation,
    merging,
    filtering,
    scoring,
    cross_scope,
    reranking,
    session_context,
    packing,
)
FINAL_NODE = "packed_bundle"
EMBEDDING_NODE = "query_embedding"


# How a planned step gets its value: the caller's override, a driver input, or the node run.
_OVERRIDE, _INPUT, _RUN = range(3)
_HOOKS = ("pre_node_execute", "post_node_execute")
_METHODS = ("do_node_execute", "do_remote_execute")


@lru_cache(maxsize=256)
def _plan(fg: graph.FunctionGraph, final_vars: tuple[str, ...], overridden: frozenset[str], given: frozenset[str]
          ) -> tuple[tuple[int, str, Any], ...] | None:
    """The steps `execute_subdag` takes for these final nodes, override names and input names,
    in its order (a depth-first walk, each node's inputs in order), then with the steps that need
    the query embedding last (`_embedding_last`): it decides nothing from values, so one walk
    serves every request of the same shape. None where a lifecycle adapter of
    the graph wraps its nodes (the thread pool's, a timer's): Hamilton's walk runs those. A
    required input that is not given makes no plan (the walk itself raises, as Hamilton does)."""
    adapter = fg.adapter
    if any(adapter.does_hook(hook, is_async=False) for hook in _HOOKS) or \
            any(adapter.does_method(method, is_async=False) for method in _METHODS):
        return None
    steps: list[tuple[int, str, Any]] = []
    done: set[str] = set()

    def visit(node_: node.Node, dependency: node.DependencyType) -> None:
        if node_.name in done:
            return
        if node_.name in overridden:
            steps.append((_OVERRIDE, node_.name, None))
            done.add(node_.name)
            return
        for upstream in node_.dependencies:
            visit(upstream, node_.input_types[upstream.name][1])
        if node_.user_defined:
            if node_.name not in given:
                if dependency != node.DependencyType.OPTIONAL:
                    raise NotImplementedError(f"{node_.name} was expected to be passed in but was not.")
                return
            steps.append((_INPUT, node_.name, None))
        else:
            steps.append((_RUN, node_.name, (node_, tuple(upstream.name for upstream in node_.dependencies))))
        done.add(node_.name)

    for name in final_vars:
        if name in fg.nodes:
            final = fg.nodes[name]
            visit(final, node.DependencyType.OPTIONAL if final.user_defined else node.DependencyType.REQUIRED)
    return _embedding_last(steps)


def _embedding_last(steps: list[tuple[int, str, Any]]) -> tuple[tuple[int, str, Any], ...]:
    """The steps, every one that needs the question's embedding (`EMBEDDING_NODE` and what reads it,
    however far down) after every one that does not, each part in its own order: a prefetched
    embedding (`PrefetchedEncoder`) is then made on the other core while the rest of the request
    (the text paths, their objects, exclusions and score inputs) runs. A step's inputs still run
    before it: one that needs no embedding reads none that does."""
    needs: set[str] = set()
    for kind, name, run in steps:
        if name == EMBEDDING_NODE or (kind == _RUN and not needs.isdisjoint(run[1])):
            needs.add(name)
    return tuple(step for step in steps if step[1] not in needs) + tuple(step for step in steps if step[1] in needs)


class EmptiedMemoExecutor(driver.DefaultGraphExecutor):
    """Hamilton's default executor, run from a plan, with its memo of node values emptied before
    it returns. Hamilton's depth-first walk (`execute_subdag`) is a recursive closure over its memo
    and inputs, so they sit in a reference cycle: left full, a request's intermediate values (about
    2,400 objects on LoCoMo: channel hits, candidates, bundle items) and its snapshot outlived it
    until the cyclic collector ran. Where no lifecycle adapter wraps a node, the walk's order is
    planned once per request shape (`_plan`: the final nodes, the names overridden and given) and
    each request runs the nodes in that order (those that need no query embedding first) with the
    same arguments, with no closure, partial or hook lookup per node (0.17-0.26 ms of a warm LoCoMo
    request's p50); with an adapter that wraps nodes (the thread pool's, a timer's), Hamilton's
    walk runs as it is."""

    def execute(self, fg: graph.FunctionGraph, final_vars: list[str], overrides: dict[str, Any],
                inputs: dict[str, Any], run_id: str) -> dict[str, Any]:
        memo: dict[str, Any] = {}
        given = graph_functions.combine_config_and_inputs(fg.config, inputs)
        try:
            steps = _plan(fg, tuple(final_vars), frozenset(overrides), frozenset(given))
            if steps is None:
                graph_functions.execute_subdag(nodes=[fg.nodes[name] for name in final_vars if name in fg.nodes],
                                               inputs=given, adapter=fg.adapter, computed=memo, overrides=overrides,
                                               run_id=run_id)
            else:
                _run_plan(steps, memo, overrides, given)
            return {name: memo.get(name, inputs.get(name)) for name in final_vars}
        finally:
            memo.clear()
            given.clear()


def _run_plan(steps: tuple[tuple[int, str, Any], ...], memo: dict[str, Any], overrides: dict[str, Any],
              given: dict[str, Any]) -> None:
    """The planned steps: each node called with the values of its inputs that the walk has (an
    optional input not given is left out, as Hamilton leaves it); a failure is logged as Hamilton
    logs it and raised."""
    for kind, name, run in steps:
        if kind == _OVERRIDE:
            memo[name] = overrides[name]
        elif kind == _INPUT:
            memo[name] = given[name]
        else:
            node_, upstream = run
            kwargs = {dependency: memo[dependency] for dependency in upstream if dependency in memo}
            try:
                memo[name] = node_(**kwargs)
            except Exception:
                graph_functions.logger.exception(graph_functions.create_error_message(kwargs, node_, ""))
                raise


def _prefetch_pool() -> ThreadPoolExecutor:
    # One worker: under concurrent requests a request whose encoding has not started yet encodes it
    # itself (PrefetchedEncoder.encode), so a busy worker costs overlap, never a wait in line.
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="rms-query-embedding")


_PREFETCH = _prefetch_pool()
# The longest a request waits for its question's encoding to start (`PrefetchedEncoder`).
START_WAIT_SECONDS = 0.002
# The questions handed to the worker and not yet encoded or cancelled (`PrefetchedEncoder`).
_in_line = 0
_in_line_lock = threading.Lock()


def _new_prefetch_pool_in_child() -> None:
    """A forked child has none of its parent's threads: a pool whose worker the parent started
    would queue the child's encodings forever (each request then encoding inline, its queued job
    kept), so the child gets a pool of its own, with none of the parent's questions in line."""
    global _PREFETCH, _in_line, _in_line_lock
    _PREFETCH, _in_line, _in_line_lock = _prefetch_pool(), 0, threading.Lock()


def _join_line() -> bool:
    """Count one more question in line; whether the line was empty."""
    global _in_line
    with _in_line_lock:
        _in_line += 1
        return _in_line == 1


def _leave_line(_: Future) -> None:
    global _in_line
    with _in_line_lock:
        _in_line -= 1


def _encoded(encoder: QueryEncoder, text: str, started: threading.Event) -> np.ndarray:
    started.set()
    return encoder.encode([text])


os.register_at_fork(after_in_child=_new_prefetch_pool_in_child)


class PrefetchedEncoder(QueryEncoder):
    """`encoder` with the encoding of one text (the question) started on a background thread when
    it is made. A planned request runs every node that needs no query embedding before the first
    that does (`_embedding_last`), so the model, which releases the interpreter lock, runs on the
    other core while they do. The same vector either way: any other text, or the question when
    the thread has not started on it, is encoded inline; a failure of the background encoding is
    raised where the node asks for it.

    Made when no other question is in line for the worker, it waits (at most START_WAIT_SECONDS)
    until the worker has started: left running, the request would keep the interpreter lock and
    the worker would start the model when the request next let it go, about 0.3 ms later on a warm
    LoCoMo request (0.2 ms of its p50, the request's other work having time to spare until the
    embedding arrives). Behind another question it goes on at once: it may encode its own."""

    def __init__(self, encoder: QueryEncoder, text: str) -> None:
        self._encoder, self._text = encoder, text
        first, started = _join_line(), threading.Event()
        self._pending = _PREFETCH.submit(_encoded, encoder, text, started)
        self._pending.add_done_callback(_leave_line)  # encoded, failed or cancelled
        if first:
            started.wait(START_WAIT_SECONDS)

    @property
    def identity(self) -> EmbeddingIdentity:
        return self._encoder.identity

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if list(texts) == [self._text] and not self._pending.cancel():
            return self._pending.result()
        return self._encoder.encode(texts)


def emptying_memo(built: driver.Driver) -> driver.Driver:
    """`built`, executing through `EmptiedMemoExecutor` (with its own lifecycle adapters)."""
    built.graph_executor = EmptiedMemoExecutor(built.adapter)
    return built


@lru_cache(maxsize=16)
def _cached_driver(switches: tuple[tuple[str, str], ...], variants: tuple[str, ...], execution: str) -> driver.Driver:
    builder = driver.Builder().with_modules(*STAGE_MODULES, *(import_module(name) for name in variants))
    if variants:
        builder = builder.allow_module_overrides()
    if execution == "threads":  # every node whose inputs are ready runs at once: the paths in parallel (RFC 4)
        builder = builder.with_adapters(FutureAdapter(thread_name_prefix="rms-node"))
    return emptying_memo(builder.with_config(dict(switches)).build())


def build_driver(settings: RetrievalSettings | None = None) -> driver.Driver:
    """The retrieval DAG for these settings' structural switches, with the node variants their
    class names (`RetrievalSettings.dataflow_variants`) in place of the stage modules' nodes; built
    once per switch value and variant list."""
    settings = settings or RetrievalSettings()
    return _cached_driver(tuple(sorted(settings.hamilton_config().items())), type(settings).dataflow_variants,
                          settings.execution)


def pipeline_inputs(
    store: ReadableStore,
    request: RetrievalRequest,
    settings: RetrievalSettings,
    encoder: QueryEncoder,
    cross_encoder: CrossEncoder | None = None,
    reformulator: QueryReformulator | None = None,
) -> dict[str, Any]:
    """The driver inputs for one request. The store is one input, `store_snapshot`: one generation
    serves every candidate node; the cross-encoder and the reformulation provider are inputs only
    while the settings enable them."""
    inputs = {
        "request": request,
        "settings": settings,
        "query_encoder": encoder,
        "store_snapshot": snapshot_of(store),
    }
    if settings.rerank.enabled:
        inputs["cross_encoder"] = cross_encoder or default_cross_encoder()
    if settings.reformulation.enabled:
        inputs["query_reformulator"] = reformulator or ChatCompletionsReformulator.from_settings(settings.reformulation)
    return inputs


def pipeline_lineage(dr: driver.Driver, final_node: str = FINAL_NODE):
    """The lineage of `final_node`, read from the driver (`what_is_upstream_of`): every node it
    depends on, in topological order, each with the nodes it reads and its stage role."""
    from rms_retrieval.dataflows.node_types import Lineage, LineageNode, role_of

    variables = {v.name: v for v in dr.what_is_upstream_of(final_node)}
    upstream = {
        name: tuple(sorted((v.required_dependencies | v.optional_dependencies) & variables.keys()))
        for name, v in variables.items()
    }
    ordered: list[str] = []
    placed: set[str] = set()
    while len(ordered) < len(variables):
        ready = sorted(name for name in variables if name not in placed and set(upstream[name]) <= placed)
        ordered.extend(ready)
        placed.update(ready)
    return Lineage(tuple(
        LineageNode(name, upstream[name], None if variables[name].is_external_input else role_of(variables[name].type),
                    variables[name].is_external_input)
        for name in ordered
    ))
