"""`rms log compact` and `rms log tail`: the retrieval log's segments under `<store>/log/`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# What `rms log compact` keeps unless told otherwise: a month of requests (about 19 KB each).
DEFAULT_MAX_AGE_DAYS = 30.0



def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `log compact` and `log tail` to the `rms` parser."""
    log = sub.add_parser("log", help="the retrieval log: compact it, show its latest records")
    commands = log.add_subparsers(dest="log_command", required=True)
    compaction = commands.add_parser(
        "compact", help="merge the closed log segments into one, dropping records beyond the retention"
    )
    compaction.add_argument("--store", required=True, type=Path)
    compaction.add_argument("--max-age-days", type=float, default=DEFAULT_MAX_AGE_DAYS,
                            help=f"drop records older than this (default {DEFAULT_MAX_AGE_DAYS:g})")
    compaction.add_argument("--keep-all", action="store_true", help="keep records of any age")
    compaction.add_argument("--max-records", type=int, help="keep at most this many of the newest (default all)")
    compaction.set_defaults(run=_cmd_compact)
    tail = commands.add_parser("tail", help="print the latest records as JSON lines, oldest first")
    tail.add_argument("--store", required=True, type=Path)
    tail.add_argument("--limit", type=int, default=10, help="how many (default 10)")
    tail.add_argument("--namespace", action="append",
                      help="only requests that read nothing but these namespaces (repeat for several)")
    tail.set_defaults(run=_cmd_tail)


def _log_directory(store: Path) -> Path:
    from rms_retrieval.stores.log.retrieval_log import LOG_DIRECTORY

    if not store.is_dir():
        raise ValueError(f"no store at {store}; give the store directory with --store")
    return store / LOG_DIRECTORY


def _cmd_compact(args: argparse.Namespace) -> int:
    from rms_retrieval.stores.log.compaction import LogRetention, compact

    retention = LogRetention(max_age_days=None if args.keep_all else args.max_age_days, max_records=args.max_records)
    report = compact(_log_directory(args.store), retention)
    print(
        f"merged {report.segments_merged} closed segments: kept {report.records_kept} records, "
        f"dropped {report.records_dropped} beyond retention and {report.unreadable_lines} unreadable lines, "
        f"removed {report.leftovers_removed} leftovers; {report.bytes_before:,} -> {report.bytes_after:,} bytes"
    )
    return 0


def _cmd_tail(args: argparse.Namespace) -> int:
    from rms_retrieval.stores.log.retrieval_log import read_records

    for record in read_records(_log_directory(args.store), limit=args.limit, namespaces=args.namespace):
        print(json.dumps(record, sort_keys=True))
    return 0
