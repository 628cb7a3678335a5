"""Stage 8, cli: the `daydream` command. The one place that turns errors into exit codes.

`main(argv) -> int` runs one command; `run()` is the console-script entry point.
Exit codes: 0 success, 1 failure of daydream itself (or, for `check`, a broken bound),
2 bad input or usage (an unreadable or unwritable path included).

One module per command: `daydream/cli/NAME.py` defines `NAME_command`, and that is the
whole registration. Modules are imported only when their command runs (or for --help),
so `daydream inspect` does not pay for the simulator's imports.
"""

from __future__ import annotations

import difflib
import errno
import importlib
import os
import pkgutil
import sys
import warnings
from pathlib import Path
from typing import Any

import click

from daydream import __version__
from daydream.errors import DaydreamError


class _CommandModules(click.Group):
    """The commands are the public modules of this package (see the module docstring)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.list_commands(ctx):
            return None
        module = importlib.import_module(f"{__name__}.{cmd_name}")
        command: click.Command = getattr(module, f"{cmd_name.replace('-', '_')}_command")
        return command

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            raise click.UsageError("no command "
                                   f"{name!r}{did_you_mean(name, self.list_commands(ctx))}", ctx)
        return super().resolve_command(ctx, args)


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """' — did you mean X?' when a choice is close to `word`, else ''."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" — did you mean {close[0]!r}?" if close else ""


@click.group(cls=_CommandModules,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="daydream")
@click.option("-q", "--quiet", is_flag=True,
              help="Results only: no status lines or progress on stderr (errors still).")
@click.option("-v", "--verbose", is_flag=True,
              help="Also say each stage as it starts, with the time so far, wherever stderr goes "
                   "(a CI log).")
def cli(quiet: bool, verbose: bool) -> None:
    """daydream: predict how a training step would change, from one trace of it."""
    if quiet and verbose:
        raise click.UsageError("-q and -v say opposite things: give one")
    from daydream.cli._progress import set_verbosity

    set_verbosity(-1 if quiet else 1 if verbose else 0)


def _tolerate_narrow_encodings() -> None:
    """Where stdout or stderr cannot encode all of Unicode
    (PYTHONIOENCODING=ascii, a latin-1 terminal), write what it cannot as
    "?" rather than fail with an internal error half-way through a table."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        reconfigure = getattr(stream, "reconfigure", None)
        if encoding not in ("utf8", "utf16", "utf32") and reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (ValueError, OSError, TypeError):
                pass


def _terminate_cleanly() -> Any:
    """SIGTERM (a CI runner's timeout, `kill`) raises SystemExit(143) instead of ending the process
    at once, so that a half-written output's temporary file is removed on the way out; returns the
    handler it replaced (None where it
    cannot be set: not the main thread)."""
    import signal

    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    try:
        return signal.signal(signal.SIGTERM, terminate)
    except (ValueError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    """Run the daydream CLI with `argv` (default: sys.argv[1:]) and return the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args:  # bare `daydream`: what it does and its commands, as --help shows them
        args = ["--help"]
    _tolerate_narrow_encodings()
    previous = _terminate_cleanly()
    watching = None
    try:
        if "trace" not in args[:3]:
            # `trace` runs the user's script in this process: its memory is the script's own
            from daydream import _memory

            _memory.note_stage(f"running daydream {args[0][:40]}")
            try:
                watching = _memory.watch()
            except DaydreamError as exc:  # DAYDREAM_MAX_MEMORY is not a size
                return _fail(str(exc), exc.exit_code)
        return _main(args)
    finally:
        _forget_settings()
        if watching is not None:
            watching.set()
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _forget_settings() -> None:
    """A command's --workers and --ray end with it (a later call of the
    API in this process reads the defaults)."""
    ranks = sys.modules.get("daydream.ranks")
    if ranks is not None:
        ranks.SETTINGS.workers = None
        ranks.SETTINGS.ray = None


def _main(args: list[str]) -> int:
    try:
        returned = _run(args)
    except (Exception, KeyboardInterrupt) as exc:
        return _failure(exc)
    # Without standalone mode, click hands back the code of a command that exited early.
    return returned if isinstance(returned, int) else 0


def _run(args: list[str]) -> Any:
    """The command, its config file's defaults applied; what reading
    decided the person should know said after it."""
    with warnings.catch_warnings():
        if not os.environ.get("DAYDREAM_DEBUG"):
            # numpy's overflow/invalid-value warnings raised inside daydream are not for the user to
            # read (the script's own warnings under `daydream trace` still show).
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"daydream\.")
        from daydream._notices import NOTICES
        from daydream.cli._config import default_map

        command = next((arg for arg in args if not arg.startswith("-")), "")
        defaults = default_map(cli, command, Path.cwd()) if command else None
        NOTICES.clear()
        returned = cli.main(args=args, prog_name="daydream", standalone_mode=False,
                            default_map=defaults)
        _say(NOTICES)
        return returned


def _failure(exc: BaseException) -> int:
    """The one line and exit code for what ended a command: bad input 2, a
    failed machine or internal error 1, an interruption 130. An internal
    error raises again under DAYDREAM_DEBUG=1, for its traceback."""
    if isinstance(exc, DaydreamError):
        return _fail(str(exc), exc.exit_code)
    if isinstance(exc, click.exceptions.Exit):
        return int(exc.exit_code)
    if isinstance(exc, click.UsageError):
        command = exc.ctx.command_path if exc.ctx else "daydream"
        return _fail(f"{exc.format_message()} — see '{command} --help'", 2)
    if isinstance(exc, click.Abort | KeyboardInterrupt):
        return _fail("aborted" if isinstance(exc, click.Abort) else "interrupted", 130)
    if isinstance(exc, MemoryError):
        return _fail("out of memory — try a smaller trace or a machine with more RAM", 1)
    if isinstance(exc, OSError):
        return _os_failure(exc)
    if os.environ.get("DAYDREAM_DEBUG"):  # an internal bug: one line unless asked for the traceback
        raise exc
    return (_fail(f"internal error: {type(exc).__name__}: {exc} — rerun with DAYDREAM_DEBUG=1 and "
                  "report it", 1))


def _os_failure(exc: OSError) -> int:
    where = f"{exc.filename}: " if exc.filename else ""
    if exc.errno in _MACHINE_ERRNOS:  # the machine failed (disk full, I/O error), not the input
        return _fail(f"{where}{exc.strerror or exc}", 1)
    # a path the user gave that cannot be read or written: bad input
    return _fail(f"{where}{exc.strerror or exc} — check the path and its permissions", 2)


def _say(notices: list[str]) -> None:
    """What reading decided that the person should know, once each, on stderr (silent under -q)."""
    from daydream.cli._progress import err

    for notice in dict.fromkeys(notices):
        err().print(f"daydream: {notice}", highlight=False)
    notices.clear()


_MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM}


def _fail(message: str, code: int) -> int:
    one_line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    click.echo(f"daydream: error: {one_line}", err=True)
    return code


def run() -> None:
    sys.exit(main())
