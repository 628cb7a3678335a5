"""A rich progress bar fed by the library's `progress(stage, done, total)` callbacks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

Callback = Callable[[str, int, int], None]


@contextmanager
def progress_bar(console: Console) -> Iterator[Callback]:
    """Yields a callback; draws nothing when stderr is not a terminal."""
    bar = Progress(
        TextColumn("{task.description:<16}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    task = bar.add_task("reading", total=None)

    def update(stage: str, done: int, total: int) -> None:
        if stage in ("decompressing", "reading"):
            bar.update(task, description=stage, completed=done, total=total or None)
        else:
            bar.update(task, description=stage, completed=0, total=None)

    with bar:
        yield update
