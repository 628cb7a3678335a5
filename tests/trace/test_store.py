"""The on-disk normalized trace: round trip, reuse, staleness, safety."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from daydream import api
from daydream import trace as trace_stage
from daydream.trace import read_source, store
from daydream.trace.sources import discover
from tests.builders import annotation, kernel, op, runtime, write_trace


def _sample(folder: Path) -> Path:
    events = [
        annotation("ProfilerStep#1", 0, 100),
        op("aten::mm", 10, 50, ext=1),
        runtime("cudaLaunchKernel", 20, 5, correlation=7, ext=1),
        kernel("gemm ünïcode", 30, 40, correlation=7, ext=1, grid=[1, 2, 3], block=[32, 1, 1]),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12,
         "args": {"Addr": 99, "Bytes": -64, "Total Allocated": 0, "Total Reserved": 2097152, "Device Type": 1,
                  "Device Id": 0}},
    ]
    return write_trace(folder, events, name="t.json.gz", distributedInfo={"rank": 2, "world_size": 4},
                       deviceProperties=[{"id": 0, "name": "Tesla V100-SXM2-32GB"}])


def test_round_trip_is_lossless(tmp_path: Path) -> None:
    source = discover(_sample(tmp_path))[0]
    original = read_source(source)
    original.derived["mapping.example"] = np.arange(3)
    target = tmp_path / "stored.npz"
    store.save(original, target, {"k": 1})
    loaded = store.load(target, {"k": 1})
    assert loaded is not None
    assert loaded.meta == original.meta
    assert loaded.strings == original.strings
    assert loaded.tracks == original.tracks
    for key, column in original.columns.items():
        assert np.array_equal(loaded.columns[key], column) and loaded.columns[key].dtype == column.dtype
    for table, columns in original.tables.items():
        for key, column in columns.items():
            assert np.array_equal(loaded.tables[table][key], column), (table, key)
    assert np.array_equal(loaded.derived["mapping.example"], np.arange(3))


def test_stored_file_holds_no_pickles(tmp_path: Path) -> None:
    source = discover(_sample(tmp_path))[0]
    target = tmp_path / "stored.npz"
    store.save(read_source(source), target, {})
    with np.load(target, allow_pickle=False) as stored:
        assert all(stored[key].dtype.kind != "O" for key in stored.files)
    with zipfile.ZipFile(target) as archive:
        assert all(name.endswith(".npy") for name in archive.namelist())


def test_second_open_reuses_the_cache(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _sample(tmp_path)
    first = api.open_job(path)
    assert len(list(isolated_cache.glob("*.npz"))) == 1

    def must_not_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trace was re-read despite a fresh cache")

    monkeypatch.setattr(trace_stage, "read_source", must_not_read)
    second = api.open_job(path)
    assert np.array_equal(second.traces[0].ts_ns, first.traces[0].ts_ns)
    assert np.array_equal(second.traces[0].derived["mapping.launch"], first.traces[0].derived["mapping.launch"])


def test_changed_source_is_read_again(tmp_path: Path) -> None:
    path = _sample(tmp_path)
    api.open_job(path)
    write_trace(tmp_path, [op("aten::only", 1, 2, ext=1)], name="t.json.gz")
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse file systems
    job = api.open_job(path)
    assert [job.traces[0].name_of(i) for i in range(len(job.traces[0]))] == ["aten::only"]


def test_corrupt_cache_is_ignored_and_replaced(tmp_path: Path, isolated_cache: Path) -> None:
    path = _sample(tmp_path)
    api.open_job(path)
    (cached,) = isolated_cache.glob("*.npz")
    cached.write_bytes(b"garbage")
    job = api.open_job(path)
    assert len(job.traces[0]) == 5
    assert store.load(cached) is not None


def test_unwritable_cache_folder_still_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("DAYDREAM_CACHE_DIR", str(blocker / "cache"))
    job = api.open_job(_sample(tmp_path))
    assert len(job.traces[0]) == 5


def test_no_cache_writes_nothing(tmp_path: Path, isolated_cache: Path) -> None:
    api.open_job(_sample(tmp_path), cache=False)
    assert list(isolated_cache.iterdir()) == []


@pytest.mark.parametrize("home", ["", "/", "/nonexistent-daydream-home"])
def test_without_a_usable_home_the_cache_is_in_the_temporary_directory(home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from daydream.trace.store import cache_dir

    monkeypatch.delenv("DAYDREAM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", home)
    found = cache_dir()
    assert found.parent == Path(tempfile.gettempdir()) and found.name.startswith("daydream-cache-")
    assert not Path("/nonexistent-daydream-home").exists()


def test_jit_compiles_without_a_cache_where_numba_cannot_write_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from daydream import _jit

    if _jit.numba is None:
        pytest.skip("numba is not installed")
    real = _jit.numba.njit

    asked: list[object] = []

    def njit(**options: object) -> object:
        asked.append(options.get("cache"))
        if options.get("cache"):
            raise RuntimeError("cannot cache function: no locator available")
        return real(**options)

    import types

    monkeypatch.setattr(_jit, "numba", types.SimpleNamespace(njit=njit))

    def add(a: int, b: int) -> int:
        return a + b

    assert _jit.jit(add)(2, 3) == 5
    assert asked == [True, False]


def test_a_cache_entry_that_is_a_fifo_or_a_link_to_one_is_a_miss(tmp_path: Path) -> None:
    fifo = tmp_path / "entry.npz"
    os.mkfifo(fifo)
    assert store.load(fifo) is None  # returns at once: nothing opened the FIFO for reading
    link = tmp_path / "link.npz"
    link.symlink_to(fifo)
    assert store.load(link) is None
