"""A model of PyTorch's CUDA caching allocator: allocations and frees in, reserved bytes out.

The model owns one question: given a sequence of tensor allocations and frees, how many
bytes would PyTorch's caching allocator hold (its *reserved* memory, what
`torch.cuda.memory_reserved()` reports) and how many would it count as *allocated*
(`torch.cuda.memory_allocated()`), at every point and at the peak. All sizes are bytes.

    from daydream.memory.allocator import replay_events
    peaks = replay_events([(1, 1024), (2, 12 << 20), (2, -(12 << 20))])
    peaks.peak_reserved_bytes   # 2 MiB small segment + 12 MiB large segment = 14 MiB

Rules, as in `c10/cuda/CUDACachingAllocator.cpp` (read from pytorch/pytorch at commit
001074d2; the constants and `round_size`, `get_pool`, `get_allocation_size`,
`should_split`, `get_free_block`, `alloc_found_block`, `free_block` and
`try_merge_blocks` have kept this shape across releases):

- `round_size`: every request is rounded up to a multiple of `kMinBlockSize` = 512 bytes
  (and a request under 512 bytes takes 512).
- `get_pool`: a rounded request of at most `kSmallSize` = 1 MiB goes to the small pool,
  anything larger to the large pool. Free blocks never move between pools.
- `get_allocation_size`: a new segment (one `cudaMalloc`) is `kSmallBuffer` = 2 MiB for a
  small request, `kLargeBuffer` = 20 MiB for a large request under `kMinLargeAlloc` =
  10 MiB, and the request rounded up to `kRoundLarge` = 2 MiB otherwise.
- `get_free_block`: a request is served by the best-fitting cached free block of its
  pool: the smallest one at least as large (`lower_bound` on blocks ordered by size, then
  address). Only when none fits is a new segment allocated.
- `should_split`: a block larger than the request is split, the remainder going back to
  the pool, when the remainder is at least 512 bytes (small pool) or more than 1 MiB
  (large pool). An unsplit block is handed out whole.
- `alloc_found_block` / `free`: "allocated" grows and shrinks by the size of the block
  handed out, which is the rounded request when the block was split and the whole block
  when it was not (a 25 MiB request gets, and counts as allocated, a whole 26 MiB segment).
- `free_block` / `try_merge_blocks`: a freed block returns to its pool, still reserved,
  and merges with the free blocks just before and after it in its segment.

Deliberately left out: releasing memory (`empty_cache`, the retry that frees cached blocks
when `cudaMalloc` fails, garbage collection), so reserved never shrinks; streams (the
model is one stream, where PyTorch keeps free blocks per stream and delays reuse of
blocks used on other streams); CUDA graph private pools; expandable segments; and the
`PYTORCH_CUDA_ALLOC_CONF` options (`max_split_size_mb`, `roundup_power2_divisions`, a
different large segment size), all at their defaults. Segment addresses are given out in
creation order, which only matters to break ties between equal-sized free blocks.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass

MIN_BLOCK_BYTES = 512  # kMinBlockSize: every request is rounded to a multiple of this
SMALL_SIZE_BYTES = 1 << 20  # kSmallSize: largest request served by the small pool
SMALL_SEGMENT_BYTES = 2 << 20  # kSmallBuffer: size of every small-pool segment
# kLargeBuffer: segment for a large request under MIN_LARGE_ALLOC_BYTES
LARGE_SEGMENT_BYTES = 20 << 20
# kMinLargeAlloc: from here a request gets a segment of its own size
MIN_LARGE_ALLOC_BYTES = 10 << 20
ROUND_LARGE_BYTES = 2 << 20  # kRoundLarge: such a segment is rounded up to a multiple of this


def round_size(nbytes: int) -> int:
    """The size in bytes PyTorch actually allocates for a request of `nbytes` bytes.

    >>> round_size(1), round_size(512), round_size(513)
    (512, 512, 1024)
    """
    if nbytes < 0:
        raise ValueError(f"round_size: a request of {nbytes} bytes is negative; sizes are byte "
                         "counts >= 0")
    if nbytes < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    return _round_up(nbytes, MIN_BLOCK_BYTES)


def is_small(rounded: int) -> bool:
    """Whether a rounded request of `rounded` bytes is served by the small pool."""
    return rounded <= SMALL_SIZE_BYTES


def segment_size(rounded: int) -> int:
    """The bytes of the new segment PyTorch would `cudaMalloc` for a
    rounded request of `rounded` bytes.

    >>> [segment_size(n) >> 20 for n in (1024, 3 << 19, 12 << 20, 25 << 20)]
    [2, 20, 12, 26]
    """
    if is_small(rounded):
        return SMALL_SEGMENT_BYTES
    if rounded < MIN_LARGE_ALLOC_BYTES:
        return LARGE_SEGMENT_BYTES
    return _round_up(rounded, ROUND_LARGE_BYTES)


def should_split(block_bytes: int, rounded: int, small: bool) -> bool:
    """Whether a free block of `block_bytes` serving a rounded request
    of `rounded` bytes is split."""
    remainder = block_bytes - rounded
    return remainder >= MIN_BLOCK_BYTES if small else remainder > SMALL_SIZE_BYTES


def _round_up(nbytes: int, multiple: int) -> int:
    return -(-nbytes // multiple) * multiple


@dataclass(slots=True, eq=False)
class _Block:
    """A contiguous piece of one segment, allocated or free;
    `prev`/`next` are its neighbours there."""

    address: int
    size: int  # bytes
    small: bool
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None


class _FreeBlocks:
    """One pool's cached free blocks, kept sorted by (size, address) for best-fit lookup."""

    __slots__ = ("_keys", "_by_address")

    def __init__(self) -> None:
        self._keys: list[tuple[int, int]] = []
        self._by_address: dict[int, _Block] = {}

    def add(self, block: _Block) -> None:
        insort(self._keys, (block.size, block.address))
        self._by_address[block.address] = block

    def remove(self, block: _Block) -> None:
        index = bisect_left(self._keys, (block.size, block.address))
        del self._keys[index]
        del self._by_address[block.address]

    def take_best_fit(self, nbytes: int) -> _Block | None:
        """Remove and return the smallest free block of at least
        `nbytes` (lowest address on ties)."""
        index = bisect_left(self._keys, (nbytes, -1))
        if index == len(self._keys):
            return None
        _, address = self._keys.pop(index)
        return self._by_address.pop(address)


