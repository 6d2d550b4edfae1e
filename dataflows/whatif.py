"""What if: a logged request run again under changed settings, compared node by node.

`whatif(store, request_id, changes)` takes one request from the retrieval log and runs it twice
through the one retrieval DAG, exactly as replay does (`replay.LoggedRequest.run`: the logged
request and query vector, an encoder that refuses to embed, nothing logged): once with the
settings it was logged with, once with `changes` applied to them, both on one snapshot of the
store. Every node's value comes back through `retrieve(..., extra_nodes=...)`, and the nodes are
compared in the DAG's order, read from the driver's lineage: the first node whose value differs,
which objects entered or left each node that holds objects, how ranks and scores moved in the
scored nodes, and which bundle items came in or went out, with their tokens and tiers.

A what-if is only reported when the logged request can be replayed exactly. It cannot when the
store generation it read is gone (a replay reads the live one), when the code that answered it
differs from the code running now, when the changed settings need the question's embedding and
the log holds none (replay never runs the model), or when the logged settings no longer give the
logged bundle. Then the report says why and compares nothing: a degraded replay is never
presented as the counterfactual.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from statistics import mean
from typing import TYPE_CHECKING, Any
from uuid import UUID

from rms_retrieval.dataflows.node_changes import ItemChange, NodeChange, compare_node
from rms_retrieval.dataflows.pipeline import build_driver, pipeline_lineage
from rms_retrieval.dataflows.replay import LoggedRequest, ReplayError, find_record, logged_request
from rms_retrieval.dataflows.setting_changes import WhatIfError, changed_settings
from rms_retrieval.dataflows.retrieval import answering_code, bundle_sha256
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import ReadableStore, snapshot_of
from rms_retrieval.stores.log.retrieval_log import within_namespaces

if TYPE_CHECKING:
    import graphviz

# ----- one request ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhatIfReport:
    """One logged request under its logged settings and under the changed ones, node by node in
    DAG order; or, when it cannot be replayed exactly, why not (`limits`) and no comparison."""

    request_id: str
    query: str
    changes: Mapping[str, Any]
    limits: tuple[str, ...]
    nodes: tuple[NodeChange, ...] = ()
    tokens_before: int | None = None
    tokens_after: int | None = None
    settings: RetrievalSettings | None = field(default=None, repr=False)

    @property
    def replayable(self) -> bool:
        return not self.limits

    @property
    def changed_nodes(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes if n.changed)

    @property
    def first_difference(self) -> str | None:
        return next(iter(self.changed_nodes), None)

    @property
    def bundle_changed(self) -> bool:
        return bool(self.nodes) and self.nodes[-1].changed

    @property
    def items_entered(self) -> int:
        return sum(item.position_before is None for item in self._items)

    @property
    def items_left(self) -> int:
        return sum(item.position_after is None for item in self._items)

    @property
    def _items(self) -> tuple[ItemChange, ...]:
        return self.nodes[-1].items if self.nodes else ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id, "query": self.query, "changes": dict(self.changes),
            "replayable": self.replayable, "limits": list(self.limits),
            "first_difference": self.first_difference, "changed_nodes": list(self.changed_nodes),
            "bundle_changed": self.bundle_changed, "items_entered": self.items_entered, "items_left": self.items_left,
            "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
            "nodes": [dataclasses.asdict(n) for n in self.nodes],
        }

    def to_text(self) -> str:
        changes = ", ".join(f"{path}={json.dumps(value)}" for path, value in self.changes.items())
        lines = [f"request {self.request_id}: {self.query!r}", f"  what if {changes}"]
        if not self.replayable:
            lines.append("  NOT REPLAYABLE exactly, so no what-if is reported:")
            lines += [f"  - {limit}" for limit in self.limits]
            return "\n".join(lines)
        if self.first_difference is None:
            lines.append(f"  no node changes: the same bundle ({len(self.nodes)} nodes compared)")
            return "\n".join(lines)
        unchanged = [n.node for n in self.nodes if not n.changed]
        lines.append(f"  first difference: {self.first_difference}; {len(self.changed_nodes)} of {len(self.nodes)} "
                     f"nodes change; bundle {self.items_entered} in, {self.items_left} out, "
                     f"tokens {self.tokens_before} -> {self.tokens_after}")
        lines.append(f"  unchanged: {', '.join(unchanged) or 'none'}")
        lines += [n.to_text() for n in self.nodes if n.changed]
        return "\n".join(lines)


def _stage_names(settings: RetrievalSettings) -> tuple[list[str], dict[str, str]]:
    dr = build_driver(settings)
    variables = {v.name: v for v in dr.list_available_variables()}
    computed = list(pipeline_lineage(dr).computed)
    stages = {}
    for name in computed:
        functions = variables[name].originating_functions or ()
        stages[name] = functions[0].__module__.rpartition(".")[2] if functions else "inputs"
    return computed, stages


def _limits(store: ReadableStore, logged: LoggedRequest, changed: RetrievalSettings) -> list[str]:
    """Why the logged request cannot be replayed exactly under either settings (empty: it can)."""
    payload = logged.payload
    limits = []
    read, live = payload.get("index_state"), store.state_fingerprint()
    if read != live:
        limits.append(f"the store generation it read ({read}) is gone: the store is at {live}, "
                      f"and a replay reads only the live generation")
    code = answering_code(type(store).__module__)
    for name, what in (("package_version", "package version"), ("dag_fingerprint", "code fingerprint")):
        if payload.get(name) != code[name]:
            limits.append(f"its {what} differs: it was answered by {payload.get(name)}, this process runs {code[name]}")
    if logged.embedding is None and PathType.VECTOR in changed.candidates.enabled_paths:
        limits.append("the changed settings search vectors, which needs the question's embedding: the logged "
                      "request searched none, so the log holds no vector, and replay never runs the embedding model")
    return limits


def whatif_record(store: ReadableStore, record: Mapping[str, Any], changes: Mapping[str, Any]) -> WhatIfReport:
    """`whatif` for a record already read from the log."""
    store = snapshot_of(store)  # both runs, and the generation check, read one generation
    logged = logged_request(store, record)
    changed = changed_settings(logged.settings, changes)
    report = dict(request_id=logged.request_id, query=logged.request.query, changes=dict(changes), settings=changed)
    limits = _limits(store, logged, changed)
    if limits:
        return WhatIfReport(limits=tuple(limits), **report)
    order, stages = _stage_names(logged.settings)
    changed_order, changed_stages = _stage_names(changed)
    before = logged.run(store, extra_nodes=order)
    if bundle_sha256(before.bundle) != logged.payload["bundle_sha256"]:
        return WhatIfReport(limits=(
            "with its logged settings it no longer gives the logged bundle (sha256 "
            f"{logged.payload['bundle_sha256'][:16]}, replayed {bundle_sha256(before.bundle)[:16]}): it depended on "
            "something the log does not hold; `rms replay` says what differs",), **report)
    after = logged.run(store, changed, extra_nodes=changed_order)
    names = order + [name for name in changed_order if name not in stages]
    nodes = tuple(compare_node(name, stages.get(name) or changed_stages[name], before.nodes.get(name),
                               after.nodes.get(name)) for name in names)
    return WhatIfReport(limits=(), nodes=nodes, tokens_before=before.bundle.tokens_used,
                        tokens_after=after.bundle.tokens_used, **report)


def whatif(store: ReadableStore, request_id: str | UUID, changes: Mapping[str, Any], *,
           namespaces: Sequence[str] | None = None) -> WhatIfReport:
    """Run the logged request `request_id` with its logged settings and with `changes`
    ({"section.field": value}) applied, and compare them node by node (see the module docstring).
    With `namespaces`, a request that read any other namespace is not found, as if never logged."""
    try:
        record = find_record(store, request_id)
    except ReplayError as error:
        raise WhatIfError(str(error)) from None
    if not within_namespaces(record, namespaces):
        raise WhatIfError(f"no retrieval record {request_id} in {getattr(store, 'path', 'the store')}")
    return whatif_record(store, record, changes)


# ----- many requests ----------------------------------------------------------------------------


def logged_records(store: ReadableStore, *, last: int | None = None, since: datetime | None = None,
                   namespaces: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The successful logged requests (of those that read only `namespaces`, when given), oldest
    first: the latest `last`, or those logged at or after `since`."""
    if (last is None) == (since is None):
        raise WhatIfError("choose the requests with --last N or with --since TIME")
    if last is not None and last < 1:
        raise WhatIfError(f"--last must be at least 1, got {last}")
    since_ns = None if since is None else int(since.timestamp() * 1e9)
    picked = []
    entries = store.retrieval_log_newest_first(namespaces)
    try:
        for logged_at_ns, record in entries:
            if since_ns is not None and logged_at_ns < since_ns:
                break
            if (record.get("payload") or {}).get("status") == "ok":
                picked.append(record)
                if last is not None and len(picked) == last:
                    break
    finally:
        entries.close()
    return picked[::-1]


