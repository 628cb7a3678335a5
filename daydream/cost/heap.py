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

While it records, a profiler keeps its event records in the same heap, between the step's tensors:
a freed block that a record was carved from no longer holds the next tensor of its size, which then
takes memory the recording had not written before. `heap_walk` finds those pages by the addresses
of the `[memory]` events. Writing them is dear in a virtual machine that reclaims memory left idle:
on this project's 2-core one, examples/mlp.py's weight-gradient multiply took 367 µs where its
output came on 256 such pages and 246 µs where it came on memory allocated before (medians of one
recording: `python scripts/heap_walk.py TRACE`). A what-if that changes the step's allocations
(`amp`, `fused-optimizer`) moves how many there are, which no what-if models; `heap_note` says how
many the recording had, and `amp` keeps an op's time on them as recorded.

    walk = heap_walk(trace, find_iterations(trace))
    walk.per_iteration       # pages written first per recorded iteration
    walk.pages[row]          # those op `row` allocated
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from daydream.mapping.attribution import within_any
from daydream.mapping.iterations import Iteration
from daydream.mapping.linking import innermost_enclosing
from daydream.trace import EventKind, Trace

#: glibc's initial mmap threshold (M_MMAP_THRESHOLD's default): blocks this large may come fresh.
FRESH_BLOCK_BYTES = 128 * 2**10
#: "Device Type" of a [memory] event on the CPU.
CPU_DEVICE_TYPE = 0
#: The page a first write faults in, or (in a virtual machine) the host hands back.
PAGE_BYTES = 4096
#: Instances of an op signature, with walked pages and without, that `page_cost_ns` needs of each.
CALIBRATION_LEAST = 2
#: Ops that allocate, or make views, without writing what they allocate: a page's cost lands in
#: the op that writes it (examples/suite/resnet.py: aten::empty took 9 µs with 1,024 new pages)
NOT_WRITING = re.compile(r"^aten::(empty|new_empty|resize_|as_strided|view|_?reshape|t$|"
                         r"transpose|permute|expand|detach|alias|set_|_unsafe_view|unsqueeze|"
                         r"squeeze|select|slice|narrow)")


@dataclass(slots=True, frozen=True)
class LargeBlocks:
    """Per recorded iteration, the CPU blocks of at least `FRESH_BLOCK_BYTES` the trace's ops asked
    for, and their bytes; and the pages of any size the recording allocated on memory it had not
    allocated before (`heap_walk`)."""

    blocks: float
    bytes: float
    iterations: int
    walk: HeapWalk | None = None

    @property
    def walked_pages(self) -> float:
        """Pages per iteration after the first on memory the recording had not allocated before."""
        return self.walk.per_iteration if self.walk is not None else 0.0


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
    return LargeBlocks(np.count_nonzero(large) / count, float(sizes[large].sum()) / count, count,
                       heap_walk(trace, iterations))


def heap_note(blocks: LargeBlocks | None, whatif: str) -> list[str]:
    """The note a what-if that changes what is live, or what the step allocates, adds on a CPU
    trace: how much the step allocates in blocks that may come fresh, and how much the recording
    put on memory it had not used before, which its prediction leaves as recorded."""
    if blocks is None or blocks.blocks == 0:
        return []
    cost = (f", {blocks.walk.page_ns:,.0f} ns more a page for this trace's ops that ran both ways"
            if blocks.walk is not None and blocks.walk.page_ns > 0 else "")
    walked = (f"; the recording put {blocks.walked_pages * PAGE_BYTES / 2**20:,.1f} MiB per "
              "iteration after its first on memory it had not allocated before (the profiler's "
              "records take freed blocks the step would reuse; writing such memory is dear in a "
              f"virtual machine that reclaims memory left idle{cost})"
              if blocks.walked_pages >= 1 else "")
    return [f"{whatif}: not modelled on a CPU, the C library's fresh pages: this trace's ops asked "
            f"for {blocks.bytes / 2**20:,.1f} MiB per iteration in {blocks.blocks:,.0f} blocks of "
            f"{FRESH_BLOCK_BYTES // 2**10} KiB or more, which glibc may map fresh (the kernel "
            f"zeroing each page){walked}; the what-if changes how many do, and its prediction "
            "keeps their recorded cost (scripts/allocator_effect.py measures the effect on this "
            "machine)"]


@dataclass(slots=True, frozen=True)
class HeapWalk:
    """The CPU pages each op of a recording allocated on memory no allocation of the recording had
    taken before (`pages`: CPU op row -> pages, counting an allocation in every op that encloses
    it), those pages per recorded iteration after the first (`per_iteration`), and what writing
    one cost this trace's ops (`page_ns`, `page_cost_ns`: 0 where the trace cannot tell)."""

    pages: dict[int, int]
    per_iteration: float
    page_ns: float = 0.0

    def walked_ns(self, row: int) -> int:
        """The time op `row` spent writing pages the recording had not allocated before, ns."""
        return int(round(self.pages.get(row, 0) * self.page_ns))


