"""`daydream memory TRACE`: peak memory per device, what it is made of, and a timeline plot."""

from __future__ import annotations

import click

from daydream.api import open_job
from daydream.cli._progress import emit, err, with_progress
from daydream.cli._traces import chosen_trace, rank_options, trace_argument, with_examples
from daydream.memory import analyze_memory
from daydream.report import plotting
from daydream.report.memory import plot_memory, render_memory, summarize_memory

#: The command's help (`with_examples`).
HELP = with_examples(
    """Peak allocated and reserved memory per device of TRACE, broken down into weights,
    activations, gradients, optimizer state, temporaries and other, at the peak.
    TRACE defaults to the newest trace in ./daydream-traces/.""",
    ("Examples (from daydream's repository folder; run.json.gz is what the daydream "
     "trace --help example writes):"),
    ["daydream memory run.json.gz",
     "daydream memory run.json.gz --json --plot memory.png"])


@click.command("memory", help=HELP)
@trace_argument
@rank_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the breakdown as JSON (a stable contract).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write a PNG of the allocated memory over time, categories stacked, the peak "
                   "marked.")
@click.option("--no-cache", is_flag=True,
              help="Read the trace afresh; neither use nor write the cache.")
def memory_command(trace: str | None, as_json: bool, plot_path: str | None, no_cache: bool) -> None:
    """See HELP."""
    if plot_path:
        plotting.require()
    status = err()
    trace = chosen_trace(trace, status.print)
    job = with_progress(lambda progress: open_job(trace, cache=not no_cache, progress=progress),
                        status)
    ranks = [(t.meta.rank, analyze_memory(t)) for t in job.traces]
    if plot_path:
        plot_memory(plot_path, [device for _, memory in ranks for device in memory], trace)
        status.print(f"daydream: wrote {plot_path}", highlight=False)
    emit(summarize_memory(trace, ranks), as_json, render_memory)
