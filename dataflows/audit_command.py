"""`rms dag`, `rms explain`, `rms replay` and `rms whatif`: pictures of the DAG, score lineage, replay of
logged requests, and logged requests under changed settings.

Each opens the store read-only and none writes to the retrieval log: an audit leaves the store
as it found it.
"""

from __future__ import annotations

import argparse
import json
import sys
from uuid import UUID

from rms_retrieval.dataflows.cli_support import (
    CliError,
    check_budget,
    check_namespaces,
    check_question,
    open_store,
    parse_time,
    policy_arguments,
    request_arguments,
    settings_from,
)

EXIT_DIFFERENT = 1


def _settings(args: argparse.Namespace):
    from rms_retrieval.nodes.settings import RetrievalSettings, ScoringSettings

    return settings_from(args, RetrievalSettings(scoring=ScoringSettings(fusion=args.fusion)))


def _request(args: argparse.Namespace):
    """The RetrievalRequest the options describe."""
    from rms_retrieval.dataflows.retrieval import as_request

    return as_request(check_question(args.question), namespaces=args.namespace,
                      reference_time=parse_time(args.reference_time), token_budget=check_budget(args.budget),
                      limit=args.limit)


def _cmd_dag(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.audit import GraphvizMissingError, dag_graph, execution_graph, render, require_dot

    settings = _settings(args)
    try:
        require_dot()
        if args.question is None:
            path = render(dag_graph(settings), args.out)
            print(f"wrote the retrieval DAG (fusion={args.fusion}) to {path}")
            return 0
        if not args.store or not args.namespace:
            raise CliError("drawing one request's execution needs --store and --namespace")
        request = _request(args)
        with open_store(args.store, read_only=True) as store:
            check_namespaces(store, args.store, args.namespace)
            graph, result = execution_graph(store, request, settings=settings)
            path = render(graph, args.out)
    except GraphvizMissingError as error:
        raise CliError(str(error)) from error
    bundle = result.bundle
    print(f"wrote the execution of {args.question!r} ({len(bundle.items)} items, "
          f"{bundle.tokens_used}/{bundle.token_budget} tokens) to {path}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.explain import explain

    request = _request(args)
    try:
        object_id = UUID(args.id.strip())
    except ValueError as error:
        raise CliError(f"--id {args.id!r} is not an object id (a UUID)") from error
    with open_store(args.store, read_only=True) as store:
        check_namespaces(store, args.store, args.namespace)
        explanation = explain(store, request, object_id, settings=_settings(args))
    print(json.dumps(explanation.to_dict(), indent=2) if args.json else explanation.to_text())
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.replay import ReplayError, find_record, replay_record
    from rms_retrieval.stores.log.retrieval_log import within_namespaces

    if not args.request_id and not args.last:
        raise CliError("name a REQUEST_ID to replay, or --last N for the latest N logged requests")
    with open_store(args.store, read_only=True) as store:
        if args.last:
            records = [r for r in store.retrieval_log(namespaces=args.namespace)
                       if (r.get("payload") or {}).get("status") == "ok"][-args.last:]
        else:
            records = [find_record(store, request_id) for request_id in args.request_id]
            for request_id, record in zip(args.request_id, records):
                if not within_namespaces(record, args.namespace):  # exactly as if it were not logged
                    raise ReplayError(f"no retrieval record {request_id} in {args.store}; "
                                      "`rms replay --store DIR --last 5` replays the latest ones")
        reports = [replay_record(store, record) for record in records]
    for report in reports:
        print(report.to_text())
    same = sum(report.identical for report in reports)
    print(f"{same} of {len(reports)} replayed bundles are identical to the logged ones")
    return 0 if same == len(reports) else EXIT_DIFFERENT


def _cmd_whatif(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.whatif import logged_records, whatif, whatif_graph, whatif_many
    from rms_retrieval.dataflows.setting_changes import changed_settings, parse_change
    from rms_retrieval.nodes.settings import RetrievalSettings

    if not args.set:
        raise CliError("name the change with --set section.field=value (e.g. --set scoring.speaker_boost=0)")
    changes = dict(parse_change(text) for text in args.set)
    changed_settings(RetrievalSettings(), changes)  # an unknown setting fails before the store is read
    chosen = sum(bool(x) for x in (args.request_id, args.last, args.since))
    if chosen != 1:
        raise CliError("name one REQUEST_ID, or choose logged requests with --last N or --since TIME")
    if args.out and not args.request_id:
        raise CliError("--out draws one request's what-if: name a REQUEST_ID")
    with open_store(args.store, read_only=True) as store:
        if args.request_id:
            report = whatif(store, args.request_id, changes, namespaces=args.namespace)
        else:
            records = logged_records(store, last=args.last, since=parse_time(args.since) if args.since else None,
                                     namespaces=args.namespace)
            summary = whatif_many(store, records, changes)
    if not args.request_id:
        print(json.dumps(summary.to_dict(args.top), indent=2) if args.json else summary.to_text(args.top))
        return 0 if summary.replayed or not summary.reports else EXIT_DIFFERENT
    if args.out and report.replayable:
        from rms_retrieval.dataflows.audit import GraphvizMissingError, render

        try:
            path = render(whatif_graph(report), args.out)
        except GraphvizMissingError as error:
            raise CliError(str(error)) from error
        print(f"wrote the DAG with the {len(report.changed_nodes)} changed nodes marked to {path}", file=sys.stderr)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.to_text())
    return 0 if report.replayable else EXIT_DIFFERENT


def _request_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    request_arguments(parser, required=required)
    parser.add_argument("--limit", type=int, help="the request's item limit")
    parser.add_argument("--fusion", choices=["rrf", "weighted"], default="rrf", help="the score formula (Hamilton config)")
    policy_arguments(parser)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `dag`, `explain`, `replay` and `whatif` to the `rms` parser."""
    dag = sub.add_parser("dag", help="draw the retrieval DAG, or one request's execution (needs Graphviz and the [viz] extra)")
    dag.add_argument("--out", required=True, help="the picture: FILE.svg, FILE.png or FILE.pdf")
    _request_arguments(dag, required=False)
    dag.add_argument("question", nargs="?", help="draw the execution of this question (with --store, --namespace)")
    dag.set_defaults(run=_cmd_dag)

    explain = sub.add_parser("explain", help="how one object's place in the bundle was decided, node by node")
    _request_arguments(explain, required=True)
    explain.add_argument("--id", required=True, help="the object id to explain")
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON")
    explain.add_argument("question")
    explain.set_defaults(run=_cmd_explain)

    replay = sub.add_parser("replay", help="replay logged requests without the embedding model; compare bundles")
    replay.add_argument("--store", required=True)
    replay.add_argument("--last", type=int, help="replay the latest N successful requests")
    replay.add_argument("--namespace", action="append",
                        help="only requests that read nothing but these namespaces (repeat for several)")
    replay.add_argument("request_id", nargs="*", help="request ids from the retrieval log")
    replay.set_defaults(run=_cmd_replay)

    whatif = sub.add_parser("whatif", help="run logged requests again under changed settings; compare node by node")
    whatif.add_argument("--store", required=True)
    whatif.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE",
                        help="a changed setting, e.g. scoring.speaker_boost=0 (JSON values; repeat for more)")
    whatif.add_argument("--last", type=int, help="run the change over the latest N successful requests")
    whatif.add_argument("--since", help="run the change over the requests logged since this time (ISO 8601)")
    whatif.add_argument("--namespace", action="append",
                        help="only requests that read nothing but these namespaces (repeat for more)")
    whatif.add_argument("--top", type=int, default=5, help="how many of the most changed requests to list")
    whatif.add_argument("--json", action="store_true", help="print the report as JSON")
    whatif.add_argument("--out", help="for one request: draw the DAG with the changed nodes marked (.svg, .png, .pdf)")
    whatif.add_argument("request_id", nargs="?", help="a request id from the retrieval log")
    whatif.set_defaults(run=_cmd_whatif)
