"""One rank's trace opened for the stages after it: read (or taken from
the cache), linked, cached with its links."""

from __future__ import annotations

from collections.abc import Callable

from daydream import trace as trace_stage
from daydream._heap import give_back
from daydream.mapping.linking import link
from daydream.trace import Trace
from daydream.trace.sources import Source

Progress = Callable[[str, int, int], None]


def open_trace(source: Source, cache: bool = True, progress: Progress | None = None) -> Trace:
    """One rank's trace, normalized and linked; cached after the first read."""
    trace = trace_stage.load_cached(source) if cache else None
    fresh = trace is None
    if trace is None:
        trace = trace_stage.read_source(source, progress)
    had_links = "mapping.launch" in trace.derived
    if progress:
        progress("linking", 0, 1)
    link(trace)
    give_back()  # what reading and linking freed
    if cache and (fresh or not had_links):
        trace_stage.write_cache(source, trace)
    return trace
