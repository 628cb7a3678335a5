"""The C library's heap on a CPU trace: the large blocks a step asks for, counted from the trace's [memory] events, the
pages the recording allocated on memory it had not allocated before, and the note the what-ifs that change what is live
carry on a CPU trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from daydream.api import predict_job
from daydream.cost import CostOptions
from daydream.cost.heap import FRESH_BLOCK_BYTES, PAGE_BYTES, LargeBlocks, heap_note, heap_walk, large_host_blocks
from daydream.mapping import find_iterations
from daydream.trace import read_job
from tests.builders import annotation, op, write_trace
from tests.conftest import REPO

MLP = REPO / "examples" / "cpu-avx2" / "round-1" / "mlp-baseline.json.gz"


def _memory(ts: float, nbytes: int, device_type: int = 0, addr: int = 4096) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Addr": addr, "Bytes": nbytes, "Total Allocated": 0, "Total Reserved": 0,
                     "Device Type": device_type, "Device Id": 0}}


def test_large_cpu_blocks_inside_the_iterations_are_counted_per_iteration(tmp_path: Path) -> None:
    big = FRESH_BLOCK_BYTES * 2
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100),
              _memory(10, big), _memory(20, FRESH_BLOCK_BYTES - 1), _memory(30, -big),    # step 1: one large block
              _memory(110, big), _memory(120, FRESH_BLOCK_BYTES), _memory(130, big, device_type=1),  # step 2: two
              _memory(250, big)]                                                          # after the steps
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    found = large_host_blocks(trace, find_iterations(trace))
    assert found is not None
    assert (found.blocks, found.bytes, found.iterations) == (1.5, (2 * big + FRESH_BLOCK_BYTES) / 2, 2)
    assert heap_note(found, "checkpoint") == [
        "checkpoint: not modelled on a CPU, the C library's fresh pages: this trace's ops asked for 0.3 MiB per "
        "iteration in 2 blocks of 128 KiB or more, which glibc may map fresh (the kernel zeroing each page); the what-if "
        "changes how many do, and its prediction keeps their recorded cost (scripts/allocator_effect.py measures the "
        "effect on this machine)"]


def test_pages_the_recording_had_not_allocated_before_are_counted_per_op_after_the_first_iteration(
        tmp_path: Path) -> None:
    first, second = 256 * PAGE_BYTES, 512 * PAGE_BYTES
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100),
              annotation("ProfilerStep#3", 200, 100),
              # step 1: 8 pages at `first`, not counted (the warm-up may have used them unrecorded)
              op("aten::mm", 10, 20, 1), _memory(15, 8 * PAGE_BYTES, addr=first), _memory(25, -8 * PAGE_BYTES, addr=first),
              # step 2: the same 8 pages again (none new); 4 pages and a part of one at `second`, inside a nested op
              op("aten::mm", 110, 20, 2), _memory(115, 8 * PAGE_BYTES, addr=first),
              op("aten::linear", 140, 40, 3), op("aten::addmm", 145, 30, 4),
              _memory(150, 4 * PAGE_BYTES + 100, addr=second), _memory(160, FRESH_BLOCK_BYTES, device_type=1, addr=second),
              # step 3: 40 pages from 2 below `second`, over the 4 and a part written in step 2: 35 whole pages new; the
              # op runs on another thread
              op("aten::mm", 210, 20, 5, tid=2), _memory(215, 40 * PAGE_BYTES, addr=second - 2 * PAGE_BYTES)]
    events[-1]["tid"] = 2
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    walk = heap_walk(trace, find_iterations(trace))
    assert walk is not None
    named = {trace.name_of(row) + f"@{trace.ts_ns[row] // 1000}": pages for row, pages in walk.pages.items()}
    assert named == {"aten::linear@140": 4, "aten::addmm@145": 4, "aten::mm@210": 35}
    assert walk.per_iteration == (4 + 35) / 2
    blocks = large_host_blocks(trace, find_iterations(trace))
    assert blocks is not None and blocks.walked_pages == walk.per_iteration
    assert ("; the recording put 0.1 MiB per iteration after its first on memory it had not allocated before (the "
            "profiler's records take freed blocks") in heap_note(blocks, "amp")[0]


def test_a_pages_cost_is_read_from_the_ops_that_ran_with_new_pages_and_without(tmp_path: Path) -> None:
    # aten::mm [4, 4] x [4, 4]: 10 µs twice on memory allocated before, 30 and 34 µs on 4 new pages each: (32 - 10) / 4
    # = 5.5 µs a page. aten::empty, which allocates 8 new pages in 1 µs without writing them, and a signature seen once
    # each way, say nothing.
    shapes = {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}
    events = [annotation(f"ProfilerStep#{step}", 100 * step, 100) for step in range(3)]
    events += [op("aten::mm", 10, 5, 1, **shapes), _memory(12, 4 * PAGE_BYTES, addr=2**20)]  # the first step: not read
    events += [op("aten::mm", 110, 10, 2, **shapes), _memory(112, 4 * PAGE_BYTES, addr=2**20),
               op("aten::mm", 130, 30, 3, **shapes), _memory(132, 4 * PAGE_BYTES, addr=2**21),
               op("aten::empty", 170, 1, 4, **{"Input Dims": [[]], "Input type": [""]}),
               _memory(170.5, 8 * PAGE_BYTES, addr=2**22),
               op("aten::mm", 210, 10, 5, **shapes), _memory(212, 4 * PAGE_BYTES, addr=2**20),
               op("aten::mm", 230, 34, 6, **shapes), _memory(232, 4 * PAGE_BYTES, addr=2**23),
               op("aten::bmm", 270, 20, 7, **shapes), _memory(272, 4 * PAGE_BYTES, addr=2**24),
               op("aten::bmm", 292, 2, 8, **shapes), _memory(293, 4 * PAGE_BYTES, addr=2**20)]
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    walk = heap_walk(trace, find_iterations(trace))
    assert walk is not None
    assert walk.page_ns == pytest.approx((32_000 - 10_000) / 4)
    assert walk.per_iteration == (4 + 8 + 4 + 4) / 2
    third_mm = next(row for row in walk.pages if trace.ts_ns[row] == 230_000)
    assert walk.walked_ns(third_mm) == round(4 * 5_500)
    note = heap_note(LargeBlocks(1.0, 2.0**20, 2, walk), "amp")[0]
    assert "; the recording put 0.0 MiB per iteration after its first" in note
    assert "left idle, 5,500 ns more a page for this trace's ops that ran both ways)" in note


def test_a_recorded_cpu_traces_new_pages_lie_between_the_whole_and_the_touched_pages_read_from_its_events() -> None:
    # From the file itself: per iteration after the first, the pages of its CPU allocations that no earlier allocation
    # of the trace touched; counted by whole pages (at least what heap_walk finds) and by any page touched (at most).
    raw = json.loads(gzip.decompress(MLP.read_bytes()))["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in raw
                   if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))
    allocations = sorted((e["ts"], e["args"]["Addr"], e["args"]["Bytes"]) for e in raw if e.get("name") == "[memory]"
                         and e["args"].get("Device Type") == 0 and e["args"]["Bytes"] > 0)
    seen: set[int] = set()
    whole = touched = 0
    for ts, address, size in allocations:
        pages = set(range(address // PAGE_BYTES, (address + size + PAGE_BYTES - 1) // PAGE_BYTES))
        if ts >= steps[0][1] and any(start <= ts < end for start, end in steps):
            whole += len(set(range(-(-address // PAGE_BYTES), (address + size) // PAGE_BYTES)) - seen)
            touched += len(pages - seen)
        seen |= pages
    trace = read_job(MLP).traces[0]
    walk = heap_walk(trace, find_iterations(trace))
    assert walk is not None and whole > 0
    assert whole / (len(steps) - 1) <= walk.per_iteration <= touched / (len(steps) - 1)


def test_without_cpu_memory_events_nothing_is_said(tmp_path: Path) -> None:
    events = [annotation("ProfilerStep#1", 0, 100), _memory(10, FRESH_BLOCK_BYTES * 4, device_type=1)]
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    assert large_host_blocks(trace, find_iterations(trace)) is None
    assert heap_note(None, "batch-size") == []
    assert heap_walk(trace, find_iterations(trace)) is None


@pytest.mark.parametrize("spec", [r"checkpoint:layers=blocks\.\d+$", "batch-size:factor=2"])
def test_the_what_ifs_that_change_what_is_live_say_so_on_a_cpu_trace(spec: str) -> None:
    raw = json.loads(gzip.decompress(MLP.read_bytes()))["traceEvents"]
    steps = [e for e in raw if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    large = [e for e in raw if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
             and e["args"]["Bytes"] >= FRESH_BLOCK_BYTES
             and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)]
    assert large and steps
    notes = predict_job(MLP, [spec], cost_options=CostOptions(measure=False))[0].notes
    said = [n for n in notes if "fresh pages" in n]
    assert len(said) == 1
    assert f" in {len(large) / len(steps):,.0f} blocks of 128 KiB or more" in said[0]
