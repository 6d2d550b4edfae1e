"""`make package-check`: the package as a user gets it, outside the repository.

Builds the sdist and the wheel, installs the wheel (not editable, core only: no extras) with
`-c constraints.txt` into a fresh virtualenv in a temporary directory, and from another
directory runs `rms demo`, one `rms query` (nothing may reach stderr), `rms dag` (must name
the [viz] extra, which a core install lacks) and a script that calls `retrieve()`. pip reuses
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
import tempfile
import time
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


def _run(step: str, command: list[str], *, cwd: Path, env: dict[str, str], expect: int = 0) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    print(f"{step}: {time.perf_counter() - started:.1f} s (exit {done.returncode})", flush=True)
    if done.returncode != expect:
        raise CheckFailed(f"{step} exited {done.returncode}, expected {expect}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def check(work: Path) -> None:
    # The child processes see no repository on their path and no HF_HUB_OFFLINE: the installed
    # package must find its model by itself.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "HF_HUB_OFFLINE", "VIRTUAL_ENV"}}
    dist, venv, elsewhere = work / "dist", work / "venv", work / "elsewhere"
    elsewhere.mkdir()
    _run("build sdist and wheel", [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=work, env=env)
    [wheel] = dist.glob("rms_retrieval-*.whl")
    if not list(dist.glob("rms_retrieval-*.tar.gz")):
        raise CheckFailed("python -m build made no sdist")
    _run("fresh virtualenv", [sys.executable, "-m", "venv", str(venv)], cwd=work, env=env)
    _run("pip install the wheel -c constraints.txt", [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "-c", str(ROOT / "constraints.txt"), str(wheel)], cwd=work, env=env)
    rms = str(venv / "bin" / "rms")
    store = str(work / "demo-store")
    demo = _run("rms demo", [rms, "demo", "--store", store], cwd=elsewhere, env=env)
    if demo.stdout.count("question: ") < 1:
        raise CheckFailed(f"rms demo printed no bundle:\n{demo.stdout[-2000:]}")
    query = _run("rms query", [rms, "query", "--store", store, "--namespace", "demo-priya-tomas", QUESTION],
                 cwd=elsewhere, env=env)
    if query.stderr:
        raise CheckFailed(f"a successful rms query wrote to stderr:\n{query.stderr[-2000:]}")
    dag = _run("rms dag without the [viz] extra", [rms, "dag", "--out", str(work / "dag.svg")], cwd=elsewhere, env=env,
               expect=2)
    if "[viz]" not in dag.stderr or dag.stderr.count("\n") != 1:
        raise CheckFailed(f"rms dag without graphviz should name the [viz] extra in one line:\n{dag.stderr}")
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