@dataclass(frozen=True)
class WhatIfSummary:
    """One change over many logged requests: how many bundles change, how many items enter and
    leave on average, which nodes the differences start at, and the requests that change most."""

    changes: Mapping[str, Any]
    reports: tuple[WhatIfReport, ...]

    @property
    def replayed(self) -> tuple[WhatIfReport, ...]:
        return tuple(r for r in self.reports if r.replayable)

    def most_changed(self, count: int = 5) -> list[WhatIfReport]:
        """The replayed requests whose bundles change most (items in and out, then nodes changed)."""
        changed = [r for r in self.replayed if r.bundle_changed or r.changed_nodes]
        return sorted(changed, key=lambda r: (-(r.items_entered + r.items_left), -len(r.changed_nodes),
                                              r.request_id))[:count]

    def to_dict(self, top: int = 5) -> dict[str, Any]:
        replayed = self.replayed
        return {
            "changes": dict(self.changes),
            "requests": len(self.reports),
            "replayed": len(replayed),
            "not_replayable": {r.request_id: list(r.limits) for r in self.reports if not r.replayable},
            "bundles_changed": sum(r.bundle_changed for r in replayed),
            "mean_items_entered": mean(r.items_entered for r in replayed) if replayed else None,
            "mean_items_left": mean(r.items_left for r in replayed) if replayed else None,
            "first_difference": dict(Counter(r.first_difference for r in replayed if r.first_difference).most_common()),
            "nodes_changed": dict(Counter(n for r in replayed for n in r.changed_nodes).most_common()),
            "most_changed": [{"request_id": r.request_id, "query": r.query, "items_entered": r.items_entered,
                              "items_left": r.items_left, "first_difference": r.first_difference}
                             for r in self.most_changed(top)],
        }

    def to_text(self, top: int = 5) -> str:
        summary = self.to_dict(top)
        changes = ", ".join(f"{path}={json.dumps(value)}" for path, value in self.changes.items())
        lines = [f"what if {changes}, over {summary['requests']} logged requests:"]
        if summary["not_replayable"]:
            reasons = Counter(limit.split(":")[0] for limits in summary["not_replayable"].values() for limit in limits)
            lines.append(f"  {len(summary['not_replayable'])} not replayable exactly, left out: "
                         + "; ".join(f"{reason} ({count})" for reason, count in reasons.most_common()))
        if not summary["replayed"]:
            lines.append("  no request could be replayed exactly: no what-if to report")
            return "\n".join(lines)
        lines.append(f"  {summary['bundles_changed']} of {summary['replayed']} bundles change; on average "
                     f"{summary['mean_items_entered']:.2f} items enter and {summary['mean_items_left']:.2f} leave")
        starts = ", ".join(f"{node} {count}" for node, count in summary["first_difference"].items())
        lines.append(f"  the differences start at: {starts or 'no node'}")
        counts = ", ".join(f"{node} {count}" for node, count in summary["nodes_changed"].items())
        lines.append(f"  nodes that change (requests): {counts or 'none'}")
        if summary["most_changed"]:
            lines.append("  the requests that change most (look at these with `rms whatif --store DIR REQUEST_ID ...`):")
            lines += [f"    {r['request_id']}  +{r['items_entered']} -{r['items_left']} items, from "
                      f"{r['first_difference']}: {r['query']!r}" for r in summary["most_changed"]]
        return "\n".join(lines)


def whatif_graph(report: WhatIfReport) -> graphviz.Digraph:
    """The DAG under the changed settings with the nodes whose value changed drawn in red, each
    with what changed (needs the [viz] extra)."""
    from rms_retrieval.dataflows.audit import dag_graph

    notes = {n.node: f"{n.before}\n-> {n.after}" + (f"\n+{len(n.entered)} -{len(n.left)} objects" if n.entered or n.left
                                                   else "") for n in report.nodes if n.changed}
    changes = ", ".join(f"{path}={json.dumps(value)}" for path, value in report.changes.items())
    title = (f"what if {changes} for {report.query!r}: first difference {report.first_difference or 'none'}, "
             f"{len(report.changed_nodes)} nodes change (red)")
    return dag_graph(report.settings, notes=notes, marked=report.changed_nodes, title=title)


def whatif_many(store: ReadableStore, records: Iterable[Mapping[str, Any]], changes: Mapping[str, Any]) -> WhatIfSummary:
    """The change over each record (`logged_records`), summarised."""
    changed_settings(RetrievalSettings(), changes)  # an unknown setting fails before anything runs
    return WhatIfSummary(dict(changes), tuple(whatif_record(store, record, changes) for record in records))
