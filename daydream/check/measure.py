"""The numbers behind the bounds: run each check's trace command, then predict, replay and size it.

Work is shared within one run: a command given by several checks runs once, and the
untouched trace is replayed once however many checks read it. Only what a check's bounds
need is measured, except the prediction (speed-up and iteration time), which is always
taken: it is what a diff of the stored values should show moving.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

from daydream.api import predict_job, predict_memory_for, replay_job
from daydream.check.expectations import Check, Expectations, Values
from daydream.errors import InputError
from daydream.simulate.whatif import Prediction

Notify = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Measurement:
    check: Check
    values: Values
    # wall time spent on this check (its command, if it ran the command first, included)
    seconds: float


@dataclass(slots=True)
class _Run:
    expectations: Expectations
    notify: Notify | None
    commands: dict[tuple[str, Path], None] = field(default_factory=dict)   # commands that have run
    replay_errors: dict[Path, float] = field(default_factory=dict)


def measure_checks(expectations: Expectations, notify: Notify | None = None) -> list[Measurement]:
    """Measure every check of `expectations`, in file order. `notify` hears one line per step."""
    run = _Run(expectations, notify)
    measurements = []
    for check in expectations.checks:
        started = time.perf_counter()
        values = _measure(run, check)
        measurements.append(Measurement(check, values, time.perf_counter() - started))
    return measurements


def _measure(run: _Run, check: Check) -> Values:
    where = f"{run.expectations.path}: check '{check.name}'"
    if check.command is not None:
        _run_command(run, check, check.command, where)
    quantities = {bound.kind.quantity for bound in check.bounds}
    if run.notify:
        run.notify(f"check '{check.name}': predicting "
                   f"{' + '.join(check.whatif) or 'the untouched trace'}")
    try:
        predictions = predict_job(check.trace, list(check.whatif), check.device)
        values = Values(speedup=_speedup(predictions),
                        iteration_ns=max(p.predicted_ns for p in predictions))
        if "peak_memory_bytes" in quantities:
            values = _with_memory(values, predict_memory_for([p.trace for p in predictions],
                                                             list(check.whatif), check.device),
                                  check)
        if "replay_error_percent" in quantities:
            values = _with_replay_error(run, values, check)
        if "speedup_low" in quantities:
            values = replace(values, speedup_low=_speedup_low(predictions))
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return values


def _speedup(predictions: list[Prediction]) -> float:
    """Simulated baseline / predicted iteration time; with several
    ranks the slowest sets each, as in `daydream whatif`."""
    baseline = max(p.simulated_ns for p in predictions)
    predicted = max(p.predicted_ns for p in predictions)
    return baseline / predicted if predicted else 1.0


def _speedup_low(predictions: list[Prediction]) -> float:
    """The low end of the speed-up's interval: the simulated baseline
    over the highest end of the ranks' intervals."""
    baseline = max(p.simulated_ns for p in predictions)
    high = max(p.interval.high_ns if p.interval else p.predicted_ns for p in predictions)
    return baseline / high if high else 1.0


def _run_command(run: _Run, check: Check, command: str, where: str) -> None:
    """Run the check's command in the expectations file's folder, once
    per run; it must (re)write the trace."""
    key = (command, check.trace)
    if key in run.commands:
        return
    if run.notify:
        run.notify(f"check '{check.name}': running {command}")
    before = _stamp(check.trace)
    result = _shell(command, run.expectations.folder, check.timeout_s)
    if result is None:
        raise InputError(f"{where}: command {command!r} did not finish within {check.timeout_s:g} "
                         "s and was stopped — raise the check's timeout: (e.g. timeout: 2h) if it "
                         "needs longer")
    if result.returncode != 0:
        raise InputError(f"{where}: command {command!r} exited with code "
                         f"{result.returncode}{_last_words(result)} — run it by hand in "
                         f"{run.expectations.folder} to see why")
    after = _stamp(check.trace)
    if after is None or after == before:
        raise InputError(f"{where}: command {command!r} exited with code 0 but did not write "
                         f"{check.trace} — make the command write the trace that 'trace' names")
    run.commands[key] = None
    run.replay_errors.pop(check.trace, None)


def _shell(command: str, folder: Path, timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    """Run `command` through /bin/sh in `folder`; None if it ran past
    `timeout_s` (it and its children are killed)."""
    process = subprocess.Popen(command, shell=True, cwd=folder, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               errors="replace", start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return None
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _last_words(result: subprocess.CompletedProcess[str]) -> str:
    """The command's last line of output: usually the error that stopped it."""
    for stream in (result.stderr, result.stdout):
        lines = [line.strip() for line in (stream or "").splitlines() if line.strip()]
        if lines:
            return f" ({lines[-1][:200]})"
    return ""


def _with_memory(values: Values, entries: list[dict[str, object]], check: Check) -> Values:
    """The largest predicted peak over the GPUs of every rank, or over
    the CPU when the trace has no GPU memory."""
    if not entries:
        raise InputError(f"{check.trace}: peak_memory_at_most: the trace has no [memory] events "
                         "— record it with profile_memory=True (daydream trace does)")
    gpus = [e for e in entries if str(e["device"]).startswith("cuda")]
    peaks = [cast(int, e["predicted_peak_bytes"]) for e in gpus or entries]
    return replace(values, peak_memory_bytes=max(peaks))


def _with_replay_error(run: _Run, values: Values, check: Check) -> Values:
    """The worst iteration's |simulated - measured| / measured of the
    untouched trace, over every rank, in percent."""
    if check.trace not in run.replay_errors:
        if run.notify:
            run.notify(f"check '{check.name}': replaying the untouched trace")
        replays = replay_job(check.trace)
        errors = [it.error for replay in replays for it in replay.iterations]
        run.replay_errors[check.trace] = max(errors) * 100 if errors else 0.0
    return replace(values, replay_error_percent=run.replay_errors[check.trace])
