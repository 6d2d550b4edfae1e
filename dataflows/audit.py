"""Pictures of the retrieval DAG: the whole DAG as built, and the execution of one request.

Drawing needs the graphviz bindings (`pip install 'rms-retrieval[viz]'`) and Graphviz's `dot`
program; both are looked for only when a picture is made. Both pictures start from Hamilton's own drawings (`display_upstream_of`, `visualize_execution`) and
restate each function node's label: its name, its type, and either the stage module it comes
from (whole DAG) or a short summary of the value it produced (one execution). Nodes are
grouped by stage module; the graph label names the configuration the DAG was built with.
"""

from __future__ import annotations

import html
import shutil
from importlib import metadata
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hamilton import driver
from hamilton.htypes import get_type_as_string

from rms_retrieval.dataflows.node_types import value_summary
from rms_retrieval.dataflows.pipeline import FINAL_NODE, build_driver, pipeline_inputs, pipeline_lineage
from rms_retrieval.dataflows.retrieval import RetrievalResult, retrieve
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.providers.onnx_encoder import default_encoder
from rms_retrieval.stores.protocols import QueryEncoder, ReadableStore, snapshot_of

if TYPE_CHECKING:
    import graphviz

FORMATS = ("svg", "png", "pdf")
DOT_MISSING = ("Graphviz's `dot` program is not installed (or not on PATH); install it with "
               "`apt-get install graphviz` (or `make system-deps`) and retry")
BINDINGS_MISSING = ("drawing the DAG needs the graphviz Python package, part of the [viz] extra: "
                    "pip install 'rms-retrieval[viz]'")
_MARKED = {"style": "rounded,filled,bold", "fillcolor": "#f9d0cc", "color": "#c62828", "penwidth": "2.5"}
_STAGE_COLOURS = ("#eef4fb", "#f3f9ee", "#fdf6e9", "#f7eef9", "#eef8f7", "#fbeeee", "#f4f4f4")


class GraphvizMissingError(RuntimeError):
    """The graphviz bindings (the [viz] extra) or Graphviz's `dot` program are needed and missing."""


def require_bindings() -> None:
    """Fail early, naming the [viz] extra, when the graphviz Python package is missing."""
    try:
        import graphviz  # noqa: F401  (only whether it imports)
    except ImportError as error:
        raise GraphvizMissingError(BINDINGS_MISSING) from error


def require_dot() -> None:
    """Fail early, with the install hints, when the bindings or the `dot` program are missing."""
    require_bindings()
    if shutil.which("dot") is None:
        raise GraphvizMissingError(DOT_MISSING)


def _label(name: str, type_name: str, note: str, note_colour: str = "#555555") -> str:
    rows = [f"<b>{html.escape(name)}</b>", f"<i>{html.escape(type_name)}</i>"]
    rows += [f'<font point-size="10" color="{note_colour}">{html.escape(line)}</font>' for line in note.splitlines()]
    return "<" + "<br/>".join(rows) + ">"


def _variables(dr: driver.Driver) -> dict[str, driver.Variable]:
    return {v.name: v for v in dr.list_available_variables()}


def _stage_of(variable: driver.Variable) -> str:
    functions = variable.originating_functions or ()
    return functions[0].__module__ if functions else "inputs"


def _restyle(graph: graphviz.Digraph, dr: driver.Driver, notes: dict[str, str], note_colour: str,
             marked: Collection[str] = ()) -> graphviz.Digraph:
    """Re-declare each function node with a fuller label, inside one cluster per stage module,
    and list the driver inputs (hidden as boxes, named in each label) in one table. Nodes in
    `marked` are drawn in red.

    A later DOT statement for an existing node updates its attributes and cluster membership,
    so Hamilton's own styling (shapes, colours, the legend) is kept.
    """
    variables = _variables(dr)
    config = dr.graph.config
    stages: dict[str, list[str]] = {}
    inputs: set[str] = set()
    for name in notes:
        stages.setdefault(_stage_of(variables[name]), []).append(name)
    for position, (stage, names) in enumerate(stages.items()):
        with graph.subgraph(name=f"cluster_{stage.replace('.', '_')}") as cluster:
            cluster.attr(label=stage, style="rounded,filled", color="#bbbbbb",
                         fillcolor=_STAGE_COLOURS[position % len(_STAGE_COLOURS)], fontname="Helvetica")
            for name in names:
                variable = variables[name]
                reads = sorted(d for d in variable.required_dependencies | variable.optional_dependencies
                               if variables[d].is_external_input)
                inputs.update(reads)
                type_name = get_type_as_string(variable.type) or ""
                switch = variable.tags.get("hamilton.config")
                if switch:
                    type_name += f"  @config.when({switch}={config.get(switch, '?')})"
                note = notes[name] + (f"\nreads {', '.join(reads)}" if reads else "")
                emphasis = _MARKED if name in marked else {}
                cluster.node(name, label=_label(name, type_name, note, note_colour), **emphasis)
    rows = "".join(
        f"<tr><td align='left'>{html.escape(name)}</td><td align='left'><i>"
        f"{html.escape(get_type_as_string(variables[name].type) or '')}</i></td></tr>"
        for name in sorted(inputs)
    )
    graph.node("_driver_inputs", label=f"<<table border='0'><tr><td colspan='2'><b>driver inputs</b></td></tr>{rows}</table>>",
               shape="rectangle", style="dashed", fontname="Helvetica")
    return graph


