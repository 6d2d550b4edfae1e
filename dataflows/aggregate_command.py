"""`rms scan` and `rms aggregate assertions|quantities|text`: the exact operations on a store.

Selector options take one or more values (ORed); leaving one out, or giving it no value, matches
every value. `--lifecycle` with no value matches nothing; left out, the default applies (ACTIVE
for scan, the epistemic mode's rule for aggregation). Aggregations print JSON.
"""

from __future__ import annotations

import argparse
from typing import Any
from uuid import UUID

from rms_retrieval.dataflows.cli_support import open_store
from rms_retrieval.stores.models import LifecycleState, NodeType

_NODE_TYPES = [member.value for member in NodeType]
_LIFECYCLES = [member.value for member in LifecycleState]
_QUERY_OPTIONS = (
    "scope", "subjects", "predicates", "objects", "polarities", "node_types", "lifecycle", "mode",
    "unverified_min_confidence", "event_time_from", "event_time_to", "valid_at", "knowledge_at", "max_groups",
    "max_samples", "predicate_prefixes", "units", "group_by",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `scan` and `aggregate` to the `rms` parser."""
    scan = sub.add_parser("scan", help="every matching stored object by id, one page at a time")
    _store_options(scan)
    scan.add_argument("--scope")
    scan.add_argument("--node-type", dest="node_types", nargs="+", choices=_NODE_TYPES, metavar="T",
                      help="default every type")
    scan.add_argument("--lifecycle", nargs="*", choices=_LIFECYCLES, metavar="S",
                      help="default ACTIVE; the option with no value matches nothing")
    scan.add_argument("--after", type=UUID, metavar="ID", help="the next_cursor of the previous page")
    scan.add_argument("--limit", type=int, default=100, help="page size (default 100)")
    scan.add_argument("--json", action="store_true", help="print the page's JSON")
    scan.set_defaults(run=_cmd_scan)

    aggregate = sub.add_parser("aggregate", help="exact counts of structured claims and totals of grounded quantities")
    commands = aggregate.add_subparsers(dest="aggregate_command", required=True)
    assertions = commands.add_parser("assertions", help="count claims by normalised subject, predicate, object, polarity")
    _claim_options(assertions)
    assertions.set_defaults(run=_cmd_assertions)
    quantities = commands.add_parser("quantities", help="exact per-unit totals of grounded quantities")
    _claim_options(quantities)
    quantities.add_argument("--predicate-prefix", dest="predicate_prefixes", nargs="*", metavar="P",
                            help="matches P and P_… (raised: raised_amount_for, not fundraised)")
    quantities.add_argument("--unit", dest="units", nargs="*", metavar="U")
    quantities.add_argument("--group-by", dest="group_by", nargs="*", choices=["subject", "predicate", "object", "polarity"],
                            help="fields grouped beside the unit")
    quantities.set_defaults(run=_cmd_quantities)
    text = commands.add_parser("text", help="plan a supported amount/count question and run it (fail-closed)")
    _store_options(text)
    text.add_argument("question")
    text.set_defaults(run=_cmd_text)


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", required=True)
    parser.add_argument("--namespace", required=True)


def _claim_options(parser: argparse.ArgumentParser) -> None:
    _store_options(parser)
    parser.add_argument("--scope")
    for option, name in (("--subject", "subjects"), ("--predicate", "predicates"), ("--object", "objects")):
        parser.add_argument(option, dest=name, nargs="*", metavar="VALUE")
    parser.add_argument("--polarity", dest="polarities", nargs="*", choices=["positive", "negative"],
                        help="default positive; the option with no value matches both")
    parser.add_argument("--node-type", dest="node_types", nargs="+", choices=_NODE_TYPES, metavar="T",
                        help="default FACT DECISION PREFERENCE")
    parser.add_argument("--lifecycle", nargs="*", choices=_LIFECYCLES, metavar="S",
                        help="authoritative when given; the option with no value matches nothing")
    parser.add_argument("--mode", choices=["DEFAULT", "EXPLICIT", "AUDIT"])
    parser.add_argument("--unverified-min-confidence", type=float)
    for option in ("--event-time-from", "--event-time-to", "--valid-at", "--knowledge-at"):
        parser.add_argument(option, metavar="ISO8601", help="with a timezone, e.g. 2024-05-01T00:00:00+00:00")
    parser.add_argument("--max-groups", type=int)
    parser.add_argument("--max-samples", type=int)


def _query_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The query fields given on the command line; the query model validates them."""
    given = {name: getattr(args, name, None) for name in _QUERY_OPTIONS}
    return {"namespace": args.namespace, **{name: value for name, value in given.items() if value is not None}}


def _open(path: str):
    return open_store(path, read_only=True)


def _cmd_scan(args: argparse.Namespace) -> int:
    from rms_retrieval.stores.exact.enumeration import DEFAULT_LIFECYCLE, scan_objects

    with _open(args.store) as store:
        page = scan_objects(
            store, namespace=args.namespace, scope=args.scope, node_type=args.node_types,
            lifecycle=DEFAULT_LIFECYCLE if args.lifecycle is None else args.lifecycle,
            after_id=args.after, limit=args.limit,
        )
    if args.json:
        print(page.model_dump_json(indent=2))
        return 0
    for memory in page.objects:
        print(f"{memory.id}  {memory.node_type:<11} {memory.lifecycle_state:<10} {' '.join(memory.content.split())}")
    print(f"more: rms scan ... --after {page.next_cursor}" if page.has_more else f"end ({len(page.objects)} on this page)")
    return 0


def _cmd_assertions(args: argparse.Namespace) -> int:
    from rms_retrieval.stores.exact.aggregation import AssertionQuery, aggregate_assertions

    query = AssertionQuery(**_query_fields(args))
    with _open(args.store) as store:
        print(aggregate_assertions(store, query).model_dump_json(indent=2))
    return 0


def _cmd_quantities(args: argparse.Namespace) -> int:
    from rms_retrieval.stores.exact.aggregation import QuantityQuery, aggregate_quantities

    query = QuantityQuery(**_query_fields(args))
    with _open(args.store) as store:
        print(aggregate_quantities(store, query).model_dump_json(indent=2))
    return 0


def _cmd_text(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.quantity_planner import aggregate_quantities_from_text

    with _open(args.store) as store:
        print(aggregate_quantities_from_text(store, args.question, namespace=args.namespace).model_dump_json(indent=2))
    return 0
