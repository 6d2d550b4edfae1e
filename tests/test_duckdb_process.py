"""stores/engine/duckdb_process.py: one database per process, a fresh one after a fork."""

from __future__ import annotations

import os

from rms_retrieval.stores.engine.duckdb_process import ProcessDatabase


def test_one_database_per_process_prepared_once_and_a_fresh_one_in_a_forked_child():
    prepared: list[int] = []

    def setup(connection) -> None:
        prepared.append(os.getpid())
        connection.execute("CREATE TABLE marker AS SELECT 42 AS answer")

    database = ProcessDatabase(setup)
    first = database.connection()
    assert database.connection() is first and prepared == [os.getpid()]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its own database, prepared again, the parent's left alone
        try:
            mine = database.connection()
            ok = mine is not first and prepared[-1] == os.getpid() and mine.execute("SELECT answer FROM marker").fetchone() == (42,)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    assert os.read(read, 1) == b"1" and status == 0
    assert database.connection() is first and first.execute("SELECT answer FROM marker").fetchone() == (42,)
