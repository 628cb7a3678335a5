"""Rich rendering of `daydream inspect` summaries for people.

Only the CLI creates the `Console`; these functions draw on the one they get.
"""

from __future__ import annotations

from typing import Any

from rich.columns import Columns
from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from daydream.mapping.attribution import layer_label
from daydream.report.table import Table, labelled, named_table


def relative_change(before: int, after: int, decimals: int = 0) -> str:
    """`after` against `before` as a signed percentage with `decimals` decimals; "new" where there
    was nothing before."""
    if not before:
        return "new" if after else ""
    return f"{(after - before) / before * 100:+.{decimals}f}%"


def format_ns(ns: float | int | None) -> str:
    """A duration for people: 1.23 s, 45.6 ms, 789 µs, 12 ns."""
    if ns is None:
        return "—"
    value = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(value) >= scale:
            return (f"{value / scale:.3g} {unit}" if abs(value) / scale < 100
                    else f"{value / scale:.0f} {unit}")
    return f"{value:.0f} ns"


def format_bytes(count: int | None) -> str:
    if count is None:
        return "—"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def short_kernel_name(name: str, width: int = 60) -> str:
    """A kernel signature cut down to what a person recognizes.

    Drops `void `, the parameter list and template arguments nested deeper than
    one level: `void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,
    ...>(int, ...)` becomes `at::native::vectorized_elementwise_kernel<4,
    at::native::FillFunctor<…>, …>`.
    """
    text = name.removeprefix("void ").replace("(anonymous namespace)", "{anonymous}")
    out: list[str] = []
    depth = 0
    for char in text:
        if char == "(" and depth == 0:
            break
        if char == "<":
            depth += 1
            if depth == 2:
                out.append("<…")
        elif char == ">":
            depth -= 1
            if depth == 1:
                out.append(">")
                continue
        if depth <= 1:
            out.append(char)
    short = "".join(out).strip() or name
    return short if len(short) <= width else short[: width - 1] + "…"


def render_job_summary(summary: dict[str, Any], console: Console,
                       detail_rank: int | None = None) -> None:
    """Draw a job summary: the captures of one process when it holds several, a table of ranks when
    there are several, then one rank in detail."""
    ranks = summary["ranks"]
    if summary.get("runs"):
        read = ranks[0]["source"] if ranks else ""
        table = Table(title="captures of one process (runs, oldest first; --run N reads another)",
                      title_justify="left")
        table.add_column("run", justify="right")
        table.add_column("file")
        table.add_column("read")
        for number, source in enumerate(summary["runs"]):
            table.add_row(str(number), source, "yes" if source == read else "")
        console.print(table)
    if len(ranks) > 1:
        console.print(_ranks_table(summary))
    chosen = _choose_rank(ranks, detail_rank)
    if chosen is not None:
        console.print(_rank_panel(chosen, several=len(ranks) > 1))


def _choose_rank(ranks: list[dict[str, Any]], detail_rank: int | None) -> dict[str, Any] | None:
    if not ranks:
        return None
    if detail_rank is None:
        return ranks[0]
    for rank in ranks:
        if rank["rank"] == detail_rank:
            return rank
    return ranks[0]


def _ranks_table(summary: dict[str, Any]) -> Table:
    table = Table(title=f"{summary['source']} — {len(summary['ranks'])} ranks",
                  title_justify="left")
    for header in ("rank", "GPU", "kernels", "iterations", "mean iteration", "orphans"):
        table.add_column(header, justify="left" if header == "GPU" else "right", no_wrap=True)
    for rank in summary["ranks"]:
        times = [it["measured_ns"] for it in rank["iterations"]]
        table.add_row(
            str(rank["rank"]),
            ", ".join(rank["gpu"]) or "—",
            f"{rank['kernels']:,}",
            str(len(times)),
            format_ns(sum(times) / len(times)) if times else "—",
            f"{rank['linking']['orphans']:,}",
        )
    return table


def _rank_panel(rank: dict[str, Any], several: bool) -> Panel:
    side_by_side: list[Any] = [_iterations_table(rank)]
    if rank["streams"]:
        side_by_side.append(_streams_table(rank))
    parts: list[Any] = [_overview(rank), Columns(side_by_side, padding=(0, 4))]
    if rank["top_kernels"]:
        parts.append(_kernels_table(rank))
    if rank.get("phases"):
        parts.append(_phases_line(rank))
    if any(layer["forward_ns"] or layer["backward_ns"] for layer in rank.get("layers", [])):
        parts.append(_layers_table(rank))
    title = f"rank {rank['rank']}" if several or rank["rank"] is not None else "trace"
    return Panel(Group(*parts), title=Text(str(title)), title_align="left")


def _runtime_line(runtime: dict[str, Any]) -> str:
    """"AMD ROCm: hip_runtime_version 60443483, roctracer_version 4.1" (or "not recorded")."""
    if not runtime:
        return "not recorded"
    versions = ", ".join(f"{key} {value}" for key, value in runtime.items() if key != "vendor")
    return (f"{runtime.get('vendor', 'unknown')}: {versions}" if versions
            else str(runtime.get("vendor")))


