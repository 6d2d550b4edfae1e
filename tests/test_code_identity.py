"""dataflows/code_identity.py: the fingerprint covers every module a bundle depends on, found from the imports."""

from __future__ import annotations

import importlib

from rms_retrieval import __version__
from rms_retrieval.dataflows import retrieval
from rms_retrieval.dataflows.code_identity import code_fingerprint, code_identity, dependency_modules, package_version
from rms_retrieval.stores import snapshot

RETRIEVE_ROOTS = (retrieval.__name__, snapshot.__name__)


def _package(root, files: dict[str, str], name: str) -> None:
    """Write the package under `name` (one per test: a found module's spec stays cached)."""
    for name_, text in files.items():
        name_, text = name_.replace("fpdemo", name), text.replace("fpdemo", name)
        path = root / name_
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    importlib.invalidate_caches()


DEMO = {
    "fpdemo/__init__.py": "",
    "fpdemo/stage.py": ("'''A stage.'''\nimport json\nfrom fpdemo import models\n\n"
                        "def node():\n    from .helpers import (\n        tidy,\n        sort_key as key,\n    )\n"
                        "    import fpdemo.deep.leaf as leaf\n"),
    "fpdemo/models.py": "X = 1\n",
    "fpdemo/helpers.py": "from fpdemo.models import X\n\ndef tidy():\n    return X\n\ndef sort_key():\n    return 0\n",
    "fpdemo/deep/__init__.py": "",
    "fpdemo/deep/leaf.py": "LEAF = 1\n",
    "fpdemo/unused.py": "UNUSED = 1\n",
}


def test_every_import_is_followed_module_level_function_level_and_relative(tmp_path, monkeypatch):
    _package(tmp_path, DEMO, "fpdemo_a")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert dependency_modules(["fpdemo_a.stage"], "fpdemo_a") == tuple(f"fpdemo_a{name}" for name in (
        "", ".deep", ".deep.leaf", ".helpers", ".models", ".stage"))


def test_changing_a_helper_module_changes_the_fingerprint_and_an_unused_one_does_not(tmp_path, monkeypatch):
    _package(tmp_path, DEMO, "fpdemo_b")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_fingerprint(["fpdemo_b.stage"], "fpdemo_b")
    _package(tmp_path, {"fpdemo/unused.py": "UNUSED = 2\n"}, "fpdemo_b")
    assert code_fingerprint(["fpdemo_b.stage"], "fpdemo_b") == before
    _package(tmp_path, {"fpdemo/deep/leaf.py": "LEAF = 2\n"}, "fpdemo_b")
    assert code_fingerprint(["fpdemo_b.stage"], "fpdemo_b") != before


def test_a_bundle_s_fingerprint_covers_the_helpers_of_the_stages_and_the_store():
    covered = set(dependency_modules(RETRIEVE_ROOTS))
    helpers = {f"rms_retrieval.nodes.helpers.{name}" for name in
               ("temporal", "eligibility", "graph_walk", "formatting", "tokens")}
    helpers |= {f"rms_retrieval.nodes.{name}" for name in ("models", "settings", "reformulation")}
    stages = {f"rms_retrieval.nodes.{name}" for name in ("query_analysis", "candidate_generation", "merging",
                                                          "filtering", "scoring", "reranking", "session_context",
                                                          "packing")}
    assert helpers | stages | {"rms_retrieval.stores.indexes.lexical", "rms_retrieval.stores.indexes.vector_index"} <= covered
    # Finding them imports nothing that a query process does not already need.
    assert "rms_retrieval.dataflows.cli" not in covered and "rms_retrieval.stores.engine.writer" not in covered


def test_the_logged_identity_is_the_version_and_the_fingerprint_of_those_modules():
    identity = code_identity(RETRIEVE_ROOTS)
    assert identity == {"package_version": package_version(), "dag_fingerprint": code_fingerprint(RETRIEVE_ROOTS)}
    assert package_version() == __version__ and len(identity["dag_fingerprint"]) == 64
