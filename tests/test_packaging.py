"""The built wheel installs one package, `rms_retrieval`, plus the `rms` script; a user's own
`nodes.py`, `stores/` or `dataflows/` beside their script changes nothing the library imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """`python -m build` (sdist and wheel) into a temporary directory, as a user would run it."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def test_the_wheel_installs_exactly_one_package_and_the_rms_script(dist):
    [wheel] = dist.glob("rms_retrieval-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"rms_retrieval", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "[console_scripts]\nrms = rms_retrieval.dataflows.cli:main" in scripts
    for module in ("rms_retrieval/__init__.py", "rms_retrieval/langchain.py", "rms_retrieval/dataflows/cli.py",
                   "rms_retrieval/nodes/models.py", "rms_retrieval/stores/memory_store.py",
                   "rms_retrieval/dataflows/bench/command.py", "rms_retrieval/dataflows/data/demo_conversation.json"):
        assert module in names


def test_the_sdist_builds_the_same_package(dist):
    [sdist] = dist.glob("rms_retrieval-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "dataflows/cli.py", "nodes/models.py", "stores/embedding.py",
            "rms_retrieval/__init__.py", "dataflows/data/demo_conversation.json"} <= names


_SHADOWED = """
import json, sys
import rms_retrieval
from rms_retrieval import MemoryStore, retrieve
from rms_retrieval.dataflows.locomo import reference_time
from rms_retrieval.dataflows.demo import load_demo

corpus = load_demo()
with MemoryStore.open(sys.argv[1], create=False) as store:
    result = retrieve(store, "Where does Tomas work now?", namespaces=[corpus.namespace],
                      reference_time=reference_time(corpus.dataset.conversations[0]), log=False)
bare = sorted(m for m in sys.modules if m.split(".")[0] in {"nodes", "stores", "dataflows"})
print(json.dumps({"items": len(result.bundle.items), "bare": bare}))
"""


def test_a_users_nodes_py_and_stores_folder_change_nothing(tmp_path, demo_store):
    """A notebook's folder often holds a nodes.py or a stores/; they come first on sys.path."""
    (tmp_path / "nodes.py").write_text("raise ImportError('the user nodes.py was imported')\n")
    for package in ("stores", "dataflows"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f"raise ImportError('the user {package}/ was imported')\n")
    script = tmp_path / "analysis.py"
    script.write_text(_SHADOWED)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "HF_HUB_OFFLINE"}}
    done = subprocess.run([sys.executable, str(script), str(demo_store.path)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["items"] > 0 and report["bare"] == []
