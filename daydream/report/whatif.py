"""`daydream whatif` results as JSON-ready data and as rich tables.

The JSON contract: `{"iteration_ns": {"measured", "simulated", "predicted"}, "speedup",
"optimizations": [...]}` is guaranteed (for several ranks, the slowest rank sets the
iteration); keys are added, never renamed. `interval` gives where the iteration time may really be
(`iteration_ns`: [low, high]), the speed-up's with it, and what widened it
(daydream/simulate/interval.py). `bound_by` splits the predicted critical path
of the mean iteration into host, gpu, communication, latency, unexplained and pinned
(daydream.simulate.bound); `pinned_on_critical_path` is the share the trace cannot
explain, and `warnings` says when it is above 5% or when the prediction did not move.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from daydream import __version__
from daydream.report.console import format_bytes, format_ns, relative_change
from daydream.report.table import Table, labelled, named_table
from daydream.report.throughput import samples_per_s
from daydream.simulate.bound import bound_line
from daydream.simulate.whatif import Prediction
from daydream.trace.model import batch_size
from daydream.transforms.specs import job_ranks, samples_factor, stated_batch

SCHEMA_VERSION = 1


def summarize_predictions(source: str, specs: list[str],
                          predictions: list[Prediction]) -> dict[str, Any]:
    slowest = max(predictions, key=lambda p: p.predicted_ns)
    baseline = max(predictions, key=lambda p: p.simulated_ns)
    measured = max(p.measured_ns for p in predictions)
    bound = slowest.bound.as_dict() if slowest.bound else None
    samples = stated_batch(specs) or batch_size(slowest.trace)
    predicted_samples = samples * samples_factor(specs) if samples else None
    # The job's throughput: every rank processes its own batch (ddp:world=8 runs eight of them).
    ranks = {"baseline": len(predictions), "predicted": job_ranks(specs, len(predictions))}
    job = {key: (per_rank * ranks[key] if per_rank else None)
           for key, per_rank in (("baseline", samples), ("predicted", predicted_samples))}
    return {
        "schema_version": SCHEMA_VERSION,
        "daydream_version": __version__,
        "source": source,
        "optimizations": specs,
        "iteration_ns": {"measured": measured, "simulated": baseline.simulated_ns,
                         "predicted": slowest.predicted_ns},
        "speedup": baseline.simulated_ns / slowest.predicted_ns if slowest.predicted_ns else None,
        # per rank: samples per iteration (None when the trace does not say); the data-parallel
        # ranks of the job, traced and predicted; the job's samples per second (all its ranks)
        "batch_size": {"baseline": samples, "predicted": predicted_samples},
        "job_ranks": ranks,
        "samples_per_s": {"measured": samples_per_s(job["baseline"], measured),
                          "simulated": samples_per_s(job["baseline"], baseline.simulated_ns),
                          "predicted": samples_per_s(job["predicted"], slowest.predicted_ns)},
        "bound_by": bound,
        "pinned_on_critical_path": slowest.bound.unexplained_share if slowest.bound else 0.0,
        "warnings": slowest.warnings,
        # where the iteration time may really be, and the speed-up with it (simulate/interval.py)
        "interval": slowest.interval.as_dict(baseline.simulated_ns) if slowest.interval else None,
        "ranks": [
            {
                "rank": p.trace.meta.rank,
                "iteration_ns": {"measured": p.measured_ns, "simulated": p.simulated_ns,
                                 "predicted": p.predicted_ns},
                "speedup": p.speedup,
                "iterations": p.per_iteration,
                "phases": p.phases,
                "layers": p.layers,
                "notes": p.notes,
                "bound_by": p.bound.as_dict() if p.bound else None,
                "baseline_bound_by": p.baseline_bound.as_dict() if p.baseline_bound else None,
                "pinned_on_critical_path": p.bound.unexplained_share if p.bound else 0.0,
                "warnings": p.warnings,
                "interval": p.interval.as_dict(p.simulated_ns) if p.interval else None,
            }
            for p in predictions
        ],
    }


def render_predictions(summary: dict[str, Any], console: Console) -> None:
    times = summary["iteration_ns"]
    table = Table(title=f"what if: {' + '.join(summary['optimizations'])}", title_justify="left")
    table.add_column("iteration (mean)")
    table.add_column("time", justify="right")
    table.add_column("", justify="left")
    table.add_row("measured", format_ns(times["measured"]), "")
    table.add_row("simulated baseline", format_ns(times["simulated"]),
                  Text(_error(times), style="dim"))
    speedup = summary["speedup"]
    style = ("bold green" if speedup and speedup > 1.01 else "bold red" if speedup
             and speedup < 0.99 else "bold")
    table.add_row(Text("predicted", style="bold"),
                  Text(format_ns(times["predicted"]), style="bold"),
                  Text(f"{speedup:.2f}x" if speedup else "—", style=style)
                  + _interval(summary.get("interval")))
    throughput = summary.get("samples_per_s") or {}
    if throughput.get("predicted"):
        ranks = summary.get("job_ranks") or {"baseline": 1, "predicted": 1}
        of_ranks = (f", {ranks['baseline']} → {ranks['predicted']} ranks"
                    if ranks["predicted"] != ranks["baseline"]
                    else f", {ranks['predicted']} ranks" if ranks["predicted"] > 1 else "")
        table.add_row("throughput", f"{throughput['predicted']:,.0f} samples/s",
                      Text(f"from {throughput['simulated']:,.0f} (batch "
                           f"{summary['batch_size']['baseline']:g} → "
                           f"{summary['batch_size']['predicted']:g} per rank{of_ranks})",
                           style="dim"))
    if summary.get("bound_by"):
        table.add_row("critical path", "", Text(bound_line(summary["bound_by"]), style="dim"))
    rank = summary["ranks"][0]
    parts: list[Any] = [table]
    parts += [Text(f"warning: {warning}", style="bold yellow")
              for warning in summary.get("warnings", [])]
    parts.append(_phases_table(rank))
    if rank["layers"]:
        parts.append(_layers_table(rank))
    parts.append(labelled(("model", note) for note in rank["notes"]))
    console.print(Panel(Group(*parts), title=Text(str(summary["source"])), title_align="left"))


def _interval(interval: dict[str, Any] | None) -> Text:
    """' (1.31–1.55)': the speed-up's interval, where there is one."""
    if not interval:
        return Text("")
    low, high = interval["speedup"]
    return Text(f" ({low:.2f}–{high:.2f})", style="dim")


