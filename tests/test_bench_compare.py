"""Two runs compared on the same questions: pairing by question key, per budget and category."""

from __future__ import annotations

import json

import pytest

from rms_retrieval.dataflows.bench import compare
from rms_retrieval.dataflows.cli import main


def _results(arm: str, packed: dict[str, tuple[int, bool, bool]]) -> dict:
    rows = [{"question": key, "category": category, "all_packed@4000": small, "all_packed@8000": large}
            for key, (category, small, large) in packed.items()]
    return {"relevance": {"per_question": {arm: {"main": rows}}}}


A = _results("pipeline", {"c#1": (1, True, True), "c#2": (1, True, True), "c#3": (4, False, True)})
B = _results("lever", {"c#3": (4, False, False), "c#2": (1, False, True), "c#1": (1, True, True)})


def test_pairs_questions_by_key_per_budget_and_category():
    compared = compare.compare_runs(A, "pipeline", B, "lever")
    assert compared["n"] == 3 and set(compared["budgets"]) == {"4000", "8000"}
    small = compared["budgets"]["4000"]
    assert (small["overall"]["wins"], small["overall"]["losses"], small["overall"]["ties"]) == (1, 0, 2)
    assert small["overall"]["difference"] == pytest.approx(1 / 3)
    assert small["by_category"] == {"1": {"n": 2, "a": 1.0, "b": 0.5}, "4": {"n": 1, "a": 0.0, "b": 0.0}}
    assert compared["budgets"]["8000"]["by_category"]["4"] == {"n": 1, "a": 1.0, "b": 0.0}
    lines = compare.summary_lines(compared, "a", "b")
    assert lines[1].startswith("@4000: 0.667 vs 0.333  +0.333")


def test_a_split_keeps_its_conversations_questions():
    a = _results("pipeline", {"c1#1": (1, True, True), "c2#1": (2, True, True), "c3#1": (2, False, True)})
    b = _results("pipeline", {"c1#1": (1, False, True), "c2#1": (2, False, True), "c3#1": (2, False, False)})
    tune = compare.compare_runs(a, "pipeline", b, "pipeline", split="tune")  # c1 and c3
    assert tune["n"] == 2 and tune["budgets"]["4000"]["overall"]["wins"] == 1
    confirm = compare.compare_runs(a, "pipeline", b, "pipeline", split="confirm")  # c2
    assert confirm["n"] == 1 and confirm["budgets"]["4000"]["by_category"] == {"2": {"n": 1, "a": 1.0, "b": 0.0}}
    # a run that asked the tune split only pairs with the tune questions of a run over all
    tune_only = _results("pipeline", {"c1#1": (1, False, True), "c3#1": (2, False, False)})
    tune_only["dataset"] = {"split": {"name": "tune"}}
    assert compare.compare_runs(a, "pipeline", tune_only, "pipeline", split="tune")["n"] == 2
    with pytest.raises(ValueError, match="asked the tune split only"):
        compare.compare_runs(a, "pipeline", tune_only, "pipeline", split="confirm")


def test_refuses_unpaired_runs_and_unknown_arms():
    with pytest.raises(ValueError, match="no arm 'nope'"):
        compare.compare_runs(A, "nope", B, "lever")
    fewer = _results("lever", {"c#1": (1, True, True)})
    with pytest.raises(ValueError, match="different questions"):
        compare.compare_runs(A, "pipeline", fewer, "lever")


def test_the_command_prints_the_comparison(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(A))
    b.write_text(json.dumps(B))
    assert main(["bench", "compare", str(a), str(b), "--arm-b", "lever"]) == 0
    printed = capsys.readouterr().out
    assert "3 questions" in printed and "wins 1  losses 0  ties 2" in printed and "multi-hop" in printed
    assert main(["bench", "compare", str(tmp_path / "missing.json"), str(b)]) != 0
    assert "missing.json: file not found" in capsys.readouterr().err
