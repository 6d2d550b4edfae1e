"""Benchmarks: LoCoMo relevance, latency, operations and scaling. They run from a repository
checkout (they are not in the wheel) and share the synthetic encoder and the store worker
processes with the tests (`tests/factories.py`, `tests/store_workers.py`), so the checkout's root
is made importable here for the bench processes."""

import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
if str(REPOSITORY) not in sys.path:
    sys.path.append(str(REPOSITORY))
