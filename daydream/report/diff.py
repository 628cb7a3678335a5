"""`daydream diff` results as JSON-ready data and as rich tables.

The JSON contract: `{"a", "b", "iteration_ns": {"a", "b", "change"}, "ranks": [{"rank",
"iteration_ns": {"a", "b", "change", "a_simulated"}, "phases", "classes", "layers": [{"name",
"a_ns", "b_ns", "change_ns"}], "host", "explanation": {"together_ns", "not_explained_ns"},
"notes"}]}` is guaranteed (phase, class and host entries add `explains_ns`: the simulated
change of the iteration time, null where nothing was simulated); for several ranks the
top-level times are the slowest rank's. Keys are added, never renamed.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from daydream import __version__
from daydream.report.console import format_ns, relative_change
from daydream.report.table import Table, labelled, named_table
from daydream.simulate.diff import Change, Comparison

SCHEMA_VERSION = 1


def summarize_comparisons(source_a: str, source_b: str, comparisons: list[Comparison],
                          top: int) -> dict[str, Any]:
    """JSON-ready comparison of B with A, every rank; `top` layers by absolute change per rank."""
    a = max(c.measured_a_ns for c in comparisons)
    b = max(c.measured_b_ns for c in comparisons)
    return {
        "schema_version": SCHEMA_VERSION,
        "daydream_version": __version__,
        "a": source_a,
        "b": source_b,
        "iteration_ns": {"a": a, "b": b, "change": b - a},
        "ranks": [_rank(c, top) for c in comparisons],
    }


def _rank(comparison: Comparison, top: int) -> dict[str, Any]:
    with_a, with_b, common = comparison.layers_in_common
    return {
        "rank": comparison.rank,
        "basis": {"a": comparison.basis[0], "b": comparison.basis[1]},
        "iterations": {"a": comparison.iterations[0], "b": comparison.iterations[1]},
        "iteration_ns": {"a": comparison.measured_a_ns, "b": comparison.measured_b_ns,
                         "change": comparison.measured_change_ns,
                         "a_simulated": comparison.simulated_a_ns},
        "phases": [_change(c) for c in comparison.phases],
        "classes": [_change(c) for c in comparison.classes],
        "host": _change(comparison.host),
        "layers": [_change(c, explained=False) for c in comparison.layers[:top]],
        "layers_in_common": {"a": with_a, "b": with_b, "common": common},
        "explanation": {"together_ns": comparison.together_ns,
                        "measured_change_ns": comparison.measured_change_ns,
                        "not_explained_ns": comparison.not_explained_ns},
        "notes": comparison.notes,
    }


def _change(change: Change, explained: bool = True) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": change.name, "a_ns": change.a_ns, "b_ns": change.b_ns,
                             "change_ns": change.change_ns}
    if explained:
        entry["explains_ns"] = change.explains_ns
    return entry


def render_comparisons(summary: dict[str, Any], console: Console) -> None:
    """Draw the first rank in detail (the JSON has every rank)."""
    ranks = summary["ranks"]
    rank = ranks[0]
    gpu = rank["basis"]["a"] == "gpu"
    basis = "GPU time" if gpu else "CPU op self time"
    host = ("the CPU time of API calls and between them" if gpu
            else "the CPU time between top-level ops")
    classes = _explained_table(f"by kernel class ({basis} per iteration)", "class", rank["classes"],
                               rank)
    classes.caption = ("explains: the simulated change of the iteration time when A's work is "
                       f"rescaled to B's; host: {host}")
    parts: list[Any] = [
        _iteration_table(rank),
        classes,
        _explained_table(f"by phase ({basis} per iteration)", "phase", rank["phases"]),
    ]
    if rank["layers"]:
        parts.append(_layers_table(rank["layers"]))
    parts.append(_notes(rank, several=len(ranks) > 1))
    title = (f"{summary['a']} → {summary['b']}"
             + (f" (rank {rank['rank']})" if len(ranks) > 1 else ""))
    console.print(Panel(Group(*parts), title=Text(str(title)), title_align="left"))


def _iteration_table(rank: dict[str, Any]) -> Table:
    times = rank["iteration_ns"]
    iterations = rank["iterations"]
    table = Table(title="iteration time (mean, measured)", title_justify="left")
    table.add_column("")
    table.add_column("time", justify="right")
    table.add_column("", justify="left")
    table.add_row("A", format_ns(times["a"]), Text(f"{iterations['a']} iterations; simulated "
                                                   f"{format_ns(times['a_simulated'])}",
                                                   style="dim"))
    table.add_row("B", format_ns(times["b"]), Text(f"{iterations['b']} iterations", style="dim"))
    table.add_row(Text("change", style="bold"),
                  Text(_signed(times["change"]), style=_style(times["change"])),
                  _percent(times["a"], times["b"]))
    return table


def _explained_table(title: str, label: str, changes: list[dict[str, Any]],
                     rank: dict[str, Any] | None = None) -> Table:
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column(label)
    for header in ("A", "B", "change", "", "explains"):
        table.add_column(header, justify="right", no_wrap=True)
    for change in changes:
        table.add_row(*_row(change))
    if rank is not None:
        table.add_section()
        table.add_row(*_row(rank["host"]))
        explanation = rank["explanation"]
        table.add_row(Text("all together", style="bold"), "", "", "", "",
                      Text(_signed(explanation["together_ns"]), style="bold"))
        table.add_row(Text("not explained", style="dim"), "", "", "", "",
                      Text(_signed(explanation["not_explained_ns"]), style="dim"))
    return table


def _row(change: dict[str, Any]) -> tuple[str | Text, ...]:
    explains = change.get("explains_ns")
    return (change["name"], format_ns(change["a_ns"]), format_ns(change["b_ns"]),
            Text(_signed(change["change_ns"]), style=_style(change["change_ns"])),
            _percent(change["a_ns"], change["b_ns"]),
            Text("—" if explains is None else _signed(explains), style="bold" if explains else ""))


def _layers_table(layers: list[dict[str, Any]]) -> Table:
    return named_table(
        f"layers that changed most (top {len(layers)}, exclusive work per iteration)",
                       ("layer", "A", "B", "change", ""),
                       [(layer["name"], format_ns(layer["a_ns"]), format_ns(layer["b_ns"]),
                         Text(_signed(layer["change_ns"]), style=_style(layer["change_ns"])),
                         _percent(layer["a_ns"], layer["b_ns"])) for layer in layers])


def _notes(rank: dict[str, Any], several: bool) -> Table:
    rows = [("note", note) for note in rank["notes"]]
    return labelled(rows + ([("ranks", "the first rank is shown; --json has every rank")] if several
                            else []))


def _signed(ns: int) -> str:
    if ns == 0:
        return "0"
    return ("+" if ns > 0 else "-") + format_ns(abs(ns))


def _style(ns: int) -> str:
    return "red" if ns > 0 else "green" if ns < 0 else ""


def _percent(before: int, after: int) -> str:
    return relative_change(before, after, decimals=1)
