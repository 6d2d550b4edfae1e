"""docs/module_graph.py: the committed diagram matches the code, and the layer rules hold."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "docs" / "module_graph.py"
_SPEC = importlib.util.spec_from_file_location("module_graph", _PATH)
module_graph = importlib.util.module_from_spec(_SPEC)
sys.modules["module_graph"] = module_graph  # dataclasses look their module up by name
_SPEC.loader.exec_module(module_graph)
Import = module_graph.Import


def test_the_committed_diagram_matches_the_code():
    text = module_graph.render(module_graph.module_graph())
    assert (module_graph.ROOT / module_graph.DIAGRAM).read_text() == text, (
        "docs/modules.md is stale: run python docs/module_graph.py")


def test_no_import_points_up_the_layers_and_nodes_import_no_storage_engine():
    assert module_graph.violations(module_graph.module_graph()) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"rms_retrieval" = "rms_retrieval"\n"rms_retrieval.dataflows" = "dataflows"\n'
        '"rms_retrieval.nodes" = "nodes"\n"rms_retrieval.stores" = "stores"\n')
    (root / "docs").mkdir()
    for name, text in {"rms_retrieval/__init__.py": "", "dataflows/__init__.py": "", "nodes/__init__.py": "",
                       "stores/__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


BROKEN = {
    "stores/a.py": "from rms_retrieval.nodes import b\n",
    "nodes/b.py": "import duckdb\n\ndef f():\n    from rms_retrieval.dataflows.c import x\n",
    "nodes/rel.py": "from .b import y\nfrom . import b\nimport faiss.contrib\n",
    "dataflows/c.py": "import numpy as np\nfrom rms_retrieval.stores.a import thing\n\ndef g():\n"
                      "    from rms_retrieval.stores import a\n",
}


def test_imports_are_read_from_the_source_with_their_kind(tmp_path):
    graph = module_graph.module_graph(_tree(tmp_path, BROKEN))
    r = "rms_retrieval."
    assert graph.imports == (
        Import(r + "dataflows.c", r + "stores.a", deferred=False),  # also imported in g(): module level wins
        Import(r + "nodes.b", r + "dataflows.c", deferred=True),
        Import(r + "nodes.rel", r + "nodes.b", deferred=False),
        Import(r + "stores.a", r + "nodes.b", deferred=False),
    )
    assert graph.external[r + "dataflows.c"] == {"numpy"} and graph.external[r + "nodes.rel"] == {"faiss"}
    assert r + "nodes" in graph.packages and r + "nodes.b" not in graph.packages


def test_upward_imports_and_storage_engines_in_nodes_are_reported(tmp_path):
    graph = module_graph.module_graph(_tree(tmp_path, BROKEN))
    assert module_graph.violations(graph) == [
        "rms_retrieval.nodes.b imports rms_retrieval.dataflows.c: rms_retrieval.nodes must not import "
        "rms_retrieval.dataflows",
        "rms_retrieval.stores.a imports rms_retrieval.nodes.b: rms_retrieval.stores must not import "
        "rms_retrieval.nodes",
        "rms_retrieval.nodes.b imports duckdb: nodes/ stays free of storage engines",
        "rms_retrieval.nodes.rel imports faiss: nodes/ stays free of storage engines",
        "import cycle: rms_retrieval.dataflows.c, rms_retrieval.nodes.b, rms_retrieval.stores.a import each other "
        "(imports inside functions count)",
    ]


CYCLES = {
    # A function-level import back to the importer: a cycle.
    "dataflows/cli.py": "from rms_retrieval.dataflows import support\n",
    "dataflows/support.py": "def f():\n    from rms_retrieval.dataflows.cli import main\n",
    # The root package imports lazily by name; a module that imports the root closes a cycle.
    "rms_retrieval/__init__.py": ("from importlib import import_module\n_PUBLIC = {'x': 'rms_retrieval.stores.log'}\n"
                                  "def __getattr__(name):\n    return import_module(_PUBLIC[name])\n"),
    "stores/log.py": "from rms_retrieval import __version__\n",
    # An import under TYPE_CHECKING never runs: no cycle.
    "stores/protocols.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rms_retrieval.stores.adj import A\n",
    "stores/adj.py": "from rms_retrieval.stores.protocols import Edge\n",
}


def test_import_cycles_are_found_with_function_level_and_lazy_imports_counted(tmp_path):
    graph = module_graph.module_graph(_tree(tmp_path, CYCLES))
    assert module_graph.cycles(graph) == [
        ("rms_retrieval", "rms_retrieval.stores.log"),
        ("rms_retrieval.dataflows.cli", "rms_retrieval.dataflows.support"),
    ]
    assert Import("rms_retrieval.stores.protocols", "rms_retrieval.stores.adj", False, typing_only=True) in graph.imports
    assert Import("rms_retrieval", "rms_retrieval.stores.log", deferred=True) in graph.imports


@pytest.mark.parametrize("files, exit_codes, drawn", [
    ({"stores/a.py": "", "nodes/b.py": "from rms_retrieval.stores import a\n"}, (1, 0, 0), "nodes_b --> stores_a"),
    (BROKEN, (1, 1, 1), "nodes_b -.-> dataflows_c"),
])
def test_check_fails_while_stale_or_broken_and_writing_makes_it_current(tmp_path, capsys, files, exit_codes, drawn):
    root = _tree(tmp_path, files)
    before_writing = module_graph.main(["--check", "--root", str(root)])
    written = module_graph.main(["--root", str(root)])
    after_writing = module_graph.main(["--check", "--root", str(root)])
    assert (before_writing, written, after_writing) == exit_codes
    assert f"    {drawn}\n" in (root / "docs" / "modules.md").read_text()
    assert "docs/modules.md is stale: run python docs/module_graph.py" in capsys.readouterr().err
