"""The heap reserve before recording (trace/collect/heap.py) and the kernel time counted per recorded iteration
(trace/collect/usage.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from daydream.trace.collect import heap, usage
from daydream.trace.collect.heap import BLOCK, RESERVE_LEAST, RESERVE_MOST, reserve_size
from daydream.trace.collect.usage import HostUsage
from tests.conftest import REPO

MiB = 2**20


def test_the_reserve_covers_the_growth_of_the_recorded_iterations() -> None:
    # 100 MiB of growth over the iteration before, 4 recorded iterations, 1.5 of margin: 600 MiB, in whole blocks
    assert reserve_size(100 * MiB, 200 * MiB, 4, 64 * 2**30) == 600 * MiB
    # no growth seen (the profiler warming up grows nothing): half the resident memory per iteration
    assert reserve_size(0, 400 * MiB, 3, 64 * 2**30) == 600 * MiB
    # never below the least, nor above the most or a quarter of what is available, and whole blocks
    assert reserve_size(0, 10 * MiB, 1, 64 * 2**30) == RESERVE_LEAST
    assert reserve_size(10 * 2**30, 0, 8, 64 * 2**30) == RESERVE_MOST
    assert reserve_size(10 * 2**30, 0, 8, 1000 * MiB) == 250 * MiB // BLOCK * BLOCK
    # four local ranks reserving at once share the quarter of what is available
    assert reserve_size(10 * 2**30, 0, 8, 4000 * MiB, processes=4) == 250 * MiB // BLOCK * BLOCK
    # the memory available unknown (not Linux): nothing
    assert reserve_size(100 * MiB, 100 * MiB, 4, None) == 0


def test_local_processes_are_torchruns_local_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert heap.local_processes() == 8
    for value in ("", "zero", "0"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
        assert heap.local_processes() == 1


def test_the_reserve_is_sized_at_the_boundary_before_the_first_recorded_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    resident = iter([150 * MiB, 250 * MiB])  # at the boundaries 1 and 2 of a --warmup 2 recording
    monkeypatch.setattr(heap, "resident_bytes", lambda: next(resident))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(heap, "room_bytes", lambda resident: 64 * 2**30)
    asked: list[int] = []
    monkeypatch.setattr(heap, "reserve", lambda size: asked.append(size) or size)
    recording = heap.HeapReserve(warmup=2, iterations=3)
    for steps in range(0, 6):
        recording.at_step(steps)
    # grew 100 MiB over the iteration before: 100 x 3 x 1.5 = 450 MiB, more than half of 250 MiB per iteration
    # (375 MiB) and the least (256 MiB); in whole 8 MiB blocks, 448 MiB
    assert asked == [448 * MiB] and recording.reserved == 448 * MiB
    off = heap.HeapReserve(warmup=0, iterations=3, enabled=False)
    off.begin()
    assert off.reserved == 0


def test_the_room_is_the_lesser_of_what_is_available_and_what_the_limit_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "available_bytes", lambda: 1000 * MiB)   # the machine's or container's limit
    assert heap.room_bytes(900 * MiB) <= 100 * MiB    # MemAvailable, where less, is the room
    assert heap.room_bytes(2000 * MiB) == 0
    monkeypatch.setattr(heap, "available_bytes", lambda: None)
    if platform.system() == "Linux":
        assert heap.room_bytes(0) > 0   # MemAvailable alone
    else:
        assert heap.room_bytes(0) is None


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's heap")
def test_the_reserve_grows_the_heap_by_written_memory_that_later_allocations_reuse() -> None:
    # In a process of its own: the reserve changes how the C library keeps freed memory for good.
    code = """
import ctypes
from daydream.trace.collect.heap import reserve, resident_bytes
before = resident_bytes()
reserved = reserve(64 * 2**20)
after = resident_bytes()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
block = libc.malloc(16 * 2**20)
ctypes.memset(block, 1, 16 * 2**20)   # writes memory the reserve already holds: no growth
libc.free(block)
print(reserved, after - before, resident_bytes() - after)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    reserved, grew, grew_after = (int(v) for v in done.stdout.split())
    assert reserved == 64 * MiB
    assert grew >= 0.95 * reserved         # written, so resident, and kept after it was freed
    assert grew_after < 1 * MiB            # a 16 MiB tensor-sized block found the reserve


def test_a_reserve_is_fenced_every_gib_so_no_freed_run_reaches_the_trim_limit() -> None:
    per_run = heap.FENCE_EVERY // BLOCK                     # 128 blocks of 8 MiB: 1 GiB
    assert heap.fenced(per_run) == set()                    # 1 GiB: no fence needed
    assert heap.fenced(per_run + 1) == set()                # a fence as the last block would part nothing
    assert heap.fenced(2 * per_run + 1) == {per_run}        # 0..127 freed, 128 kept, 129..256 freed
    assert heap.fenced(RESERVE_MOST // BLOCK) == {128, 257, 386}
    blocks = RESERVE_MOST // BLOCK
    fences = sorted(heap.fenced(blocks))
    runs = [b - a - 1 for a, b in zip([-1, *fences], [*fences, blocks])]
    assert max(runs) * BLOCK <= heap.FENCE_EVERY < heap.TRIM_MOST


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's heap")
def test_a_reserve_of_over_2_gib_is_kept_not_trimmed_back() -> None:
    # glibc trims a free top chunk of 2 GiB (the largest trim threshold) at once: unfenced, a 2,200 MiB
    # reserve was handed back whole and writing 256 MiB after it faulted every page again.
    code = """
import ctypes, resource
from daydream.trace.collect.heap import BLOCK, reserve
reserved = reserve(2200 * 2**20)
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(32):
    ctypes.memset(libc.malloc(BLOCK - 64), 1, BLOCK - 64)
print(reserved, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    reserved, faults = (int(v) for v in done.stdout.split())
    if reserved < 2100 * MiB:
        pytest.skip(f"only {reserved >> 20} MiB could be reserved here")
    assert faults < 0.01 * 256 * MiB / 4096               # 65,536 pages written: under 1% came fresh


def test_host_usage_counts_each_recorded_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = iter([(100, 0, 5_000_000, 400 * MiB), (300, 1, 9_000_000, 420 * MiB), (300, 1, 9_000_000, 460 * MiB)])
    clock = iter([1_000, 51_000, 91_000])
    monkeypatch.setattr(usage, "_sample", lambda: next(samples))
    monkeypatch.setattr(usage, "_now", lambda: next(clock))
    reserve = heap.HeapReserve(warmup=1, iterations=2, enabled=False)
    reserve.reserved = 7
    counted = HostUsage(warmup=1, iterations=2, reserve=reserve)
    counted.begin()                      # boundary 0: warm-up, not sampled
    for steps in range(1, 5):            # boundaries 1, 2, 3 are the recorded iterations'; 4 is past them
        counted.at_step(steps)
    assert counted.recorded() == {
        "iterations": [{"minor_faults": 200, "major_faults": 1, "system_ns": 4_000_000, "wall_ns": 50_000},
                       {"minor_faults": 0, "major_faults": 0, "system_ns": 0, "wall_ns": 40_000}],
        "max_rss_bytes": [400 * MiB, 460 * MiB], "heap_reserve_bytes": 7}
    monkeypatch.setattr(usage, "_sample", lambda: (0, 0, 0, MiB))
    monkeypatch.setattr(usage, "_now", lambda: 0)
    short = HostUsage(warmup=0, iterations=3)
    short.begin()
    assert short.recorded() is None      # the recording ended early: no counts
