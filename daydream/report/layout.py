"""`daydream whatif T --opt layout --sweep dp=1,2,tp=1,2,pp=1,2 --world N`: every layout of N ranks,
and the fastest that fits.

The JSON contract: `{"world", "baseline_ns", "batch", "rows": [{"dp", "tp", "pp", "spec",
"predicted_ns", "samples_per_s", "predicted_peak_bytes", "capacity_bytes", "fits", "error",
"notes"}], "fastest"}`. Each row is the what-if `--opt <spec>` run alone; a layout the trace cannot
take (a degree that does not divide the widths, more stages than blocks) has its `error` instead.
Samples per second are the job's: each of the dp replicas takes the trace's batch. `fastest` is the
row with the most samples per second (the shortest step per replica's batch: step ÷ dp) among those
that fit (or whose fit is unknown: no device capacity), None where none does.
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

SCHEMA_VERSION = 1


def summarize_layouts(source: str, world: int, baseline_ns: int, batch: int | None,
                      rows: list[dict[str, Any]]
                      ) -> dict[str, Any]:
    """`rows`: per layout, dp/tp/pp, its spec, and its prediction
    (predicted_ns, peak, fits) or its error."""
    for row in rows:
        row["samples_per_s"] = samples_per_s(batch * row["dp"] if batch else None,
                                             row.get("predicted_ns"))
    usable = [r for r in rows if r.get("predicted_ns") and r.get("fits") is not False]
    fastest = min(usable, key=lambda r: r["predicted_ns"] / r["dp"]) if usable else None
    return {"schema_version": SCHEMA_VERSION, "daydream_version": __version__, "source": source,
            "world": world, "baseline_ns": baseline_ns, "batch": batch, "rows": rows,
            "fastest": {k: fastest[k] for k in ("dp", "tp", "pp", "spec")} if fastest else None}


def render_layouts(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"layouts of {summary['world']} ranks (one rank traced: "
                        f"{format_ns(summary['baseline_ns'])} per step)", title_justify="left")
    for header in ("dp × tp × pp", "iteration", "samples/s", "peak memory per rank", "fits",
                   "note"):
        table.add_column(header, justify="left" if header in ("dp × tp × pp", "note") else "right",
                         overflow="fold")
    fastest = summary["fastest"]
    # each distinct reason a layout could not be predicted once, under the table: a row says which
    errors = list(dict.fromkeys(row["error"] for row in summary["rows"] if row.get("error")))
    for row in summary["rows"]:
        name = f"{row['dp']} × {row['tp']} × {row['pp']}"
        chosen = fastest is not None and fastest["spec"] == row["spec"]
        peak, fits = row.get("predicted_peak_bytes"), row.get("fits")
        note = (f"not predicted ({errors.index(row['error']) + 1})" if row.get("error")
                else "fastest" if chosen else "")
        table.add_row(Text(name, style="bold green" if chosen else ""),
                      format_ns(row["predicted_ns"]) if row.get("predicted_ns") else "—",
                      f"{row['samples_per_s']:,.1f}" if row.get("samples_per_s") else "—",
                      format_bytes(peak) if peak is not None else "—",
                      Text("yes", style="green") if fits else Text("no", style="red")
                      if fits is False else "—", note)
    console.print(table)
    for k, error in enumerate(errors, 1):
        console.print(f"({k}) {error}", highlight=False)
    console.print(_verdict(summary), style="red" if fastest is None else None, highlight=False)


def _verdict(summary: dict[str, Any]) -> str:
    """The line under the table: the fastest layout and whether it is known to fit."""
    fastest, rows = summary["fastest"], summary["rows"]
    if fastest is None:
        if any(row.get("predicted_ns") for row in rows):
            return "no layout of these fits"
        return "no layout of these could be predicted (the reasons above)"
    row = next(r for r in rows if r["spec"] == fastest["spec"])
    known = ("fastest that fits" if row.get("fits") else
             "fastest (whether it fits is unknown: no device capacity"
             + (")" if row.get("predicted_peak_bytes") is not None else "; add --memory)"))
    return (f"{known}: dp={fastest['dp']}, tp={fastest['tp']}, pp={fastest['pp']} "
            f"(--opt {fastest['spec']})")


#: A layout's bar: fits, does not fit, fit unknown (no device capacity).
FIT_COLORS = {True: "#55a868", False: "#c44e52", None: "#8c8c8c"}
FIT_NAMES = {True: "fits", False: "does not fit", None: "fit unknown (no device capacity)"}


def plot_layouts(path: str | os.PathLike[str], summary: dict[str, Any]) -> None:
    """Per layout that could be predicted, its samples per second (or, without a batch size, its
    step) and, where predicted, its peak memory per rank against the device's capacity, as a PNG;
    the fastest that fits marked; written atomically."""
    plt = plotting.pyplot()
    rows = [row for row in summary["rows"] if row.get("predicted_ns")]
    labels = [f"{r['dp']}×{r['tp']}×{r['pp']}" for r in rows]
    with_memory = any(r.get("predicted_peak_bytes") is not None for r in rows)
    size = (max(5.0, 0.8 * len(rows) + 2), 6 if with_memory else 3.5)
    figure, axes = plt.subplots(2 if with_memory else 1, 1, figsize=size, squeeze=False)
    try:
        colors = [FIT_COLORS[r.get("fits")] for r in rows]
        speed = axes[0][0]
        if summary["batch"]:
            speed.bar(labels, [r["samples_per_s"] for r in rows], color=colors)
            speed.set_ylabel("samples/s (job)")
        else:
            speed.bar(labels, [r["predicted_ns"] / 1e6 for r in rows], color=colors)
            speed.set_ylabel("predicted step (ms)")
        fastest = summary["fastest"]
        # room for the mark
        speed.set_ylim(0, max([p.get_height() for p in speed.patches], default=1.0) * 1.15)
        if fastest is not None:
            at = next(k for k, r in enumerate(rows) if r["spec"] == fastest["spec"])
            speed.get_xticklabels()[at].set_fontweight("bold")
            speed.annotate("fastest that fits", (at, speed.patches[at].get_height()), ha="center",
                           va="bottom", fontsize=8)
        speed.set_title(f"layouts of {summary['world']} ranks (dp×tp×pp) — "
                        f"{os.path.basename(summary['source'])}",
                        fontsize=10)
        shown = sorted({r.get("fits") for r in rows}, key=list(FIT_COLORS).index)
        speed.legend([plt.Rectangle((0, 0), 1, 1, color=FIT_COLORS[fit]) for fit in shown],
                     [FIT_NAMES[fit] for fit in shown], loc="upper left", fontsize=8,
                     framealpha=0.8)
        if with_memory:
            _memory_bars(axes[1][0], labels, rows, colors)
    finally:
        plotting.save_png(figure, path)


def _memory_bars(memory: Any, labels: list[str], rows: list[dict[str, Any]],
                 colors: list[str]) -> None:
    """Each layout's peak memory per rank (GiB, or MiB where all are
    under a GiB), the device's capacity dashed."""
    capacities = sorted({r["capacity_bytes"] for r in rows if r.get("capacity_bytes")})
    largest = max([r.get("predicted_peak_bytes") or 0 for r in rows] + capacities)
    unit, scale = ("GiB", 2**30) if largest >= 2**30 else ("MiB", 2**20)
    memory.bar(labels, [(r.get("predicted_peak_bytes") or 0) / scale for r in rows], color=colors)
    for capacity in capacities:
        memory.axhline(capacity / scale, color="#333333", linestyle="--", linewidth=1)
    memory.set_ylabel(f"peak memory per rank ({unit})"
                      + (", capacity dashed" if capacities else ""))
