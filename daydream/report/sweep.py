"""`daydream whatif --sweep KEY=V1,V2,...`: one prediction per value, as a scaling table and a plot.

The JSON contract: `{"parameter", "values", "baseline_ns", "points": [{"value", "predicted_ns",
"relative_throughput", "scaling_efficiency"}]}`. For a sweep over `world` (data-parallel ranks, each
with the traced batch), relative throughput is (N / n) · T1 / TN, and scaling efficiency T1 / TN,
where T1 is the simulated baseline of the n ranks traced (one, for a single trace). Samples per
second are the job's: every rank's batch.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.text import Text

from daydream import __version__
from daydream.report import plotting
from daydream.report.console import format_bytes, format_ns
from daydream.report.table import Table
from daydream.report.throughput import samples_per_s
from daydream.simulate.whatif import Prediction
from daydream.trace.model import batch_size
from daydream.transforms.specs import job_ranks, samples_factor, with_value

SCHEMA_VERSION = 1


def summarize_sweep(source: str, specs: list[str], parameter: str,
                    runs: list[tuple[str, list[Prediction]]],
                    memories: list[list[dict[str, Any]]] | None = None,
                    prices: dict[str, float] | None = None) -> dict[str, Any]:
    """`runs`: (value, the predictions of every rank with that value), in
    sweep order; `memories`: per value, the memory predictions of every device
    (api.predict_memory_for); `prices`: USD per hour of some values."""
    baseline = max(p.simulated_ns for p in runs[0][1])
    samples = batch_size(runs[0][1][0].trace)
    points = []
    for value, predictions in runs:
        predicted = max(p.predicted_ns for p in predictions)
        chosen = [with_value(spec, parameter, value) for spec in specs]
        ranks = float(job_ranks(chosen, len(predictions)))
        per_rank = samples * samples_factor(chosen) if samples else None
        points.append({
            "value": value,
            "predicted_ns": predicted,
            # samples per second of the whole job: every rank processes its own batch
            "samples_per_s": samples_per_s(per_rank * ranks if per_rank else None, predicted),
            "relative_throughput": ranks / len(predictions) * baseline / predicted if predicted
            else None, "scaling_efficiency": baseline / predicted if predicted else None,
            "notes": predictions[0].notes,
        })
        if memories is not None:
            points[-1].update(_memory_point(memories[len(points) - 1]))
        if prices and value in prices:
            points[-1]["price_per_hour"] = prices[value]
            points[-1]["cost_per_1000_steps"] = prices[value] * predicted * 1000 / 3.6e12
    return {"schema_version": SCHEMA_VERSION, "daydream_version": __version__, "source": source,
            "optimizations": specs, "parameter": parameter, "values": [v for v, _ in runs],
            "baseline_ns": baseline, "points": points}


def _memory_point(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether every device's predicted peak fits, the largest peak,
    and the largest batch factor that fits all."""
    known = [e for e in entries if e.get("fits") is not None]
    factors = [e["largest_batch_factor"] for e in entries
               if e.get("largest_batch_factor") is not None]
    return {"fits": all(e["fits"] for e in known) if known else None,
            "predicted_peak_bytes": max((int(e["predicted_peak_bytes"]) for e in entries),
                                        default=None),
            "largest_batch_factor": min(factors) if factors else None}


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 1.0


def render_sweep(summary: dict[str, Any], console: Console) -> None:
    parameter, points = summary["parameter"], summary["points"]
    table = Table(title=f"what if: {' + '.join(summary['optimizations'])}, sweeping {parameter} "
                        f"(baseline {format_ns(summary['baseline_ns'])})", title_justify="left")
    columns = _sweep_columns(parameter, points)
    for header in columns:
        table.add_column(header, justify="right")
    for point in points:
        table.add_row(*_sweep_row(point, parameter, columns))
    console.print(table)