def _overview(rank: dict[str, Any]) -> Table:
    events, linking = rank["events"], rank["linking"]
    world = f" of {rank['world_size']}" if rank["world_size"] else ""
    gpus = ", ".join(rank["gpu"]) or "not recorded"
    kinds = "  ".join(f"{label} {count:,}" for label, count in rank["kinds"].items() if count)
    share = linking["linked_to_op_time_share"] * 100
    lines = [
        ("source   ", rank["source"]),
        ("format   ", rank["format"]),
        ("GPU      ", gpus),
        ("runtime  ", _runtime_line(rank.get("runtime") or {})),
        ("rank     ", f"{rank['rank']}{world}" if rank["rank"] is not None else "not recorded"),
        ("events   ", f"{events['kept']:,} kept of {events['in_file']:,} in the file: {kinds}"),
        (
            "linking  ",
            f"{linking['linked_to_op']:,} of {linking['gpu_activities']:,} GPU activities linked "
            f"to a CPU op ({share:.1f}% of GPU time), {linking['orphans']:,} orphans (launched "
            f"before the window), {linking['unlinked']:,} unlinked; convention: "
            f"{linking['convention']}",
        ),
    ]
    if rank.get("capture"):
        lines.append(("capture  ", rank["capture"]))
    if events["skipped_malformed"]:
        reasons = ", ".join(f"{why}: {n}" for why, n in events["skipped_reasons"].items())
        lines.append(("skipped  ", f"{events['skipped_malformed']:,} malformed events ({reasons})"))
    return labelled((label.strip(), value) for label, value in lines)


def _iterations_table(rank: dict[str, Any]) -> Table | Text:
    iterations = rank["iterations"]
    if not iterations:
        return Text("no iterations found\n")
    source = _ITERATION_SOURCES.get(rank["iteration_source"], rank["iteration_source"])
    table = Table(title="iterations", title_justify="left", caption=f"from {source}",
                  caption_justify="left")
    table.add_column("iteration")
    table.add_column("measured", justify="right")
    shown = iterations if len(iterations) <= 12 else iterations[:5] + iterations[-5:]
    for position, it in enumerate(shown):
        if len(iterations) > 12 and position == 5:
            table.add_row("…", "")
        table.add_row(it["name"], format_ns(it["measured_ns"]))
    times = [it["measured_ns"] for it in iterations]
    table.add_row(Text("mean", style="bold"),
                  Text(format_ns(sum(times) / len(times)), style="bold"))
    if rank.get("samples_per_s"):
        table.add_row("samples/s", f"{rank['samples_per_s']:,.0f} (batch {rank['batch_size']})")
    return table


_ITERATION_SOURCES = {
    "profiler_step": "ProfilerStep#N",
    "optimizer_step": "optimizer steps",
    "marker": "--iteration-marker",
    "whole_trace": "the whole trace",
}


def _streams_table(rank: dict[str, Any]) -> Table:
    table = Table(title="GPU streams", title_justify="left")
    for header in ("device", "stream", "activities", "busy"):
        table.add_column(header, justify="right", no_wrap=True)
    for stream in rank["streams"]:
        table.add_row(str(stream["device"]), str(stream["stream"]), f"{stream['activities']:,}",
                      format_ns(stream["busy_ns"]))
    return table


def _phases_line(rank: dict[str, Any]) -> Table:
    phases, attribution = rank["phases"], rank["attribution"]
    total = sum(phases.values()) or 1
    basis = "GPU time" if attribution["basis"] == "gpu" else "CPU op time"
    return labelled([
        ("phases",
         "  ".join(f"{name} {format_ns(ns)} ({ns / total:.0%})" for name, ns in phases.items())
         + f"  — {basis} per iteration"),
        ("layers", f"from {attribution['source']}: {attribution['forward_layer_share']:.0%} of "
                   "forward time on a layer "
                   f"({attribution['forward_leaf_share']:.0%} on a leaf module), "
                   f"{attribution['backward_layer_share']:.0%} of backward"),
    ])


def _layers_table(rank: dict[str, Any], top: int = 15) -> Table:
    layers = sorted(rank["layers"], key=lambda layer: -(layer["forward_ns"] + layer["backward_ns"]))
    shown = [layer for layer in layers if layer["forward_ns"] or layer["backward_ns"]][:top]
    total = sum(layer["forward_ns"] + layer["backward_ns"] for layer in layers) or 1
    return named_table(f"layers by time per iteration (exclusive; top {len(shown)})",
                       ("layer", "forward", "backward", "share"),
                       [(layer_label(layer), format_ns(layer["forward_ns"]),
                         format_ns(layer["backward_ns"]),
                         f"{(layer['forward_ns'] + layer['backward_ns']) / total:.1%}")
                        for layer in shown])


def _kernels_table(rank: dict[str, Any]) -> Table:
    table = Table(title="top kernels by GPU time", title_justify="left", expand=True)
    table.add_column("kernel", overflow="ellipsis", no_wrap=True, ratio=1)
    for header in ("count", "total", "share"):
        table.add_column(header, justify="right", no_wrap=True)
    for kernel in rank["top_kernels"]:
        table.add_row(
            short_kernel_name(kernel["name"]), f"{kernel['count']:,}",
            format_ns(kernel["total_ns"]), f"{kernel['share'] * 100:.1f}%"
        )
    return table
