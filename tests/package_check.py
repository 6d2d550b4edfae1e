"""`make package-check`: the package as a user gets it, outside the repository.

Builds the sdist and the wheel from the files a clone holds (`source_tree`), installs the wheel
(not editable, core only: no extras) with `-c constraints.txt` into a fresh virtualenv in a
temporary directory, and from another directory runs `rms demo`, one `rms query` (nothing may reach stderr), `rms dag` (must name
the [viz] extra, which a core install lacks), `rms bench` (must say that the benchmarks run from a
checkout: the wheel holds the library only, `wheel_problems`) and a script that calls `retrieve()`. pip reuses
the wheels it has downloaded before (its cache, and any find-links the machine configures),
so a second run installs without the network. Prints each step's wall time; exits 1 on the
first failure. `--keep` leaves the temporary directory for a look.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Where does Tomas work now?"
SCRIPT = """
import sys
from pathlib import Path
import rms_retrieval
from rms_retrieval import MemoryStore, retrieve
from rms_retrieval.dataflows.demo import load_demo
from rms_retrieval.dataflows.locomo import reference_time

assert Path(rms_retrieval.__file__).is_relative_to(Path(sys.prefix)), rms_retrieval.__file__
corpus = load_demo()
with MemoryStore.open(sys.argv[1], create=False) as store:
    result = retrieve(store, sys.argv[2], namespaces=corpus.namespace,
                      reference_time=reference_time(corpus.dataset.conversations[0]), token_budget=300)
assert result.bundle.items and result.bundle.tokens_used <= 300
print(f"retrieve() from {rms_retrieval.__file__}: {len(result.bundle.items)} items, "
      f"{result.bundle.tokens_used}/300 tokens")
"""


class CheckFailed(Exception):
    pass


# What a user's wheel holds: the library, the demo conversation, and the LoCoMo loader (the demo
# corpus is in LoCoMo's format, and `rms ingest-locomo` is a user command).
WHEEL_MUST_HOLD = (
    "rms_retrieval/__init__.py", "rms_retrieval/langchain.py", "rms_retrieval/dataflows/cli.py",
    "rms_retrieval/dataflows/retrieval.py", "rms_retrieval/dataflows/locomo.py", "rms_retrieval/nodes/models.py",
    "rms_retrieval/stores/memory_store.py", "rms_retrieval/dataflows/data/demo_conversation.json",
)
# What it does not: the benchmarks (run from a checkout) and the test helpers.
WHEEL_MUST_NOT_HOLD = ("rms_retrieval/dataflows/bench/", "tests/")
SDIST_MUST_HOLD = {"pyproject.toml", "README.md", "dataflows/cli.py", "nodes/models.py", "stores/providers/embedding.py",
                   "rms_retrieval/__init__.py", "dataflows/data/demo_conversation.json"}


def wheel_problems(wheel: Path) -> list[str]:
    """What is wrong with the contents of `wheel`: one package, the `rms` script, WHEEL_MUST_HOLD
    and nothing under WHEEL_MUST_NOT_HOLD."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points[0]).decode() if entry_points else ""
    problems = []
    top_level = {name.split("/")[0] for name in names}
    if top_level != {"rms_retrieval", wheel.name.split("-py3")[0] + ".dist-info"}:
        problems.append(f"top-level names {sorted(top_level)}, not rms_retrieval and its dist-info")
    if "[console_scripts]\nrms = rms_retrieval.dataflows.cli:run" not in scripts:
        problems.append("no rms console script")
    problems += [f"lacks {name}" for name in WHEEL_MUST_HOLD if name not in names]
    problems += [f"holds {name}" for name in names if name.startswith(WHEEL_MUST_NOT_HOLD)]
    return problems


def sdist_problems(sdist: Path) -> list[str]:
    """What the sdist lacks of SDIST_MUST_HOLD."""
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    return [f"sdist lacks {name}" for name in sorted(SDIST_MUST_HOLD - names)]