def _sweep_columns(parameter: str, points: list[dict[str, Any]]) -> list[str]:
    """The sweep table's headers: the value, its time and speed-up, and what the points carry
    (samples, memory, cost)."""
    columns = [parameter, "iteration", "throughput" if parameter == "world" else "speed-up"]
    columns += ["scaling efficiency"] if parameter == "world" else []
    columns += ["samples/s"] if any(point.get("samples_per_s") for point in points) else []
    columns += (["peak memory", "fits", "largest batch ×"]
                if any("fits" in point for point in points) else [])
    columns += (["$ / 1,000 steps"] if any("cost_per_1000_steps" in point for point in points)
                else [])
    return columns


def _sweep_row(point: dict[str, Any], parameter: str, columns: list[str]) -> list[Any]:
    efficiency, throughput = point["scaling_efficiency"], point["relative_throughput"]
    style = ("green" if efficiency and efficiency >= 0.9 else "yellow" if efficiency
             and efficiency >= 0.7 else "red")
    peak, fits, factor = (point.get("predicted_peak_bytes"), point.get("fits"),
                          point.get("largest_batch_factor"))
    cost, samples = point.get("cost_per_1000_steps"), point.get("samples_per_s")
    cells: dict[str, Any] = {
        parameter: str(point["value"]),
        "iteration": format_ns(point["predicted_ns"]),
        columns[2]: f"{throughput:.2f}x" if throughput else "—",
        "scaling efficiency": Text(f"{efficiency:.0%}", style=style) if efficiency else "—",
        "samples/s": f"{samples:,.0f}" if samples else "—",
        "peak memory": format_bytes(peak) if peak is not None else "—",
        "fits": Text("yes", style="green") if fits else Text("no", style="red") if fits is False
        else "—", "largest batch ×": f"{factor:.2f}" if factor is not None else "—",
        "$ / 1,000 steps": f"{cost:.3f}" if cost is not None else "—",
    }
    return [cells[column] for column in columns]


def plot_sweep(path: str | os.PathLike[str], summary: dict[str, Any]) -> None:
    """Iteration time and (for world) scaling efficiency against the
    swept value, as a PNG; written atomically."""
    plt = plotting.pyplot()
    labels = [str(p["value"]) for p in summary["points"]]
    numeric = all(_is_number(label) for label in labels)
    # Named values (gpu:target=A100,H100) are categories: one bar each, in sweep order.
    values = [_number(label) for label in labels] if numeric else list(range(len(labels)))
    times_ms = [p["predicted_ns"] / 1e6 for p in summary["points"]]
    figure, left = plt.subplots(figsize=(7, 4))
    try:
        if numeric:
            left.plot(values, times_ms, marker="o", color="#4c72b0",
                      label="predicted iteration time (left axis)")
        else:
            left.bar(values, times_ms, color="#4c72b0", label="predicted iteration time")
            left.set_xticks(values, labels)
        left.set_xlabel(summary["parameter"])
        left.set_ylabel("predicted iteration time (ms)", color="#4c72b0")
        left.set_ylim(bottom=0)
        if summary["parameter"] == "world":
            left.set_xscale("log", base=2)
            left.set_xticks(values, [str(p["value"]) for p in summary["points"]])
            right = left.twinx()
            right.plot(values, [100 * (p["scaling_efficiency"] or 0) for p in summary["points"]],
                       marker="s", linestyle="--", markerfacecolor="none", color="#c44e52",
                       label="scaling efficiency (right axis)")
            right.set_ylabel("scaling efficiency (%)", color="#c44e52")
            right.set_ylim(0, 105)
        left.set_title(f"{' + '.join(summary['optimizations'])} — "
                       f"{os.path.basename(summary['source'])}", fontsize=10)
        figure.legend(loc="lower left", bbox_to_anchor=(0, 0), bbox_transform=left.transAxes,
                      fontsize=8, framealpha=0.8)
    finally:
        plotting.save_png(figure, path)
