"""The data behind `daydream report`'s page, JSON-ready: timeline boxes per track, memory series.

Sizes are bounded so that a page stays a few MB for any trace: on a track, boxes
narrower than 1/TIMELINE_COLUMNS of the drawn span that lie next to each other are
merged into one (named after its longest task, with the count), and a track whose
boxes still exceed its share of MAX_BOXES_PER_VIEW (at most MAX_BOXES_PER_TRACK) is
merged at a coarser resolution until it fits. A memory timeline keeps at most MEMORY_POINTS points
per device (the highest of each time bucket, so the peak is always kept). All times are integer ns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.graph import Graph, Resource, ResourceKind, TaskKind
from daydream.graph.model import GPU_WORK, HOST_WORK, Timeline
from daydream.graph.windows import iteration_windows
from daydream.mapping import PHASES, Iteration, link
from daydream.memory import CATEGORIES, DeviceMemory
from daydream.report.timeline import completions_of_calls
from daydream.simulate import Replay
from daydream.trace import GPU_ACTIVITY_KINDS, Trace

TIMELINE_COLUMNS = 16384  # merge resolution: about 12 screen widths of detail before boxes merge
MAX_BOXES_PER_TRACK = 6000
MAX_BOXES_PER_VIEW = 50000  # about 1.5 MB of JSON per view, however many streams
MEMORY_POINTS = 1500
NAME_CHARS = 300  # longer (templated C++) names are cut in tooltips
DRAWN_KINDS = (*HOST_WORK, *GPU_WORK)
BOX_FIELDS = ("start_ns", "duration_ns", "name", "phase", "kind", "count")


@dataclass(slots=True, frozen=True)
class TimelineRun:
    """One drawn timeline: a graph, when each task ran (ns) and the
    iteration's window on that clock."""

    title: str
    graph: Graph
    start_ns: np.ndarray
    end_ns: np.ndarray
    window_ns: tuple[int, int]


def typical_iteration(trace: Trace, iterations: list[Iteration]) -> int:
    """Index of the iteration to draw by default: the whole iteration of median measured time.

    An iteration is cut when GPU work in it was launched before the window (orphans), or
    when it is the first of optimizer-step iterations (it starts where the trace does,
    not at a step). Of the whole ones, the median by time stands for the steady state
    (the first is often a warm-up step, much shorter or longer); ties go to the earlier.
    The first iteration when none is whole.
    """
    gpu = trace.indices(*GPU_ACTIVITY_KINDS)
    orphans = trace.ts_ns[gpu[link(trace).orphan[gpu]]]
    whole = [index for index, iteration in enumerate(iterations)
             if not (index == 0 and iteration.source == "optimizer_step" and len(iterations) > 1)
             and not np.any((orphans >= iteration.start_ns) & (orphans < iteration.end_ns))]
    if not whole:
        return 0
    times = np.array([iterations[i].end_ns - iterations[i].start_ns for i in whole],
                     dtype=np.float64)
    return whole[int(np.argmin(np.abs(times - np.median(times))))]


def measured_run(replay: Replay, index: int) -> TimelineRun:
    """The recorded timeline of iteration `index`, from the untouched
    graph's recorded task times."""
    tasks = replay.graph.tasks
    it = replay.iterations[index]
    return TimelineRun("measured", replay.graph, tasks["measured_start_ns"],
                       tasks["measured_end_ns"], (it.measured_start_ns, it.measured_end_ns))


def simulated_run(title: str, graph: Graph, timeline: Timeline,
                  window_ns: tuple[int, int]) -> TimelineRun:
    """A simulated timeline; a blocking call is drawn until it returns
    (its completion), as it was recorded."""
    end = timeline.end_ns.copy()
    completions = completions_of_calls(graph)
    if completions:
        calls = np.fromiter(completions.keys(), dtype=np.int64, count=len(completions))
        done = np.fromiter(completions.values(), dtype=np.int64, count=len(completions))
        end[calls] = np.maximum(end[calls], timeline.start_ns[done])
    return TimelineRun(title, graph, timeline.start_ns, end, window_ns)


