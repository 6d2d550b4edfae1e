"""dataflows/bench/machine.py: what a benchmark records about the machine."""

from __future__ import annotations

from rms_retrieval.dataflows.bench.machine import machine_info


def test_machine_info():
    info = machine_info()
    assert info["cores"] >= 1 and info["python"].startswith("3.") and "torch" in info["versions"]
    assert len(info["load_average"]) == 3 and set(info["git"]) == {"commit", "dirty"}
