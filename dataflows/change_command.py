"""`rms update`, `rms delete`, `rms erase` and `rms compact`: change what a store holds.

Each names its namespace; an id of another namespace is reported like an unknown one. Field
values are JSON (`--set salience=0.9`, `--set 'metadata={"topic": "river"}'`); a bare word is
taken as a string (`--set lifecycle_state=ARCHIVED`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from uuid import UUID

from rms_retrieval.dataflows.cli_support import CliError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `update`, `delete`, `erase` and `compact` to the `rms` parser."""
    update = sub.add_parser("update", help="change fields of one stored object (a content change is indexed again)")
    update.add_argument("--store", required=True)
    update.add_argument("--namespace", required=True)
    update.add_argument("--id", required=True, type=_object_id)
    update.add_argument("--set", action="append", required=True, metavar="FIELD=VALUE", type=_assignment,
                        help="lifecycle_state, epistemic_type, confidence, salience, valid_to, metadata or content")
    update.set_defaults(run=_cmd_update)

    delete = sub.add_parser("delete", help="delete stored objects by id (their bytes go at the next compaction)")
    delete.add_argument("--store", required=True)
    delete.add_argument("--namespace", required=True)
    delete.add_argument("ids", nargs="+", type=_object_id, metavar="ID")
    delete.set_defaults(run=_cmd_delete)

    erase = sub.add_parser("erase", help="delete by namespace, owner or filter, compact, and forget their log records")
    erase.add_argument("--store", required=True)
    erase.add_argument("--namespace")
    erase.add_argument("--owner")
    erase.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE", type=_assignment,
                       help="owner, scope, session_id, node_type, source_ref, lifecycle_state, epistemic_type "
                            "or metadata.<key>; exact match")
    erase.set_defaults(run=_cmd_erase)

    compact = sub.add_parser("compact", help="rewrite segments without deleted rows and remove every unnamed file now")
    compact.add_argument("--store", required=True)
    compact.set_defaults(run=_cmd_compact)


def _object_id(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an object id (a UUID such as 0b6e1c9e-...)") from None


def _assignment(text: str) -> tuple[str, Any]:
    field, equals, value = text.partition("=")
    if not equals or not field:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIELD=VALUE")
    try:
        return field, json.loads(value)
    except ValueError:
        return field, value


def _writable(path: str):
    from pathlib import Path

    from rms_retrieval.dataflows.cli_support import open_store

    if not (Path(path) / "manifest.json").exists():
        raise CliError(f"no store at {path}; build one with `rms ingest` or `rms ingest-locomo`")
    return open_store(path, create=True)


def _cmd_update(args: argparse.Namespace) -> int:
    with _writable(args.store) as store:
        report = store.update(args.namespace, args.id, dict(args.set))
    print(f"updated {args.id} (generation {report.generation})")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    with _writable(args.store) as store:
        report = store.delete(args.namespace, args.ids)
    print(f"deleted {len(report.object_ids)} objects (generation {report.generation}); "
          f"their bytes go at the next `rms compact --store {args.store}`")
    return 0


def _cmd_erase(args: argparse.Namespace) -> int:
    with _writable(args.store) as store:
        report = store.erase(args.namespace, owner=args.owner, where=dict(args.where))
    print(f"erased {len(report.object_ids)} objects and compacted (generation {report.generation})")
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    with _writable(args.store) as store:
        generation = store.compact()
    print(f"compacted (generation {generation})")
    return 0