def predicted_window(graph: Graph, timeline: Timeline, index: int) -> tuple[int, int]:
    """Iteration `index`'s simulated (start, end) ns, its window
    (simulate.windows); the whole run without markers."""
    if index < len(graph.iteration_markers):
        window = iteration_windows(graph, timeline)[index]
        return window.start_ns, window.end_ns
    return int(timeline.start_ns.min()), int(timeline.end_ns.max())


def timeline_data(runs: list[TimelineRun]) -> dict[str, Any]:
    """Tracks (the same in every run) and, per run, the boxes on each
    track, offset from the run's window start.

    A track is a host thread or GPU stream with a task in the window of any run. Boxes
    are flat lists of BOX_FIELDS per track; `name` indexes `names`, `phase` indexes
    `phases`, `kind` indexes `kinds`, and `count` > 1 marks merged boxes.
    """
    axis_ns = max(max(run.window_ns[1] - run.window_ns[0] for run in runs), 1)
    resolution_ns = max(axis_ns // TIMELINE_COLUMNS, 1)
    chosen = [_in_window(run) for run in runs]
    tracks = _tracks(runs, chosen)
    cap = min(MAX_BOXES_PER_TRACK, MAX_BOXES_PER_VIEW // max(len(tracks), 1))
    names: dict[str, int] = {}  # filled by the views
    views = [_view(run, tasks, tracks, resolution_ns, cap, names)
             for run, tasks in zip(runs, chosen)]
    return {
        "axis_ns": axis_ns,
        "fields": list(BOX_FIELDS),
        "tracks": [{"label": track.label, "kind": "gpu" if track.kind is ResourceKind.GPU_STREAM
                    else "host"} for track in tracks],
        "views": views,
        "names": list(names),
        "phases": [*PHASES, "none"],
        "kinds": [kind.name.lower().replace("_", " ") for kind in TaskKind],
    }


def _in_window(run: TimelineRun) -> np.ndarray:
    """Drawn tasks of `run` that overlap its window (a zero-length task
    counts when it starts inside)."""
    first, last = run.window_ns
    drawn = np.isin(run.graph.tasks["kind"], [int(kind) for kind in DRAWN_KINDS])
    overlaps = (run.start_ns < last) & ((run.end_ns > first) | (run.start_ns >= first))
    return np.flatnonzero(drawn & overlaps)


def _tracks(runs: list[TimelineRun], chosen: list[np.ndarray]) -> list[Resource]:
    """Resources with work in any run (matched by value: each run has its own graph), host threads
    first, then GPU streams by device and stream."""
    used = {run.graph.resources[int(index)] for run, tasks in zip(runs, chosen)
            for index in np.unique(run.graph.tasks["resource"][tasks])}
    return sorted(used, key=lambda r: (int(r.kind), r.device, r.stream, r.track, r.label))


def _view(run: TimelineRun, tasks: np.ndarray, tracks: list[Resource], resolution_ns: int, cap: int,
          names: dict[str, int]) -> dict[str, Any]:
    """One run's boxes, track by track, with what was merged."""
    position = {resource: index for index, resource in enumerate(run.graph.resources)}
    resource = run.graph.tasks["resource"][tasks]
    boxes = [_track_boxes(run, tasks[resource == position[track]], resolution_ns, cap, names)
             if track in position else ([], resolution_ns)
             for track in tracks]
    return {
        "title": run.title,
        "window_ns": list(run.window_ns),
        "duration_ns": run.window_ns[1] - run.window_ns[0],
        "tasks": int(tasks.size),
        "boxes": [box for box, _ in boxes],
        "drawn": sum(len(box) // len(BOX_FIELDS) for box, _ in boxes),
        "merge_resolution_ns": max(used for _, used in boxes) if boxes else resolution_ns,
    }


def _track_boxes(run: TimelineRun, tasks: np.ndarray, resolution_ns: int, cap: int,
                 names: dict[str, int]) -> tuple[list[int], int]:
    """One track's boxes as a flat list of BOX_FIELDS, merged until
    there are at most `cap`; and the resolution used."""
    order = np.lexsort((tasks, run.start_ns[tasks]))
    tasks = tasks[order]
    start = run.start_ns[tasks] - run.window_ns[0]
    end = np.maximum(run.end_ns[tasks] - run.window_ns[0], start)
    group = merge_groups(start, end, resolution_ns)
    while group.size and int(group[-1]) + 1 > cap:
        resolution_ns *= 2
        group = merge_groups(start, end, resolution_ns)
    if not tasks.size:
        return [], resolution_ns
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    group_end = np.maximum.reduceat(end, first)
    count = np.diff(np.r_[first, tasks.size])
    longest = _longest_in_group(group, end - start)
    graph = run.graph
    phase = graph.tasks["phase"][tasks[longest]].astype(np.int64)
    columns = np.stack([
        start[first],
        group_end - start[first],
        np.array([_intern(names, graph.task_name(int(task))) for task in tasks[longest]],
                 dtype=np.int64),
        np.where(phase >= 0, phase, len(PHASES)),
        graph.tasks["kind"][tasks[longest]].astype(np.int64),
        count,
    ], axis=1)
    return columns.reshape(-1).tolist(), resolution_ns


def merge_groups(start_ns: np.ndarray, end_ns: np.ndarray, resolution_ns: int) -> np.ndarray:
    """Group id of each box (sorted by start): runs of neighbouring boxes narrower than
    `resolution_ns` share one.

    A group spans at most `resolution_ns` and its boxes are less than `resolution_ns` apart,
    so merging never hides anything wider than one column of the drawn span.
    """
    group = np.zeros(start_ns.size, dtype=np.int64)
    small = ((end_ns - start_ns) < resolution_ns).tolist()
    starts, ends = start_ns.tolist(), end_ns.tolist()
    current = -1
    group_start = group_end = 0
    group_small = False
    for i, (begin, finish) in enumerate(zip(starts, ends)):
        joins = (group_small and small[i] and begin - group_end < resolution_ns
                 and finish - group_start <= resolution_ns)
        if not joins:
            current += 1
            group_start, group_end, group_small = begin, finish, small[i]
        group_end = max(group_end, finish)
        group[i] = current
    return group


def _longest_in_group(group: np.ndarray, duration_ns: np.ndarray) -> np.ndarray:
    """Per group, the position of its longest box (the first of equals)."""
    order = np.lexsort((np.arange(group.size), -duration_ns, group))
    firsts = np.r_[True, group[order][1:] != group[order][:-1]]
    return order[firsts]


def _intern(names: dict[str, int], name: str) -> int:
    if len(name) > NAME_CHARS:
        name = name[: NAME_CHARS - 1] + "…"
    return names.setdefault(name, len(names))


def memory_data(memory: list[DeviceMemory], origin_ns: int) -> list[dict[str, Any]]:
    """Per device with memory events: allocated bytes per category over
    time (ns since `origin_ns`), and the peak."""
    devices = []
    for device in memory:
        if not device.times_ns.size:
            continue
        categories = [name for name in CATEGORIES if name in device.by_category
                      and device.by_category[name].any()]
        # no category held memory: no rows
        stacked = np.zeros((len(categories), device.times_ns.size), dtype=np.int64)
        for row, name in enumerate(categories):
            stacked[row] = device.by_category[name]
        kept = downsample_peaks(device.times_ns, stacked.sum(axis=0), MEMORY_POINTS)
        devices.append({
            "device": device.device,
            "categories": categories,
            "times_ns": (device.times_ns[kept] - origin_ns).tolist(),
            "bytes": stacked[:, kept].tolist(),
            "peak_time_ns": device.peak_time_ns - origin_ns,
            "peak_allocated_bytes": device.peak_allocated_bytes,
            "points": int(device.times_ns.size),
        })
    return devices


def downsample_peaks(times_ns: np.ndarray, total: np.ndarray, points: int) -> np.ndarray:
    """Indices of at most `points` samples: per equal time bucket, the
    highest `total` (first of equals), in time order.

    The first and last samples are always kept, and the highest sample overall is the
    highest of its bucket, so the peak survives.
    """
    size = times_ns.size
    if size <= points:
        return np.arange(size)
    span = max(int(times_ns[-1] - times_ns[0]), 1)
    bucket = ((times_ns - times_ns[0]).astype(np.float64) * (points - 2) / span).astype(np.int64)
    order = np.lexsort((np.arange(size), -total, bucket))
    best = order[np.r_[True, bucket[order][1:] != bucket[order][:-1]]]
    return np.unique(np.r_[0, best, size - 1])
