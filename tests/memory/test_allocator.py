"""The caching-allocator model on hand-computed cases, and against a plain reference on random ones."""

from __future__ import annotations

import random
import time

import pytest

from daydream.memory.allocator import (
    AllocatorPeaks,
    CachingAllocatorModel,
    replay_events,
    round_size,
    segment_size,
    should_split,
)

KiB = 1 << 10
MiB = 1 << 20


def _model(*requests: int) -> CachingAllocatorModel:
    """A model after allocating `requests` bytes under handles 0, 1, 2, ..."""
    model = CachingAllocatorModel()
    for handle, nbytes in enumerate(requests):
        model.malloc(handle, nbytes)
    return model


@pytest.mark.parametrize(("nbytes", "rounded"), [(0, 512), (1, 512), (512, 512), (513, 1024), (MiB + 1, MiB + 512)])
def test_round_size_to_512_bytes(nbytes: int, rounded: int) -> None:
    assert round_size(nbytes) == rounded


@pytest.mark.parametrize(
    ("rounded", "segment"),
    [(KiB, 2 * MiB), (MiB, 2 * MiB), (MiB + 512, 20 * MiB), (3 * MiB // 2, 20 * MiB), (10 * MiB - 512, 20 * MiB),
     (10 * MiB, 10 * MiB), (12 * MiB, 12 * MiB), (25 * MiB, 26 * MiB), (26 * MiB + 512, 28 * MiB)],
)
def test_segment_size(rounded: int, segment: int) -> None:
    assert segment_size(rounded) == segment


@pytest.mark.parametrize(
    ("block_bytes", "request_bytes", "small", "split"),
    [(2 * MiB, MiB, True, True), (MiB, MiB - 512, True, True), (MiB, MiB, True, False),
     (20 * MiB, 3 * MiB, False, True), (20 * MiB, 19 * MiB, False, False), (20 * MiB, 19 * MiB - 512, False, True)],
)
def test_should_split(block_bytes: int, request_bytes: int, small: bool, split: bool) -> None:
    assert should_split(block_bytes, request_bytes, small) is split


@pytest.mark.parametrize(
    ("nbytes", "reserved", "allocated"),
    [
        (KiB, 2 * MiB, KiB),  # small pool: a 2 MiB segment
        (3 * MiB // 2, 20 * MiB, 3 * MiB // 2),  # 1-10 MiB: a 20 MiB segment, split
        (12 * MiB, 12 * MiB, 12 * MiB),  # >= 10 MiB: its own size
        (25 * MiB, 26 * MiB, 26 * MiB),  # rounded to 2 MiB; the 1 MiB remainder is not split off
    ],
)
def test_one_request_reserves_a_segment(nbytes: int, reserved: int, allocated: int) -> None:
    model = _model(nbytes)
    assert (model.reserved_bytes, model.allocated_bytes) == (reserved, allocated)


def test_small_requests_share_a_segment() -> None:
    model = _model(KiB, KiB)
    assert (model.reserved_bytes, model.allocated_bytes) == (2 * MiB, 2 * KiB)


def test_small_pool_fills_its_segment_then_opens_another() -> None:
    # 1 MiB + (1 MiB - 512) leaves 512 bytes, which is split off and serves the third request.
    model = _model(MiB, MiB - 512, 512)
    assert (model.reserved_bytes, model.allocated_bytes) == (2 * MiB, 2 * MiB)
    model.malloc(3, 512)
    assert model.reserved_bytes == 4 * MiB


def test_free_then_reallocate_reuses_the_cached_block() -> None:
    model = _model(3 * MiB // 2)
    model.free(0)
    assert (model.reserved_bytes, model.allocated_bytes) == (20 * MiB, 0)
    model.malloc(0, 3 * MiB // 2)
    assert (model.reserved_bytes, model.allocated_bytes) == (20 * MiB, 3 * MiB // 2)


def test_pools_do_not_share_free_blocks() -> None:
    model = _model(12 * MiB)
    model.free(0)
    model.malloc(1, KiB)  # a free 12 MiB large block cannot serve a small request
    assert model.reserved_bytes == 14 * MiB
    model.free(1)
    model.malloc(2, 2 * MiB)  # nor a free small block a large one: the cached 12 MiB block does
    assert model.reserved_bytes == 14 * MiB


def test_large_block_is_split_when_more_than_1_mib_remains() -> None:
    model = _model(3 * MiB // 2)
    model.free(0)  # a whole free 20 MiB block
    model.malloc(1, 3 * MiB)
    assert model.allocated_bytes == 3 * MiB
    model.malloc(2, 17 * MiB)  # exactly the 17 MiB remainder
    assert (model.reserved_bytes, model.allocated_bytes) == (20 * MiB, 20 * MiB)


@pytest.mark.parametrize("request_bytes", [19 * MiB, 39 * MiB // 2])
def test_large_block_is_handed_out_whole_when_at_most_1_mib_remains(request_bytes: int) -> None:
    model = _model(3 * MiB // 2)
    model.free(0)
    model.malloc(1, request_bytes)
    assert (model.reserved_bytes, model.allocated_bytes) == (20 * MiB, 20 * MiB)
    model.free(1)
    assert model.allocated_bytes == 0


def test_best_fit_takes_the_smallest_block_that_fits() -> None:
    model = _model(14 * MiB, 12 * MiB)
    model.free(0)
    model.free(1)
    # The 12 MiB block leaves 1 MiB, so it is handed out whole; the 14 MiB one would have been split.
    model.malloc(2, 11 * MiB)
    assert (model.reserved_bytes, model.allocated_bytes) == (26 * MiB, 12 * MiB)


@pytest.mark.parametrize("free_order", [(0, 1), (1, 0)])
def test_adjacent_free_blocks_merge(free_order: tuple[int, int]) -> None:
    # One 20 MiB segment: [0, 5) [5, 10) [10, 20) MiB, fully allocated.
    model = _model(5 * MiB, 5 * MiB, 10 * MiB)
    assert (model.reserved_bytes, model.allocated_bytes) == (20 * MiB, 20 * MiB)
    for handle in free_order:
        model.free(handle)
    model.malloc(3, 8 * MiB)  # fits only in the merged 10 MiB block
    assert (model.reserved_bytes, model.allocated_bytes) == (20 * MiB, 18 * MiB)


def test_freeing_the_middle_block_merges_both_sides() -> None:
    model = _model(5 * MiB, 5 * MiB, 10 * MiB)
    for handle in (0, 2, 1):
        model.free(handle)
    model.malloc(3, 20 * MiB)
    assert (model.reserved_bytes, model.allocated_bytes) == (20 * MiB, 20 * MiB)


def test_blocks_of_different_segments_do_not_merge() -> None:
    model = _model(12 * MiB, 12 * MiB)
    model.free(0)
    model.free(1)
    model.malloc(2, 14 * MiB)
    assert model.reserved_bytes == 38 * MiB


def test_peaks_across_a_sequence() -> None:
    events = [
        (1, KiB),  # small segment: reserved 2 MiB
        (2, 12 * MiB),  # reserved 14 MiB, allocated 12 MiB + 1 KiB (the peak)
        (2, -12 * MiB),
        (3, 3 * MiB // 2),  # served by the cached 12 MiB block, split
        (4, 5 * MiB),  # served by the 10.5 MiB remainder, split
        (5, 5 * MiB),  # the 5.5 MiB remainder is handed out whole
        (6, 3 * MiB // 2),  # nothing cached fits: a new 20 MiB segment
    ]
    model = CachingAllocatorModel()
    for handle, nbytes in events:
        if nbytes > 0:
            model.malloc(handle, nbytes)
        else:
            model.free(handle)
    assert model.allocated_bytes == KiB + 3 * MiB // 2 + 5 * MiB + 11 * MiB // 2 + 3 * MiB // 2
    assert (model.peak_allocated_bytes, model.peak_reserved_bytes) == (KiB + 13 * MiB + MiB // 2, 34 * MiB)
    assert replay_events(events) == AllocatorPeaks(KiB + 13 * MiB + MiB // 2, 34 * MiB)


def test_peak_allocated_is_remembered_after_frees() -> None:
    assert replay_events([(1, 12 * MiB), (2, 12 * MiB), (1, -1), (2, -1), (3, 0)]) == AllocatorPeaks(24 * MiB, 24 * MiB)


def test_unknown_handle_raises() -> None:
    model = _model(KiB)
    with pytest.raises(ValueError, match="free of handle 7: no live allocation"):
        model.free(7)
    model.free(0)
    with pytest.raises(ValueError, match="free of handle 0: no live allocation"):
        model.free(0)
    with pytest.raises(ValueError, match="handle 9: no live allocation"):
        replay_events([(9, -KiB)])


def test_bad_malloc_raises() -> None:
    model = _model(KiB)
    with pytest.raises(ValueError, match="handle 0: that handle is still allocated"):
        model.malloc(0, KiB)
    with pytest.raises(ValueError, match="must be positive"):
        model.malloc(1, 0)
    with pytest.raises(ValueError, match="negative"):
        round_size(-1)


class _ReferenceAllocator:
    """The same rules with no index: segments as address-ordered lists, best fit by scanning them all."""

    def __init__(self) -> None:
        self.segments: list[tuple[bool, list[list[int]]]] = []  # (small, [[address, size, allocated], ...])
        self.live: dict[int, tuple[int, int]] = {}  # handle -> (segment index, address)
        self.next_address = self.allocated = self.reserved = self.peak_allocated = 0

    def malloc(self, handle: int, nbytes: int) -> None:
        rounded = round_size(nbytes)
        small = rounded <= MiB
        fits = [(block[1], block[0], index) for index, (seg_small, blocks) in enumerate(self.segments)
                for block in blocks if seg_small == small and not block[2] and block[1] >= rounded]
        if fits:
            _, address, index = min(fits)
        else:
            size = segment_size(rounded)
            address, index = self.next_address, len(self.segments)
            self.segments.append((small, [[address, size, 0]]))
            self.next_address += size
            self.reserved += size
        blocks = self.segments[index][1]
        position = next(i for i, block in enumerate(blocks) if block[0] == address)
        block = blocks[position]
        if should_split(block[1], rounded, small):
            blocks.insert(position + 1, [address + rounded, block[1] - rounded, 0])
            block[1] = rounded
        block[2] = 1
        self.live[handle] = (index, address)
        self.allocated += block[1]
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, handle: int) -> None:
        index, address = self.live.pop(handle)
        blocks = self.segments[index][1]
        position = next(i for i, block in enumerate(blocks) if block[0] == address)
        blocks[position][2] = 0
        self.allocated -= blocks[position][1]
        merged: list[list[int]] = []
        for block in blocks:
            if merged and not merged[-1][2] and not block[2]:
                merged[-1][1] += block[1]
            else:
                merged.append(block)
        blocks[:] = merged


def _random_events(seed: int, count: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    sizes = [rng.choice([rng.randint(1, 64 * KiB), rng.randint(1, MiB), rng.randint(MiB, 12 * MiB), rng.randint(MiB, 40 * MiB)])
             for _ in range(64)]
    live: list[int] = []
    events: list[tuple[int, int]] = []
    for handle in range(count):
        if live and rng.random() < 0.5:
            victim = live.pop(rng.randrange(len(live)))
            events.append((victim, -1))
        else:
            events.append((handle, rng.choice(sizes)))
            live.append(handle)
    return events


@pytest.mark.parametrize("seed", range(8))
def test_matches_the_reference_on_random_sequences(seed: int) -> None:
    model, reference = CachingAllocatorModel(), _ReferenceAllocator()
    for handle, nbytes in _random_events(seed, 600):
        for allocator in (model, reference):
            if nbytes > 0:
                allocator.malloc(handle, nbytes)
            else:
                allocator.free(handle)
        assert (model.allocated_bytes, model.reserved_bytes) == (reference.allocated, reference.reserved)
    assert model.peak_allocated_bytes == reference.peak_allocated


def test_replays_100k_events_quickly() -> None:
    events = _random_events(42, 100_000)
    start = time.perf_counter()
    peaks = replay_events(events)
    elapsed_s = time.perf_counter() - start
    assert peaks.peak_reserved_bytes >= peaks.peak_allocated_bytes > 0
    assert elapsed_s < 5.0
