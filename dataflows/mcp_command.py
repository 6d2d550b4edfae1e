"""`rms mcp`: serve a store's memory to MCP hosts, over stdio or streamable HTTP (rms_retrieval/mcp_server.py)."""

from __future__ import annotations

import argparse
import gc

from rms_retrieval.dataflows.cli_support import CliError, open_store


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8765)")
    return host.strip("[]"), int(port)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from rms_retrieval.mcp_server import NamespaceBinding, serve

    try:
        NamespaceBinding.of(args.namespace)
    except ValueError as error:
        raise CliError(str(error)) from error
    with open_store(args.store, create=True) as store:
        gc.freeze()  # the imports and the open store leave the collector's full scans (README, "Serving")
        serve(store, args.namespace, http=args.http)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `mcp` to the `rms` parser."""
    mcp = sub.add_parser("mcp", help="serve a store to MCP hosts over stdio or HTTP (needs the [mcp] extra)")
    mcp.add_argument("--store", required=True, help="store directory (an empty one is created)")
    mcp.add_argument("--namespace", action="append", required=True,
                     help="a namespace this server serves, or a pattern such as 'team-*' ('*': all); repeat for several")
    mcp.add_argument("--http", type=_host_port, metavar="HOST:PORT",
                     help="streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    mcp.set_defaults(run=_cmd_mcp)
