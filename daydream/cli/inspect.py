"""`daydream inspect TRACE`: what is in a trace, readable in ten seconds."""

from __future__ import annotations

import click

from daydream.api import open_job
from daydream.cli._progress import emit, err, with_progress
from daydream.cli._traces import (
    SHIPPED_EXAMPLES,
    chosen_trace,
    rank_options,
    trace_argument,
    with_examples,
)
from daydream.report.console import render_job_summary
from daydream.report.summary import summarize_job

#: The command's help (`with_examples`).
HELP = with_examples(
    """Summarize TRACE: a Kineto .json/.json.gz file, a folder of rank files, or a .tar.gz of them.

    Shows the GPUs, ranks, iterations and their measured times, events per kind,
    streams, the top kernels by GPU time, and how much GPU work is linked to a CPU op.
    TRACE defaults to the newest trace in ./daydream-traces/.""",
    SHIPPED_EXAMPLES,
    ["daydream inspect example:cnn_v100",
     "daydream inspect example:cnn_v100 --json --top 3"])


@click.command("inspect", help=HELP)
@trace_argument
@rank_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON (a stable contract) instead of tables.")
@click.option("--rank", "detail_rank", type=int, default=None,
              help="Which rank to show in detail (default: the first).")
@click.option("--iteration-marker", metavar="REGEX", default=None,
              help="Annotation or op name (a regular expression) whose spans are the iterations.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="How many kernels to list.")
@click.option("--no-cache", is_flag=True,
              help="Read the trace afresh; neither use nor write the cache.")
def inspect_command(trace: str | None, as_json: bool, detail_rank: int | None,
                    iteration_marker: str | None, top: int, no_cache: bool) -> None:
    """See HELP."""
    status = err()
    trace = chosen_trace(trace, status.print)
    job = with_progress(lambda progress: open_job(trace, cache=not no_cache, progress=progress),
                        status)
    summary = summarize_job(job, iteration_marker=iteration_marker, top=top)
    emit(summary, as_json, lambda found, console: render_job_summary(found, console, detail_rank))
