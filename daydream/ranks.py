"""Reading a job's ranks: in this process, in worker processes, or as Ray tasks on a cluster.

Each rank is read (decompressed, decoded, linked, cached) and, for the commands that
simulate, its graph built, on its own; only the joint simulation needs every rank at once.
So a job of many ranks is read in parallel:

- **worker processes** by default, when the job has more than one rank and enough bytes for
  the workers' start-up to pay (`PARALLEL_FROM_BYTES`); `--workers N` or DAYDREAM_WORKERS=N
  sets how many (1: this process only);
- **Ray tasks** with `--ray ADDRESS` or DAYDREAM_RAY_ADDRESS (`auto` for the cluster this
  machine belongs to, `local` for a Ray started here): each rank's read and build is a task,
  its columns come back as numpy arrays through Ray's object store. The rank files must be
  readable at the same path from every node (a shared file system). Ray is an optional extra:
  `pip install 'ray>=2.40'` (the `[ray]` extra).

The points of a `whatif --sweep` run as Ray tasks the same way when Ray is named.
Results are the same whichever way the ranks are read (tests/simulate/test_ranks.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daydream.errors import InputError

if TYPE_CHECKING:
    from daydream.graph import Graph
    from daydream.trace import Trace
    from daydream.trace.sources import Source

Progress = Callable[[str, int, int], None]

WORKERS_ENV = "DAYDREAM_WORKERS"
RAY_ENV = "DAYDREAM_RAY_ADDRESS"
#: Below this many bytes of rank files in all, the ranks are read in
#: this process: starting workers costs more.
PARALLEL_FROM_BYTES = 32 << 20


@dataclass(slots=True)
class Settings:
    """How ranks are read; the CLI sets these from --workers and --ray
    (the environment otherwise)."""

    # None: DAYDREAM_WORKERS, else one per CPU when the job is large enough
    workers: int | None = None
    ray: str | None = None  # a Ray address; None: DAYDREAM_RAY_ADDRESS, else no Ray


SETTINGS = Settings()


def load_ranks(sources: list[Source], cache: bool, progress: Progress | None,
               build: bool) -> tuple[list[Trace], list[Graph] | None]:
    """Every rank of `sources`, read (and with `build`, its graph
    built), in the order of `sources`."""
    from daydream.trace.sources import close_archives, in_reading_order

    address = ray_address()
    # an archive's members in archive order: one pass over it (per process)
    order = in_reading_order(sources)
    chosen = [sources[i] for i in order]
    try:
        if address and len(sources) > 1:
            results = _with_ray(address, chosen, cache, build, progress)
        else:
            workers = worker_count(sources)
            if workers > 1:
                results = _with_processes(workers, chosen, cache, build, progress)
            else:
                results = [read_rank(source, cache, build, progress) for source in chosen]
    finally:
        close_archives()
    back = {position: result for position, result in zip(order, results)}
    results = [back[i] for i in range(len(sources))]
    traces = [trace for trace, _ in results]
    graphs = [graph for _, graph in results] if build else None
    # graphs hold no None when `build`: each rank built one
    return traces, graphs  # type: ignore[return-value]


def worker_count(sources: list[Source]) -> int:
    """How many processes read `sources`: --workers or DAYDREAM_WORKERS, else one per CPU (at most
    one per rank) for a job of several ranks and more than PARALLEL_FROM_BYTES of files, else 1."""
    chosen = SETTINGS.workers
    if chosen is None:
        text = os.environ.get(WORKERS_ENV, "").strip()
        if text:
            try:
                chosen = int(text)
            except ValueError:
                raise InputError(f"{WORKERS_ENV}={text!r} is not a number of worker processes — "
                                 "write e.g. 4, or 1 to read the ranks in this process") from None
            if chosen < 1:
                raise InputError(f"{WORKERS_ENV}={text!r}: at least 1 worker process is needed")
    if chosen is None:
        # an archive's members share its size: counted once
        files = {str(s.path): s.size for s in sources}
        if len(sources) < 2 or sum(files.values()) < PARALLEL_FROM_BYTES:
            return 1
        chosen = os.cpu_count() or 1
    return max(1, min(chosen, len(sources)))


def read_rank(source: Source, cache: bool, build: bool,
              progress: Progress | None = None) -> tuple[Trace, Graph | None]:
    """One rank: its trace (read, linked, cached) and, with `build`,
    its graph (collectives not yet tied)."""
    from daydream.mapping.opening import open_trace

    trace = open_trace(source, cache, progress)
    if not build:
        return trace, None
    # the builder (and numba) only for the commands that simulate
    from daydream.graph import build_graph

    return trace, build_graph(trace)


def _with_processes(workers: int, sources: list[Source], cache: bool, build: bool,
                    progress: Progress | None) -> list[tuple[Trace, Graph | None]]:
    # imported here: a process that reads one trace does not pay for them (about 20 ms)
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    results: list[tuple[Trace, Graph | None] | None] = [None] * len(sources)
    # spawn, not fork: the parent may hold threads (numba, a progress
    # display) that fork would copy half-way.
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(read_rank, source, cache, build): index
                   for index, source in enumerate(sources)}
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            if progress:
                progress(f"reading ranks ({workers} processes)", done, len(sources))
    return results  # type: ignore[return-value]  # every slot filled: one result per source


def _with_ray(address: str, sources: list[Source], cache: bool, build: bool,
              progress: Progress | None) -> list[tuple[Trace, Graph | None]]:
    ray = _ray_started(address)
    task = ray.remote(read_rank)
    pending = {task.remote(source, cache, build): index for index, source in enumerate(sources)}
    results: list[Any] = [None] * len(sources)
    done = 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for reference in ready:
            results[pending.pop(reference)] = _unwrapped(ray.get, reference)
            done += 1
            if progress:
                progress("reading ranks (Ray)", done, len(sources))
    return results


def ray_address() -> str | None:
    """The Ray cluster to use (--ray, else DAYDREAM_RAY_ADDRESS), or None."""
    return SETTINGS.ray or os.environ.get(RAY_ENV) or None


def sweep_points(traces: list[Trace], points: list[list[str]], device_name: str | None,
                 with_memory: bool) -> list[tuple[list[Any], list[dict[str, object]] | None]]:
    """Each sweep point's predictions (and memory predictions with
    `with_memory`): one Ray task per point when Ray is configured (the
    traces put in Ray's object store once), else one after another here."""
    address = ray_address()
    if not address or len(points) < 2:
        return [predict_point(traces, specs, device_name, with_memory) for specs in points]
    ray = _ray_started(address)
    shared = ray.put(traces)
    task = ray.remote(predict_point)
    return _unwrapped(ray.get,
                      [task.remote(shared, specs, device_name, with_memory) for specs in points])


def predict_point(traces: list[Trace], specs: list[str], device_name: str | None,
                  with_memory: bool) -> tuple[list[Any], list[dict[str, object]] | None]:
    """One sweep point: the job's predictions under `specs`, and its
    memory predictions with `with_memory`."""
    from daydream.memory.job import predict_memory_for
    from daydream.simulate.whatif import predict_traces

    predictions = predict_traces(traces, specs, device_name)
    return predictions, predict_memory_for(traces, specs, device_name) if with_memory else None


def _ray_started(address: str) -> Any:
    """Ray, connected to `address` ("local": a Ray started here with
    --workers CPUs, all of them by default)."""
    ray = ray_module()
    if not ray.is_initialized():
        if address == "local":
            ray.init(num_cpus=SETTINGS.workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray


def _unwrapped(get: Callable[[Any], Any], references: Any) -> Any:
    """`get(references)`, with a task's own error (a bad trace, a bad parameter) raised as itself,
    not wrapped in Ray's task error with the worker's traceback."""
    try:
        return get(references)
    except Exception as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def ray_module() -> Any:
    """The `ray` package, or an input error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray / DAYDREAM_RAY_ADDRESS needs Ray: pip install 'ray>=2.40' "
                         "(or read the ranks with worker processes: --workers N)") from None
    return ray
