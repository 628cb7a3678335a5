"""The C library's heap on a CPU trace: what a step allocates in blocks large enough for glibc to
hand out as fresh pages, which no what-if models.

glibc maps a block of at least its mmap threshold (128 KiB at first, raised as mapped blocks are
freed) fresh from the kernel, which zeroes its pages on first touch; smaller ones, and larger ones
once a block of their size has been freed, come from its heap. How many of a step's blocks come
fresh depends on what is live when each is asked for, which `checkpoint` and `batch-size` change:
on a 2-core AVX2 machine one convolution alone took about twice as long under the default heap as
with its buffers reused (`python scripts/allocator_effect.py --op`). The trace shows the blocks
(its `[memory]` events on the CPU), not which of them came fresh; `heap_note` says how large that
unmodelled part of the step can be.

    blocks = large_host_blocks(trace, find_iterations(trace))
    notes += heap_note(blocks, "checkpoint")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from daydream.mapping.attribution import within_any
from daydream.mapping.iterations import Iteration
from daydream.trace import Trace

#: glibc's initial mmap threshold (M_MMAP_THRESHOLD's default): blocks this large may come fresh.
FRESH_BLOCK_BYTES = 128 * 2**10
#: "Device Type" of a [memory] event on the CPU.
CPU_DEVICE_TYPE = 0


@dataclass(slots=True, frozen=True)
class LargeBlocks:
    """Per recorded iteration, the CPU blocks of at least `FRESH_BLOCK_BYTES` the trace's ops asked
    for, and their bytes."""

    blocks: float
    bytes: float
    iterations: int


def large_host_blocks(trace: Trace, iterations: Sequence[Iteration]) -> LargeBlocks | None:
    """The CPU allocations of `FRESH_BLOCK_BYTES` or more that start inside `iterations`, per
    iteration; None where the trace recorded no CPU memory events (no `profile_memory`) or no
    iteration."""
    table = trace.tables.get("memory")
    if table is None or table["event"].size == 0 or not iterations:
        return None
    cpu = table["device_type"] == CPU_DEVICE_TYPE
    if not cpu.any():
        return None
    rows = table["event"][cpu]
    starts, sizes = trace.ts_ns[rows], trace.bytes[rows]
    inside = within_any(starts, [(i.start_ns, i.end_ns) for i in iterations])
    large = inside & (sizes >= FRESH_BLOCK_BYTES)
    count = len(iterations)
    return LargeBlocks(np.count_nonzero(large) / count, float(sizes[large].sum()) / count, count)


def heap_note(blocks: LargeBlocks | None, whatif: str) -> list[str]:
    """The note a what-if that changes what is live adds on a CPU trace: how much the step allocates
    in blocks that may come fresh, which its prediction leaves as recorded."""
    if blocks is None or blocks.blocks == 0:
        return []
    return [f"{whatif}: not modelled on a CPU, the C library's fresh pages: this trace's ops asked "
            f"for {blocks.bytes / 2**20:,.1f} MiB per iteration in {blocks.blocks:,.0f} blocks of "
            f"{FRESH_BLOCK_BYTES // 2**10} KiB or more, which glibc may map fresh (the kernel "
            "zeroing each page); the what-if changes how many do, and its prediction keeps their "
            "recorded cost (scripts/allocator_effect.py measures the effect on this machine)"]
