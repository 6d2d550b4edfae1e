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
import struct
import zipfile

import numpy as np

_LOCAL_HEADER = b"PK\x03\x04"
_LOCAL_HEADER_SIZE = 30
# The most an .npy header may take, magic and length fields included (numpy's own limit is 10,000 bytes).
_HEADER_LIMIT = 1 << 16


def npz_views(data: bytes) -> dict[str, np.ndarray]:
    """Every array of the .npz archive `data`, by name (without `.npy`), read-only. ValueError or
    zipfile.BadZipFile where the archive or a member is damaged; object arrays are refused."""
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED:
                arrays[name] = np.load(io.BytesIO(archive.read(info)), allow_pickle=False)
            else:
                arrays[name] = _stored_member(data, info)
    return arrays


def _stored_member(data: bytes, info: zipfile.ZipInfo) -> np.ndarray:
    start = info.header_offset
    if data[start:start + 4] != _LOCAL_HEADER:
        raise ValueError(f"{info.filename}: no local file header where the archive's directory points")
    name_length, extra_length = struct.unpack("<HH", data[start + 26:start + _LOCAL_HEADER_SIZE])
    member = start + _LOCAL_HEADER_SIZE + name_length + extra_length
    header = io.BytesIO(data[member:member + min(info.file_size, _HEADER_LIMIT)])
    version = np.lib.format.read_magic(header)
    if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(header)
    elif version == (2, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(header)
    else:
        return np.load(io.BytesIO(data[member:member + info.file_size]), allow_pickle=False)
    if dtype.hasobject:
        raise ValueError(f"{info.filename} holds Python objects, which are never loaded")
    count = int(np.prod(shape, dtype=np.int64))
    if header.tell() + count * dtype.itemsize != info.file_size or member + info.file_size > len(data):
        raise ValueError(f"{info.filename}: its header's shape does not fit its bytes")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=member + header.tell())
    return array.reshape(shape, order="F" if fortran_order else "C")
