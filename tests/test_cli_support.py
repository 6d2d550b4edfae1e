"""The helpers every command shares: times, budgets, questions, opening stores."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

import pytest

from rms_retrieval.dataflows import cli_support
from rms_retrieval.dataflows.cli_support import CliError
from rms_retrieval.nodes.models import DEFAULT_TOKEN_BUDGET
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.models import MemoryObject


def test_parse_time_wants_iso_8601_with_a_timezone():
    assert cli_support.parse_time(None) is None
    assert cli_support.parse_time("2025-01-02T03:04:05+00:00") == datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    with pytest.raises(CliError, match="has no timezone; add one"):
        cli_support.parse_time("2025-01-02T03:04:05")
    with pytest.raises(CliError, match="not an ISO 8601 time"):
        cli_support.parse_time("last week")


def test_questions_and_budgets():
    assert cli_support.check_question("Who?") == "Who?"
    with pytest.raises(CliError, match="the question is empty"):
        cli_support.check_question(" \t")
    assert cli_support.check_budget(1) == 1
    with pytest.raises(CliError, match="at least 1 token, got 0"):
        cli_support.check_budget(0)


def test_request_arguments_default_to_the_default_budget():
    parser = argparse.ArgumentParser()
    cli_support.request_arguments(parser)
    args = parser.parse_args(["--store", "s", "--namespace", "a", "--namespace", "b"])
    assert (args.namespace, args.budget, args.reference_time) == (["a", "b"], DEFAULT_TOKEN_BUDGET, None)


def test_open_store_names_a_missing_store_and_opens_read_only(demo_store, tmp_path):
    with pytest.raises(CliError, match="no store at .*rms ingest"):
        cli_support.open_store(str(tmp_path / "nowhere"))
    with cli_support.open_store(str(demo_store.path), read_only=True) as store:
        with pytest.raises(StoreError, match="read-only"):
            store.add([MemoryObject(namespace="demo", content="a write through a read-only store")])
    with pytest.raises(CliError, match="namespace nobody has no memories .* known: "):
        with cli_support.open_store(str(demo_store.path), read_only=True) as store:
            cli_support.check_namespaces(store, str(demo_store.path), ["nobody"])
