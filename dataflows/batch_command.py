"""`rms batch`: answer a JSON Lines file of requests on local, Ray or Dask, into one Parquet file."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rms_retrieval.dataflows.batch_engines import ENGINES
from rms_retrieval.dataflows.cli_support import CliError


def add_engine_options(parser: argparse.ArgumentParser, engines: tuple[str, ...] = ENGINES) -> None:
    """--engine, --address and --workers, as `rms batch` and `rms ingest` take them."""
    parser.add_argument("--engine", choices=engines, default="local",
                        help="where the work runs (default local: this process)")
    parser.add_argument("--address", help="join a running cluster: auto or host:6379 for Ray, "
                                          "tcp://host:8786 for Dask (default: start one for this run)")
    parser.add_argument("--workers", type=int, help="worker processes of the cluster started for this run "
                                                    "(default: one per core for Ray, one for Dask)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `batch` to the `rms` parser."""
    from rms_retrieval.dataflows.batch import DEFAULT_SHARD_SIZE

    batch = sub.add_parser("batch", help="answer a JSON Lines file of requests into one Parquet file")
    batch.add_argument("--store", required=True, help="the store directory every request reads")
    batch.add_argument("--in", dest="requests", required=True,
                       help="JSON Lines, one request a line: query, namespaces, reference_time (ISO 8601 with "
                            "timezone), optional request_id, token_budget and the other request fields")
    batch.add_argument("--out", required=True, help="the Parquet file to write (one row per request)")
    batch.add_argument("--shard-size", type=int, default=DEFAULT_SHARD_SIZE,
                       help=f"requests per task (default {DEFAULT_SHARD_SIZE})")
    add_engine_options(batch)
    batch.set_defaults(run=_cmd_batch)


def _cmd_batch(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.batch import read_requests, retrieve_many, write_parquet

    out = Path(args.out)
    if not Path(args.store).is_dir():
        raise CliError(f"no store at {args.store}; build one with `rms ingest` or `rms ingest-locomo`")
    if not out.parent.is_dir():
        raise CliError(f"--out {out}: the directory {out.parent} does not exist; create it first")
    requests = read_requests(Path(args.requests))
    started = time.perf_counter()
    results = retrieve_many(args.store, requests, engine=args.engine, address=args.address,
                            workers=args.workers, shard_size=args.shard_size)
    seconds = time.perf_counter() - started
    write_parquet(results, out)
    failed = [result for result in results if result.error is not None]
    print(f"answered {len(results) - len(failed)} of {len(results)} requests on {args.engine} in {seconds:.1f} s "
          f"({len(results) / max(seconds, 1e-9):.1f} requests/s); wrote {out}")
    for result in failed[:5]:
        print(f"  failed {result.request_id}: {result.error}")
    if len(failed) > 5:
        print(f"  and {len(failed) - 5} more failed; the error column of {out} has each one")
    return 0
