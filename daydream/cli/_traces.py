"""Which trace a command reads: the one named, else the newest that `daydream trace` wrote here.

`daydream trace train.py && daydream whatif --opt amp` works because TRACE defaults to the
newest trace in ./daydream-traces/: a `*.json.gz` file, or a `SCRIPT-ranks/` folder of a
multi-rank run (as new as its newest rank file).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from daydream.errors import InputError

#: The examples' header of a command whose examples read the traces shipped with daydream.
SHIPPED_EXAMPLES = ("Examples (example:NAME reads a trace shipped with daydream: example:cnn_v100, "
                    "example:ddp_a100_rank0):")


def with_examples(text: str, header: str, examples: list[str]) -> str:
    """A command's help: `text` (a docstring), then `header` and one example per line, each shown
    whole however long (click's \\b), as a newcomer pastes it."""
    shown = "\n".join(f"  {example}" for example in examples)
    return f"{inspect.cleandoc(text)}\n\n\b\n{header}\n{shown}"

DEFAULT_FOLDER = Path("daydream-traces")

F = TypeVar("F", bound=Callable[..., Any])


def trace_argument(function: F) -> F:
    """The optional TRACE argument every command that reads a trace takes."""
    return click.argument("trace", required=False, type=click.Path(path_type=str))(function)


def chosen_trace(trace: str | None, say: Callable[[str], None] | None = None) -> str:
    """`trace`, or the newest one in ./daydream-traces/ (said through `say`)."""
    if trace:
        return trace
    newest = newest_trace()
    if say is not None:
        say(f"daydream: reading {newest} (the newest trace in ./{DEFAULT_FOLDER}/)")
    return str(newest)


def newest_trace(folder: Path = DEFAULT_FOLDER) -> Path:
    candidates: list[tuple[float, Path]] = []
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.is_file() and entry.name.endswith(".json.gz"):
                candidates.append((entry.stat().st_mtime, entry))
            elif entry.is_dir() and entry.name.endswith("-ranks"):
                times = [f.stat().st_mtime for f in entry.glob("*.json.gz") if f.is_file()]
                if times:
                    candidates.append((max(times), entry))
    if not candidates:
        raise InputError(f"no TRACE given and no trace in ./{folder}/ — record one with daydream "
                         "trace train.py, or name a trace file")
    return max(candidates)[1]


def _set_workers(_context: click.Context, _parameter: click.Parameter, value: int | None) -> None:
    from daydream.ranks import SETTINGS

    # every invocation sets it, so one command's choice does not outlive it
    SETTINGS.workers = value


def _set_ray(_context: click.Context, _parameter: click.Parameter, value: str | None) -> None:
    from daydream.ranks import SETTINGS

    SETTINGS.ray = value


def _set_run(_context: click.Context, _parameter: click.Parameter, value: int | None) -> None:
    from daydream.trace import RUN

    RUN.run = value


def rank_options(function: F) -> F:
    """--workers and --ray: how the ranks of a multi-rank job are read (daydream.ranks); --run:
    which of several captures of one process."""
    function = click.option("--run", type=click.IntRange(min=0), default=None, metavar="N",
                            expose_value=False, callback=_set_run,
                            help="Where the files are several captures of one process (not ranks): "
                                 "read run N, oldest first from 0 (default: the newest).")(function)
    function = click.option("--ray", default=None, metavar="ADDRESS", expose_value=False,
                            callback=_set_ray,
                            help="Read and build each rank as a Ray task: a cluster address, "
                                 "'auto', or 'local' (also DAYDREAM_RAY_ADDRESS; needs Ray: pip "
                                 "install 'ray>=2.40').")(function)
    function = click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
                            expose_value=False, callback=_set_workers,
                            help="Processes that read a multi-rank job's ranks (default: one per "
                                 "CPU for a large job; 1: this process only; also "
                                 "DAYDREAM_WORKERS).")(function)
    return function
