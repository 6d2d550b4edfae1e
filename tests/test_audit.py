"""DAG pictures: the whole DAG and one execution render to SVG, with types, configuration and values."""

from __future__ import annotations

from pathlib import Path

import graphviz
import pytest

from rms_retrieval.dataflows import audit
from rms_retrieval.dataflows.audit import DOT_MISSING, GraphvizMissingError, dag_graph, execution_graph, outline, render
from rms_retrieval.dataflows.pipeline import build_driver, pipeline_lineage
from rms_retrieval.nodes.settings import RetrievalSettings, ScoringSettings
from rms_retrieval.stores.memory_store import MemoryStore


@pytest.fixture(scope="module")
def store(demo_store):
    with MemoryStore.open(demo_store.path, create=False) as opened:
        yield opened


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_the_whole_dag_renders_every_node_with_its_type_and_configuration(tmp_path, fusion):
    settings = RetrievalSettings(scoring=ScoringSettings(fusion=fusion))
    svg = render(dag_graph(settings), tmp_path / "dag.svg").read_text()
    assert svg.startswith("<?xml") and "</svg>" in svg
    for name in pipeline_lineage(build_driver(settings)).computed:
        assert f">{name}<" in svg, name
    assert f"fusion={fusion}" in svg and settings.fingerprint() in svg
    assert f"@config.when(fusion={fusion})" in svg and "@config.when(reranker=off)" in svg
    assert "reformulation=off" in svg and ">RerankedPool" in svg
    assert ">CandidatePool" in svg and ">MemoryBundle<" in svg and ">rms_retrieval.nodes.scoring<" in svg
    assert "driver inputs" in svg


def test_one_execution_renders_the_nodes_that_ran_with_their_values(tmp_path, store, demo_store, monkeypatch):
    from rms_retrieval.nodes.bundle import MemoryBundle

    serialised = []  # the log record (which serialises the bundle) is never built: the request is the result's
    to_json = MemoryBundle.to_json
    monkeypatch.setattr(MemoryBundle, "to_json", lambda self: serialised.append(self) or to_json(self))
    graph, result = execution_graph(store, "Where does Tomas work now?", namespaces=[demo_store.namespace],
                                    reference_time=demo_store.reference_time, token_budget=300)
    assert serialised == []
    svg = render(graph, tmp_path / "run.svg").read_text()
    bundle = result.bundle
    assert f"{len(bundle.items)} items, {bundle.tokens_used}/300 tokens" in svg
    pool = result.nodes["merged_candidates"]
    assert f"{len(pool.candidates)} candidates" in svg
    assert f"{len(result.nodes['vector_candidates'].hits)} hits" in svg
    assert "Where does Tomas work now?" in svg and "intent ENTITY_LOOKUP" in svg
    assert render(graph, tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_dot_gets_the_install_hint_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GraphvizMissingError, match="apt-get install graphviz.*make system-deps"):
        render(dag_graph(), tmp_path / "dag.svg")
    assert not (tmp_path / "dag.svg").exists()


def test_dot_vanishing_after_the_check_gets_the_same_message(tmp_path, monkeypatch):
    def missing(*args, **kwargs):
        raise graphviz.ExecutableNotFound(("dot",))

    monkeypatch.setattr(graphviz.Digraph, "pipe", missing)
    with pytest.raises(GraphvizMissingError) as raised:
        render(dag_graph(), tmp_path / "dag.svg")
    assert str(raised.value) == DOT_MISSING


def test_an_unknown_picture_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"must be one of \.svg, \.png, \.pdf"):
        render(dag_graph(), tmp_path / "dag.gif")


def test_without_the_graphviz_bindings_the_message_names_the_viz_extra(tmp_path, monkeypatch, store, demo_store):
    monkeypatch.setitem(__import__("sys").modules, "graphviz", None)  # as if not installed
    for draw in (dag_graph, lambda: render(graphviz.Digraph(), tmp_path / "x.svg")):
        with pytest.raises(GraphvizMissingError) as raised:
            draw()
        assert str(raised.value) == audit.BINDINGS_MISSING and "[viz]" in str(raised.value)
    with pytest.raises(GraphvizMissingError, match=r"\[viz\]"):
        execution_graph(store, "Where does Tomas work now?", namespaces=[demo_store.namespace])


def test_an_execution_picture_names_nothing_of_another_namespace(tmp_path, store, demo_store):
    graph, result = execution_graph(store, "Where does Tomas work now? Is he a carpenter in Bristol?",
                                    namespaces=[demo_store.namespace], reference_time=demo_store.reference_time)
    svg = render(graph, tmp_path / "run.svg").read_text()
    values = "\n".join(repr(value) for value in result.nodes.values())
    for text in (svg, values):
        assert str(demo_store.other_namespace_id) not in text and "carpenter in Bristol." not in text


def test_the_committed_dag_picture_matches_the_code():
    """docs/retrieval_dag.{svg,png} are the README's picture, docs/retrieval_dag.txt their text form;
    `make dag` redraws all three."""
    import html
    import re
    import struct

    docs = Path(__file__).resolve().parents[1] / "docs"
    graph = dag_graph()
    committed = (docs / "retrieval_dag.txt").read_text(encoding="utf-8")
    assert committed == outline(graph), "the DAG changed: run `make dag` and commit docs/retrieval_dag.*"
    svg = (docs / "retrieval_dag.svg").read_text(encoding="utf-8")
    titles = {html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", svg)}
    edges = {f"{a}->{b}" for a, b in re.findall(r"^(\w+) -> (\w+)", committed, flags=re.M)}
    nodes = set(re.findall(r"^(\w+) \[label=", committed, flags=re.M))
    assert edges and nodes and edges | nodes <= titles, "docs/retrieval_dag.svg is not the picture of the code"
    assert {t for t in titles if "->" in t} == edges
    width_pt, height_pt = (float(v) for v in re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    png = (docs / "retrieval_dag.png").read_bytes()
    width_px, height_px = struct.unpack(">II", png[16:24])
    # The PNG is the same drawing at 96 dpi (the SVG's points are 1/72 inch).
    assert abs(width_px - width_pt * 96 / 72) <= 2 and abs(height_px - height_pt * 96 / 72) <= 2
