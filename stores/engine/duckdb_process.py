"""One in-memory DuckDB database per process, for the store's SQL and its text analysis.

A DuckDB connection must not cross a fork: a child that used its parent's would share its
threads' state, and one that destroyed it would join threads the child does not have
(std::terminate). So a forked child opens a database of its own and keeps the inherited one,
unused, for its lifetime.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import duckdb

# DuckDB must never reach for the network to autoload an extension.
DUCKDB_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}

_INHERITED: list[duckdb.DuckDBPyConnection] = []


class ProcessDatabase:
    """This process's in-memory database, opened on first use and prepared by `setup`."""

    def __init__(self, setup: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        self._setup = setup
        self._lock = threading.Lock()
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._pid = -1

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The database's connection for this process (callers serialise their own use of it, or
        take a `cursor()` each)."""
        with self._lock:
            if self._connection is not None and self._pid != os.getpid():
                _INHERITED.append(self._connection)
                self._connection = None
            if self._connection is None:
                connection = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
                self._setup(connection)
                self._connection, self._pid = connection, os.getpid()
            return self._connection
