"""`rms check` and `rms migrate`: verify a store's files, and upgrade a format-2 store."""

from __future__ import annotations

import argparse
from pathlib import Path

EXIT_DAMAGED = 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `check` and `migrate` to the `rms` parser."""
    check = sub.add_parser("check", help="verify every file of a store against its manifest's sha256")
    check.add_argument("--store", required=True)
    check.add_argument("--repair", action="store_true",
                       help="rebuild a lost or damaged manifest from the intact segments; damaged segments are set "
                            "aside under damaged/ and reported")
    check.set_defaults(run=_cmd_check)

    migrate = sub.add_parser("migrate", help="upgrade a store of the old format (store.duckdb + FAISS)")
    migrate.add_argument("--store", required=True)
    migrate.set_defaults(run=_cmd_migrate)


def _cmd_check(args: argparse.Namespace) -> int:
    from rms_retrieval.stores.engine.check import check_store

    if args.repair:
        from rms_retrieval.stores.providers.onnx_encoder import default_encoder
        from rms_retrieval.stores.engine.repair import repair_store

        print(repair_store(Path(args.store), lambda: default_encoder().identity).to_text())
    report = check_store(Path(args.store))
    print(report.to_text())
    return EXIT_DAMAGED if report.problems else 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from rms_retrieval.stores.engine.migrate import migrate_store

    print(migrate_store(Path(args.store)).to_text())
    return 0