@dataclass(slots=True, frozen=True)
class AllocatorPeaks:
    """The high-water marks of a replayed sequence, in bytes."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int


class CachingAllocatorModel:
    """PyTorch's CUDA caching allocator on one device and one stream, by handle instead of pointer.

    >>> model = CachingAllocatorModel()
    >>> model.malloc(1, 1024); model.malloc(2, 1024)
    >>> model.allocated_bytes, model.reserved_bytes >> 20   # two 1 KiB blocks in one 2 MiB segment
    (2048, 2)
    """

    __slots__ = ("_pools", "_live", "_next_address", "_allocated", "_reserved", "_peak_allocated",
                 "_peak_reserved")

    def __init__(self) -> None:
        self._pools = {True: _FreeBlocks(), False: _FreeBlocks()}  # keyed by "is the small pool"
        self._live: dict[int, _Block] = {}
        self._next_address = 0
        self._allocated = 0
        self._reserved = 0
        self._peak_allocated = 0
        self._peak_reserved = 0

    @property
    def allocated_bytes(self) -> int:
        """Bytes in blocks handed out and not yet freed (PyTorch's `memory_allocated`)."""
        return self._allocated

    @property
    def reserved_bytes(self) -> int:
        """Bytes in all segments the allocator holds, used or cached
        (PyTorch's `memory_reserved`)."""
        return self._reserved

    @property
    def peak_allocated_bytes(self) -> int:
        """The largest `allocated_bytes` seen so far."""
        return self._peak_allocated

    @property
    def peak_reserved_bytes(self) -> int:
        """The largest `reserved_bytes` seen so far."""
        return self._peak_reserved

    def malloc(self, handle: int, nbytes: int) -> None:
        """Allocate `nbytes` bytes (> 0) under `handle`, which must not be live already."""
        if nbytes <= 0:
            raise ValueError(f"malloc of handle {handle}: {nbytes} bytes; a request must be "
                             "positive (PyTorch does not call the allocator for empty tensors)")
        if handle in self._live:
            raise ValueError(f"malloc of handle {handle}: that handle is still allocated; free it "
                             "first or give each live allocation its own handle")
        rounded = round_size(nbytes)
        small = is_small(rounded)
        block = self._pools[small].take_best_fit(rounded) or self._new_segment(rounded, small)
        if should_split(block.size, rounded, small):
            block = self._split(block, rounded)
        block.allocated = True
        self._live[handle] = block
        self._allocated += block.size
        self._peak_allocated = max(self._peak_allocated, self._allocated)

    def free(self, handle: int) -> None:
        """Free the allocation made under `handle`; its block goes back
        to its pool, still reserved."""
        block = self._live.pop(handle, None)
        if block is None:
            raise ValueError(f"free of handle {handle}: no live allocation has that handle "
                             "(never allocated, or already freed)")
        self._allocated -= block.size
        block.allocated = False
        self._pools[block.small].add(self._merge_with_free_neighbours(block))

    def _new_segment(self, rounded: int, small: bool) -> _Block:
        size = segment_size(rounded)
        block = _Block(self._next_address, size, small)
        self._next_address += size
        self._reserved += size
        self._peak_reserved = max(self._peak_reserved, self._reserved)
        return block

    def _split(self, block: _Block, rounded: int) -> _Block:
        """Cut `rounded` bytes off the front of free `block`; the rest goes back to the pool."""
        front = _Block(block.address, rounded, block.small, prev=block.prev, next=block)
        if block.prev is not None:
            block.prev.next = front
        block.prev = front
        block.address += rounded
        block.size -= rounded
        self._pools[block.small].add(block)
        return front

    def _merge_with_free_neighbours(self, block: _Block) -> _Block:
        pool = self._pools[block.small]
        before = block.prev
        if before is not None and not before.allocated:
            pool.remove(before)
            block.address = before.address
            block.size += before.size
            block.prev = before.prev
            if block.prev is not None:
                block.prev.next = block
        after = block.next
        if after is not None and not after.allocated:
            pool.remove(after)
            block.size += after.size
            block.next = after.next
            if block.next is not None:
                block.next.prev = block
        return block


def replay_events(events: Iterable[tuple[int, int]]) -> AllocatorPeaks:
    """Replay (handle, signed bytes) events through a fresh `CachingAllocatorModel`.

    Positive bytes allocate that many bytes under the handle; negative bytes free the
    handle (the magnitude is not checked: the handle names the block); zero is skipped,
    as PyTorch does not call the allocator for empty tensors.

    >>> replay_events([(1, 3 << 19), (1, -(3 << 19)), (2, 3 << 19)])
    AllocatorPeaks(peak_allocated_bytes=1572864, peak_reserved_bytes=20971520)
    """
    model = CachingAllocatorModel()
    for handle, nbytes in events:
        if nbytes > 0:
            model.malloc(handle, nbytes)
        elif nbytes < 0:
            model.free(handle)
    return AllocatorPeaks(model.peak_allocated_bytes, model.peak_reserved_bytes)
