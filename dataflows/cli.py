"""The `rms` command line. Each command lives in a module of its own that exposes
`add_parser(subparsers)` and imports only argparse and `cli_support` at the top; a new command
is one row of COMMANDS. This module imports only the module of the command being run, and
handles every command's errors in one place: a user error (CliError, StoreError, a validation
error, ValueError, OSError) prints one line and exits 2, and `--verbose` adds the traceback.

`rms --help` imports none of the command modules, so it starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import logging
import os
import signal
import sys
import traceback
from collections.abc import Iterable, Sequence
from importlib import import_module

from rms_retrieval.dataflows.cli_support import EXIT_USAGE, CliError, one_line, skip_hamilton_plugins

# Command name -> (the module whose add_parser adds it, the one-line help `rms --help` shows).
# tests/test_cli.py checks that each module registers exactly these names with this help.
COMMANDS: dict[str, tuple[str, str]] = {
    "query": ("rms_retrieval.dataflows.query_command", "answer a question with a Memory Bundle"),
    "demo": ("rms_retrieval.dataflows.query_command", "build the embedded demo store and answer sample questions"),
    "assess": ("rms_retrieval.dataflows.assess_command",
               "check whether a packed bundle answers its question (a chat model cites its memories)"),
    "batch": ("rms_retrieval.dataflows.batch_command", "answer a JSON Lines file of requests into one Parquet file"),
    "ingest": ("rms_retrieval.dataflows.ingest_command", "add MemoryObjects or chat messages from a JSON Lines file (all or nothing)"),
    "ingest-locomo": ("rms_retrieval.dataflows.ingest_command",
                      "build a store from LoCoMo (one namespace per conversation)"),
    "dag": ("rms_retrieval.dataflows.audit_command",
            "draw the retrieval DAG, or one request's execution (needs Graphviz and the [viz] extra)"),
    "explain": ("rms_retrieval.dataflows.audit_command",
                "how one object's place in the bundle was decided, node by node"),
    "replay": ("rms_retrieval.dataflows.audit_command",
               "replay logged requests without the embedding model; compare bundles"),
    "whatif": ("rms_retrieval.dataflows.audit_command",
               "run logged requests again under changed settings; compare node by node"),
    "scan": ("rms_retrieval.dataflows.aggregate_command", "every matching stored object by id, one page at a time"),
    "aggregate": ("rms_retrieval.dataflows.aggregate_command",
                  "exact counts of structured claims and totals of grounded quantities"),
    "bench": ("rms_retrieval.dataflows.bench.command", "benchmarks: LoCoMo relevance and operations, scaling"),
    "check": ("rms_retrieval.dataflows.store_command", "verify every file of a store against its manifest's sha256"),
    "migrate": ("rms_retrieval.dataflows.store_command", "upgrade a store of the old format (store.duckdb + FAISS)"),
    "update": ("rms_retrieval.dataflows.change_command",
               "change fields of one stored object (a content change is indexed again)"),
    "delete": ("rms_retrieval.dataflows.change_command",
               "delete stored objects by id (their bytes go at the next compaction)"),
    "erase": ("rms_retrieval.dataflows.change_command",
              "delete by namespace, owner or filter, compact, and forget their log records"),
    "compact": ("rms_retrieval.dataflows.change_command",
                "rewrite segments without deleted rows and remove every unnamed file now"),
    "log": ("rms_retrieval.dataflows.log_command", "the retrieval log: compact it, show its latest records"),
    "mcp": ("rms_retrieval.dataflows.mcp_command", "serve a store to MCP hosts over stdio or HTTP (needs the [mcp] extra)"),
}
# Commands a repository checkout has and the wheel does not, and what to do instead.
REPOSITORY_ONLY = {
    "bench": "the benchmarks are not part of the installed package: they run from a repository checkout "
             "(make bench, or .venv/bin/rms bench --help there; README, \"Speed checks\")",
}
# Commands that answer once and end: `run()` leaves the collector off for their whole process.
ONE_SHOT_COMMANDS = frozenset({"query"})
VERBOSE = "--verbose"
# Optional imports and the extra that brings each (pyproject.toml), for a one-line hint.
EXTRA_OF_MODULE = {"matplotlib": "bench", "graphviz": "viz", "langchain_core": "langchain", "ray": "ray",
                   "dask": "dask", "distributed": "dask", "langchain_community": "peers", "rank_bm25": "peers", "mcp": "mcp"}


def build_parser(load: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The `rms` parser. Commands in `load` (all when None) get their full parsers from their
    modules; the others are listed by name and help only, which imports nothing."""
    wanted = set(COMMANDS) if load is None else set(load)
    parser = argparse.ArgumentParser(prog="rms", description="rms-retrieval: hybrid retrieval for conversational memory")
    parser.add_argument(VERBOSE, action="store_true",
                        help="on an error, print the traceback too (may be given anywhere on the line)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if name in wanted and name not in sub.choices:
            try:
                command_module = import_module(module)
            except ModuleNotFoundError as error:
                if name not in REPOSITORY_ONLY or not module.startswith(error.name or "\0"):
                    raise
                _add_absent(sub, name, help_text)
                continue
            command_module.add_parser(sub)
    for name, (_, help_text) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _add_absent(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    """`name` as a command that says how to run it where it is installed."""
    parser = sub.add_parser(name, help=help_text, add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)

    def run(args: argparse.Namespace) -> int:
        raise CliError(f"`rms {name}`: {REPOSITORY_ONLY[name]}")

    parser.set_defaults(run=run)


def _split_verbose(argv: Sequence[str]) -> tuple[list[str], bool]:
    """`--verbose` may follow the command, as users type it; argparse only takes it before."""
    args = list(argv)
    end = args.index("--") if "--" in args else len(args)
    verbose = VERBOSE in args[:end]
    return [a for i, a in enumerate(args) if i >= end or a != VERBOSE], verbose


def _command_name(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv, verbose = _split_verbose(sys.argv[1:] if argv is None else argv)
    command = _command_name(argv)
    args = build_parser([command] if command in COMMANDS else []).parse_args(argv)
    start = getattr(args, "start", None)  # what a command starts on a thread before the shared imports
    if start is not None:
        start()
    skip_hamilton_plugins()
    from pydantic import ValidationError

    from rms_retrieval.stores.errors import EmbeddingError, StoreError

    hamilton_log = logging.getLogger("hamilton")
    level = hamilton_log.level
    if not verbose:
        # Hamilton logs a banner and a traceback for a failing node before the error reaches
        # us; the one-line message is enough unless --verbose.
        hamilton_log.setLevel(logging.CRITICAL)
    try:
        return args.run(args)
    except (CliError, StoreError, EmbeddingError, ValidationError, ValueError, OSError, ModuleNotFoundError) as error:
        extra = EXTRA_OF_MODULE.get((getattr(error, "name", None) or "").split(".")[0])
        if isinstance(error, ModuleNotFoundError) and extra is None:
            raise
        if verbose:
            traceback.print_exc()
        message = (f"`rms {command}` needs {error.name}, part of the [{extra}] extra: "
                   f"pip install 'rms-retrieval[{extra}]'") if extra else one_line(error)
        print(f"error: {message}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        hamilton_log.setLevel(level)


def run() -> None:
    """The `rms` command: `main()`, then the process ends. Its objects are frozen out of the
    garbage collector first, so the interpreter's last collection does not scan everything the
    imports made (0.2 s of a cold `rms query`, a sixth of it); atexit hooks (the retrieval log's
    flush) still run, and memory goes back to the system with the process. Callers of `main()` in
    a process that goes on (tests, notebooks) keep their collector as it was.

    A command of ONE_SHOT_COMMANDS runs with no automatic collection at all: its imports make some
    300,000 objects, and the collections they set off scanned them again and again (0.11 s of a
    cold `rms query`), for the few cycles one answer leaves. Its process ends as soon as its
    threads are done and its atexit hooks have run, without the interpreter's teardown (module by
    module, object by object: 70 ms), through `_end_after_exit_hooks`, registered first so that it
    runs last."""
    status = [1]  # an exception that escapes main() ends the process with 1, as Python's own exit does
    if _command_name(_split_verbose(sys.argv[1:])[0]) in ONE_SHOT_COMMANDS:
        gc.disable()
        atexit.register(_end_after_exit_hooks, status)
    try:
        status[0] = code = main()
    except SystemExit as leaving:  # argparse's --help (0) and usage errors (2)
        status[0] = _exit_status(leaving.code)
        raise
    except KeyboardInterrupt:
        status[0] = 128 + signal.SIGINT  # what a shell reports of a process Ctrl-C ended
        raise
    gc.freeze()
    sys.exit(code)


def _exit_status(code: object) -> int:
    """The status Python gives `sys.exit(code)`: 0 for None, an int as it is, 1 for anything else."""
    return 0 if code is None else code if isinstance(code, int) else 1


def _end_after_exit_hooks(status: list[int]) -> None:
    """The process's end with `status[0]`, its output flushed: what the interpreter's teardown
    would do next is let go of memory the system takes back anyway. Python runs atexit hooks after
    it has joined every thread that is not a daemon (the encoder's load), last registered first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed stream: as Python's own end
            stream.flush()
    os._exit(status[0])


if __name__ == "__main__":
    run()