def heap_walk(trace: Trace, iterations: Sequence[Iteration]) -> HeapWalk | None:
    """Which CPU ops of the recorded iterations allocated heap pages the recording had not
    allocated before; None without CPU memory events.

    A page counts from the second recorded iteration on: the first one reuses what the warm-up
    wrote unrecorded, which the trace does not show."""
    table = trace.tables.get("memory")
    if table is None or table["event"].size == 0 or not iterations:
        return None
    events = table["event"]
    wanted = (table["device_type"] == CPU_DEVICE_TYPE) & (trace.bytes[events] > 0)
    if not wanted.any():
        return None
    events, addresses = events[wanted], table["addr"][wanted]
    order = np.argsort(trace.ts_ns[events], kind="stable")
    events, addresses = events[order], addresses[order]
    first_end = min(i.end_ns for i in iterations)
    spans = [(i.start_ns, i.end_ns) for i in iterations]
    counted = within_any(trace.ts_ns[events], spans) & (trace.ts_ns[events] >= first_end)
    written = _Written()
    fresh = {}
    for index, (event, address) in enumerate(zip(events.tolist(), addresses.tolist())):
        pages = written.add(address, int(trace.bytes[event])) // PAGE_BYTES
        if pages and counted[index]:
            fresh[event] = pages
    later = max(len(iterations) - 1, 1)
    by_op = _by_op(trace, fresh)
    return HeapWalk(by_op, sum(fresh.values()) / later, page_cost_ns(trace, by_op, first_end))


class _Written:
    """The address ranges written so far, as sorted disjoint [start, end) pairs."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, start: int, size: int) -> int:
        """Mark [start, start + size) written; how many of its bytes were not before."""
        end = start + size
        first = bisect.bisect_left(self.ends, start)  # the first range that ends at or after start
        last = bisect.bisect_right(self.starts, end)  # past the last range that starts by end
        covered = sum(min(e, end) - max(s, start)
                      for s, e in zip(self.starts[first:last], self.ends[first:last]))
        if first < last:
            start, end = min(start, self.starts[first]), max(end, self.ends[last - 1])
        self.starts[first:last], self.ends[first:last] = [start], [end]
        return size - covered


def _by_op(trace: Trace, fresh: dict[int, int]) -> dict[int, int]:
    """Per CPU op row, the fresh pages of the allocations (`fresh`: memory event -> pages) made
    while it ran on their thread: the innermost op enclosing each, and the ops enclosing that."""
    ops = trace.indices(EventKind.CPU_OP)
    found: dict[int, int] = {}
    if ops.size == 0 or not fresh:
        return found
    events = np.fromiter(fresh, dtype=np.int64, count=len(fresh))
    # only the ops some allocation falls in can hold one, and each holds its own parent's too
    times = np.sort(trace.ts_ns[events])
    ops = ops[np.searchsorted(times, trace.end_ns[ops], side="right")
              > np.searchsorted(times, trace.ts_ns[ops])]
    parent = dict(zip(ops.tolist(), innermost_enclosing(trace, ops, ops).tolist()))
    for event, row in zip(events.tolist(), innermost_enclosing(trace, ops, events).tolist()):
        while row >= 0:
            found[row] = found.get(row, 0) + fresh[event]
            row = parent[row]
    return found


def page_cost_ns(trace: Trace, pages: dict[int, int], after_ns: int) -> float:
    """What writing a page the recording had not allocated before cost this trace's ops, ns: over
    the signatures `calibration_groups` gives, the median time with such pages less the median
    without, per median page, each signature weighing by its pages; the weighted median, 0 where
    no signature qualifies or it is not positive. One recording of examples/mlp.py on this
    project's machine: its weight-gradient multiply took 367 µs with 256 such pages and 246 µs
    without, and the trace's ops gave 476 ns a page."""
    costs, weights = [], []
    for without, walked in calibration_groups(trace, pages, after_ns).values():
        typical = float(np.median([p for p, _ in walked]))
        costs.append((float(np.median([d for _, d in walked])) - float(np.median(without)))
                     / typical)
        weights.append(sum(p for p, _ in walked))
    if not costs:
        return 0.0
    order = np.argsort(costs)
    cumulative = np.cumsum(np.asarray(weights, dtype=np.float64)[order])
    return max(float(np.asarray(costs)[order][np.searchsorted(cumulative, cumulative[-1] / 2)]),
               0.0)


def calibration_groups(trace: Trace, pages: dict[int, int], after_ns: int
                       ) -> dict[tuple[int, int, int], tuple[list[int], list[tuple[int, int]]]]:
    """The op signatures a page's cost is read from: (name, recorded shapes, recorded types, as
    string indices) -> (the durations of its calls without pages new to the recording, the (pages,
    duration) of those with), for the ATen ops that write what they allocate (not `NOT_WRITING`)
    that ran after `after_ns` at least `CALIBRATION_LEAST` times each way."""
    table = trace.tables.get("shapes")
    if table is None or table["event"].size == 0 or not pages:
        return {}
    rows = table["event"]
    later = trace.ts_ns[rows] >= after_ns
    writing = {int(index) for index in np.unique(trace.name[rows[later]])
               if trace.strings[index].startswith("aten::")
               and not NOT_WRITING.match(trace.strings[index])}
    groups: dict[tuple[int, int, int], tuple[list[int], list[tuple[int, int]]]] = {}
    for row, dims, kinds in zip(rows[later].tolist(), table["dims_str"][later].tolist(),
                                table["types_str"][later].tolist()):
        if int(trace.name[row]) not in writing:
            continue
        without, walked = groups.setdefault((int(trace.name[row]), dims, kinds), ([], []))
        if pages.get(row, 0):
            walked.append((pages[row], int(trace.dur_ns[row])))
        else:
            without.append(int(trace.dur_ns[row]))
    return {key: (without, walked) for key, (without, walked) in groups.items()
            if len(without) >= CALIBRATION_LEAST and len(walked) >= CALIBRATION_LEAST}
