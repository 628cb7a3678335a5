"""`daydream whatif T --opt layout --sweep dp=1,2,tp=1,2,pp=1,2 --world N`: every layout of N ranks, and the fastest
that fits.

The JSON contract: `{"world", "baseline_ns", "batch", "rows": [{"dp", "tp", "pp", "spec", "predicted_ns",
"samples_per_s", "predicted_peak_bytes", "fits", "error", "notes"}], "fastest"}`. Each row is the what-if
`--opt <spec>` run alone; a layout the trace cannot take (a degree that does not divide the widths, more stages than
blocks) has its `error` instead. Samples per second are the job's: each of the dp replicas takes the trace's batch.
`fastest` is the row with the most samples per second (the shortest step per replica's batch: step ÷ dp) among those
that fit (or whose fit is unknown: no device capacity), None where none does.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from daydream import __version__
from daydream.report.console import format_bytes, format_ns
from daydream.report.table import Table
from daydream.report.throughput import samples_per_s

SCHEMA_VERSION = 1


def summarize_layouts(source: str, world: int, baseline_ns: int, batch: int | None, rows: list[dict[str, Any]]
                      ) -> dict[str, Any]:
    """`rows`: per layout, dp/tp/pp, its spec, and its prediction (predicted_ns, peak, fits) or its error."""
    for row in rows:
        row["samples_per_s"] = samples_per_s(batch * row["dp"] if batch else None, row.get("predicted_ns"))
    usable = [r for r in rows if r.get("predicted_ns") and r.get("fits") is not False]
    fastest = min(usable, key=lambda r: r["predicted_ns"] / r["dp"]) if usable else None
    return {"schema_version": SCHEMA_VERSION, "daydream_version": __version__, "source": source, "world": world,
            "baseline_ns": baseline_ns, "batch": batch, "rows": rows,
            "fastest": {k: fastest[k] for k in ("dp", "tp", "pp", "spec")} if fastest else None}


def render_layouts(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"layouts of {summary['world']} ranks (one rank traced: "
                        f"{format_ns(summary['baseline_ns'])} per step)", title_justify="left")
    for header in ("dp × tp × pp", "iteration", "samples/s", "peak memory per rank", "fits", "note"):
        table.add_column(header, justify="left" if header in ("dp × tp × pp", "note") else "right",
                         overflow="fold")
    fastest = summary["fastest"]
    for row in summary["rows"]:
        name = f"{row['dp']} × {row['tp']} × {row['pp']}"
        chosen = fastest is not None and fastest["spec"] == row["spec"]
        peak, fits = row.get("predicted_peak_bytes"), row.get("fits")
        table.add_row(Text(name, style="bold green" if chosen else ""),
                      format_ns(row["predicted_ns"]) if row.get("predicted_ns") else "—",
                      f"{row['samples_per_s']:,.1f}" if row.get("samples_per_s") else "—",
                      format_bytes(peak) if peak is not None else "—",
                      Text("yes", style="green") if fits else Text("no", style="red") if fits is False else "—",
                      row.get("error") or ("fastest that fits" if chosen else ""))
    console.print(table)
    if fastest is None:
        console.print("no layout of these fits", style="red")
    else:
        console.print(f"fastest that fits: dp={fastest['dp']}, tp={fastest['tp']}, pp={fastest['pp']} "
                      f"(--opt {fastest['spec']})", highlight=False)
