"""What a user's wheel holds (checked on the built wheel by `make package-check`); a user's own
`nodes.py`, `stores/` or `dataflows/` beside their script changes nothing the library imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.package_check import WHEEL_MUST_HOLD, source_tree, wheel_problems

ROOT = Path(__file__).resolve().parents[1]


def _wheel(tmp_path: Path, names: list[str]) -> Path:
    wheel = tmp_path / "rms_retrieval-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in names:
            archive.writestr(name, "")
        archive.writestr("rms_retrieval-0.1.0.dist-info/entry_points.txt",
                         "[console_scripts]\nrms = rms_retrieval.dataflows.cli:run\n")
    return wheel


def test_the_wheel_check_asks_for_the_library_and_refuses_benchmarks_and_test_helpers(tmp_path):
    """`make package-check` builds the wheel (once) and runs this check on it (tests/package_check.py)."""
    assert wheel_problems(_wheel(tmp_path, list(WHEEL_MUST_HOLD))) == []
    shipped_bench = _wheel(tmp_path, [*WHEEL_MUST_HOLD, "rms_retrieval/dataflows/bench/command.py", "tests/factories.py"])
    assert wheel_problems(shipped_bench) == [
        "top-level names ['rms_retrieval', 'rms_retrieval-0.1.0.dist-info', 'tests'], not rms_retrieval and its dist-info",
        "holds rms_retrieval/dataflows/bench/command.py", "holds tests/factories.py"]
    assert wheel_problems(_wheel(tmp_path, [n for n in WHEEL_MUST_HOLD if "locomo" not in n])) == [
        "lacks rms_retrieval/dataflows/locomo.py"]


def test_the_packaging_lists_every_package_but_the_benchmarks():
    """pyproject.toml names the packages the wheel holds: every folder with an __init__.py but bench/."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {".".join([package, *init.parent.relative_to(ROOT / folder).parts])
                for package, folder in config["package-dir"].items() for init in (ROOT / folder).rglob("__init__.py")}
    assert "rms_retrieval.dataflows.bench" in packages
    assert set(config["packages"]) == packages - {"rms_retrieval.dataflows.bench"}


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


def test_the_package_is_built_from_what_a_clone_holds(tmp_path):
    """Not from the work tree as it lies: there, the egg-info an editable install left behind lists
    files since moved, and setuptools would put them in the sdist."""
    copied = source_tree(tmp_path / "source")
    assert (copied / "pyproject.toml").read_bytes() == (ROOT / "pyproject.toml").read_bytes()
    assert (copied / "dataflows" / "cli.py").is_file() and (copied / "tests" / "package_check.py").is_file()
    assert not (copied / "rms_retrieval.egg-info").exists() and not (copied / ".venv").exists()
    assert not list(copied.rglob("__pycache__"))
