"""`daydream replay TRACE`: simulate the untouched graph and compare it with the measurement."""

from __future__ import annotations

import click

from daydream.api import replay_job
from daydream.cli._progress import emit, err, with_progress
from daydream.cli._traces import (
    SHIPPED_EXAMPLES,
    chosen_trace,
    rank_options,
    trace_argument,
    with_examples,
)

#: The command's help (`with_examples`).
HELP = with_examples(
    """Replay TRACE's dependency graph in the simulator: measured vs simulated time per iteration.

    TRACE is a trace file, a folder of rank files or an archive; the ranks of a job are
    replayed together, each collective matched across its ranks (docs/distributed.md).

    Every wait (synchronization, the launch queue, cross-stream events, the autograd
    thread) is re-derived from dependencies; what cannot be (a missing peer's lateness,
    an unnamed event) is a delay relative to its anchor, reported as "unexplained".
    TRACE defaults to the newest trace in ./daydream-traces/.""",
    SHIPPED_EXAMPLES,
    ["daydream replay example:cnn_v100",
     "daydream replay example:cnn_v100 --critical-path --timeline simulated.json.gz"])


@click.command("replay", help=HELP)
@trace_argument
@rank_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the results as JSON (a stable contract) instead of tables.")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False, path_type=str),
              default=None, help="Write the simulated timeline as a Chrome trace (Perfetto, "
                                 "chrome://tracing); .gz compresses it. "
                   "With several ranks, one file per rank where the name holds {rank}, else one "
                   "file of them all.")
@click.option("--critical-path", is_flag=True,
              help="Show the tasks that bound each simulated iteration.")
@click.option("--no-cache", is_flag=True,
              help="Read the trace afresh; neither use nor write the cache.")
def replay_command(trace: str | None, as_json: bool, timeline_path: str | None, critical_path: bool,
                   no_cache: bool) -> None:
    """See HELP."""
    # Imported here, not with the module: `daydream --help` lists this
    # command without loading the simulator.
    from daydream.report.replay import render_replays, summarize_replays
    from daydream.report.timeline import write_timelines

    status = err()
    trace = chosen_trace(trace, status.print)
    replays = with_progress(lambda progress: replay_job(trace, cache=not no_cache,
                                                        progress=progress), status)
    summary = summarize_replays(trace, replays, with_critical_path=critical_path)
    if timeline_path:
        runs = [(r.trace, r.graph, r.timeline,
                 [(it.name, it.simulated_start_ns, it.simulated_end_ns) for it in r.iterations])
                for r in replays]
        for written in write_timelines(timeline_path, runs, "simulated timeline"):
            status.print(f"daydream: wrote {written}", highlight=False)
    emit(summary, as_json, render_replays)
