"""The arrays of a segment's `index.npz` as views of the file's verified bytes, not copies.

`np.load` copies every array out of the archive: opening a store held each `index.npz` twice
while it loaded (its bytes, read once for their sha256, and the arrays), and copying took a
third of a LongMemEval-S store's open. `np.savez` stores its members uncompressed, so each array
is a run of the bytes after its `.npy` header: `npz_views` finds that run through the archive's
own directory and hands out a read-only array over it. A compressed member (a file written by
other means) is read as `np.load` reads it. The sha256 over the whole file is what guards the
bytes; the archive's CRCs are not checked again.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

_LOCAL_HEADER = b"PK\x03\x04"
_LOCAL_HEADER_SIZE = 30
# The most an .npy header may take, magic and length fields included (numpy's own limit is 10,000 bytes).
_HEADER_LIMIT = 1 << 16
_ALIGNMENT = 64


def npz_views(data: bytes | np.ndarray) -> dict[str, np.ndarray]:
    """Every array of the .npz archive `data` (bytes, or a uint8 array from `read_aligned`), by
    name (without `.npy`), read-only. ValueError or zipfile.BadZipFile where the archive or a
    member is damaged; object arrays are refused."""
    view = memoryview(data).cast("B")
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(_Reader(view)) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED:
                arrays[name] = np.load(io.BytesIO(archive.read(info)), allow_pickle=False)
            else:
                arrays[name] = _stored_member(view, info)
    return arrays


def read_aligned(path: Path, anchor: str = "vectors") -> np.ndarray:
    """The bytes of the .npz file at `path` as a read-only uint8 array placed so that the data of
    member `anchor` starts on a 64-byte boundary: numpy and FAISS read an aligned float32 matrix
    at full speed, and a view of plain bytes lands wherever the archive's headers put it. Any
    other member is aligned by chance: numpy reads a misaligned array correctly, a little slower
    (copying the misaligned edge and postings arrays of a LongMemEval-S store cost more at open
    than it saved)."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        try:
            offset = _data_offset(handle, anchor)
        except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile):
            offset = 0  # a damaged or foreign file: its sha256 will say so
        buffer = np.empty(size + _ALIGNMENT, dtype=np.uint8)
        shift = -(buffer.ctypes.data + offset) % _ALIGNMENT
        data = buffer[shift:shift + size]
        handle.seek(0)
        filled = 0
        while filled < size:
            read = handle.readinto(memoryview(data)[filled:])
            if not read:
                raise OSError(f"{path} ended after {filled} of its {size} bytes")
            filled += read
    data.flags.writeable = False
    return data


def _data_offset(handle: BinaryIO, name: str) -> int:
    """Where member `name.npy`'s array data starts in the archive open as `handle`."""
    info = zipfile.ZipFile(handle).getinfo(f"{name}.npy")
    handle.seek(info.header_offset)
    local = handle.read(_LOCAL_HEADER_SIZE)
    name_length, extra_length = struct.unpack("<HH", local[26:_LOCAL_HEADER_SIZE])
    member = info.header_offset + _LOCAL_HEADER_SIZE + name_length + extra_length
    handle.seek(member)
    header = io.BytesIO(handle.read(min(info.file_size, _HEADER_LIMIT)))
    _array_header(header)
    return member + header.tell()


def _array_header(header: io.BytesIO) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """The shape, order and dtype of an .npy header in `header` (left after it), None for a
    format version this reader leaves to np.load."""
    version = np.lib.format.read_magic(header)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(header)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(header)
    return None


def _stored_member(view: memoryview, info: zipfile.ZipInfo) -> np.ndarray:
    start = info.header_offset
    if bytes(view[start:start + 4]) != _LOCAL_HEADER:
        raise ValueError(f"{info.filename}: no local file header where the archive's directory points")
    name_length, extra_length = struct.unpack("<HH", view[start + 26:start + _LOCAL_HEADER_SIZE])
    member = start + _LOCAL_HEADER_SIZE + name_length + extra_length
    header = io.BytesIO(view[member:member + min(info.file_size, _HEADER_LIMIT)])
    parsed = _array_header(header)
    if parsed is None:
        return np.load(io.BytesIO(view[member:member + info.file_size]), allow_pickle=False)
    shape, fortran_order, dtype = parsed
    if dtype.hasobject:
        raise ValueError(f"{info.filename} holds Python objects, which are never loaded")
    count = int(np.prod(shape, dtype=np.int64))
    if header.tell() + count * dtype.itemsize != info.file_size or member + info.file_size > len(view):
        raise ValueError(f"{info.filename}: its header's shape does not fit its bytes")
    array = np.frombuffer(view, dtype=dtype, count=count, offset=member + header.tell())
    return array.reshape(shape, order="F" if fortran_order else "C")


class _Reader(io.RawIOBase):
    """A read-only file over a buffer, for zipfile's directory reads (no copy of the buffer)."""

    def __init__(self, view: memoryview) -> None:
        self._view, self._at = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: len(self._view)}[whence]
        self._at = max(base + offset, 0)
        return self._at

    def readinto(self, buffer: Any) -> int:
        count = max(min(len(buffer), len(self._view) - self._at), 0)
        buffer[:count] = self._view[self._at:self._at + count]
        self._at += count
        return count
