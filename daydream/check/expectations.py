"""The expectations file of `daydream check`: its format, loaded once into frozen dataclasses.

    version: 1
    checks:
      cnn-amp:
        trace: ../traces/cnn_v100.json.gz     # relative to this file's folder
        whatif: [amp]                         # --opt specs, applied in order
        expect:
          speedup_at_least: 2.3
          iteration_time_vs_stored_at_most: +1%
          replay_error_at_most: 0.5%
        stored:                               # written by `daydream check --update`
          speedup: 2.409
          iteration_ns: 32675577

Every key is checked here, before anything runs; a problem is one `InputError` line that
names the file, the check and the key. The full format is in docs/check.md.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from daydream._yaml import load_yaml, read_yaml_file
from daydream.errors import InputError

SUPPORTED_VERSION = 1
CHECK_KEYS = ("trace", "command", "timeout", "whatif", "device", "expect", "stored")
#: How long a check's command may run unless its `timeout:` says otherwise.
DEFAULT_TIMEOUT_S = 30 * 60.0


@dataclass(frozen=True, slots=True)
class Values:
    """The numbers a check measures; also what `stored:` holds. None: not measured / not stored."""

    speedup: float | None = None               # simulated baseline / predicted iteration time
    iteration_ns: int | None = None            # predicted mean iteration time, ns
    peak_memory_bytes: int | None = None       # predicted peak allocated memory, bytes
    # worst |simulated - measured| / measured of the untouched trace, %
    replay_error_percent: float | None = None
    # the low end of the speed-up's interval (simulate/interval.py)
    speedup_low: float | None = None

    def get(self, quantity: str) -> float | None:
        value: float | None = getattr(self, quantity)
        return value

    def as_dict(self) -> dict[str, float]:
        """The values that are set, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


QUANTITIES = tuple(f.name for f in fields(Values))
INTEGER_QUANTITIES = ("iteration_ns", "peak_memory_bytes")


@dataclass(frozen=True, slots=True)
class BoundKind:
    """One kind of bound: which quantity it limits, from which side,
    and how its limit is written."""

    quantity: str        # a `Values` field
    at_most: bool        # True: value <= limit; False: value >= limit
    relative_to_stored: bool  # the limit is a percentage over the stored value of `quantity`
    parse: Callable[[Any], float]
    unit: str            # "x", "ns", "bytes", "%"
    example: str


@dataclass(frozen=True, slots=True)
class Bound:
    name: str            # a key of BOUNDS
    limit: float         # as parsed: a ratio, bytes, or a percentage (see BOUNDS[name].parse)
    written: str         # the limit as the file spells it, for messages

    @property
    def kind(self) -> BoundKind:
        return BOUNDS[self.name]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    trace: Path                 # absolute; what `command` writes when there is one
    command: str | None         # a shell command run in the file's folder before reading `trace`
    timeout_s: float            # the most seconds `command` may run
    whatif: tuple[str, ...]     # --opt specs in order; pipeline files made absolute
    device: str | None          # like `whatif --device`
    bounds: tuple[Bound, ...]
    stored: Values


@dataclass(frozen=True, slots=True)
class Expectations:
    path: Path                  # as given, for messages
    version: int
    checks: tuple[Check, ...]

    @property
    def folder(self) -> Path:
        return self.path.resolve().parent


# --------------------------------------------------------------------------- limits as written


def parse_ratio(value: Any) -> float:
    """A speed-up: a positive number, optionally written with an x (`2.3`, `2.3x`)."""
    text = (str(value).strip().removesuffix("x").removesuffix("×").strip() if isinstance(value, str)
            else value)
    number = _number(text)
    if number is None or number <= 0:
        raise ValueError(f"{value!r} is not a positive speed-up — write e.g. 1.5 or 1.5x")
    return number


def parse_percent(value: Any) -> float:
    """A percentage: `10`, `10%`, `+10%`, `-5%`, `0.5%` (a number without % is also in percent)."""
    text = value.strip().removesuffix("%").strip() if isinstance(value, str) else value
    number = _number(text)
    if number is None:
        raise ValueError(f"{value!r} is not a percentage — write e.g. 2% or 2")
    return number


