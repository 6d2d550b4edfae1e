"""The arrays of a segment's `index.npz`, written aligned and read without copies.

`np.savez` stores its members uncompressed, so each array is a run of the file after its `.npy`
header. `npz_bytes` writes the same archive with every array's data at a multiple of 64 bytes
from the file's start (a zip "extra" field pads each member's local header, as Android's
zipalign does; `np.load` reads the file as any other). Such a file is memory-mapped by
`map_npz`: opening it reads its directory and headers only, every process that maps it shares
its pages, and its arrays sit on aligned addresses, as numpy and FAISS want them. Its sha256 is
the caller's to check (`LoadedSegment` does it the first time the arrays are read).

A file written before the alignment (`np.savez`) is read by `read_npz`: once, in order, hashing
every byte, each array's run going to a 64-byte-aligned place of one buffer, headers and the
archive's directory only to the hash. A file that pass cannot lay out (a compressed member,
another .npy version) is read as `np.load` reads it (`load_npz`). The sha256 over the whole file
is what guards the bytes; the archive's CRCs are not checked again.
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import struct
import threading
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

_LOCAL_HEADER = b"PK\x03\x04"
_LOCAL_HEADER_SIZE = 30
# The most an .npy header may take, magic and length fields included (numpy's own limit is 10,000 bytes).
_HEADER_LIMIT = 1 << 16
_ALIGNMENT = 64
# The zip extra field id Android's zipalign pads local headers with: readers skip it.
_PADDING_FIELD = 0xD935


# numpy parses an .npy header with `ast.literal_eval`, whose tree building CPython 3.11 does not
# keep apart across threads: two headers parsed at once (a reader opening a segment while the
# merge thread reads another) can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905). Every header this package reads is parsed under this lock.
HEADER_LOCK = threading.Lock()


def load_npy(data: bytes) -> np.ndarray:
    """The array of the .npy file `data`, as `np.load` reads it (object arrays refused)."""
    with HEADER_LOCK:
        return np.load(io.BytesIO(data), allow_pickle=False)


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The .npz archive `np.savez(**arrays)` writes (stored members, `<name>.npy`), with each
    array's data at a multiple of 64 bytes from the start: what `map_npz` maps."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
            data = member.getvalue()
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o600 << 16
            # zipfile adds a 20-byte zip64 field to the local header of a member this large
            zip64 = 20 if len(data) * 1.05 > zipfile.ZIP64_LIMIT else 0
            fixed = out.tell() + _LOCAL_HEADER_SIZE + len(info.filename.encode()) + zip64 + 6
            info.extra = struct.pack("<HHH", _PADDING_FIELD, 2 + (-fixed % _ALIGNMENT), _ALIGNMENT) + bytes(-fixed % _ALIGNMENT)
            archive.writestr(info, data)
    return out.getvalue()


def map_npz(path: Path) -> tuple[mmap.mmap, dict[str, np.ndarray]] | None:
    """The arrays of the .npz file at `path` as read-only views of one memory map of it, with the
    map; None for a file whose arrays are not all stored on 64-byte-aligned offsets (written
    before `npz_bytes`, or not an archive `read_npz` lays out): the caller reads it as bytes.
    Nothing is hashed here."""
    with path.open("rb") as handle:  # FileNotFoundError is the caller's cue that a merge retired it
        size = os.fstat(handle.fileno()).st_size
        try:
            members = _layout(handle, size)
        except (ValueError, OSError, KeyError, EOFError, struct.error, zipfile.BadZipFile):
            return None
        if not members or any(member.start % _ALIGNMENT for member in members):
            return None
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    return mapped, {member.name: np.frombuffer(mapped, dtype=member.dtype, count=member.count, offset=member.start).reshape(
        member.shape, order="F" if member.fortran_order else "C") for member in members}


def load_npz(data: bytes) -> dict[str, np.ndarray]:
    """Every array of the .npz archive `data`, as `np.load` reads it (copies): for a file that
    `read_npz` does not lay out (a compressed member, another .npy version). Object arrays are
    refused."""
    with HEADER_LOCK, np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}


def read_npz(path: Path) -> tuple[str, dict[str, np.ndarray] | None]:
    """The sha256 of the .npz file at `path` and its arrays, in one sequential read: each array's
    data is read into a 64-byte-aligned place of one buffer and viewed there (read-only), its
    headers and the archive's directory only hashed. Arrays None where the file is not an archive
    of stored, plain-dtype members (damaged, compressed, or another format): the caller checks the
    sha256 first, then reads such a file as bytes (`load_npz`)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        try:
            members = _layout(handle, size)
        except (ValueError, OSError, KeyError, EOFError, struct.error, zipfile.BadZipFile):
            handle.seek(0)
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
            return digest.hexdigest(), None
        places, total = [], 0
        for member in members:
            places.append(total)
            total += -(-member.size // _ALIGNMENT) * _ALIGNMENT  # each array on its own aligned place
        buffer = np.empty(total + _ALIGNMENT, dtype=np.uint8)
        base = -buffer.ctypes.data % _ALIGNMENT
        handle.seek(0)
        at = 0
        for member, place in zip(members, places):
            digest.update(_read_exactly(handle, member.start - at, path))  # its headers, and the previous tail
            data = buffer[base + place:base + place + member.size]
            _read_into(handle, data, path)
            digest.update(data)
            at = member.start + member.size
        digest.update(_read_exactly(handle, size - at, path))  # the archive's directory
    buffer.flags.writeable = False
    return digest.hexdigest(), {
        member.name: np.frombuffer(buffer, dtype=member.dtype, count=member.count, offset=base + place).reshape(
            member.shape, order="F" if member.fortran_order else "C")
        for member, place in zip(members, places)}


@dataclass(frozen=True)
class _Member:
    name: str
    start: int  # where its array data begins in the file
    size: int
    count: int
    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype


def _layout(handle: BinaryIO, size: int) -> list[_Member]:
    """The stored members of the archive open as `handle`, in file order, with where each array's
    data lies; ValueError for anything `read_npz` does not lay out."""
    members: list[_Member] = []
    for info in sorted(zipfile.ZipFile(handle).infolist(), key=lambda info: info.header_offset):
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"{info.filename} is compressed")
        handle.seek(info.header_offset)
        local = handle.read(_LOCAL_HEADER_SIZE)
        if local[:4] != _LOCAL_HEADER:
            raise ValueError(f"{info.filename}: no local file header where the archive's directory points")
        name_length, extra_length = struct.unpack("<HH", local[26:_LOCAL_HEADER_SIZE])
        member = info.header_offset + _LOCAL_HEADER_SIZE + name_length + extra_length
        handle.seek(member)
        header = io.BytesIO(handle.read(min(info.file_size, _HEADER_LIMIT)))
        parsed = _array_header(header)
        if parsed is None or parsed[2].hasobject:
            raise ValueError(f"{info.filename}: an .npy version or dtype this reader leaves to np.load")
        shape, fortran_order, dtype = parsed
        count = int(np.prod(shape, dtype=np.int64))
        if header.tell() + count * dtype.itemsize != info.file_size:
            raise ValueError(f"{info.filename}: its header's shape does not fit its bytes")
        start = member + header.tell()
        if (members and start < members[-1].start + members[-1].size) or start + count * dtype.itemsize > size:
            raise ValueError(f"{info.filename} overlaps another member or the end of the file")
        members.append(_Member(info.filename.removesuffix(".npy"), start, count * dtype.itemsize, count, shape,
                               fortran_order, dtype))
    return members


def _read_exactly(handle: BinaryIO, count: int, path: Path) -> bytes:
    data = handle.read(count)
    if len(data) != count:
        raise OSError(f"{path} ended early: it changed while it was read")
    return data


def _read_into(handle: BinaryIO, target: np.ndarray, path: Path) -> None:
    view, filled = memoryview(target), 0
    while filled < len(view):
        read = handle.readinto(view[filled:])
        if not read:
            raise OSError(f"{path} ended early: it changed while it was read")
        filled += read


def _array_header(header: io.BytesIO) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """The shape, order and dtype of an .npy header in `header` (left after it), None for a
    format version this reader leaves to np.load."""
    version = np.lib.format.read_magic(header)
    with HEADER_LOCK:
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(header)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(header)
    return None
