"""`daydream memory` results: JSON-ready data, rich tables, and the stacked timeline plot.

The JSON contract: `{"devices": [{"device", "peak_allocated_bytes", "peak_reserved_bytes",
"categories": {name: bytes at the peak}}]}` is guaranteed; keys are added, never renamed.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from daydream import __version__
from daydream.errors import InputError
from daydream.memory import CATEGORIES, DeviceMemory
from daydream.report import plotting
from daydream.report.console import format_bytes
from daydream.report.table import Table, named_table

SCHEMA_VERSION = 1
_COLORS = {"weights": "#4c72b0", "activations": "#dd8452", "gradients": "#55a868",
           "optimizer state": "#c44e52",
           "workspace": "#da8bc3",
           "temporaries": "#8172b3", "before the trace": "#937860", "other": "#bbbbbb"}


def summarize_memory(source: str,
                     ranks: list[tuple[int | None, list[DeviceMemory]]]) -> dict[str, Any]:
    devices = []
    for rank, memory in ranks:
        for device in memory:
            devices.append({
                "rank": rank,
                "device": device.device,
                "peak_allocated_bytes": device.peak_allocated_bytes,
                "peak_reserved_bytes": device.peak_reserved_bytes,
                "peak_time_ns": device.peak_time_ns,
                "peak_from": device.peak_from,
                "categories": device.categories,
                "unclassified_share": device.unclassified_share,
                "before_trace": device.before_trace,
                "unseen_frees": {"blocks": device.unseen_frees[0], "bytes": device.unseen_frees[1]},
                "iteration_peaks_bytes": list(device.iteration_peaks_bytes),
                "top_layers_by_activation_bytes": device.layers[:10],
            })
    return {"schema_version": SCHEMA_VERSION, "daydream_version": __version__, "source": source,
            "devices": devices}


def render_memory(summary: dict[str, Any], console: Console) -> None:
    if not summary["devices"]:
        console.print(f"{summary['source']}: no [memory] events — record with profile_memory=True "
                      "(daydream trace does)",
                      soft_wrap=True)
        return
    for device in summary["devices"]:
        reserved = (format_bytes(device["peak_reserved_bytes"]) if device["peak_reserved_bytes"]
                    else "not recorded")
        # the CPU allocator keeps no reserved pool
        pool = "" if device["device"] == "cpu" else f", {reserved} reserved"
        table = Table(
            title=f"at the peak: {format_bytes(device['peak_allocated_bytes'])} allocated "
                  f"({device['peak_from']}){pool}", title_justify="left", expand=True)
        table.add_column("category")
        table.add_column("bytes", justify="right")
        table.add_column("share", justify="right")
        peak = device["peak_allocated_bytes"] or 1
        for name in CATEGORIES:
            value = device["categories"].get(name, 0)
            if value:
                table.add_row(name, format_bytes(value), f"{value / peak:.0%}")
        captions = ([f"before the trace: {device['before_trace']}"] if device.get("before_trace")
                    else [])
        blocks, nbytes = (device.get("unseen_frees", {}).get("blocks", 0),
                          device.get("unseen_frees", {}).get("bytes", 0))
        if blocks:
            captions.append(f"{blocks} blocks ({format_bytes(nbytes)}) were freed where the "
                            "profiler did not see it (a thread it does not watch): each counted "
                            "until its address was handed out again; blocks freed so and never "
                            "reused stay counted, so the peak can be high")
        rising = _rising(device.get("iteration_peaks_bytes", []))
        if rising:
            captions.append(rising)
        if captions:
            table.caption = "\n".join(captions)
            table.caption_justify = "left"
        parts: list[Any] = [table]
        if device["top_layers_by_activation_bytes"]:
            parts.append(named_table("layers by activation memory at the peak",
                                     ("layer", "activations"),
                                     [(entry["name"], format_bytes(entry["activation_bytes"]))
                                      for entry in device["top_layers_by_activation_bytes"]]))
        rank = f"rank {device['rank']} " if device["rank"] is not None else ""
        console.print(Panel(Group(*parts), title=Text(f"{rank}{device['device']}"),
                            title_align="left"))


#: Peaks of a steady loop's iterations that climb by more than this
#: share from the first to the last are named.
RISING_SHARE = 0.05


def _rising(peaks: list[int]) -> str:
    """A line when every iteration's peak is at least the one before
    and the last is well above the first."""
    if len(peaks) < 3 or not peaks[0] or any(b < a for a, b in zip(peaks, peaks[1:])) \
            or peaks[-1] < peaks[0] * (1 + RISING_SHARE):
        return ""
    return (f"the peak rises every iteration, {format_bytes(peaks[0])} to "
            f"{format_bytes(peaks[-1])} over {len(peaks)}: memory kept from one iteration to the "
            "next (a leak), or freed where the profiler did not see it; the first iteration's peak "
            "is the steadiest figure")


def plot_memory(path: str | os.PathLike[str], memory: list[DeviceMemory], title: str) -> None:
    """A stacked-area PNG per device (one row each), categories
    stacked, the peak marked; written atomically."""
    plt = plotting.pyplot()
    shown = [d for d in memory if d.times_ns.size]
    if not shown:
        raise InputError(f"{title}: no memory events to plot")
    figure, axes = plt.subplots(len(shown), 1, figsize=(10, 3.2 * len(shown)), squeeze=False)
    for axis, device in zip(axes[:, 0], shown):
        start = device.times_ns[0]
        times_ms = (device.times_ns - start) / 1e6
        # as the CLI prints it
        unit, scale = ("GiB", 2**30) if device.peak_allocated_bytes >= 2**30 else ("MiB", 2**20)
        names = [n for n in CATEGORIES if device.by_category.get(n) is not None
                 and device.by_category[n].any()]
        if names:  # a device whose events all net to zero has nothing to stack
            axis.stackplot(times_ms, [device.by_category[n] / scale for n in names], labels=names,
                           colors=[_COLORS[n] for n in names], step="post")
        for boundary in device.iteration_bounds_ns.tolist():  # iteration boundaries, dotted
            if device.times_ns[0] <= boundary <= device.times_ns[-1]:
                axis.axvline((boundary - start) / 1e6, color="#888888", linestyle=":",
                             linewidth=0.8)
        axis.axvline((device.peak_time_ns - start) / 1e6, color="black", linestyle="--",
                     linewidth=1)
        axis.annotate(f"peak {format_bytes(device.peak_allocated_bytes)}",
                      xy=((device.peak_time_ns - start) / 1e6, 0), xytext=(4, 4),
                      textcoords="offset points", fontsize=8)
        axis.set_title(f"{title} — {device.device} (dotted: iteration boundaries)", fontsize=10)
        axis.set_xlabel("time (ms)")
        axis.set_ylabel(f"allocated ({unit})")
        if names:
            axis.legend(loc="upper left", fontsize=7, ncol=4)
    plotting.save_png(figure, path)
