"""Stage 1, trace: the normalized `Trace` model, its readers and its on-disk form.

Typical use::

    from daydream.trace import read_job
    job = read_job("rank0.json.gz")          # a file, a folder of rank files, or a .tar.gz
    trace = job.traces[0]
    trace.count(EventKind.KERNEL)

`READERS` maps a format name to its decoder; today every trace daydream reads
is Kineto (PyTorch profiler) Chrome-trace JSON.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daydream.errors import InputError
from daydream.trace import kineto, store
from daydream.trace.model import (
    API_KINDS,
    COLLECTIVE_KINDS,
    GPU_ACTIVITY_KINDS,
    KERNEL_KINDS,
    NO_VALUE,
    EventKind,
    GpuInfo,
    Job,
    Trace,
    TraceMeta,
    Track,
    TrackKind,
)
from daydream.trace.sources import Source, close_archives, discover, in_reading_order

Progress = Callable[[str, int, int], None]

#: format name -> reader of one document (anything with `.label` and
#: `.read(progress)`, e.g. a `Source`).
READERS: dict[str, Callable[[kineto.Readable, Progress | None], Trace]] = {"kineto": kineto.read}


def stamp_of(source: Source) -> dict[str, Any]:
    """What must be unchanged for a cached copy of `source` to be reused."""
    return {"identity": source.identity, "size": source.size, "mtime_ns": source.mtime_ns}


def load_cached(source: Source) -> Trace | None:
    """The cached normalized trace of `source`, if one exists and is still fresh."""
    return store.load(store.cache_path(source.identity), stamp_of(source))


def write_cache(source: Source, trace: Trace) -> bool:
    """Cache `trace` for `source`; False (and nothing written) if the
    cache folder is not writable."""
    try:
        store.save(trace, store.cache_path(source.identity), stamp_of(source))
    except OSError:
        return False
    return True


def read_source(source: Source, progress: Progress | None = None) -> Trace:
    """Read and normalize one trace document, ignoring any cache."""
    return READERS["kineto"](source, progress)


def order_by_rank(traces: list[Trace]) -> list[Trace]:
    """Rank order from each file's distributedInfo; files without a rank keep their order, last."""
    return [traces[i] for i in rank_order(traces)]


def rank_order(traces: list[Trace]) -> list[int]:
    """The positions of `traces` in rank order (see order_by_rank)."""
    return sorted(range(len(traces)),
                  key=lambda i: (traces[i].meta.rank is None, traces[i].meta.rank or 0))


@dataclass(slots=True)
class RunChoice:
    """Which capture a command reads when the files it is given are several captures of one process
    (`--run N`: the N-th by start, from 0; None: the newest). Set once per command by the CLI."""

    run: int | None = None


RUN = RunChoice()


def runs_of_one_process(traces: list[Trace]) -> bool:
    """Whether `traces` are several captures of one process rather than ranks of a job: none records
    a rank and two come from the same host process (a TensorBoard log folder holding captures of one
    run made at different times)."""
    if len(traces) < 2 or any(t.meta.rank is not None for t in traces):
        return False
    owners: dict[int | str, str] = {}
    for trace in traces:
        for pid in {t.pid for t in trace.tracks if t.kind is TrackKind.HOST and t.pid}:
            if pid in owners and owners[pid] != trace.meta.source:
                return True
            owners[pid] = trace.meta.source
    return False


def capture_start_ns(trace: Trace) -> int:
    """When a capture began, as far as its file says: its base time plus its first event."""
    return trace.meta.base_time_ns + trace.span_ns()[0]


def choose_run(path: str | os.PathLike[str], traces: list[Trace],
               wanted: int | None = None) -> tuple[int, list[int], str]:
    """(the position in `traces` of the capture to read, every position in start order, the line
    that says so) for captures of one process: run `wanted` (from 0, by start), else the newest."""
    order = sorted(range(len(traces)),
                   key=lambda i: (capture_start_ns(traces[i]), traces[i].meta.source))
    if wanted is not None and not 0 <= wanted < len(order):
        raise InputError(f"{path}: --run {wanted}: it holds {len(order)} captures of one process "
                         f"(runs 0 to {len(order) - 1}, oldest first) — daydream inspect {path} "
                         "lists them")
    chosen = order[-1] if wanted is None else order[wanted]
    which = "the newest" if wanted is None else f"run {wanted}"
    said = (f"{path} holds {len(order)} captures of one process, not ranks of a job: reading "
            f"{which}, {Path(traces[chosen].meta.source).name} (run {order.index(chosen)} of "
            f"0-{len(order) - 1}, oldest first; --run N for another)")
    return chosen, order, said


def check_ranks(path: str | os.PathLike[str],
                traces: list[Trace]) -> tuple[list[Trace], list[str], list[str]]:
    """(the traces to read as the job, what to say about them, every
    capture's file in start order where they are several captures of one
    process: one of them, said; else all of them, nothing said, no runs)."""
    if not runs_of_one_process(traces):
        return traces, [], []
    chosen, order, said = choose_run(path, traces, RUN.run)
    return [traces[chosen]], [said], [traces[i].meta.source for i in order]


def read_job(path: str | os.PathLike[str], cache: bool = True,
             progress: Progress | None = None) -> Job:
    """All ranks at `path` (file, folder or archive), normalized, in rank order."""
    sources = discover(path)
    read: dict[int, Trace] = {}
    try:
        for index in in_reading_order(sources):
            source = sources[index]
            trace = load_cached(source) if cache else None
            if trace is None:
                trace = read_source(source, progress)
                if cache:
                    write_cache(source, trace)
            read[index] = trace
    finally:
        close_archives()
    traces, notes, runs = check_ranks(path, [read[index] for index in range(len(sources))])
    return Job(source=str(path), traces=order_by_rank(traces), notes=notes, runs=runs)


__all__ = [
    "API_KINDS",
    "COLLECTIVE_KINDS",
    "GPU_ACTIVITY_KINDS",
    "KERNEL_KINDS",
    "NO_VALUE",
    "READERS",
    "EventKind",
    "GpuInfo",
    "Job",
    "Source",
    "Trace",
    "TraceMeta",
    "Track",
    "TrackKind",
    "discover",
    "load_cached",
    "order_by_rank",
    "read_job",
    "read_source",
    "write_cache",
]
