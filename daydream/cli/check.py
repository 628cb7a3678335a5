"""`daydream check EXPECTATIONS.yaml`: hold predicted speed-ups, memory
and replay error to bounds, for CI.

Exit codes: 0 every bound holds (or --update), 1 a bound is broken, 2 bad input.
"""

from __future__ import annotations

from collections.abc import Callable

import click
from rich.console import Console

from daydream.cli._progress import emit, err
from daydream.errors import InputError
from daydream.report.check import render_check, write_junit


@click.command("check")
@click.argument("expectations_path", metavar="EXPECTATIONS.yaml",
                type=click.Path(dir_okay=False, path_type=str))
@click.option("--update", is_flag=True,
              help="Write this run's values into the file's stored: mappings (after an intended "
                   "change) and exit 0.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write JUnit XML: one test case per check and bound, broken bounds as "
                   "failures.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the results as JSON (a stable contract) instead of a table.")
def check_command(expectations_path: str, update: bool, junit_path: str | None,
                  as_json: bool) -> int:
    """Run the checks of EXPECTATIONS.yaml and hold their results to its bounds.

    Each check reads a trace (or runs a command that writes one), predicts it under its
    what-ifs and compares the speed-up, the iteration time against the stored one, the
    peak memory and the replay error with its bounds. docs/check.md has the file format.

    Exit codes: 0 every bound holds (or --update), 1 a bound is broken, 2 bad input.

    \b
    Example (from daydream's repository folder):
      daydream check examples/ci/expectations.yaml --junit daydream-check.xml
    """
    # Imported here, not with the module: `daydream --help` lists this
    # command without loading the simulator.
    from daydream.check import (
        load_expectations,
        measure_checks,
        missing_stored,
        summarize_check,
        update_stored,
    )

    expectations = load_expectations(expectations_path)
    if not update:
        problems = missing_stored(expectations)
        if problems:
            raise InputError(problems[0])
    status = err()
    measurements = measure_checks(expectations, notify=_notifier(status))
    if update:
        expectations = update_stored(expectations, measurements)
    summary = summarize_check(expectations, measurements, updated=update)
    if junit_path:
        write_junit(junit_path, summary)
    emit(summary, as_json, render_check)
    return 0 if update or summary["passed"] else 1


def _notifier(console: Console) -> Callable[[str], None] | None:
    """Progress lines on a terminal only: in CI logs and pipes, stderr carries errors alone."""
    if not console.is_terminal:
        return None
    return lambda line: console.print(line, style="dim", highlight=False)