def _run(step: str, command: list[str], *, cwd: Path, env: dict[str, str], expect: int = 0) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    print(f"{step}: {time.perf_counter() - started:.1f} s (exit {done.returncode})", flush=True)
    if done.returncode != expect:
        raise CheckFailed(f"{step} exited {done.returncode}, expected {expect}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def source_tree(target: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new ones it does not ignore), copied to
    `target`: what a clone holds. Built in place, a checkout would also hand setuptools its
    `rms_retrieval.egg-info` from the last editable install, whose file list still names files
    since moved or deleted, and the sdist would ship them."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise CheckFailed(f"the package check builds from a git checkout; git ls-files said: {listed.stderr.strip()}")
    for name in filter(None, listed.stdout.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the work tree is not in a clone of it
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def check(work: Path) -> None:
    # The child processes see no repository on their path and no HF_HUB_OFFLINE: the installed
    # package must find its model by itself. They write bytecode, as Python does by default: the
    # install compiles none (--no-compile below), and the first command compiles what it imports.
    # And they start from an empty encoder cache, as on a new machine: `rms demo` exports the ONNX
    # graph with what the core install brings (torch, transformers, onnx), and the later commands
    # read it.
    hidden = {"PYTHONPATH", "HF_HUB_OFFLINE", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "XDG_CACHE_HOME"}
    env = {k: v for k, v in os.environ.items() if k not in hidden} | {"RMS_CACHE_DIR": str(work / "encoder-cache")}
    dist, venv, elsewhere = work / "dist", work / "venv", work / "elsewhere"
    elsewhere.mkdir()
    source = source_tree(work / "source")
    _run("build sdist and wheel", [sys.executable, "-m", "build", "--outdir", str(dist), str(source)], cwd=work, env=env)
    [wheel] = dist.glob("rms_retrieval-*.whl")
    sdists = list(dist.glob("rms_retrieval-*.tar.gz"))
    if not sdists:
        raise CheckFailed("python -m build made no sdist")
    problems = wheel_problems(wheel) + sdist_problems(sdists[0])
    if problems:
        raise CheckFailed("the built package is wrong: " + "; ".join(problems))
    print(f"wheel contents: {len(WHEEL_MUST_HOLD)} required files, no benchmarks, no test helpers")
    _run("fresh virtualenv", [sys.executable, "-m", "venv", str(venv)], cwd=work, env=env)
    # --no-compile: compiling every module of torch and its peers ahead of time is half of the
    # install's time and checks nothing.
    _run("pip install the wheel -c constraints.txt", [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--no-compile", "-c", str(ROOT / "constraints.txt"), str(wheel)], cwd=work, env=env)
    rms = str(venv / "bin" / "rms")
    store = str(work / "demo-store")
    demo = _run("rms demo", [rms, "demo", "--store", store], cwd=elsewhere, env=env)
    if demo.stdout.count("question: ") < 1:
        raise CheckFailed(f"rms demo printed no bundle:\n{demo.stdout[-2000:]}")
    if not list((work / "encoder-cache").glob("minilm-*.onnx")):
        raise CheckFailed("rms demo on a new machine left no exported ONNX graph in RMS_CACHE_DIR")
    query = _run("rms query", [rms, "query", "--store", store, "--namespace", "demo-priya-tomas", QUESTION],
                 cwd=elsewhere, env=env)
    if query.stderr:
        raise CheckFailed(f"a successful rms query wrote to stderr:\n{query.stderr[-2000:]}")
    dag = _run("rms dag without the [viz] extra", [rms, "dag", "--out", str(work / "dag.svg")], cwd=elsewhere, env=env,
               expect=2)
    if "[viz]" not in dag.stderr or dag.stderr.count("\n") != 1:
        raise CheckFailed(f"rms dag without graphviz should name the [viz] extra in one line:\n{dag.stderr}")
    bench = _run("rms bench without the benchmarks", [rms, "bench", "locomo"], cwd=elsewhere, env=env, expect=2)
    if "repository checkout" not in bench.stderr or bench.stderr.count("\n") != 1:
        raise CheckFailed(f"rms bench in a wheel install should say where the benchmarks run, in one line:\n{bench.stderr}")
    script = elsewhere / "use_it.py"
    script.write_text(SCRIPT)
    print(_run("retrieve() from a script", [str(venv / "bin" / "python"), str(script), store, QUESTION],
               cwd=elsewhere, env=env).stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rms-package-check-"))
    try:
        check(work)
    except CheckFailed as error:
        print(f"package check FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("package check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
