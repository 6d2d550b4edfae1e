"""Who said a turn: the speaker a memory names, and the text it is read and indexed by.

A memory's speaker is `metadata["speaker"]` (what `MemoryStore.add_messages` records, and what
any caller may set). A TURN without one, written the way chat logs are ("Caroline: I went to the
support group"), names its speaker with its leading label when `SpeakerRules.leading_name` is on
(the default): one to `max_name_words` capitalised name words, then a colon and a space. The rule
must not take a label for a name, so it refuses a word that is not a name word of
`stores/analysis/entities.py` (greetings, pronouns, weekdays, months), an all-capitals word ("FYI:",
"TODO:"), a one-letter label ("Q:", "A:"), any word of `LABEL_WORDS` ("Note:", "Update:",
"Step 2:"), digits ("10:30"), and a colon not followed by a space ("https://..."). Measured on
LoCoMo written as plain turns (BENCHMARKS.md): without it a plain turn has no speaker, and the
speaker lift (`scoring.speaker_boost`) never fires.

A turn's chat role (`role_of`) is `metadata["role"]` (what `add_messages` records), else, for a
TURN written the way flattened chat logs are ("user: ...", "Assistant: ..."), its leading role
label: user or human for the user, assistant or ai for the assistant. Scoring can lift the turns of
the roles a question names (`scoring.pronoun_speakers`, nodes/scoring.py).

The writer gives each speaker one ENTITY per namespace, created the first time the speaker
speaks (stores/indexes/entity_graph.py), and a SPOKEN_BY edge from each of their turns. A turn whose
content does not start with its speaker's label (a message written through `add_messages`) is
embedded, indexed and put into the context as "Speaker: content"; its stored content stays as given.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from rms_retrieval.stores.analysis.entities import is_name_word, name_key
from rms_retrieval.stores.models import MemoryObject, NodeType

# Capitalised words that head a line as a label, not as someone speaking.
LABEL_WORDS = frozenset(
    """
    note notes nb warning caution error errors update updates summary question questions answer
    answers tip tips hint example examples edit edited re fw fwd subject step steps important
    reminder source sources title date time location place status result results reason goal
    goals task tasks todo agenda action actions context input output response request reply
    quote disclaimer fact facts info information details detail background overview
    recap conclusion conclusions problem solution issue fix bug feature ingredients directions
    address phone email website link url price cost total part chapter section item items
    morning afternoon evening night
    """.split()
)
# A flattened chat log's role labels, as `role_of` reads them.
_ROLE_LABEL = re.compile(r"\s*(user|human|assistant|ai)\s*:\s", re.IGNORECASE)
_LABEL_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant"}
_LEADING_LABEL = re.compile(r"\s*([^\W\d_][^:\n]{0,80}?)\s*:\s+\S")
_NAME_WORD = re.compile(r"[^\W\d_](?:[^\W\d_]|['’.\-])*")


class SpeakerRules(BaseModel):
    """How a TURN without `metadata["speaker"]` names its speaker; fixed per open store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    leading_name: bool = Field(
        default=True, description='A TURN written "Name: text" was said by Name (LABEL_WORDS and the other '
                                  "refusals of stores/analysis/speakers.py excepted).")
    max_name_words: int = Field(default=3, ge=1, le=5, description="The longest label taken for a name, in words.")


DEFAULT_SPEAKER_RULES = SpeakerRules()


def leading_speaker(content: str, rules: SpeakerRules = DEFAULT_SPEAKER_RULES) -> str | None:
    """The name `content` opens with as "Name: text", or None when its label is not a name."""
    match = _LEADING_LABEL.match(content)
    if match is None:
        return None
    label = match.group(1)
    words = label.split()
    if not 1 <= len(words) <= rules.max_name_words or len(name_key(label)) < 2:
        return None
    for word in words:
        if (not _NAME_WORD.fullmatch(word) or not is_name_word(word) or (word.isupper() and len(word) > 1)
                or word.lower().strip(".") in LABEL_WORDS):
            return None
    return " ".join(words)


def speaker_of(memory: MemoryObject, rules: SpeakerRules = DEFAULT_SPEAKER_RULES) -> str | None:
    """Who said `memory`: `metadata["speaker"]`, else (a TURN, under `rules`) its leading name."""
    speaker = memory.metadata.get("speaker")
    if isinstance(speaker, str) and speaker.strip():
        return speaker.strip()
    if rules.leading_name and memory.node_type is NodeType.TURN:
        return leading_speaker(memory.content, rules)
    return None


def role_of(memory: MemoryObject) -> str | None:
    """The chat role of `memory`: `metadata["role"]`, else (a TURN) its leading role label
    ("user:", "human:" for user; "assistant:", "ai:" for assistant, in any case), else None."""
    role = memory.metadata.get("role")
    if isinstance(role, str) and role.strip():
        return role.strip().lower()
    if memory.node_type is not NodeType.TURN:
        return None
    label = _ROLE_LABEL.match(memory.content)
    return _LABEL_ROLES[label.group(1).lower()] if label else None


def spoken_text(memory: MemoryObject) -> str:
    """The text a memory is embedded, indexed and packed by: its content, prefixed "Speaker: "
    when `metadata["speaker"]` names someone the content does not already open with."""
    speaker = memory.metadata.get("speaker")
    if not isinstance(speaker, str) or not speaker.strip() or memory.node_type is not NodeType.TURN:
        return memory.content
    speaker = speaker.strip()
    if memory.content.startswith(f"{speaker}:"):
        return memory.content
    return f"{speaker}: {memory.content}"
