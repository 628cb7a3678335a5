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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daydream import trace as trace_stage
from daydream._notices import NOTICES
from daydream.errors import InputError
from daydream.mapping.opening import open_trace
from daydream.memory.job import predict_memory_for
from daydream.trace import Job

if TYPE_CHECKING:
    # the simulator (numba) is imported only by the calls that simulate: inspect starts fast
    from daydream.cost import CostOptions
    from daydream.simulate import Replay
    from daydream.simulate.diff import Comparison
    from daydream.simulate.whatif import Prediction

Progress = Callable[[str, int, int], None]


def open_job(path: str | os.PathLike[str], cache: bool = True, progress: Progress | None = None,
             build: bool = False) -> Job:
    """Every rank at `path` (a trace file, a folder of rank files, or a tar
    archive), in rank order; with `build`, each rank's graph too (`Job.graphs`).
    A job of many ranks is read in parallel (daydream.ranks)."""
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
               graphs=[graphs[i] for i in order] if graphs is not None else None, notes=notes,
               runs=runs)


def replay_job(path: str | os.PathLike[str], cache: bool = True,
               progress: Progress | None = None) -> list[Replay]:
    """Build and simulate the untouched graph of every rank at `path`."""
    from daydream.simulate.replay import replay_traces

    job = open_job(path, cache, progress, build=True)
    if progress:
        progress("simulating", 0, 1)
    return replay_traces(job.traces, job.graphs)


def predict_job(path: str | os.PathLike[str], specs: list[str], device_name: str | None = None,
                cache: bool = True, progress: Progress | None = None,
                cost_options: CostOptions | None = None) -> list[Prediction]:
    """Predict every rank at `path` under the optimizations `specs` (applied in order)."""
    from daydream.simulate.whatif import predict_traces

    job = open_job(path, cache, progress, build=True)
    if progress:
        progress("predicting", 0, 1)
    try:
        return predict_traces(job.traces, specs, device_name, job.graphs, cost_options=cost_options)
    except (ValueError, InputError) as exc:
        names_a_file = (any(str(exc).startswith(t.meta.source) for t in job.traces)
                        or str(exc).startswith(str(path)))
        if isinstance(exc, InputError) and names_a_file:
            raise
        raise InputError(f"{path}: {exc}") from None


def diff_jobs(path_a: str | os.PathLike[str], path_b: str | os.PathLike[str], cache: bool = True,
              progress: Progress | None = None) -> list[Comparison]:
    """Compare the traces at `path_b` with those at `path_a`, rank by rank (see
    daydream.simulate.diff)."""
    from daydream.simulate.diff import diff_pairs

    job_a, job_b = open_job(path_a, cache, progress), open_job(path_b, cache, progress)
    ranks_a, ranks_b = [t.meta.rank for t in job_a.traces], [t.meta.rank for t in job_b.traces]
    if (len(ranks_a) > 1 or len(ranks_b) > 1) and ranks_a != ranks_b:
        raise InputError(f"{path_b}: holds {_ranks(ranks_b)} but {path_a} holds {_ranks(ranks_a)} "
                         "— compare traces of the same ranks (two files, or two folders of the "
                         "same rank files)")
    if progress:
        progress("comparing", 0, 1)
    return diff_pairs(job_a.traces, job_b.traces)


def _ranks(ranks: list[int | None]) -> str:
    return (f"{len(ranks)} rank{'s' if len(ranks) > 1 else ''} "
            f"({', '.join('?' if r is None else str(r) for r in ranks)})")


@dataclass(slots=True, frozen=True)
class Sweep:
    """A job predicted at every value of one parameter: `runs` is (value, predictions) per value,
    `memories` each value's memory predictions (empty without them)."""

    key: str
    values: list[str]
    runs: list[tuple[str, list[Prediction]]]
    memories: list[list[dict[str, object]]]


def sweep_values(sweep: str) -> tuple[str, list[str]]:
    """'world=1,2,4' -> ('world', ['1', '2', '4']): the parameter a --sweep names and its values."""
    from daydream.transforms.specs import parse_sweep

    return parse_sweep(sweep)


def sweep_job(path: str | os.PathLike[str], specs: list[str], sweep: str,
              device_name: str | None = None, cache: bool = True, with_memory: bool = False,
              progress: Progress | None = None) -> Sweep:
    """Every rank at `path` under `specs` at each value of `sweep`
    ('KEY=V1,V2,...': a parameter of one of them), the values' predictions made
    in worker processes or Ray tasks where configured (daydream.ranks)."""
    from daydream.ranks import sweep_points
    from daydream.transforms import is_pipeline_file, parse_spec
    from daydream.transforms.specs import with_value

    key, values = sweep_values(sweep)
    if not any(key in parse_spec(spec)[1] for spec in specs if not is_pipeline_file(spec)):
        raise InputError(f"--sweep {sweep}: none of the optimizations {', '.join(specs)} has a "
                         f"parameter {key!r}")
    job = open_job(path, cache, progress)
    if progress:
        progress(f"predicting {len(values)} values of {key}", 0, len(values))
    points = [[with_value(spec, key, value) for spec in specs] for value in values]
    try:
        results = sweep_points(job.traces, points, device_name, with_memory)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None
    runs = [(value, predictions) for value, (predictions, _) in zip(values, results)]
    memories = [memory or [] for _, memory in results] if with_memory else []
    return Sweep(key, values, runs, memories)


