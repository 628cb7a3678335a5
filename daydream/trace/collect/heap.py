"""A reserve of written heap for the recorded iterations, so that the profiler's own records do not
make the script fault in fresh memory it would reuse without them (glibc on Linux only).

A profiler keeps every event it records in the process's heap until it exports them. While it
records, the heap grows under the script instead of serving its tensors from the memory freed
tensors left: each recorded iteration writes pages the script without the profiler never faults in
again (a GPT-style script, examples/own/gpt.py: 16,384 pages, 64 MiB, an iteration; `usage.py`
counts them). A fault costs about a microsecond on bare metal and tens of microseconds in a virtual
machine that hands free memory back to its host, where that script's recorded step took 2.3 times
its unprofiled time, half of it in the kernel.

At the boundary before the first recorded iteration (whose time lands in no iteration), the
reserve keeps freed memory in the heap (M_TRIM_THRESHOLD), keeps tensors below 32 MiB in the heap
as glibc's own threshold does once it has adapted (M_MMAP_THRESHOLD, its largest value), then
allocates, writes and frees a block of memory at the heap's top: the heap grows into memory that is
already there (one 8 MiB block in each GiB stays allocated, so that glibc, which hands back a free
top of 2 GiB or more whatever its threshold, keeps it). Its size is what the process grew by over
the iteration before, times the recorded iterations and a margin, or half the resident memory per
recorded iteration where that is more; at least RESERVE_LEAST, at most RESERVE_MOST and a quarter
of the room left (the memory the machine has available, and what this process's machine or
container limit leaves it), shared among the job's processes on this machine (torchrun's local
ranks reserve at once).

    reserve = HeapReserve(warmup=1, iterations=3)
    reserve.begin()          # when the script starts
    reserve.at_step(1)       # at each step boundary, with the steps taken so far
    reserve.reserved         # bytes reserved (0: none: not glibc, or nothing to reserve)
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform

from daydream._memory import available_bytes, resident_bytes

#: mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: the largest trim threshold mallopt takes (an int): glibc gives the top of its heap back to the
#: kernel at a free that leaves the free top this large, so a reserve that freed into one top
#: chunk of 2 GiB or more was handed back at once (2,096 MiB reserved: all of it; 2,400 MiB: all
#: but 352 MiB), and the recorded iterations faulted in fresh pages again
TRIM_MOST = 2**31 - 1
#: glibc's largest mmap threshold on 64-bit systems, which its adaptive threshold stops at
MMAP_THRESHOLD_MOST = 32 * 2**20
#: the reserve is allocated in blocks below the mmap threshold, so they come from the heap
BLOCK = 8 * 2**20
#: every this many bytes of the reserve, one block stays allocated: it parts the freed blocks into
#: chunks that never join into a top chunk of TRIM_MOST (a chunk below the top stays in the heap
#: whatever its size; later allocations are carved from it as from the top)
FENCE_EVERY = 2**30
RESERVE_LEAST, RESERVE_MOST = 256 * 2**20, 4 * 2**30
#: the reserve covers the growth of this many iterations per recorded one
MARGIN = 1.5
#: and at least half the resident memory per recorded iteration: the profiler's records do not grow
#: the heap while it warms up, so the iteration before can show no growth at all, while a recorded
#: iteration can take fresh memory for much of what it allocates (the suite's ResNet on 64x64
#: images, 460 MiB resident before recording: a reserve of a quarter per iteration, 920 MiB, was
#: used up after six of eight recorded iterations, which then faulted 33,000 pages each; at twice
#: the batch, after four, then 67,000 pages an iteration)
RESIDENT_SHARE = 2


def room_bytes(resident: int) -> int | None:
    """The memory this process may still take: the machine's MemAvailable, and what its machine's
    or container's limit (daydream._memory.available_bytes) leaves beside `resident`, the lesser;
    None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            found += [int(line.split()[1]) * 1024 for line in handle
                      if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    limit = available_bytes()
    if limit is not None:
        found.append(max(limit - resident, 0))
    return min(found) if found else None


def reserve_size(growth: int, resident: int, iterations: int, available: int | None,
                 processes: int = 1) -> int:
    """Bytes to reserve for `iterations` recorded iterations of a process of `resident` bytes
    that grew by `growth` over the iteration before, one of `processes` on this machine that
    reserve at once (torchrun's local ranks); 0 where the memory available is unknown."""
    if available is None:
        return 0
    wanted = max(RESERVE_LEAST, int(max(growth, 0) * iterations * MARGIN),
                 resident * iterations // RESIDENT_SHARE)
    return min(wanted, RESERVE_MOST, available // (4 * max(processes, 1))) // BLOCK * BLOCK


def local_processes() -> int:
    """How many processes of this job run on this machine (torchrun's LOCAL_WORLD_SIZE), else 1."""
    value = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(value) if value.isdigit() and int(value) > 0 else 1


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, where it is glibc's on Linux (the only one whose heap this knows)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
        libc.mallopt.restype, libc.mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed() -> ctypes.CDLL | None:
    """Have glibc keep freed memory in the heap for good, and serve blocks below 32 MiB from it,
    as its adaptive thresholds do in a process that has run a while; the C library where it did,
    else None (not glibc, or refused)."""
    libc = _glibc()
    if libc is None or not (libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
                            and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MOST)):
        return None
    return libc


def reserve(size: int) -> int:
    """Keep freed memory in the heap and grow it by `size` bytes of written memory; the bytes
    reserved (0 where the C library is not glibc or refused)."""
    libc = keep_freed() if size > 0 else None
    if libc is None:
        return 0
    blocks = []
    for _ in range(size // BLOCK):
        block = libc.malloc(BLOCK - 64)  # below the block, so that a chunk's header fits
        if not block:
            break
        ctypes.memset(block, 0, BLOCK - 64)
        blocks.append(block)
    fences = fenced(len(blocks))
    for index in reversed(range(len(blocks))):
        if index not in fences:
            libc.free(blocks[index])
    return (len(blocks) - len(fences)) * BLOCK


def fenced(blocks: int) -> set[int]:
    """Which of a reserve's `blocks` (allocated one after another) stay allocated, so that no run
    of freed ones spans FENCE_EVERY bytes: the block after each such run."""
    run = FENCE_EVERY // BLOCK
    return set(range(run, blocks - 1, run + 1))


class HeapReserve:
    """The reserve of a recording of `iterations` iterations after `warmup`: sized at the boundary
    before the first recorded one from the growth over the iteration before it."""

    def __init__(self, warmup: int, iterations: int, enabled: bool = True) -> None:
        self.warmup, self.iterations, self.enabled = warmup, iterations, enabled
        self.reserved = 0
        self._before: int | None = None

    def begin(self) -> None:
        """Call when the script starts (the boundary before the first iteration)."""
        self.at_step(0)

    def at_step(self, steps: int) -> None:
        """Call at each step boundary with the steps taken so far, before recording moves on."""
        if not self.enabled:
            return
        if steps == self.warmup - 1:
            self._before = resident_bytes()
        if steps == self.warmup:
            now = resident_bytes() or 0
            growth = now - self._before if now and self._before is not None else 0
            self.reserved = reserve(reserve_size(growth, now, self.iterations, room_bytes(now),
                                                 local_processes()))
