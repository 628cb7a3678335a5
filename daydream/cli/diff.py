"""`daydream diff A B`: compare two traces of the same model and
explain the change of the iteration time."""

from __future__ import annotations

import click

from daydream.api import diff_jobs
from daydream.cli._progress import emit, with_progress

TOP_LAYERS = 10  # layers listed by default (`--top`)


@click.command("diff")
@click.argument("a", type=click.Path(path_type=str))
@click.argument("b", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True,
              help="Print the comparison as JSON (a stable contract) instead of tables.")
@click.option("--top", default=TOP_LAYERS, show_default=True, type=click.IntRange(1, 1000),
              help="How many layers to list (largest absolute change first).")
@click.option("--no-cache", is_flag=True,
              help="Read the traces afresh; neither use nor write the cache.")
def diff_command(a: str, b: str, as_json: bool, top: int, no_cache: bool) -> None:
    """Compare trace B (after a change) with trace A (before), both of the same model.

    Shows the mean iteration time of both, and the work per phase, per kernel class and
    per layer. For each class and phase, "explains" is the simulated change of the
    iteration time when A's work of it is rescaled to B's: work that grew off the
    critical path explains little. A and B may be files, folders of rank files or tar
    archives holding the same ranks; ranks are compared one by one.

    \b
    Example (example:NAME reads a trace shipped with daydream):
      daydream diff example:cnn_v100 example:cnn_v100 --top 3
    """
    # Imported here, not with the module: `daydream --help` lists this
    # command without loading the simulator.
    from daydream.report.diff import render_comparisons, summarize_comparisons

    comparisons = with_progress(lambda progress: diff_jobs(a, b, cache=not no_cache,
                                                           progress=progress))
    emit(summarize_comparisons(a, b, comparisons, top), as_json, render_comparisons)
