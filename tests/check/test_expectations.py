"""The expectations file: limits as written, the loaded dataclasses, and one-line errors that name file, check and key."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from daydream.check import BOUNDS, Values, load_expectations
from daydream.check.expectations import parse_percent, parse_ratio, parse_size
from daydream.errors import InputError
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"


def _write(folder: Path, text: str, name: str = "expect.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("written, expected", [
    (1024, 1024), ("1024", 1024), ("1e9", 10**9), ("12 GiB", 12 * 2**30), ("512MiB", 512 * 2**20),
    ("1.5 GB", 1_500_000_000), ("2 kB", 2000), ("1.5 KiB", 1536), ("3 tib", 3 * 2**40), ("100 B", 100),
])
def test_sizes(written: object, expected: int) -> None:
    assert parse_size(written) == expected


@pytest.mark.parametrize("written", ["12 Gb?", "GiB", "twelve", 0, -5, True, "1 PiB", None])
def test_bad_sizes(written: object) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(written)


@pytest.mark.parametrize("written, expected", [("+10%", 10), ("10%", 10), (10, 10), ("-5%", -5), ("0.5%", 0.5), (2.5, 2.5)])
def test_percentages(written: object, expected: float) -> None:
    assert parse_percent(written) == expected


@pytest.mark.parametrize("written, expected", [(2.3, 2.3), ("2.3x", 2.3), ("1.5 x", 1.5), (3, 3.0)])
def test_ratios(written: object, expected: float) -> None:
    assert parse_ratio(written) == expected


@pytest.mark.parametrize("written", [0, -1, "fast", True])
def test_bad_ratios(written: object) -> None:
    with pytest.raises(ValueError):
        parse_ratio(written)


def test_loads_into_frozen_dataclasses_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "run.json.gz").write_bytes(EXAMPLE.read_bytes())
    (tmp_path / "gemm.yaml").write_text(
        "version: 1\nname: g\nsteps:\n  - select: {kind: kernel, name: gemm}\n    scale: {factor: 0.5}\n")
    path = _write(tmp_path, """\
        version: 1
        checks:
          first:
            trace: traces/run.json.gz
            whatif: [amp, 'batch-size:factor=2', gemm.yaml]
            device: V100
            expect:
              speedup_at_least: 1.5x
              peak_memory_at_most: 12 GiB
              iteration_time_vs_stored_at_most: +10%
              replay_error_at_most: 2%
            stored: {speedup: 2.5, iteration_ns: 1000, peak_memory_bytes: 2048}
          second:
            command: echo hi > out.json
            trace: out.json
            expect: {replay_error_at_most: 1}
        """)
    expectations = load_expectations(path)
    assert expectations.version == 1 and expectations.path == path
    first, second = expectations.checks
    assert first.name == "first" and first.trace == tmp_path / "traces" / "run.json.gz"
    assert first.whatif == ("amp", "batch-size:factor=2", str(tmp_path / "gemm.yaml"))
    assert first.device == "V100" and first.command is None
    assert [(b.name, b.limit) for b in first.bounds] == [
        ("speedup_at_least", 1.5), ("peak_memory_at_most", 12 * 2**30), ("iteration_time_vs_stored_at_most", 10),
        ("replay_error_at_most", 2)]
    assert first.stored == Values(speedup=2.5, iteration_ns=1000, peak_memory_bytes=2048)
    assert isinstance(first.stored.iteration_ns, int)
    # A trace that a command writes need not exist yet.
    assert second.command == "echo hi > out.json" and second.trace == tmp_path / "out.json" and not second.trace.exists()
    assert second.whatif == () and second.stored == Values()
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.name = "other"  # type: ignore[misc]


TRACE = str(EXAMPLE)


A = "version: 1\nchecks: {a: {%s}}\n"  # one check named a


@pytest.mark.parametrize("text, message", [
    ("version: 2\nchecks: {}\n", "version 2 is not supported — this daydream reads version 1"),
    ("checks: {a: {trace: T}}\n", "no 'version'"),
    ("version: 1\n", "'checks' must be a mapping"),
    ("version: 1\nchecks: {}\n", "'checks' must be a mapping"),
    ("version: 1\nchecks: [a]\n", "'checks' must be a mapping"),
    ("extra: 1\n" + A % "trace: T, whatif: [amp], expect: {speedup_at_least: 1}", "unknown key 'extra' — known: version, checks"),
    (A % "trace: T, whatif: [amp], expect: {speedup_min: 1}",
     "check 'a': unknown bound 'speedup_min' — known: speedup_at_least, speedup_at_most, iteration_time_vs_stored_at_most"),
    (A % "trace: T, wahtif: [amp], expect: {speedup_at_least: 1}", "check 'a': unknown key 'wahtif' — known: trace"),
    (A % "whatif: [amp], expect: {speedup_at_least: 1}", "check 'a': no 'trace'"),
    (A % "command: make trace, expect: {replay_error_at_most: 1}", "the path the command writes"),
    (A % "trace: nowhere.json, expect: {replay_error_at_most: 1}", "check 'a': trace: nowhere.json not found"),
    (A % "trace: T, whatif: [amp]", "check 'a': no bounds"),
    (A % "trace: T, whatif: [amp], expect: {speedup_at_least: fast}", "check 'a': speedup_at_least: 'fast' is not"),
    (A % "trace: T, whatif: [amp], expect: {peak_memory_at_most: 12 GBs}", "peak_memory_at_most: '12 GBs' is not a size"),
    (A % "trace: T, expect: {replay_error_at_most: -1%}", "replay_error_at_most: '-1%' is negative"),
    (A % "trace: T, expect: {speedup_at_least: 2}", "a speed-up bound needs what-ifs"),
    (A % "trace: T, whatif: amp, expect: {speedup_at_least: 2}", "whatif: expected a list"),
    (A % "trace: T, whatif: [warp-drive], expect: {speedup_at_least: 2}", "check 'a': whatif: --opt warp-drive: unknown optimization"),
    (A % "trace: T, whatif: ['amp:speed=2'], expect: {speedup_at_least: 2}", "no parameter 'speed'"),
    (A % "trace: T, whatif: [missing.yaml], expect: {speedup_at_least: 2}", "missing.yaml: no such file"),
    (A % "trace: T, whatif: [amp], device: Voodoo5, expect: {speedup_at_least: 2}", "check 'a': device: unknown device"),
    (A % "trace: T, whatif: [amp], expect: {speedup_at_least: 2}, stored: {speed: 1}",
     "check 'a': stored: unknown key 'speed'"),
    (A % "trace: T, whatif: [amp], expect: {speedup_at_least: 2}, stored: {speedup: lots}",
     "stored: speedup: 'lots' is not a number"),
    ("version: 1\nchecks:\n  a: {trace: T, expect: {replay_error_at_most: 1}}\n  a: {trace: T, expect: {replay_error_at_most: 2}}\n",
     "duplicate key 'a'"),
    ("version: 1\nchecks:\n  a: {trace: T\n", "not valid YAML (line"),
    ("- just\n- a list\n", "expected a mapping with 'version' and 'checks'"),
])
def test_errors_name_the_file_and_the_check(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text.replace(": T,", f": {TRACE},"))
    with pytest.raises(InputError) as caught:
        load_expectations(path)
    error = str(caught.value)
    assert error.startswith(f"{path}: ") and message in error
    assert "\n" not in error


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_expectations(tmp_path / "nothing.yaml")
    with pytest.raises(InputError, match="is a folder"):
        load_expectations(tmp_path)


def test_every_bound_is_documented() -> None:
    document = (REPO / "docs" / "check.md").read_text()
    assert all(f"`{name}`" in document for name in BOUNDS)
    assert all(f"`{field.name}`" in document for field in dataclasses.fields(Values))