def parse_error_percent(value: Any) -> float:
    number = parse_percent(value)
    if number < 0:
        raise ValueError(f"{value!r} is negative — an error bound is at least 0%")
    return number


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: Any) -> float:
    """Bytes: an integer, or a number with a unit (`12 GiB`, `512MiB`,
    `1.5 GB`; KiB = 1024 B, kB = 1000 B).

    >>> parse_size("1.5 KiB")
    1536.0
    """
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in SIZE_UNITS:
            raise ValueError(f"{value!r} is not a size — write bytes or a number with B, KiB, MiB, "
                             "GiB, TiB, kB, MB, GB, TB")
        number: float | None = float(match.group(1)) * SIZE_UNITS[unit]
    else:
        number = _number(value)
    if number is None or number <= 0:
        raise ValueError(f"{value!r} is not a size — write bytes or a number with B, KiB, MiB, "
                         "GiB, TiB, kB, MB, GB, TB")
    return float(round(number))


def _number(value: Any) -> float | None:
    """A finite number from YAML (which reads `1e9` as a string), or
    None. Booleans are not numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


BOUNDS: dict[str, BoundKind] = {
    "speedup_at_least": BoundKind("speedup", False, False, parse_ratio, "x", "1.5"),
    "speedup_at_most": BoundKind("speedup", True, False, parse_ratio, "x", "3"),
    "iteration_time_vs_stored_at_most": BoundKind("iteration_ns", True, True, parse_percent, "ns",
                                                  "+10%"),
    "peak_memory_at_most": BoundKind("peak_memory_bytes", True, False, parse_size, "bytes",
                                     "12 GiB"),
    "replay_error_at_most": BoundKind("replay_error_percent", True, False, parse_error_percent, "%",
                                      "2%"),
    "speedup_low_at_least": BoundKind("speedup_low", False, False, parse_ratio, "x", "1.2"),
}


# --------------------------------------------------------------------------- loading


def load_expectations(path: str | os.PathLike[str]) -> Expectations:
    """Read and check an expectations file. Every problem is an
    `InputError` naming the file (and check, and key)."""
    source = Path(path)
    return parse_expectations(read_yaml_file(source, "an expectations file (see docs/check.md)"),
                              source)


def parse_expectations(text: str, path: Path) -> Expectations:
    """`load_expectations` on the text of the file at `path` (which places relative paths)."""
    document = load_yaml(text, path)
    if not isinstance(document, dict):
        raise InputError(f"{path}: expected a mapping with 'version' and 'checks' (see "
                         "docs/check.md)")
    unknown = [key for key in document if key not in ("version", "checks")]
    if unknown:
        raise InputError(f"{path}: unknown key {unknown[0]!r} — known: version, checks")
    version = document.get("version")
    if version is None:
        raise InputError(f"{path}: no 'version' — add version: {SUPPORTED_VERSION} at the top")
    if version != SUPPORTED_VERSION or isinstance(version, bool):
        raise InputError(f"{path}: version {version!r} is not supported — this daydream reads "
                         f"version {SUPPORTED_VERSION}")
    checks = document.get("checks")
    if not isinstance(checks, dict) or not checks:
        raise InputError(f"{path}: 'checks' must be a mapping of check names to checks, with at "
                         "least one check")
    folder = path.resolve().parent
    return Expectations(path, SUPPORTED_VERSION, tuple(_check(path, folder, str(name), body)
                                                       for name, body in checks.items()))


def _check(path: Path, folder: Path, name: str, body: Any) -> Check:
    where = f"{path}: check '{name}'"
    if not isinstance(body, dict):
        raise InputError(f"{where}: expected a mapping with 'trace' (or 'command' and 'trace'), "
                         "'whatif' and 'expect'")
    unknown = [key for key in body if key not in CHECK_KEYS]
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} — known: {', '.join(CHECK_KEYS)}")
    command = _command(where, body.get("command"))
    trace = _trace(where, folder, body.get("trace"), command)
    bounds = _bounds(where, body.get("expect"))
    whatif = _whatif(where, folder, body.get("whatif"))
    if not whatif and any(b.kind.quantity in ("speedup", "speedup_low") for b in bounds):
        raise InputError(f"{where}: whatif: a speed-up bound needs what-ifs to run — add e.g. "
                         "whatif: [amp]")
    device = body.get("device")
    if device is not None:
        if not isinstance(device, str) or not device.strip():
            raise InputError(f"{where}: device: expected a device name such as A100")
        _wrapped(where, "device", lambda: _known_device(device))
    timeout_s = _timeout(where, body.get("timeout"))
    return Check(name, trace, command, timeout_s, whatif, device, bounds,
                 _stored(where, body.get("stored")))


def _command(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: command: expected a shell command, e.g. \"daydream trace "
                         "train.py -o run.json.gz\"")
    return value.strip()


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h)?\s*$")


def _timeout(where: str, value: Any) -> float:
    """timeout: 90 (seconds), 90s, 20m or 2h."""
    if value is None:
        return DEFAULT_TIMEOUT_S
    found = _DURATION.match(str(value)) if not isinstance(value, bool) else None
    seconds = float(found.group(1)) * {None: 1, "s": 1, "m": 60, "min": 60,
                                       "h": 3600}[found.group(2)] if found else math.nan
    if not math.isfinite(seconds) or seconds <= 0 or seconds > 7 * 86400:
        raise InputError(f"{where}: timeout: {value!r} is not a duration — write seconds or e.g. "
                         "90s, 20m, 2h (at most a week)")
    return seconds


def _trace(where: str, folder: Path, value: Any, command: str | None) -> Path:
    if value is None:
        hint = ("the path the command writes" if command
                else "a trace file, folder or archive, or a command that writes one")
        raise InputError(f"{where}: no 'trace' — add trace: PATH ({hint})")
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: trace: expected a path")
    from daydream.trace.sources import packaged_example

    try:
        shipped = packaged_example(value.strip())
    except InputError as exc:
        raise InputError(f"{where}: trace: {exc}") from None
    trace = shipped or folder / os.path.expanduser(value.strip())
    # A trace that a command will write need not exist yet; any other must.
    if command is None and not trace.exists():
        raise InputError(f"{where}: trace: {value} not found (looked in {folder}) — fix the path, "
                         "or add a command that writes it")
    return trace


def _whatif(where: str, folder: Path, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if (not isinstance(value, list)
        or not all(isinstance(spec, str) and spec.strip() for spec in value)):
        raise InputError(f"{where}: whatif: expected a list of --opt specs, e.g. [amp, "
                         "'batch-size:factor=2']")
    return tuple(_spec(where, folder, spec.strip()) for spec in value)


def _spec(where: str, folder: Path, spec: str) -> str:
    """Check one --opt spec now; pipeline files are made absolute (they
    are relative to the expectations file)."""
    from daydream.transforms import is_pipeline_file, load_pipeline, parse_spec

    if is_pipeline_file(spec):
        resolved = str(folder / os.path.expanduser(spec))
        _wrapped(where, "whatif", lambda: load_pipeline(resolved))
        return resolved
    _wrapped(where, "whatif", lambda: parse_spec(spec))
    return spec


def _bounds(where: str, value: Any) -> tuple[Bound, ...]:
    known = ", ".join(BOUNDS)
    if not isinstance(value, dict) or not value:
        raise InputError(f"{where}: no bounds — add expect: with at least one of {known}")
    bounds = []
    for name, limit in value.items():
        if name not in BOUNDS:
            raise InputError(f"{where}: unknown bound {str(name)!r} — known: {known}")
        try:
            parsed = BOUNDS[name].parse(limit)
        except ValueError as exc:
            raise InputError(f"{where}: {name}: {exc}") from None
        bounds.append(Bound(name, parsed, str(limit)))
    return tuple(bounds)


def _stored(where: str, value: Any) -> Values:
    if value is None:
        return Values()
    if not isinstance(value, dict):
        raise InputError(f"{where}: stored: expected a mapping of {', '.join(QUANTITIES)} — or "
                         "leave it to daydream check --update")
    numbers: dict[str, Any] = {}
    for key, number in value.items():
        if key not in QUANTITIES:
            raise InputError(f"{where}: stored: unknown key {str(key)!r} — known: "
                             f"{', '.join(QUANTITIES)}")
        parsed = _number(number)
        if parsed is None or parsed < 0:
            raise InputError(f"{where}: stored: {key}: {number!r} is not a number ≥ 0 — rerun "
                             "daydream check --update")
        numbers[key] = int(parsed) if key in INTEGER_QUANTITIES else parsed
    return Values(**numbers)


def _known_device(name: str) -> None:
    from daydream.devices import device

    device(name)


def _wrapped(where: str, key: str, action: Callable[[], object]) -> None:
    """Run a check from another stage, putting the file and check in front of its message."""
    try:
        action()
    except InputError as exc:
        raise InputError(f"{where}: {key}: {exc}") from None
