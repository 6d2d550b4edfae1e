"""What every `rms` command shares: the user-error type, time parsing, opening a store, the
request checks. Command modules import this, never each other; it imports nothing heavy, so
`rms --help` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rms_retrieval.stores.memory_store import MemoryStore

EXIT_USAGE = 2


class CliError(Exception):
    """A user mistake: printed as one line, exit code 2."""


def skip_hamilton_plugins() -> None:
    """Load none of Hamilton's plugins in a process `rms` owns (its commands, the readers its
    benchmarks start), as `HAMILTON_AUTOLOAD_EXTENSIONS=0` does. Hamilton otherwise imports a
    plugin for every library it finds installed (matplotlib, dask, scikit-learn, ...) on first use
    of its decorators: seconds of start-up and about 117 MB of private memory per process. The
    DAGs take and return Python objects, never data frames through Hamilton, so none needs even
    the pandas plugin (40 ms of a cold `rms query`: fsspec and Arrow's file systems). A library
    caller's process is left alone (README, "Serving from a long-running process")."""
    from hamilton import registry

    registry.INITIALIZED = True


def parse_time(text: str | None, option: str = "--reference-time") -> datetime | None:
    """An ISO 8601 time with a timezone, or None when the option was not given."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as error:
        raise CliError(f"{option} {text!r} is not an ISO 8601 time (e.g. 2023-08-20T12:00:00+00:00)") from error
    if value.tzinfo is None:
        raise CliError(f"{option} {text!r} has no timezone; add one, e.g. {text}+00:00")
    return value


def open_store(path: str, *, create: bool = False, read_only: bool = False, expansion: str | None = None) -> MemoryStore:
    """The store at `path`. `create` opens it for writing with the default encoder; `read_only`
    is for commands that only read (audits), so nothing is set up, cleaned or logged;
    `expansion` names the preset an empty store is built with (stores/analysis/expansion.py)."""
    from rms_retrieval.stores.memory_store import MemoryStore

    if not create and not Path(path).exists():
        raise CliError(f"no store at {path}; build one with `rms ingest` or `rms ingest-locomo`")
    encoder = None
    if create:
        from rms_retrieval.stores.providers.onnx_encoder import default_encoder

        encoder = default_encoder()
    asked = None
    if expansion is not None:
        from rms_retrieval.stores.analysis.expansion import expansion_named

        asked = expansion_named(expansion)
    return MemoryStore.open(path, encoder=encoder, create=create, read_only=read_only, expansion=asked)


def check_question(question: str) -> str:
    """The question, or a CliError when it is blank."""
    if not question.strip():
        raise CliError("the question is empty; pass it in quotes, e.g. rms query --store DIR --namespace NS \"Who moved?\"")
    return question


def check_budget(budget: int) -> int:
    if budget < 1:
        raise CliError(f"--budget must be at least 1 token, got {budget}")
    return budget


def check_namespaces(store: MemoryStore, path: str, namespaces: Sequence[str]) -> None:
    """Every requested namespace holds memories, else a CliError listing the known ones."""
    known = set(store.snapshot().namespaces())
    unknown = [ns for ns in namespaces if ns not in known]
    if unknown:
        raise CliError(f"namespace {', '.join(unknown)} has no memories in {path}; "
                       f"known: {', '.join(sorted(known)) or 'none'}")


def request_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """The options that make a retrieval request: store, namespaces, reference time, budget."""
    from rms_retrieval.nodes.models import DEFAULT_TOKEN_BUDGET

    parser.add_argument("--store", required=required, help="store directory")
    parser.add_argument("--namespace", action="append", required=required, help="repeat for several")
    parser.add_argument("--reference-time", help="ISO 8601 with timezone; default now")
    parser.add_argument("--budget", type=int, default=DEFAULT_TOKEN_BUDGET, help="token budget in cl100k_base tokens")


def policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The opt-in cross-encoder reranker's options (RFC 7.3; the [rerank] extra)."""
    from rms_retrieval.nodes.policy_settings import LEGACY_PRIOR_WEIGHT, RERANKER_POLICIES

    parser.add_argument("--rerank", choices=RERANKER_POLICIES,
                        help="rerank the top of the scored pool with the cross-encoder under this policy")
    parser.add_argument("--rerank-top-k", type=int, default=100, help="candidates reranked (default 100)")
    parser.add_argument("--rerank-prior-weight", type=float, default=LEGACY_PRIOR_WEIGHT,
                        help=f"weight of a candidate's own score in the new order (default {LEGACY_PRIOR_WEIGHT}; another value "
                             "needs an envelope policy)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE", dest="settings",
                        help="change a retrieval setting (repeat for several), e.g. --set packing.tier_order=score "
                             "--set 'scoring.pronoun_speakers=[\"user\", \"assistant\"]'")


def settings_from(args: argparse.Namespace, base: Any = None) -> Any:
    """The retrieval settings the options describe (`--rerank ...`, then each `--set`), on top of
    `base` (the defaults)."""
    from rms_retrieval.nodes.policy_settings import RerankSettings
    from rms_retrieval.nodes.settings import RetrievalSettings

    from rms_retrieval.dataflows.setting_changes import changed_settings, parse_change

    settings = base or RetrievalSettings()
    if getattr(args, "rerank", None) is not None:
        rerank = RerankSettings(enabled=True, policy=args.rerank, top_k=args.rerank_top_k,
                                prior_weight=args.rerank_prior_weight)
        settings = RetrievalSettings.model_validate({**settings.model_dump(), "rerank": rerank.model_dump()})
    changes = getattr(args, "settings", None)
    return changed_settings(settings, dict(parse_change(text) for text in changes)) if changes else settings


def one_line(error: BaseException) -> str:
    """The error as one line; a validation error lists each field and what is wrong with it."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in error.errors()]
        text = "; ".join(parts)
    else:
        text = str(error)
    return " ".join(text.split())
