"""`daydream replay` results as JSON-ready data and as rich tables.

The JSON contract: `{"ranks": [{"rank", "iterations": [{"name", "measured_ns",
"simulated_ns", "pinned_fraction"}]}]}` is guaranteed; keys are added, never renamed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from daydream import __version__
from daydream.graph import DepKind
from daydream.graph.model import ResourceKind
from daydream.report.console import format_ns, short_kernel_name
from daydream.report.table import Table
from daydream.report.throughput import samples_per_s
from daydream.simulate import Replay
from daydream.simulate.analysis import Breakdowns, critical_path, recorded_timeline
from daydream.simulate.bound import UNEXPLAINED_WARNING_SHARE, bound_line, iteration_bounds
from daydream.simulate.replay import IterationReplay
from daydream.trace.model import batch_size

SCHEMA_VERSION = 1


def summarize_replays(source: str, replays: list[Replay],
                      with_critical_path: bool = False) -> dict[str, Any]:
    ranks = [summarize_replay(r, with_critical_path) for r in replays]
    errors = [it["error"] for rank in ranks for it in rank["iterations"]]
    summary = {
        "schema_version": SCHEMA_VERSION,
        "daydream_version": __version__,
        "source": source,
        "max_error": max(errors) if errors else None,
        "ranks": ranks,
    }
    if len(ranks) > 1:
        summary["job"] = summarize_job(ranks)
    return summary


def summarize_job(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's iteration is its slowest rank's: per iteration index,
    measured and simulated maxima."""
    count = min(len(rank["iterations"]) for rank in ranks)
    iterations = []
    for index in range(count):
        measured = max(rank["iterations"][index]["measured_ns"] for rank in ranks)
        simulated = max(rank["iterations"][index]["simulated_ns"] for rank in ranks)
        iterations.append({"name": ranks[0]["iterations"][index]["name"], "measured_ns": measured,
                           "simulated_ns": simulated,
                           "signed_error": (simulated - measured) / measured if measured else 0.0})
    return {"ranks": len(ranks), "iterations": iterations}


def summarize_replay(replay: Replay, with_critical_path: bool = False) -> dict[str, Any]:
    graph, trace = replay.graph, replay.trace
    recorded = recorded_timeline(graph)
    measured_split, simulated_split = (Breakdowns(graph, recorded, recorded=True),
                                       Breakdowns(graph, replay.timeline, recorded=False))
    bounds = (iteration_bounds(graph, replay.timeline)
              if len(graph.iteration_markers) == len(replay.iterations) else [])
    iterations = []
    for index, it in enumerate(replay.iterations):
        entry = _iteration(it, measured_split, simulated_split)
        if bounds:
            entry["bound_by"] = bounds[index].as_dict()
            entry["pinned_on_critical_path"] = bounds[index].unexplained_share
        if with_critical_path:
            path = critical_path(graph, replay.timeline, it.simulated_start_ns, it.simulated_end_ns)
            entry["critical_path"] = {
                "tasks": len(path.tasks),
                "by_kind_ns": path.by_kind_ns,
                "top": [{"kind": k, "name": n, "ns": t} for k, n, t in path.top_tasks],
            }
        iterations.append(entry)
    edge_kinds = np.bincount(graph.edges["kind"], minlength=len(DepKind))
    samples = batch_size(trace)
    return {
        "rank": trace.meta.rank,
        "source": trace.meta.source,
        # "cpu": the trace holds no GPU work (a CPU-only run): its tables speak of the host only
        "device": "gpu" if any(r.kind is ResourceKind.GPU_STREAM for r in graph.resources)
        else "cpu",
        # False: the trace holds GPU work and no host work (a GPU-only
        # capture): nothing says why the GPU idled
        "host_recorded": graph.has_host_work(),
        # the GPU a trace without GPU work still names (a
        # range-profiler capture, a host-only one of a GPU run)
        "gpu_named": ", ".join(name for name in trace.gpu_names if name.strip()),
        "iterations": iterations,
        "batch_size": samples,
        "samples_per_s": {key: samples_per_s(samples,
                                             float(np.mean([it[f"{key}_ns"] for it in iterations]))
                                             if iterations else None)
                          for key in ("measured", "simulated")},
        "graph": {
            "tasks": graph.task_count,
            "edges": graph.edge_count,
            "edges_by_kind": {kind.name.lower(): int(edge_kinds[kind]) for kind in DepKind},
            "pinned_tasks": int(graph.pinned().sum()),
        },
        "calibration": graph.calibration.as_dict(),
        "collectives_replayed_as_recorded": bool(graph.calibration.pinned_collectives),
        "notes": graph.notes,
    }


def _iteration(it: IterationReplay, measured: Breakdowns, simulated: Breakdowns) -> dict[str, Any]:
    """One replayed iteration's entry: its times, error and breakdowns, recorded and simulated."""
    signed = (it.simulated_ns - it.measured_ns) / it.measured_ns if it.measured_ns else 0.0
    return {
        "name": it.name,
        "measured_ns": it.measured_ns,
        "simulated_ns": it.simulated_ns,
        "error": it.error,
        "signed_error": signed,
        "pinned_fraction": it.pinned_fraction,
        "tasks": it.tasks,
        "breakdown": {
            "measured": measured.window(it.measured_start_ns, it.measured_end_ns).as_dict(),
            "simulated": simulated.window(it.simulated_start_ns, it.simulated_end_ns).as_dict(),
        },
    }