def _error(times: dict[str, int]) -> str:
    if not times["measured"]:
        return ""
    return ("replay error "
            f"{(times['simulated'] - times['measured']) / times['measured'] * 100:+.2f}%")


def _phases_table(rank: dict[str, Any]) -> Table:
    table = Table(title="work per phase (per iteration)", title_justify="left")
    for header in ("phase", "baseline", "predicted", "change"):
        table.add_column(header, justify="left" if header == "phase" else "right")
    for phase, values in rank["phases"].items():
        before, after = values["baseline_ns"], values["predicted_ns"]
        if before or after:
            table.add_row(phase, format_ns(before), format_ns(after),
                          relative_change(before, after))
    return table


def _layers_table(rank: dict[str, Any]) -> Table:
    return named_table("layers that moved most (work per iteration)",
                       ("layer", "baseline", "predicted", "change"),
                       [(layer["name"], format_ns(layer["baseline_ns"]),
                         format_ns(layer["predicted_ns"]),
                         relative_change(layer["baseline_ns"], layer["predicted_ns"]))
                        for layer in rank["layers"]])


def render_memory_predictions(entries: list[dict[str, Any]], console: Console) -> None:
    if not entries:
        console.print("memory: the trace has no [memory] events — record with profile_memory=True "
                      "(daydream trace does)",
                      soft_wrap=True)
        return
    table = Table(title="peak memory", title_justify="left")
    for header in ("device", "measured", "predicted", "reserved", "fits", "headroom",
                   "largest batch"):
        table.add_column(header, justify="left" if header == "device" else "right")
    for entry in entries:
        fits = {True: Text("yes", style="green"), False: Text("NO", style="bold red"),
                None: Text("—")}[entry["fits"]]
        factor = entry.get("largest_batch_factor")
        rank = f"rank {entry['rank']} " if entry["rank"] is not None else ""
        table.add_row(
            f"{rank}{entry['device']}",
            format_bytes(entry["measured_peak_bytes"]), format_bytes(entry["predicted_peak_bytes"]),
            format_bytes(entry["predicted_reserved_bytes"]), fits,
            format_bytes(entry["headroom_bytes"]) if entry["headroom_bytes"] is not None else "—",
            f"×{factor:.2f}" if isinstance(factor, float) else "—",
        )
    if any(entry["device"] == "cpu" for entry in entries):
        table.caption = ("— on the CPU: host memory has no caching-allocator reserve and no device "
                         "capacity to check")
        table.caption_justify = "left"
    elif any(entry["fits"] is None for entry in entries):
        table.caption = ("— : the GPU is not in the device table (docs/devices.md): name it with "
                         "--device")
        table.caption_justify = "left"
    console.print(table)
