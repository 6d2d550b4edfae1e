"""Running the answerability evaluator (`nodes/answerability.py`) as its own Hamilton DAG.

`assess_answerability(bundle, chat_model)` asks whether the packed bundle answers its question
(or another one given), optionally with a draft answer. `answerability_driver()` is public, so a
notebook or an audit can execute or draw any node of it (`evaluation_prompt`,
`checked_requirements`) for the same inputs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from hamilton import driver

from rms_retrieval.nodes import answerability
from rms_retrieval.nodes.answerability import AnswerabilityAssessment
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.stores.protocols import ChatModel

FINAL_NODE = "answerability_assessment"


@lru_cache(maxsize=1)
def answerability_driver() -> driver.Driver:
    """The evaluator's DAG; built once."""
    return driver.Builder().with_modules(answerability).build()


def answerability_inputs(bundle: MemoryBundle, chat_model: ChatModel, *, question: str | None = None,
                         draft_answer: str | None = None) -> dict[str, Any]:
    """The DAG's inputs: the bundle's own question unless another is given."""
    question = bundle.query if question is None else question
    if not question.strip():
        raise ValueError("the question to assess is empty: give the question the bundle was retrieved for")
    if draft_answer is not None and not draft_answer.strip():
        raise ValueError("the draft answer is empty: leave it out, or give the answer to check")
    return {"bundle": bundle, "chat_model": chat_model, "question": question, "draft_answer": draft_answer}


def assess_answerability(bundle: MemoryBundle, chat_model: ChatModel, *, question: str | None = None,
                         draft_answer: str | None = None) -> AnswerabilityAssessment:
    """Whether `bundle` answers the question; raises AnswerabilityError when there is no verdict."""
    inputs = answerability_inputs(bundle, chat_model, question=question, draft_answer=draft_answer)
    return answerability_driver().execute([FINAL_NODE], inputs=inputs)[FINAL_NODE]
