"""The consoles the commands print on, and a progress bar fed by the library's `progress(stage, done, total)` callbacks.

Every console is made here with rich markup off: what daydream prints holds names from
traces and paths from users, and "[memory]" or "exp[red].json.gz" must print as written.
Styles are applied with `rich.text.Text`, never with markup in strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from daydream._memory import note_stage

Callback = Callable[[str, int, int], None]


def out() -> Console:
    """The console for results (stdout)."""
    return Console(markup=False)


def err() -> Console:
    """The console for status lines and progress (stderr)."""
    return Console(stderr=True, markup=False, soft_wrap=True)


@contextmanager
def progress_bar(console: Console) -> Iterator[Callback]:
    """Yields a callback that shows each stage by name (bytes where a stage counts them); nothing when stderr is not a terminal."""
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

    def update(stage: str, done: int, total: int) -> None:
        note_stage(stage)
        if stage in ("decompressing", "reading") and total:
            detail = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB"
            bar.update(task, description=stage, completed=done, total=total, detail=detail)
        else:
            bar.update(task, description=stage, completed=0, total=None, detail="")

    with bar:
        yield update
