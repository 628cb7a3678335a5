"""`daydream whatif [TRACE] --opt NAME[:k=v,...]`: predict the step time under optimizations."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from daydream.api import (
    list_optimizations,
    predict_job,
    predict_memory_for,
    sweep_job,
    sweep_values,
)
from daydream.cli._complete import complete_device, complete_opt, complete_sweep
from daydream.cli._progress import emit, err, with_progress
from daydream.cli._traces import (
    SHIPPED_EXAMPLES,
    chosen_trace,
    rank_options,
    trace_argument,
    with_examples,
)
from daydream.cost import COMPILE_BUDGET_S, CostOptions
from daydream.report import plotting
from daydream.report.table import Table

#: The command's help (`with_examples`).
HELP = with_examples(
    """Predict the iteration time of TRACE with the optimizations applied.

    TRACE defaults to the newest trace in ./daydream-traces/, so that
    `daydream trace train.py && daydream whatif --opt amp` works.""",
    SHIPPED_EXAMPLES,
    ["daydream whatif example:cnn_v100 --opt amp",
     "daydream whatif example:cnn_v100 --opt fused-optimizer --opt cuda-graphs --json",
     "daydream whatif example:cnn_v100 --opt batch-size:factor=2 --memory",
     "daydream whatif example:ddp_a100_rank0 --opt no-comm --opt ddp:bandwidth=100Gbps "
     "--sweep world=1,8,64",
     "daydream whatif example:cnn_v100 --opt gpu --sweep target=A100,H100,MI300X,L4 --memory "
     "--price A100=1.8,H100=2.9",
     "daydream whatif example:cnn_v100 --opt layout:params=97MB "
     "--sweep dp=1,2,4,8,tp=1,2,pp=1,2 --world 8 --memory",
     "daydream whatif --list"])


@click.command("whatif", help=HELP)
@trace_argument
@rank_options
@click.option("--opt", "specs", multiple=True, metavar="NAME[:k=v,...]|FILE.yaml",
              shell_complete=complete_opt,
              help="An optimization to apply (repeat to combine, in order). See --list.")
@click.option("--list", "show_list", is_flag=True,
              help="List every optimization with its model, and exit.")
@click.option("--device", "device_name", default=None, shell_complete=complete_device,
              help="The GPU the trace ran on, if the trace does not say (device table name).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the prediction as JSON (a stable contract).")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False, path_type=str),
              default=None, help="Write the predicted timeline as a Chrome trace (.gz compresses; "
                                 "several ranks: a file per rank "
                                 "where the name holds {rank}, else one file of them all).")
@click.option("--memory", "with_memory", is_flag=True,
              help="Also predict the peak memory per device, whether it fits (--device or the "
                   "trace's GPU) and the largest batch that does.")
@click.option("--sweep", default=None, metavar="KEY=V1,V2,...", shell_complete=complete_sweep,
              help="Predict once per value of parameter KEY of the --opt optimizations that have "
                   "it (e.g. --opt ddp --sweep world=1,2,4,8): a scaling table.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="With --sweep: also draw the predicted iteration time (and scaling efficiency) "
                   "as a PNG; with a layout sweep, each layout's samples/s and memory per rank, "
                   "coloured by whether it fits.")
@click.option("--price", "prices", default=None, metavar="VALUE=USD_PER_HOUR,...",
              help="With --sweep: the hourly price of each swept value (e.g. A100=1.8,H100=2.9): "
                   "adds the cost of 1,000 steps.")
@click.option("--world", type=click.IntRange(1, 65536), default=None, metavar="N",
              help="With --opt layout --sweep dp=...,tp=...,pp=...: the ranks each layout has (dp "
                   "× tp × pp = N).")
@click.option("--no-cache", is_flag=True,
              help="Read the trace afresh; neither use nor write the cache.")
@click.option("--measure/--no-measure", "measure", default=None,
              help="Time the ops a what-if changes by running them here at the recorded shapes (a "
                   "CPU trace, torch installed; on by default, DAYDREAM_MEASURE=0 turns it off), "
                   "or only by the model.")
@click.option("--measure-budget", type=click.FloatRange(0.0, 3600.0), default=5.0,
              show_default=True, metavar="SECONDS",
              help="The most time measuring may take per what-if; past it, ops are modelled.")
@click.option("--compile-budget", type=click.FloatRange(0.0, 3600.0), default=COMPILE_BUDGET_S,
              show_default=True, metavar="SECONDS",
              help="The most time the compile what-if may spend compiling its runs of fused ops "
                   "here with inductor and timing them (a CPU trace); past it, they take a fixed "
                   "share. Compiled runs are cached: a second prediction compiles none again.")
def whatif_command(trace: str | None, specs: tuple[str, ...], show_list: bool,
                   device_name: str | None, as_json: bool, timeline_path: str | None,
                   with_memory: bool, sweep: str | None, plot_path: str | None, prices: str | None,
                   world: int | None, no_cache: bool, measure: bool | None,
                   measure_budget: float, compile_budget: float) -> None:
    """See HELP."""
    if show_list:
        _print_list(as_json)
        return
    _check_options(specs, sweep, plot_path, prices)
    path = chosen_trace(trace, err().print)
    if plot_path:
        plotting.require()
    if _layouts(path, list(specs), sweep, world, device_name, as_json, not no_cache, with_memory,
                plot_path):
        return
    if sweep:
        _sweep(path, list(specs), sweep, device_name, as_json, plot_path, not no_cache, with_memory,
               _prices(prices))
        return
    _predict(path, list(specs), device_name, as_json, timeline_path, with_memory, not no_cache,
             CostOptions(measure, measure_budget, compile_budget))


def _predict(path: str, specs: list[str], device_name: str | None, as_json: bool,
             timeline_path: str | None, with_memory: bool, cache: bool,
             cost_options: CostOptions) -> None:
    """One prediction of the trace at `path` with `specs` applied, printed or as JSON."""
    # The simulator and its compiled code are imported here, not with the module: `daydream --help`
    # lists this command without paying for them.
    from daydream.report.timeline import prediction_runs, write_timelines
    from daydream.report.whatif import (
        render_memory_predictions,
        render_predictions,
        summarize_predictions,
    )

    predictions = with_progress(lambda progress: predict_job(path, specs, device_name, cache=cache,
                                                             progress=progress,
                                                             cost_options=cost_options))
    summary = summarize_predictions(path, specs, predictions)
    if with_memory:
        summary["memory"] = predict_memory_for([p.trace for p in predictions], specs, device_name)
    if timeline_path:
        for written in write_timelines(timeline_path, prediction_runs(predictions),
                                       f"predicted timeline: {' + '.join(specs)}"):
            err().print(f"daydream: wrote {written}", highlight=False)

    def render(found: dict[str, Any], console: Console) -> None:
        render_predictions(found, console)
        if with_memory:
            render_memory_predictions(found["memory"], console)

    emit(summary, as_json, render)


def _layouts(path: str, specs: list[str], sweep: str | None, world: int | None,
             device_name: str | None, as_json: bool, cache: bool, with_memory: bool,
             plot_path: str | None) -> bool:
    """The layout sweep (--opt layout --sweep dp=...,tp=...,pp=...
    --world N), if that is what was asked."""
    layout = bool(specs) and specs[-1].partition(":")[0].strip() == "layout"
    if world is not None and not (layout and sweep):
        raise click.UsageError("--world is the ranks of a layout sweep: give --opt layout --sweep "
                               "dp=...,tp=...,pp=...")
    if not (sweep and layout):
        return False
    if world is None:
        raise click.UsageError(
            "--opt layout --sweep ...: give --world N, the ranks each layout has")
    from daydream.api import layout_sweep
    from daydream.report.layout import plot_layouts, render_layouts

    found = with_progress(lambda progress: layout_sweep(path, specs, sweep, world, device_name,
                                                        cache, with_memory, progress))
    if plot_path:
        plot_layouts(plot_path, found)
        err().print(f"daydream: wrote {plot_path}", highlight=False)
    emit(found, as_json, render_layouts)
    return True


def _check_options(specs: tuple[str, ...], sweep: str | None, plot_path: str | None,
                   prices: str | None) -> None:
    """The options that only mean something with others: one usage error naming what is missing."""
    if not specs:
        raise click.UsageError("name at least one optimization with --opt (see --list)")
    if plot_path and not sweep:
        raise click.UsageError("--plot draws a sweep: give --sweep KEY=V1,V2,...")
    if prices and not sweep:
        raise click.UsageError("--price prices the values of a sweep: give --sweep KEY=V1,V2,...")


def _prices(text: str | None) -> dict[str, float]:
    """--price A100=1.8,H100=2.9 -> {"A100": 1.8, "H100": 2.9}; a
    malformed entry is a usage error."""
    prices: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not name.strip() or not (price >= 0 and price < float("inf")):
            raise click.UsageError(f"--price {item.strip()!r}: write VALUE=USD_PER_HOUR, e.g. "
                                   "H100=2.9")
        prices[name.strip()] = price
    return prices


def _sweep(path: str, specs: list[str], sweep: str, device_name: str | None, as_json: bool,
           plot_path: str | None, cache: bool, with_memory: bool = False,
           prices: dict[str, float] | None = None) -> None:
    from daydream.report.sweep import plot_sweep, render_sweep, summarize_sweep

    unknown = sorted(set(prices or {}) - set(sweep_values(sweep)[1]))
    if unknown:  # before any work: a price for a value the sweep does not have
        raise click.UsageError(f"--price {unknown[0]}: not a value of --sweep {sweep}")
    found = with_progress(lambda progress: sweep_job(path, specs, sweep, device_name, cache,
                                                     with_memory, progress))
    summary = summarize_sweep(path, specs, found.key, found.runs, found.memories or None, prices
                              or None)
    if plot_path:
        plot_sweep(plot_path, summary)
        err().print(f"daydream: wrote {plot_path}", highlight=False)
    emit(summary, as_json, render_sweep)


def _print_list(as_json: bool) -> None:
    emit(list_optimizations(), as_json, _render_list)


def _render_list(entries: list[dict[str, str]], console: Console) -> None:
    table = Table(title="optimizations (--opt NAME[:k=v,...]; a .yaml file for your own)",
                  title_justify="left", show_lines=True)
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("model", overflow="fold")
    table.add_column("parameters", overflow="fold")
    for entry in entries:
        table.add_row(entry["name"],
                      f"{entry['summary']}. time: {entry['model']}. memory: {entry['memory']}",
                      entry["parameters"])
    console.print(table)
