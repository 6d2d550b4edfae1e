"""Errors the stores raise. Messages name the file or object at fault and say what to do next."""

from __future__ import annotations


class StoreError(Exception):
    """The store cannot be opened, read or written as asked."""


class EmbeddingMismatchError(StoreError):
    """Vectors from one embedding model would be compared with vectors from another (RFC-0005 4.2)."""


class EmbeddingError(Exception):
    """An encoder returned something other than one finite unit vector of the declared size per text."""


class StaleSnapshotError(StoreError):
    """A request read an older generation whose files a later write (a merge past its grace, an
    erase, a compaction) has since removed; a new snapshot reads the live one."""
