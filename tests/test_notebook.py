"""The exploration notebook runs headless on the demo store, so it never rots."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "explore_retrieval.ipynb"


def _text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.extend(str(v) for v in output.get("data", {}).values())
    return "\n".join(parts)


def test_the_notebook_runs_on_the_demo_store(tmp_path, demo_store, monkeypatch):
    monkeypatch.setenv("RMS_DEMO_STORE", str(demo_store.path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the kernel must find the model by itself
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=600,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = "\n".join(_text(cell) for cell in notebook.cells if cell.cell_type == "code")
    assert not [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert f"{demo_store.path}:" in outputs and "question: Where does Tomas work now?" in outputs
    assert "merged_candidates" in outputs and "excluded_reason" in outputs
    assert "<svg" in outputs and "items, " in outputs
    assert "outcome: INCLUDED at packed_bundle" in outputs
    assert "EXCLUDED at filtered_candidates" in outputs
    assert "position_rrf" in outputs and "in both bundles" in outputs
    assert "what if scoring.speaker_boost=0" in outputs and "first difference: " in outputs
    assert "rank moves" in outputs and "#c62828" in outputs  # the node table and the marked DAG
    assert not (tmp_path / ".rms").exists()  # it used the store it was given