def render_replays(summary: dict[str, Any], console: Console) -> None:
    console.print(_error_table(summary))
    for rank in summary["ranks"][:1] if len(summary["ranks"]) > 1 else summary["ranks"]:
        console.print(_rank_detail(rank))
    if len(summary["ranks"]) > 1:
        console.print(Text(
            f"(details of rank {summary['ranks'][0]['rank']}; --json has every rank)", style="dim"))


def _error_table(summary: dict[str, Any]) -> Table:
    table = Table(title=f"replay of {summary['source']}", title_justify="left")
    for header in ("rank", "iteration", "measured", "simulated", "error", "unexplained",
                   "critical path"):
        table.add_column(header, justify="left" if header in ("iteration", "critical path")
                         else "right", no_wrap=True)
    for rank in summary["ranks"]:
        for it in rank["iterations"]:
            error = it["signed_error"] * 100
            style = "red" if abs(error) > 2 else ""
            unexplained = it.get("pinned_on_critical_path")
            table.add_row(
                "—" if rank["rank"] is None else str(rank["rank"]), it["name"],
                format_ns(it["measured_ns"]), format_ns(it["simulated_ns"]),
                Text(f"{error:+.2f}%", style=style),
                Text(f"{unexplained:.1%}", style="yellow" if unexplained > UNEXPLAINED_WARNING_SHARE
                     else "")
                if unexplained is not None else "—",
                bound_line(it["bound_by"], top=3) if "bound_by" in it else "",
            )
    for it in summary.get("job", {}).get("iterations", []):
        table.add_row(Text("job", style="bold"), it["name"], format_ns(it["measured_ns"]),
                      format_ns(it["simulated_ns"]), f"{it['signed_error'] * 100:+.2f}%", "", "",
                      style="bold")
    return table


def _rank_detail(rank: dict[str, Any]) -> Panel:
    parts: list[Any] = []
    cpu_only = rank.get("device") == "cpu"
    if rank["iterations"]:
        parts.append(_breakdown_table(rank["iterations"], cpu_only,
                                      rank.get("host_recorded", True)))
        path = rank["iterations"][-1].get("critical_path")
        if path:
            parts.append(_critical_path_table(rank["iterations"][-1]["name"], path))
    calibration = rank["calibration"]
    model = Table.grid(padding=(0, 1))
    model.add_column(style="bold", no_wrap=True)
    model.add_column(overflow="fold")
    graph = rank["graph"]
    model.add_row("graph", f"{graph['tasks']:,} tasks, {graph['edges']:,} edges, "
                           f"{graph['pinned_tasks']:,} with waits the trace cannot explain")
    if cpu_only and rank.get("gpu_named"):
        model.add_row("device", f"a GPU trace without GPU activity: it names {rank['gpu_named']} "
                                "but records no kernel, copy or memset (a range-profiler or "
                                "host-only capture), so every task is host work")
    elif cpu_only:
        model.add_row("device", "CPU only: the trace holds no GPU work, so every task is host work "
                                "(CPU ops and their gaps)")
    else:
        depth = calibration.get("queue_depth")
        model.add_row(
            "calibrated",
            f"launch latency {format_ns(calibration.get('launch_latency_ns'))}, kernel gap "
            f"{format_ns(calibration.get('kernel_gap_ns'))}, sync return "
            f"{format_ns(calibration.get('sync_return_ns'))}, launch queue depth "
            f"{depth if depth is not None else 'not reached'} "
            f"({calibration.get('blocked_launches', 0)} launches blocked)",
        )
    for note in rank["notes"][:5]:
        model.add_row("note", note)
    parts.append(model)
    title = f"rank {rank['rank']}" if rank["rank"] is not None else "trace"
    return Panel(Group(*parts), title=Text(title), title_align="left")


def _breakdown_table(iterations: list[dict[str, Any]], cpu_only: bool = False,
                     host_recorded: bool = True) -> Table:
    table = Table(title="where the time went (mean per iteration: measured → simulated)",
                  title_justify="left")
    table.add_column("")
    table.add_column("measured", justify="right")
    table.add_column("simulated", justify="right")
    rows: tuple[tuple[str, str], ...] = (
        ("iteration", "window_ns"),
        ("GPU busy", "gpu_busy_ns"),
        ("GPU idle (waiting on the host)" if host_recorded
         else "GPU idle (no host work recorded to explain it)", "gpu_idle_ns"),
        ("host waiting on the GPU", "host_waiting_on_gpu_ns"),
        ("communication", "communication_ns"),
    )
    if cpu_only:
        rows = (rows[0], rows[-1])
    for label, key in rows:
        measured = np.mean([it["breakdown"]["measured"][key] for it in iterations])
        simulated = np.mean([it["breakdown"]["simulated"][key] for it in iterations])
        table.add_row(label, format_ns(measured), format_ns(simulated))
    return table


def _critical_path_table(name: str, path: dict[str, Any]) -> Table:
    table = Table(title=f"critical path of {name} ({path['tasks']:,} tasks)", title_justify="left",
                  expand=True)
    table.add_column("on the path", ratio=1, overflow="ellipsis", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    for kind, ns in sorted(path["by_kind_ns"].items(), key=lambda item: -item[1]):
        table.add_row(Text(kind, style="bold"), format_ns(ns))
    for entry in path["top"]:
        table.add_row(f"  {entry['kind']}: {short_kernel_name(entry['name'], 80)}",
                      format_ns(entry["ns"]))
    return table
