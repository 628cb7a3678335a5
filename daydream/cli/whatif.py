"""`daydream whatif [TRACE] --opt NAME[:k=v,...]`: predict the step time under optimizations."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from daydream.api import predict_job, predict_memory_for
from daydream.cli._progress import progress_bar
from daydream.errors import InputError
from daydream.report.timeline import write_timelines
from daydream.report.whatif import render_memory_predictions, render_predictions, summarize_predictions
from daydream.simulate.whatif import list_optimizations

DEFAULT_FOLDER = Path("daydream-traces")


@click.command("whatif")
@click.argument("trace", required=False, type=click.Path(path_type=str))
@click.option("--opt", "specs", multiple=True, metavar="NAME[:k=v,...]|FILE.yaml",
              help="An optimization to apply (repeat to combine, in order). See --list.")
@click.option("--list", "show_list", is_flag=True, help="List every optimization with its model, and exit.")
@click.option("--device", "device_name", default=None, help="The GPU the trace ran on, if the trace does not say (device table name).")
@click.option("--json", "as_json", is_flag=True, help="Print the prediction as JSON (a stable contract).")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the predicted timeline as a Chrome trace (.gz compresses; {rank} for several ranks).")
@click.option("--memory", "with_memory", is_flag=True,
              help="Also predict the peak memory per device, whether it fits (--device or the trace's GPU) "
                   "and the largest batch that does.")
@click.option("--no-cache", is_flag=True, help="Read the trace afresh; neither use nor write the cache.")
def whatif_command(trace: str | None, specs: tuple[str, ...], show_list: bool, device_name: str | None, as_json: bool,
                   timeline_path: str | None, with_memory: bool, no_cache: bool) -> None:
    """Predict the iteration time of TRACE with the optimizations applied.

    TRACE defaults to the newest trace in ./daydream-traces/, so that
    `daydream trace train.py && daydream whatif --opt amp` works.
    """
    if show_list:
        _print_list(as_json)
        return
    if not specs:
        raise click.UsageError("name at least one optimization with --opt (see --list)")
    path = trace or str(_newest_trace())
    with progress_bar(Console(stderr=True)) as progress:
        predictions = predict_job(path, list(specs), device_name, cache=not no_cache, progress=progress)  # type: ignore[arg-type]
    summary = summarize_predictions(path, list(specs), predictions)
    if with_memory:
        summary["memory"] = predict_memory_for([p.trace for p in predictions], list(specs), device_name)
    if timeline_path:
        runs = []
        for p in predictions:
            assert p.graph is not None and p.timeline is not None
            iterations = [(it["name"], int(p.timeline.start_ns[a]), int(p.timeline.start_ns[b]))
                          for it, (a, b) in zip(p.per_iteration, p.graph.iteration_markers)]
            runs.append((p.trace, p.graph, p.timeline, iterations))
        write_timelines(timeline_path, runs, f"predicted timeline: {' + '.join(specs)}")
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    console = Console()
    render_predictions(summary, console)
    if with_memory:
        render_memory_predictions(summary["memory"], console)


def _newest_trace() -> Path:
    candidates = sorted(DEFAULT_FOLDER.glob("*.json.gz"), key=lambda p: p.stat().st_mtime) if DEFAULT_FOLDER.is_dir() else []
    if not candidates:
        raise InputError(f"no TRACE given and no trace in ./{DEFAULT_FOLDER}/ — record one with daydream trace train.py, "
                         "or name a trace file")
    return candidates[-1]


def _print_list(as_json: bool) -> None:
    entries = list_optimizations()
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    table = Table(title="optimizations (--opt NAME[:k=v,...]; a .yaml file for your own)", title_justify="left", show_lines=True)
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("model", overflow="fold")
    table.add_column("parameters", overflow="fold")
    for entry in entries:
        table.add_row(entry["name"], f"{entry['summary']}: {entry['model']}", entry["parameters"])
    Console().print(table)
