"""`rms bench ingest` and `rms bench crash`: the store's write-cost and kill benchmarks."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

EXIT_FAILED_CHECK = 1


def register(commands: argparse._SubParsersAction) -> None:
    """Add `ingest` and `crash` under `rms bench`."""
    from rms_retrieval.dataflows.bench.ingest_bench import INGEST_SIZES, SINGLES

    ingest = commands.add_parser("ingest", help="one-turn add latency by store size, and bulk throughput")
    ingest.add_argument("--out", required=True, help="directory for ingest_results.json and the store")
    ingest.add_argument("--sizes", nargs="+", type=int, default=list(INGEST_SIZES), metavar="N",
                        help="store sizes (default 1000 10000 100000; add 1000000 for the slow one)")
    ingest.add_argument("--singles", type=int, default=SINGLES, help=f"one-turn adds timed per size (default {SINGLES})")
    ingest.set_defaults(run=_cmd_ingest)

    crash = commands.add_parser("crash", help="SIGKILL a writing process at random moments, check the store")
    crash.add_argument("--kills", type=int, default=50)
    crash.add_argument("--seed", type=int, default=0)
    crash.set_defaults(run=_cmd_crash)


def _cmd_ingest(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench.ingest_bench import run_ingest

    if min(args.sizes) < 1 or args.singles < 1:
        raise ValueError("--sizes and --singles must be positive")
    out = Path(args.out)
    store = out / "ingest-store"
    if store.exists():
        shutil.rmtree(store)
    out.mkdir(parents=True, exist_ok=True)
    results = run_ingest(store, args.sizes, singles=args.singles)
    (out / "ingest_results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out / 'ingest_results.json'}")
    return 0


def _cmd_crash(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench.crash_bench import run_kills

    if args.kills < 1:
        raise ValueError("--kills must be at least 1")
    with tempfile.TemporaryDirectory() as directory:
        result = run_kills(Path(directory) / "store", args.kills, seed=args.seed)
    print(f"{result['kills']} kills: {len(result['problems'])} problems, {result['rounds_with_leftovers']} rounds "
          f"left files the next write removed, {result['turns_at_end']} turns at the end")
    for problem in result["problems"]:
        print(f"FAILED: {problem}", file=sys.stderr)
    return EXIT_FAILED_CHECK if result["problems"] else 0
