"""`rms bench plot`: the committed quality picture is the one its committed data file draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.testing.compare import compare_images
from PIL import Image
from pydantic import ValidationError

from rms_retrieval.dataflows.bench import published
from rms_retrieval.dataflows.cli import main

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / published.DEFAULT_DATA
FIGURE = REPO / published.DEFAULT_FIGURE


def _data(**changes):
    raw = json.loads(DATA.read_text(encoding="utf-8"))
    raw.update(changes)
    return raw


def _write(tmp_path, raw, name="data.json"):
    path = tmp_path / name
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def test_the_committed_picture_was_drawn_from_the_committed_data():
    recorded = Image.open(FIGURE).text.get(published.DATA_HASH_KEY)
    assert recorded == published.data_sha256(DATA), (
        "docs/bench/quality_by_budget.png is not drawn from docs/bench/quality_by_budget.json: run `rms bench plot`")


def test_redrawing_the_committed_data_gives_the_committed_picture(tmp_path):
    redrawn = published.quality_by_budget_figure(DATA, tmp_path / "redrawn.png")
    assert compare_images(str(FIGURE), str(redrawn), tol=0.5) is None


def test_a_changed_figure_changes_the_recorded_hash(tmp_path):
    raw = _data()
    raw["series"][0]["values"] = [0.5, 0.6]
    changed = _write(tmp_path, raw)
    figure = published.quality_by_budget_figure(changed, tmp_path / "changed.png")
    assert Image.open(figure).text[published.DATA_HASH_KEY] == published.data_sha256(changed)
    assert published.data_sha256(changed) != published.data_sha256(DATA)


def test_the_data_file_holds_a_value_per_budget_for_every_series():
    figures = published.load_quality_by_budget(DATA)
    assert figures.budgets == (4000, 8000)
    assert all(len(series.values) == 2 for series in figures.series)
    assert figures.values_of("rms-retrieval, defaults") == (0.872, 0.941)
    with pytest.raises(KeyError, match="no series 'nobody'"):
        figures.values_of("nobody")


@pytest.mark.parametrize(("change", "message"), [
    ({"series": [{"name": "a", "kind": "ours", "values": [0.5]}]}, "has 1 values for 2 budgets"),
    ({"series": [{"name": "a", "kind": "ours", "values": [0.5, 1.5]}]}, "share between 0 and 1"),
    ({"series": [{"name": "a", "kind": "ours", "values": [None, None]}]}, "has no value at any budget"),
    ({"series": [{"name": "a", "kind": "ours", "values": [0.5, 0.6]}] * 2}, "names must be unique"),
    ({"series": [{"name": "a", "kind": "rumour", "values": [0.5, 0.6]}]}, "kind"),
    ({"targets": [0.9]}, "targets has 1 values for 2 budgets"),
    ({"colour": "red"}, "Extra inputs are not permitted"),
])
def test_bad_data_is_refused_with_what_is_wrong(tmp_path, change, message):
    with pytest.raises(ValidationError, match=message):
        published.load_quality_by_budget(_write(tmp_path, _data(**change)))


def test_rms_bench_plot_draws_the_picture_and_says_where(tmp_path, capsys):
    out = tmp_path / "figs" / "quality.png"
    assert main(["bench", "plot", "--data", str(DATA), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert compare_images(str(FIGURE), str(out), tol=0.5) is None


def test_rms_bench_plot_refuses_a_file_that_is_not_json_in_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    assert main(["bench", "plot", "--data", str(broken), "--out", str(tmp_path / "x.png")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {broken} is not JSON") and error.count("\n") == 1
    assert not (tmp_path / "x.png").exists()
