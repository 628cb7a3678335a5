"""Running a user's training script unmodified, under a collector.

The script runs in this process, as `python SCRIPT ARGS` would run it: as
`__main__`, with `sys.argv` set and its folder first on `sys.path`. Collection
ends after the wanted iterations; by default the script is then stopped (an
exception the script does not see unwinds it), or it is left to finish.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class CaptureComplete(BaseException):
    """Raised from the step hook to stop the script once the wanted iterations are recorded."""


@dataclass(slots=True)
class ScriptOutcome:
    """How the script ended: normally, stopped after capture, or with its own exception."""

    stopped_after_capture: bool = False
    error: BaseException | None = None
    formatted_error: str = ""
    exit_code: int | None = None  # the script called sys.exit(code)
    steps: int = 0  # iteration boundaries seen (optimizer steps, or returns of --step-fn)


@contextmanager
def script_environment(script: str, args: list[str], module: bool = False) -> Iterator[None]:
    """sys.argv and sys.path as `python script args` (or `python -m
    module args`) would have them; restored afterwards."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [module_file(script) if module else script, *args]
    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.abspath(script)))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def module_file(module: str) -> str:
    """The file `python -m module` would run ('' if there is none),
    found from the current folder."""
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            # a package: its __main__
            spec = importlib.util.find_spec(f"{module}.__main__")
    except (ImportError, ValueError):
        spec = None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    return (str(spec.origin) if spec is not None and spec.origin and os.path.isfile(spec.origin)
            else "")


def run_script(script: str, args: list[str], on_start: Callable[[], None] | None = None,
               module: bool = False) -> ScriptOutcome:
    """Run `script` (a module name when `module`) as __main__; never
    raises what the script raises, reports it instead."""
    outcome = ScriptOutcome()
    with script_environment(script, args, module):
        if on_start is not None:
            on_start()
        try:
            if module:
                runpy.run_module(script, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(script, run_name="__main__")
        except CaptureComplete:
            outcome.stopped_after_capture = True
        except SystemExit as exc:
            code = exc.code
            outcome.exit_code = code if isinstance(code, int) else (0 if code is None else 1)
            if outcome.exit_code:
                outcome.error = exc
                outcome.formatted_error = f"the script exited with code {outcome.exit_code}"
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the script's own error: report it as the script's
            outcome.error = exc
            outcome.formatted_error = _script_traceback(exc, script)
    return outcome


def _script_traceback(exc: BaseException, script: str) -> str:
    """The traceback from the script's first frame on (daydream's own frames left out)."""
    frames = list(traceback.extract_tb(exc.__traceback__))
    script_path = (os.path.realpath(module_file(script) or script) if not os.path.isfile(script)
                   else os.path.realpath(script))
    for index, frame in enumerate(frames):
        if os.path.realpath(frame.filename) == script_path:
            frames = frames[index:]
            break
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)
