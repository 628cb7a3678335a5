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

#: format name -> reader of one document (anything with `.label` and `.read(progress)`, e.g. a `Source`).
READERS: dict[str, Callable[[kineto.Readable, Progress | None], Trace]] = {"kineto": kineto.read}


def stamp_of(source: Source) -> dict[str, Any]:
    """What must be unchanged for a cached copy of `source` to be reused."""
    return {"identity": source.identity, "size": source.size, "mtime_ns": source.mtime_ns}


def load_cached(source: Source) -> Trace | None:
    """The cached normalized trace of `source`, if one exists and is still fresh."""
    return store.load(store.cache_path(source.identity), stamp_of(source))


def write_cache(source: Source, trace: Trace) -> bool:
    """Cache `trace` for `source`; False (and nothing written) if the cache folder is not writable."""
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
    return sorted(range(len(traces)), key=lambda i: (traces[i].meta.rank is None, traces[i].meta.rank or 0))


def check_ranks(path: str | os.PathLike[str], traces: list[Trace]) -> None:
    """Refuse traces that are not ranks of one job: two or more that record no rank and come from the same host
    process (a TensorBoard log folder holding two captures of one run, made at different times)."""
    if len(traces) < 2 or any(t.meta.rank is not None for t in traces):
        return
    owners: dict[int | str, str] = {}
    for trace in traces:
        for pid in {t.pid for t in trace.tracks if t.kind is TrackKind.HOST and t.pid}:
            if pid in owners and owners[pid] != trace.meta.source:
                raise InputError(f"{path}: {Path(owners[pid]).name} and {Path(trace.meta.source).name} are two captures of "
                                 f"one process (pid {pid}), not ranks of a job: pass one of the files")
            owners[pid] = trace.meta.source


def read_job(path: str | os.PathLike[str], cache: bool = True, progress: Progress | None = None) -> Job:
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
    traces = [read[index] for index in range(len(sources))]
    check_ranks(path, traces)
    return Job(source=str(path), traces=order_by_rank(traces))


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
