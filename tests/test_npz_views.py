"""An .npz read once: hashed, its arrays equal to np.load's, aligned, read-only and not copied."""

from __future__ import annotations

import hashlib
import io
import zipfile

import numpy as np
import pytest

from rms_retrieval.stores.engine.npz_views import load_npz, map_npz, npz_bytes, read_npz

ARRAYS = {
    "vectors": np.random.default_rng(1).random((50, 384), dtype=np.float32),
    "ids": np.arange(7, dtype=np.int64),
    "fortran": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    "empty": np.zeros((0, 32), dtype=np.uint8),
    "scalar": np.array(3.5),
    "bytes": np.frombuffer("naïve tenant/γ".encode(), dtype=np.uint8),
}


def _npz(compressed: bool = False, **arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def test_a_file_is_hashed_and_its_arrays_placed_aligned_in_one_read(tmp_path) -> None:
    path = tmp_path / "index.npz"
    path.write_bytes(_npz(**ARRAYS))
    digest, arrays = read_npz(path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sorted(arrays) == sorted(ARRAYS)
    for name, expected in ARRAYS.items():
        assert arrays[name].dtype == expected.dtype and arrays[name].shape == expected.shape, name
        np.testing.assert_array_equal(arrays[name], expected)
        assert arrays[name].ctypes.data % 64 == 0 and not arrays[name].flags.writeable, name
    assert arrays["fortran"].flags.f_contiguous
    assert len({id(_root(array)) for array in arrays.values()}) == 1  # views of one buffer, none copied out


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def test_a_file_it_cannot_lay_out_is_only_hashed(tmp_path) -> None:
    for name, data in (("damaged.npz", b"damaged"), ("compressed.npz", _npz(compressed=True, **ARRAYS)),
                       ("cut.npz", _npz(**ARRAYS)[:-100])):
        path = tmp_path / name
        path.write_bytes(data)
        assert read_npz(path) == (hashlib.sha256(data).hexdigest(), None), name


def test_a_compressed_member_is_read_as_np_load_reads_it() -> None:
    arrays = load_npz(_npz(compressed=True, **ARRAYS))
    for name, expected in ARRAYS.items():
        np.testing.assert_array_equal(arrays[name], expected)


def test_damage_is_refused_not_read(tmp_path) -> None:
    data = _npz(**ARRAYS)
    with pytest.raises((ValueError, zipfile.BadZipFile)):
        load_npz(data[: len(data) // 2])
    member = data.index(b"\x93NUMPY")  # the first array's header: a shape that no longer fits its bytes
    grown = data.replace(b"(50, 384)", b"(51, 384)", 1)
    assert grown != data and member >= 0
    path = tmp_path / "grown.npz"
    path.write_bytes(grown)
    assert read_npz(path) == (hashlib.sha256(grown).hexdigest(), None)
    with pytest.raises((ValueError, zipfile.BadZipFile)):  # np.load: the member's CRC no longer matches
        load_npz(grown)


def test_python_objects_are_never_loaded(tmp_path) -> None:
    data = _npz(words=np.array(["a", None], dtype=object))
    path = tmp_path / "objects.npz"
    path.write_bytes(data)
    assert read_npz(path) == (hashlib.sha256(data).hexdigest(), None)
    with pytest.raises(ValueError):
        load_npz(data)


def test_an_aligned_archive_is_np_load_s_and_maps_without_reading_its_arrays(tmp_path) -> None:
    path = tmp_path / "index.npz"
    path.write_bytes(npz_bytes(ARRAYS))
    with np.load(path) as loaded:  # any .npz reader reads it
        for name, expected in ARRAYS.items():
            np.testing.assert_array_equal(loaded[name], expected)
    mapped, arrays = map_npz(path)
    for name, expected in ARRAYS.items():
        assert arrays[name].dtype == expected.dtype and arrays[name].shape == expected.shape, name
        np.testing.assert_array_equal(arrays[name], expected)
        assert arrays[name].ctypes.data % 64 == 0 and not arrays[name].flags.writeable, name
    assert arrays["fortran"].flags.f_contiguous
    assert all(_root(array).base.obj is mapped for array in arrays.values())  # views of the map, none copied out
    assert read_npz(path)[0] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_archive_np_savez_wrote_is_not_mapped(tmp_path) -> None:
    for name, data in (("savez.npz", _npz(**ARRAYS)), ("compressed.npz", _npz(compressed=True, **ARRAYS)),
                       ("damaged.npz", b"damaged"), ("cut.npz", npz_bytes(ARRAYS)[:-100])):
        path = tmp_path / name
        path.write_bytes(data)
        assert map_npz(path) is None, name


def test_npy_headers_are_parsed_one_at_a_time_across_threads(tmp_path, monkeypatch) -> None:
    import ast
    import threading
    import time

    from rms_retrieval.stores.engine.npz_views import load_npy

    inside, most = [0], [0]
    parse = ast.literal_eval

    def slow(text):  # numpy parses each header with it: two at once are what CPython 3.11 can fail on
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.002)
        inside[0] -= 1
        return parse(text)

    monkeypatch.setattr(ast, "literal_eval", slow)
    path = tmp_path / "index.npz"
    path.write_bytes(npz_bytes(ARRAYS))
    npy = io.BytesIO()
    np.save(npy, ARRAYS["ids"])
    data = npy.getvalue()

    read = []

    def reader() -> None:
        for _ in range(3):
            read.append((map_npz(path)[1]["ids"].tolist(), load_npz(_npz(ids=ARRAYS["ids"]))["ids"].tolist(),
                         load_npy(data).tolist(), read_npz(path)[1]["ids"].tolist()))

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert read == [(list(range(7)),) * 4] * 12 and most[0] == 1
