"""The calls the command line makes; each CLI command is one call from here.

    from daydream.api import open_job
    job = open_job("traces/rank0.json.gz")   # read (or reuse the cache), link, in rank order
    replays = replay_job("traces/")          # build and simulate every rank's graph
    predictions = predict_job("trace.json.gz", ["amp"])   # what if: each rank under optimizations
    comparisons = diff_jobs("before.json.gz", "after.json.gz")   # B against A, rank by rank
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from daydream import trace as trace_stage
from daydream._heap import give_back
from daydream._notices import NOTICES
from daydream.errors import InputError
from daydream.mapping import link
from daydream.trace import Job, Trace
from daydream.trace.sources import Source

if TYPE_CHECKING:  # the simulator (numba) is imported only by the calls that simulate: inspect starts fast
    from daydream.cost import CostOptions
    from daydream.simulate import Replay
    from daydream.simulate.diff import Comparison
    from daydream.simulate.whatif import Prediction

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


def open_job(path: str | os.PathLike[str], cache: bool = True, progress: Progress | None = None,
             build: bool = False) -> Job:
    """Every rank at `path` (a trace file, a folder of rank files, or a tar archive), in rank order; with `build`,
    each rank's graph too (`Job.graphs`). A job of many ranks is read in parallel (daydream.ranks)."""
    from daydream.ranks import load_ranks

    sources = trace_stage.discover(path)
    traces, graphs = load_ranks(sources, cache, progress, build)
    kept, notes, runs = trace_stage.check_ranks(path, traces)
    if runs:  # captures of one process: one of them, with its graph
        graphs = [graphs[traces.index(kept[0])]] if graphs is not None else None
        traces = kept
    NOTICES.extend(notes)
    order = trace_stage.rank_order(traces)
    return Job(source=str(path), traces=[traces[i] for i in order],
               graphs=[graphs[i] for i in order] if graphs is not None else None, notes=notes, runs=runs)


def replay_job(path: str | os.PathLike[str], cache: bool = True, progress: Progress | None = None) -> list[Replay]:
    """Build and simulate the untouched graph of every rank at `path`."""
    from daydream.simulate.replay import replay_traces

    job = open_job(path, cache, progress, build=True)
    if progress:
        progress("simulating", 0, 1)
    return replay_traces(job.traces, job.graphs)


def predict_job(path: str | os.PathLike[str], specs: list[str], device_name: str | None = None, cache: bool = True,
                progress: Progress | None = None, cost_options: CostOptions | None = None) -> list[Prediction]:
    """Predict every rank at `path` under the optimizations `specs` (applied in order)."""
    from daydream.simulate.whatif import predict_traces

    job = open_job(path, cache, progress, build=True)
    if progress:
        progress("predicting", 0, 1)
    try:
        return predict_traces(job.traces, specs, device_name, job.graphs, cost_options=cost_options)
    except (ValueError, InputError) as exc:
        names_a_file = any(str(exc).startswith(t.meta.source) for t in job.traces) or str(exc).startswith(str(path))
        if isinstance(exc, InputError) and names_a_file:
            raise
        raise InputError(f"{path}: {exc}") from None


def diff_jobs(path_a: str | os.PathLike[str], path_b: str | os.PathLike[str], cache: bool = True,
              progress: Progress | None = None) -> list[Comparison]:
    """Compare the traces at `path_b` with those at `path_a`, rank by rank (see daydream.simulate.diff)."""
    from daydream.simulate.diff import diff_pairs

    job_a, job_b = open_job(path_a, cache, progress), open_job(path_b, cache, progress)
    ranks_a, ranks_b = [t.meta.rank for t in job_a.traces], [t.meta.rank for t in job_b.traces]
    if (len(ranks_a) > 1 or len(ranks_b) > 1) and ranks_a != ranks_b:
        raise InputError(f"{path_b}: holds {_ranks(ranks_b)} but {path_a} holds {_ranks(ranks_a)} — compare traces of the "
                         "same ranks (two files, or two folders of the same rank files)")
    if progress:
        progress("comparing", 0, 1)
    return diff_pairs(job_a.traces, job_b.traces)


def _ranks(ranks: list[int | None]) -> str:
    return f"{len(ranks)} rank{'s' if len(ranks) > 1 else ''} ({', '.join('?' if r is None else str(r) for r in ranks)})"


def predict_memory_for(traces: list[Trace], specs: list[str], device_name: str | None = None) -> list[dict[str, object]]:
    """Predicted peak memory per device of each trace (rank) under `specs`, with a fits verdict."""
    from daydream.mapping import attribute
    from daydream.memory import analyze_memory
    from daydream.memory.whatif import current_optimizer_of, largest_batch_factor, predict_memory
    from daydream.simulate.whatif import gradient_bytes_of, resolve_device
    from daydream.transforms import is_pipeline_file, parse_spec

    parsed = [parse_spec(spec) for spec in specs if not is_pipeline_file(spec)]
    results: list[dict[str, object]] = []
    for trace in traces:
        layers = attribute(trace).layers
        layer_bytes = gradient_bytes_of(trace)
        current = current_optimizer_of(trace.strings)
        device, _ = resolve_device(trace, device_name)
        targets = [params["target"] for name, params in parsed if name == "gpu" and params.get("target")]
        if targets:  # gpu:target=NAME: the memory must fit the target's
            from daydream.devices import device as table_device
            device = table_device(str(targets[-1]))
        for memory in analyze_memory(trace):
            target = device if memory.device.startswith("cuda") else None
            prediction = predict_memory(memory, parsed, layers, current, target, layer_bytes)
            entry: dict[str, object] = {
                "rank": trace.meta.rank,
                "device": memory.device,
                "measured_peak_bytes": prediction.measured_peak_bytes,
                "predicted_peak_bytes": prediction.predicted_peak_bytes,
                "predicted_reserved_bytes": prediction.predicted_reserved_bytes,
                "capacity_bytes": prediction.capacity_bytes,
                "fits": prediction.fits,
                "headroom_bytes": prediction.headroom_bytes,
                "notes": prediction.notes,
            }
            if target is not None:
                entry["largest_batch_factor"] = largest_batch_factor(memory, parsed, layers, current, target, layer_bytes)
            results.append(entry)
    return results
