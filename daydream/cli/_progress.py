"""The consoles the commands print on, and a progress bar fed by the
library's `progress(stage, done, total)` callbacks.

Every console is made here with rich markup off: what daydream prints holds names from
traces and paths from users, and "[memory]" or "exp[red].json.gz" must print as written.
Styles are applied with `rich.text.Text`, never with markup in strings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from daydream._memory import note_stage

Callback = Callable[[str, int, int], None]
T = TypeVar("T")

#: How much daydream says on stderr besides errors: -1 nothing (-q), 0 status lines and a progress
#: bar on a terminal, 1 also each stage as a line with the time so far, wherever stderr goes (-v).
#: Set once per command (cli.cli).
VERBOSITY = 0


def set_verbosity(level: int) -> None:
    global VERBOSITY
    VERBOSITY = level


def out() -> Console:
    """The console for results (stdout)."""
    return Console(markup=False)


def err() -> Console:
    """The console for status lines and progress (stderr); silent under -q."""
    return Console(stderr=True, markup=False, soft_wrap=True, quiet=VERBOSITY < 0)


@contextmanager
def progress_bar(console: Console) -> Iterator[Callback]:
    """Yields a callback that shows each stage by name (bytes where a stage counts them); nothing
    when stderr is not a terminal."""
    bar = Progress(
        TextColumn("{task.description:<18}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    task = bar.add_task("reading", total=None, detail="")
    began, said = time.monotonic(), [""]

    def update(stage: str, done: int, total: int) -> None:
        note_stage(stage)
        if VERBOSITY > 0 and stage != said[0]:
            said[0] = stage
            console.print(f"daydream: {stage} ({time.monotonic() - began:.1f} s)", highlight=False)
        if stage in ("decompressing", "reading") and total:
            detail = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB"
            bar.update(task, description=stage, completed=done, total=total, detail=detail)
        else:
            bar.update(task, description=stage, completed=0, total=None, detail="")

    with bar:
        yield update


def with_progress(call: Callable[[Callback], T], console: Console | None = None) -> T:
    """`call(progress)` under a progress bar on `console` (stderr by
    default): an API call that reads or simulates."""
    with progress_bar(console or err()) as progress:
        return call(progress)


def emit(summary: Any, as_json: bool, render: Callable[[Any, Console], None]) -> None:
    """A command's result: `summary` as indented JSON on stdout with
    --json, else rendered for people."""
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        render(summary, out())
