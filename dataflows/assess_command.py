"""`rms assess`: does a packed bundle answer its question? The answerability evaluator
(`nodes/answerability.py`) over an OpenAI-compatible chat-completions model.

The bundle is the JSON `rms query --json` prints, from a file or standard input (`-`), so
`rms query --json ... | rms assess --bundle -` checks what was just retrieved. The verdict's JSON
goes to standard output; a provider failure is an error (exit 2), never a verdict.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rms_retrieval.dataflows.cli_support import CliError

ENVIRONMENT_PREFIX = "RMS_ANSWERABILITY"


def _bundle_text(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    if not path.is_file():
        raise CliError(f"no bundle file at {source}; write one with `rms query --json ... > {source}`, or pass -")
    return path.read_text(encoding="utf-8")


def _cmd_assess(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from rms_retrieval.dataflows.answerability import assess_answerability
    from rms_retrieval.nodes.bundle import MemoryBundle
    from rms_retrieval.stores.providers.chat_completions import ChatCompletionsModel

    text = _bundle_text(args.bundle)
    try:
        bundle = MemoryBundle.model_validate_json(text)
    except ValidationError as exc:
        raise CliError(f"{args.bundle} is not a Memory Bundle's JSON (`rms query --json` writes one): "
                       f"{exc.errors()[0]['msg']} at {'.'.join(str(p) for p in exc.errors()[0]['loc']) or 'top level'}") from None
    model = ChatCompletionsModel.from_environment(ENVIRONMENT_PREFIX, url=args.url, model=args.model,
                                                  timeout_seconds=args.timeout)
    assessment = assess_answerability(bundle, model, question=args.question, draft_answer=args.draft_answer)
    print(assessment.model_dump_json(indent=2))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    assess = sub.add_parser("assess", help="check whether a packed bundle answers its question (a chat model cites its memories)")
    assess.add_argument("--bundle", required=True, help="the bundle's JSON file (`rms query --json`), or - for standard input")
    assess.add_argument("--question", help="the question to check (default: the bundle's own)")
    assess.add_argument("--draft-answer", help="a draft answer whose claims are checked too")
    assess.add_argument("--url", help=f"the chat-completions endpoint (default ${ENVIRONMENT_PREFIX}_URL), "
                                      "e.g. http://127.0.0.1:8000/v1")
    assess.add_argument("--model", help=f"the model name (default ${ENVIRONMENT_PREFIX}_MODEL); "
                                        f"the key is read from ${ENVIRONMENT_PREFIX}_API_KEY")
    assess.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the model (60)")
    assess.set_defaults(run=_cmd_assess)