#: The degrees a layout sweep takes (--sweep dp=...,tp=...,pp=...).
LAYOUT_KEYS = ("dp", "tp", "pp")


def parse_layout_sweep(sweep: str) -> dict[str, list[int]]:
    """'dp=1,2,4,tp=1,2,pp=1,2' -> {'dp': [1, 2, 4], 'tp': [1, 2],
    'pp': [1, 2]}; a degree not named is [1]."""
    found: dict[str, list[int]] = {}
    key = None
    for item in (part.strip() for part in sweep.split(",")):
        name, sep, value = item.partition("=")
        if sep:
            key = name.strip()
            if key not in LAYOUT_KEYS:
                raise InputError(f"--sweep {sweep}: {key!r} is not a degree of a layout — sweep "
                                 "dp=, tp= and pp=")
            found[key] = []
            item = value
        if key is None or not item.strip().isdigit() or int(item) < 1:
            raise InputError(
                f"--sweep {sweep}: write dp=1,2,4,tp=1,2,pp=1,2 (whole degrees from 1)")
        found[key].append(int(item))
    return {k: found.get(k, [1]) for k in LAYOUT_KEYS}


def layout_sweep(path: str | os.PathLike[str], specs: list[str], sweep: str, world: int,
                 device_name: str | None = None, cache: bool = True, with_memory: bool = False,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Every layout dp × tp × pp = `world` of the degrees `sweep` names, each the what-if `specs`
    (the last one `layout[:...]`) with those degrees, run alone: its step, samples/s, memory per
    rank and whether it fits (report.layout)."""
    from itertools import product

    from daydream.report.layout import summarize_layouts
    from daydream.trace.model import batch_size
    from daydream.transforms.specs import with_value

    degrees = parse_layout_sweep(sweep)
    if not specs or not specs[-1].partition(":")[0].strip() == "layout":
        raise InputError(f"--sweep {sweep}: a layout sweep is of --opt layout[:...] (give it last)")
    for key, values in degrees.items():
        if max(values) > world:
            raise InputError(f"--sweep {sweep}: {key}={max(values)} is more ranks than the world "
                             f"of {world} — give degrees up to {world}")
    layouts = [(d, t, p) for d, t, p in product(degrees["dp"], degrees["tp"], degrees["pp"])
               if d * t * p == world]
    if not layouts:
        raise InputError(f"--sweep {sweep} --world {world}: no dp × tp × pp of these is {world} "
                         f"ranks — give degrees whose products include {world}")
    job = open_job(path, cache, progress, build=True)
    rows, baseline = [], 0
    for number, (dp, tp, pp) in enumerate(layouts):
        if progress:
            progress(f"layout dp={dp} tp={tp} pp={pp}", number, len(layouts))
        spec = specs[-1]
        for key, value in zip(LAYOUT_KEYS, (dp, tp, pp)):
            spec = with_value(spec, key, str(value))
        row, simulated_ns = _layout_row(path, job, [*specs[:-1], spec], (dp, tp, pp), device_name,
                                        cache, with_memory)
        rows.append(row)
        baseline = baseline or simulated_ns
    if not baseline:  # no layout could be predicted: the step as recorded, simulated
        baseline = predict_job(path, [], device_name, cache)[0].simulated_ns
    return summarize_layouts(str(path), world, baseline, batch_size(job.traces[0]), rows)


def _layout_row(path: str | os.PathLike[str], job: Job, specs: list[str],
                degrees: tuple[int, int, int], device_name: str | None, cache: bool,
                with_memory: bool) -> tuple[dict[str, Any], int]:
    """A layout's row, and the simulated step as recorded its
    prediction started from (0 where it could not run)."""
    dp, tp, pp = degrees
    simulated_ns = 0
    row: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "spec": specs[-1]}
    try:
        prediction = predict_job(path, specs, device_name, cache)[0]
        row.update(predicted_ns=prediction.predicted_ns, notes=prediction.notes)
        simulated_ns = prediction.simulated_ns
        if with_memory:
            memory = predict_memory_for(job.traces[:1], specs, device_name)
            if memory:  # a trace without memory events has none to predict
                capacities = [int(str(m["capacity_bytes"])) for m in memory
                              if m.get("capacity_bytes")]
                row.update(predicted_peak_bytes=max(int(str(m["predicted_peak_bytes"]))
                                                    for m in memory),
                           capacity_bytes=min(capacities) if capacities else None,
                           fits=all(bool(m["fits"]) for m in memory)
                           if all(m["fits"] is not None for m in memory)
                           else None)
    except InputError as exc:
        row["error"] = str(exc).removeprefix(f"{path}: ")
    return row, simulated_ns


def list_optimizations() -> list[dict[str, str]]:
    """Every registered optimization by name: its summary, time model,
    memory model and parameters (`whatif --list`)."""
    from daydream.memory.whatif import memory_model_words
    from daydream.transforms import OPTIMIZATIONS

    return [{"name": o.name, "summary": o.summary, "model": o.model,
             "memory": memory_model_words(o.name),
             "parameters": ", ".join(f"{k}={p.default!r}" for k, p in o.parameters.items())}
            for _, o in sorted(OPTIMIZATIONS.items())]


__all__ = ["Sweep", "diff_jobs", "list_optimizations", "open_job", "open_trace", "predict_job",
           "predict_memory_for", "replay_job", "sweep_job", "sweep_values"]
