"""Changed settings by dotted path (`scoring.speaker_boost=0`): what `rms whatif --set` and
`whatif()` apply to the settings a request was logged with, validated as settings always are."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any, get_origin

from pydantic import BaseModel, ValidationError

from rms_retrieval.nodes.settings import RetrievalSettings


class WhatIfError(ValueError):
    """A change that names no setting or gives it an invalid value, or a request that cannot be found."""


def parse_change(text: str) -> tuple[str, Any]:
    """`section.field=value` as (path, value): the value is read as JSON (`0`, `true`, `null`,
    `["LEXICAL"]`), else taken as text (`plain`)."""
    path, equals, raw = text.partition("=")
    if not equals or not path.strip():
        raise WhatIfError(f"--set {text!r}: write a change as section.field=value, e.g. scoring.speaker_boost=0")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return path.strip(), value


def _setting_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            paths += _setting_paths(kind, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


def _unknown(path: str) -> WhatIfError:
    paths = _setting_paths(RetrievalSettings)
    close = difflib.get_close_matches(path, paths, n=1)
    hint = f"did you mean {close[0]}?" if close else f"settings are {', '.join(paths[:4])}, ... (nodes/settings.py)"
    return WhatIfError(f"--set {path}: there is no such setting; {hint}")


def _set(data: dict[str, Any], model: type[BaseModel], keys: Sequence[str], value: Any, path: str) -> None:
    """Put `value` at `keys` in `data` (a settings dump), walking the settings model so that only
    a real field, or a key of a mapping field such as `scoring.epistemic_weights.OBSERVED`, is set."""
    info = model.model_fields.get(keys[0])
    if info is None:
        raise _unknown(path)
    kind = info.annotation
    if len(keys) == 1:
        data[keys[0]] = value
    elif isinstance(kind, type) and issubclass(kind, BaseModel):
        _set(data[keys[0]], kind, keys[1:], value, path)
    elif get_origin(kind) is dict and len(keys) == 2:
        data[keys[0]] = {**data[keys[0]], keys[1]: value}
    else:
        raise _unknown(path)


def changed_settings(settings: RetrievalSettings, changes: Mapping[str, Any]) -> RetrievalSettings:
    """`settings` with `changes` ({"scoring.speaker_boost": 0, ...}) applied and validated as usual;
    a WhatIfError of one line names a change that is unknown or invalid."""
    data = settings.model_dump(mode="json")
    for path, value in changes.items():
        _set(data, RetrievalSettings, path.split("."), value, path)
    try:
        return RetrievalSettings.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in error.errors())
        given = ", ".join(f"{path}={json.dumps(value)}" for path, value in changes.items())
        raise WhatIfError(f"--set {given}: {problems}") from None
