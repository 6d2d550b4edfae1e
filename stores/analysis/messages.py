"""Chat messages as TURN objects: the shapes people already write (`MemoryStore.add_messages`).

A message has a role (user, assistant, system or tool), an optional speaker name, its content and
an optional time. Accepted shapes:

- OpenAI's and mem0's dicts: `{"role": "user", "content": "...", "name": "Caroline"}`;
- Zep's dicts, where `role_type` is the role and `role` the speaker's name:
  `{"role_type": "user", "role": "Caroline", "content": "..."}`;
- LangChain `BaseMessage` objects (`HumanMessage`, `AIMessage`, `SystemMessage`, `ToolMessage`,
  `ChatMessage`), when langchain-core is installed (checked by type name; nothing is imported);
- `ChatMessage` objects of this module.

A dict may also carry `created_at` (ISO 8601 with a timezone), `metadata` (a dict kept on the
turn), `source_ref` and `id` (the turn's UUID; default: a new one); any other key is an error. Each message becomes a TURN whose content is
the message's content exactly as given, with `metadata["role"]` and, when there is a name,
`metadata["speaker"]`; its time (else the call's `time`, else now) is its `created_at`,
`updated_at` and `event_time`. No position is set: the store places the turns after the
session's existing ones (stores/analysis/positions.py) and gives each speaker an ENTITY once per
namespace (stores/analysis/speakers.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Literal

from uuid import UUID, uuid4

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.models import EpistemicType, MemoryObject, NodeType

Role = Literal["user", "assistant", "system", "tool"]
_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool",
                    "user": "user", "assistant": "assistant", "developer": "system"}
_DICT_KEYS = ("role", "role_type", "name", "content", "created_at", "metadata", "source_ref", "id")


class ChatMessage(BaseModel):
    """One chat message, validated: a role, an optional speaker name, content, an optional time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str = Field(min_length=1)
    name: str | None = Field(default=None, min_length=1)
    created_at: AwareDatetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    source_ref: str | None = None
    id: UUID = Field(default_factory=uuid4)


def chat_message(message: Any) -> ChatMessage:
    """`message` in any accepted shape as a ChatMessage; ValueError saying what is wrong otherwise."""
    if isinstance(message, ChatMessage):
        return message
    if isinstance(message, Mapping):
        return _from_dict(message)
    if _is_langchain_message(message):
        return _from_langchain(message)
    raise ValueError(f"a message is a dict with role and content, a LangChain message or a ChatMessage, "
                     f"not {type(message).__name__}")


def _from_dict(message: Mapping[str, Any]) -> ChatMessage:
    unknown = sorted(str(key) for key in message if key not in _DICT_KEYS)
    if unknown:
        raise ValueError(f"unknown message field {unknown[0]!r}; a message has {', '.join(_DICT_KEYS)}")
    fields = dict(message)
    if "role_type" in fields:  # Zep: role_type is the role, role the speaker's name
        role_type, name = fields.pop("role_type"), fields.pop("role", None)
        if name is not None and fields.get("name") not in (None, name):
            raise ValueError(f"the message names its speaker twice ({name!r} as role, {fields['name']!r} as name)")
        fields.update(role=role_type, name=fields.get("name") or name)
    return ChatMessage.model_validate(fields)


def _is_langchain_message(message: Any) -> bool:
    return any(f"{cls.__module__}.{cls.__name__}" == "langchain_core.messages.base.BaseMessage"
               for cls in type(message).__mro__)


def _from_langchain(message: Any) -> ChatMessage:
    kind = message.type if message.type != "chat" else str(getattr(message, "role", "")).lower()
    role = _LANGCHAIN_ROLES.get(kind)
    if role is None:
        raise ValueError(f"a LangChain {type(message).__name__} of role {kind!r} has no chat role "
                         f"({', '.join(sorted(set(_LANGCHAIN_ROLES.values())))})")
    content = message.content
    if not isinstance(content, str):  # a list of content blocks: their text
        text = message.text  # a str property in langchain-core 1.x, a method before
        content = text if isinstance(text, str) else text()
    return ChatMessage(role=role, content=content, name=message.name or None)


def message_turns(
    namespace: str, session_id: str, messages: Sequence[Any], *, owner: str = "default", scope: str = "default",
    time: datetime | None = None,
) -> list[MemoryObject]:
    """One TURN per message, in order; a StoreError naming the first bad message, and nothing else."""
    if isinstance(messages, str | bytes | Mapping):
        raise StoreError("messages must be a list of messages, e.g. [{\"role\": \"user\", \"content\": \"hi\"}]")
    default_time = time or datetime.now(timezone.utc)
    turns = []
    for index, message in enumerate(messages):
        try:
            turns.append(message_turn(message, namespace, session_id, owner=owner, scope=scope, time=default_time))
        except ValidationError as error:
            detail = error.errors()[0]
            where = ".".join(str(part) for part in detail["loc"])
            raise StoreError(f"message {index}{f', {where}' if where else ''}: {detail['msg']}; nothing was added") from None
        except ValueError as error:
            raise StoreError(f"message {index}: {error}; nothing was added") from None
    return turns


def message_turn(message: Any, namespace: str, session_id: str, *, owner: str = "default", scope: str = "default",
                 time: datetime | None = None) -> MemoryObject:
    """One message as a TURN; pydantic's ValidationError or ValueError saying what is wrong."""
    message = chat_message(message)
    when = message.created_at or time or datetime.now(timezone.utc)
    metadata = {**message.metadata, "role": message.role}
    if message.name is not None:
        metadata["speaker"] = message.name
    return MemoryObject(id=message.id, namespace=namespace, owner=owner, scope=scope, session_id=session_id, node_type=NodeType.TURN,
                        content=message.content, epistemic_type=EpistemicType.OBSERVED, created_at=when,
                        updated_at=when, event_time=when, source_ref=message.source_ref, metadata=metadata)
