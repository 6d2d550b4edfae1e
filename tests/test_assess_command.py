"""`rms assess` on a bundle `rms query --json` wrote, against a chat-completions server on
127.0.0.1 that cites the first memory it is shown; and its one-line errors."""

from __future__ import annotations

import io
import json
import re

import pytest

from rms_retrieval.dataflows.cli import main
from tests.chat_server import running_chat_server


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _cite_first(body: dict) -> str:
    first = re.search(r"^\[(m\d+)\]", body["messages"][1]["content"], re.MULTILINE).group(1)
    return json.dumps({"requirements": [{"text": "where Tomas works", "status": "supported", "citations": [first]}]})


@pytest.fixture
def bundle_file(capsys, demo_store, demo_copy, tmp_path):
    code, out, err = _run(capsys, "query", "--store", str(demo_copy), "--namespace", demo_store.namespace,
                          "--reference-time", "2025-09-03T00:00:00+00:00", "--json", "Where does Tomas work now?")
    assert code == 0, err
    path = tmp_path / "bundle.json"
    path.write_text(out)
    return path


def test_a_queried_bundle_is_assessed_from_a_file_and_from_standard_input(capsys, bundle_file, monkeypatch):
    bundle = json.loads(bundle_file.read_text())
    with running_chat_server() as chat:
        chat.reply = _cite_first
        code, out, err = _run(capsys, "assess", "--bundle", str(bundle_file), "--url", chat.url, "--model", "judge")
        assert code == 0, err
        assessment = json.loads(out)
        assert assessment["verdict"] == "answerable"
        assert assessment["requirements"][0]["cited_ids"] == [bundle["items"][0]["id"]]
        assert assessment["configuration_fingerprint"] == bundle["retrieval_metadata"]["configuration_fingerprint"]
        monkeypatch.setattr("sys.stdin", io.StringIO(bundle_file.read_text()))
        monkeypatch.setenv("RMS_ANSWERABILITY_URL", chat.url)
        monkeypatch.setenv("RMS_ANSWERABILITY_MODEL", "judge-env")
        code, out, err = _run(capsys, "assess", "--bundle", "-", "--draft-answer", "At a bank.")
        assert code == 0, err
        assert json.loads(out)["draft_answer_sha256"] is not None
        assert chat.requests[-1][2]["model"] == "judge-env"
        assert "Draft answer: At a bank." in chat.requests[-1][2]["messages"][1]["content"]


def test_bad_inputs_and_a_failing_model_are_one_line(capsys, bundle_file, tmp_path, monkeypatch):
    monkeypatch.delenv("RMS_ANSWERABILITY_URL", raising=False)
    monkeypatch.delenv("RMS_ANSWERABILITY_MODEL", raising=False)
    not_a_bundle = tmp_path / "x.json"
    not_a_bundle.write_text('{"query": "q"}')
    with running_chat_server() as chat:
        chat.status = 500
        cases = [
            ((str(tmp_path / "missing.json"), "--url", chat.url, "--model", "m"), "no bundle file at"),
            ((str(not_a_bundle), "--url", chat.url, "--model", "m"), "is not a Memory Bundle's JSON"),
            ((str(bundle_file),), "needs a chat-completions endpoint"),
            ((str(bundle_file), "--url", chat.url, "--model", "m"), "the answerability model openai_chat:m@"),
        ]
        for argv, message in cases:
            code, out, err = _run(capsys, "assess", "--bundle", *argv)
            assert code == 2 and out == "", err
            assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
