"""The segment engine: immutable segments, the manifest that names them, the one writer, the changes
(update, supersede, delete, erase), compaction, checks and repair (stores/README.md)."""
