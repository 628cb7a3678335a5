"""`daydream report TRACE [--opt SPEC ...] -o report.html`: one self-contained HTML page."""

from __future__ import annotations

import time
from typing import Any

import click

from daydream.api import predict_job, replay_job
from daydream.cli._complete import complete_device, complete_opt
from daydream.cli._progress import err, progress_bar
from daydream.cli._traces import (
    SHIPPED_EXAMPLES,
    chosen_trace,
    rank_options,
    trace_argument,
    with_examples,
)
from daydream.errors import InputError
from daydream.report.console import format_bytes

#: The command's help (`with_examples`).
HELP = with_examples(
    """Write one HTML page about TRACE: the measured and predicted timelines of one iteration,
    the time per phase and layer, the what-if table (each --opt alone, then all of them
    together) and the memory timeline with the breakdown at its peak.
    TRACE defaults to the newest trace in ./daydream-traces/.""",
    SHIPPED_EXAMPLES,
    ["daydream report example:cnn_v100 --opt amp -o report.html",
     "daydream report example:cnn_v100 --opt amp --opt fused-optimizer -o report.html"])


@click.command("report", help=HELP)
@trace_argument
@rank_options
@click.option("-o", "--output", "output_path", required=True,
              type=click.Path(dir_okay=False, path_type=str),
              help="The HTML file to write (self-contained: open it anywhere, offline).")
@click.option("--opt", "specs", multiple=True, metavar="NAME[:k=v,...]|FILE.yaml",
              shell_complete=complete_opt, help="An optimization to predict (repeat to combine, in "
                                                "order; see daydream whatif --list). "
                   "Without it the predicted timeline is the simulated replay.")
@click.option("--device", "device_name", default=None, shell_complete=complete_device,
              help="The GPU the trace ran on, if the trace does not say (device table name).")
@click.option("--iteration", "iteration", default=None, metavar="N|NAME",
              help="The iteration to draw: its position (0 for the first) or its name. "
                   "Default: the whole iteration of median measured time (the first is often a "
                   "warm-up).")
@click.option("--rank", "rank", type=int, default=None,
              help="With several ranks, the rank to draw and break down (default: the first).")
@click.option("--no-cache", is_flag=True,
              help="Read the trace afresh; neither use nor write the cache.")
def report_command(trace: str | None, output_path: str, specs: tuple[str, ...],
                   device_name: str | None, iteration: str | None, rank: int | None,
                   no_cache: bool) -> None:
    """See HELP."""
    # Imported here, not with the module: `daydream --help` lists this
    # command without loading the simulator.
    from daydream.report.html import build_report, choose_iteration, write_report

    began = time.perf_counter()
    status = err()
    trace = chosen_trace(trace, status.print)
    with progress_bar(status) as progress:
        replays = replay_job(trace, cache=not no_cache, progress=progress)
        whatifs = [(row,
                    predict_job(trace, row, device_name, cache=not no_cache, progress=progress))
                   for row in _rows(list(specs))]
    rank_index = _rank_index([r.trace.meta.rank for r in replays], rank)
    chosen = choose_iteration(replays[rank_index], iteration)
    memory = [_predicted_memory(predictions[rank_index].trace, row, device_name)
              for row, predictions in whatifs]
    document = build_report(trace, replays, whatifs, rank_index, chosen, memory)
    size = write_report(output_path, document)
    seconds = time.perf_counter() - began
    status.print(f"daydream: wrote {output_path} ({format_bytes(size)}, "
                 f"{document['iteration']['name']}) in {seconds:.1f} s",
                 highlight=False)


def _predicted_memory(trace: Any, specs: list[str],
                      device_name: str | None) -> list[dict[str, Any]]:
    """The peak per device under `specs`, as whatif --memory predicts it; none where the trace
    records no allocations or the memory model cannot take the specs (whatif --memory says why)."""
    from daydream.api import predict_memory_for
    from daydream.errors import InputError

    try:
        return predict_memory_for([trace], specs, device_name)
    except (InputError, ValueError):
        return []


def _rows(specs: list[str]) -> list[list[str]]:
    """The what-if table's rows: each optimization alone, then (with
    several) all of them in order."""
    rows = [[spec] for spec in specs]
    return rows + [specs] if len(specs) > 1 else rows


def _rank_index(ranks: list[int | None], wanted: int | None) -> int:
    if wanted is None:
        return 0
    if wanted not in ranks:
        raise InputError(f"--rank {wanted}: the trace has ranks {', '.join(str(r) for r in ranks)} "
                         "— pick one of them")
    return ranks.index(wanted)

