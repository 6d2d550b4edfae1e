"""`rms ingest` and `rms ingest-locomo`: build or extend a store, all or nothing, with progress bars."""

from __future__ import annotations

import argparse
from pathlib import Path

from rms_retrieval.dataflows.batch_command import add_engine_options
from rms_retrieval.dataflows.cli_support import CliError, open_store


def _cmd_ingest(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.ingest import read_jsonl, read_message_lines

    objects = (read_message_lines if args.format == "messages" else read_jsonl)(Path(args.path))
    if args.engine != "local" or args.address is not None or args.workers is not None:
        from rms_retrieval.dataflows.batch import ingest_with_workers

        if args.expansion is not None:
            raise CliError("--expansion works with the local engine only (the workers embed each turn's own "
                           "content); drop --engine/--address/--workers, or --expansion")
        report = ingest_with_workers(objects, args.store, engine=args.engine, address=args.address,
                                     workers=args.workers, progress=True)
    else:
        with open_store(args.store, create=True, expansion=args.expansion) as store:
            report = store.add(objects, progress=True)
    print(f"added {report.objects_added} objects, {report.entities_added} entities, "
          f"{report.edges_added} edges to {args.store} in {report.seconds:.1f} s")
    return 0


def _cmd_ingest_locomo(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.ingest import ingest_locomo

    from rms_retrieval.stores.analysis.expansion import expansion_named

    expansion = None if args.expansion is None else expansion_named(args.expansion)
    report, dataset = ingest_locomo(Path(args.path), args.store, expansion=expansion)
    issues = dataset.evidence_report()
    print(f"added {report.objects_added} objects, {report.entities_added} entities, {report.edges_added} edges "
          f"from {len(dataset.conversations)} conversations in {report.seconds:.1f} s "
          f"({report.objects_added / max(report.seconds, 1e-9):.0f} objects/s)")
    print(f"{len(issues)} questions have malformed or missing evidence ids (normalised, not dropped):")
    for question in issues:
        print(f"  {question.sample_id} #{question.index}: {'; '.join(question.evidence_issues)}")
    return 0


def _expansion_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expansion", metavar="NAME",
                        help="ingest-time expansion of an empty store: off, previous, previous-lexical, previous-both, "
                             "previous-next, previous-next-both (stores/analysis/expansion.py); a store with objects keeps its own")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `ingest` and `ingest-locomo` to the `rms` parser."""
    ingest = sub.add_parser("ingest", help="add MemoryObjects or chat messages from a JSON Lines file (all or nothing)")
    ingest.add_argument("path")
    ingest.add_argument("--format", choices=("objects", "messages"), default="objects",
                        help="objects: one MemoryObject per line; messages: one chat message per line, "
                             '{"namespace", "session_id", "role", "content", optional "name", "created_at", '
                             '"metadata", "source_ref", "id"}, each session continued in file order')
    ingest.add_argument("--store", required=True)
    _expansion_option(ingest)
    add_engine_options(ingest)
    ingest.set_defaults(run=_cmd_ingest)

    locomo = sub.add_parser("ingest-locomo", help="build a store from LoCoMo (one namespace per conversation)")
    locomo.add_argument("path")
    locomo.add_argument("--store", required=True)
    _expansion_option(locomo)
    locomo.set_defaults(run=_cmd_ingest_locomo)