def _graph_attr(title: str) -> dict[str, Any]:
    return {"graph_attr": {"label": title, "labelloc": "t", "fontsize": "16", "fontname": "Helvetica"}}


def _hamilton_version() -> str:
    try:
        return metadata.version("apache-hamilton")
    except metadata.PackageNotFoundError:
        return "unknown"


def dag_graph(settings: RetrievalSettings | None = None, *, notes: Mapping[str, str] | None = None,
              marked: Collection[str] = (), title: str | None = None) -> graphviz.Digraph:
    """The whole retrieval DAG for these settings: every node `packed_bundle` depends on, its type,
    its stage module, and (graph label) the Hamilton config and settings fingerprint it was built with.
    `notes` replace the docstring line of the nodes they name, `marked` nodes are drawn in red
    (what-if marks the nodes a change reaches), and `title` goes before the graph label."""
    require_bindings()
    settings = settings or RetrievalSettings()
    dr = build_driver(settings)
    lineage = pipeline_lineage(dr)
    config = ", ".join(f"{k}={v}" for k, v in settings.hamilton_config().items())
    label = (f"rms-retrieval DAG ({len(lineage.computed)} nodes): Hamilton config {config}; "
             f"settings fingerprint {settings.fingerprint()}; apache-hamilton {_hamilton_version()}")
    graph = dr.display_upstream_of(FINAL_NODE, graphviz_kwargs=_graph_attr(f"{title}\n{label}" if title else label),
                                   hide_inputs=True)
    variables = _variables(dr)
    notes = {name: (notes or {}).get(name) or _wrap(_first_line(variables[name].documentation))
             for name in lineage.computed}
    return _restyle(graph, dr, notes, "#555555", marked)


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def _wrap(text: str, width: int = 48) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join(lines + [line] if line else lines)


def execution_graph(
    store: ReadableStore,
    question: str | RetrievalRequest,
    *,
    settings: RetrievalSettings | None = None,
    encoder: QueryEncoder | None = None,
    **request_fields: Any,
) -> tuple[graphviz.Digraph, RetrievalResult]:
    """Run one request (not logged) and draw its execution: the nodes that ran, each with a
    summary of its value. `question` is a `RetrievalRequest`, or the question with the request
    fields as for `retrieve()`. Returns the picture and the result, whose `nodes` hold every value."""
    require_bindings()
    store = snapshot_of(store)  # the run and the drawing read one generation
    settings = settings or RetrievalSettings()
    encoder = encoder or default_encoder()
    dr = build_driver(settings)
    computed = pipeline_lineage(dr).computed
    result = retrieve(store, question, settings=settings, encoder=encoder, extra_nodes=computed, log=False,
                      **request_fields)
    request = result.request
    title = (f"{request.query!r} in {', '.join(request.namespaces)} at {request.reference_time:%Y-%m-%d %H:%M}; "
             f"{value_summary(result.bundle)}; config fusion={settings.scoring.fusion}, "
             f"settings {settings.fingerprint()}")
    graph = dr.visualize_execution([FINAL_NODE], inputs=pipeline_inputs(store, request, settings, encoder),
                                   graphviz_kwargs=_graph_attr(title), hide_inputs=True)
    notes = {name: value_summary(result.nodes[name]) for name in computed}
    return _restyle(graph, dr, notes, "#1a5e20"), result


def outline(graph: graphviz.Digraph) -> str:
    """The text form of `graph`: its DOT source's lines, sorted (Hamilton emits nodes and edges in
    hash-seed order), so equal pictures have equal outlines. docs/retrieval_dag.txt holds the
    README picture's."""
    return "\n".join(sorted({line.strip() for line in graph.source.splitlines() if line.strip()})) + "\n"


def render(graph: graphviz.Digraph, out: str | Path) -> Path:
    """Write `graph` to `out`; the suffix (.svg, .png, .pdf; .txt: its `outline`) picks the format."""
    out = Path(out)
    fmt = out.suffix.lstrip(".").lower()
    if fmt == "txt":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(outline(graph), encoding="utf-8")
        return out
    if fmt not in FORMATS:
        raise ValueError(f"{out}: the picture's suffix must be one of "
                         f"{', '.join('.' + f for f in (*FORMATS, 'txt'))}")
    require_dot()
    import graphviz

    try:
        picture = graph.pipe(format=fmt)
    except graphviz.ExecutableNotFound as error:
        raise GraphvizMissingError(DOT_MISSING) from error
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(picture)
    return out
