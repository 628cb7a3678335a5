"""`daydream check`: bounds held against values from `daydream whatif` / `daydream replay`, exit codes, --update, --junit."""

from __future__ import annotations

import contextlib
import io
import json
import os
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from daydream.cli import main
from tests.builders import annotation, op, write_trace
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"


def _json_of(argv: list[str]) -> Any:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The V100 trace's numbers from the commands `check` must agree with."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAYDREAM_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        whatif = _json_of(["whatif", str(EXAMPLE), "--opt", "amp", "--json"])
        replay = _json_of(["replay", str(EXAMPLE), "--json"])
    return {"speedup": whatif["speedup"], "predicted_ns": whatif["iteration_ns"]["predicted"],
            "simulated_ns": whatif["iteration_ns"]["simulated"], "speedup_low": whatif["interval"]["speedup"][0],
            "replay_error_percent": replay["max_error"] * 100}


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def _expectations(folder: Path, body: str) -> Path:
    path = folder / "expect.yaml"
    path.write_text(textwrap.dedent(body).replace("TRACE", str(EXAMPLE)))
    return path


def test_every_bound_holds(tmp_path: Path, reference: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    speedup, error = reference["speedup"], reference["replay_error_percent"]
    path = _expectations(tmp_path, f"""\
        version: 1
        checks:
          amp:
            trace: TRACE
            whatif: [amp]
            expect:
              speedup_at_least: {speedup * 0.99}
              speedup_at_most: {speedup * 1.01}
              replay_error_at_most: {error * 1.01}%
        """)
    assert main(["check", str(path)]) == 0
    captured = capsys.readouterr()
    assert "every bound holds" in captured.out and "3 bounds in 1 check hold" in captured.out
    assert captured.err == ""


def test_a_broken_bound_exits_1_with_a_table(tmp_path: Path, reference: dict[str, Any],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    speedup, error = reference["speedup"], reference["replay_error_percent"]
    limit = speedup * 1.001  # just beyond what `daydream whatif` predicts
    path = _expectations(tmp_path, f"""\
        version: 1
        checks:
          amp:
            trace: TRACE
            whatif: [amp]
            expect:
              speedup_at_least: {limit}
              replay_error_at_most: {error * 1.01}%
            stored: {{speedup: 2.5}}
        """)
    assert main(["check", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ""  # no traceback, no error line: a broken bound is a result
    broken = [line for line in captured.out.splitlines() if "speedup_at_least" in line]
    assert len(broken) == 1
    assert "amp" in broken[0] and f"≥ {limit:.3f}x" in broken[0] and f"{speedup:.3f}x" in broken[0] and "2.500x" in broken[0]
    assert f"{limit - speedup:.3f}x" in broken[0] and "under" in broken[0]
    assert "replay_error_at_most" not in captured.out  # the table lists what broke
    assert "1 of 2 bounds broken" in captured.out

    document = _json_of_exit(["check", str(path), "--json"], 1)
    first, second = document["checks"][0]["bounds"]
    assert first["value"] == pytest.approx(speedup, rel=1e-12) and first["limit"] == pytest.approx(limit)
    assert first["previous"] == 2.5 and first["passed"] is False
    assert first["beyond"] == pytest.approx((limit - speedup) / limit)
    assert second["value"] == pytest.approx(reference["replay_error_percent"]) and second["passed"] is True
    assert document["passed"] is False and document["broken"] == 1 and document["bounds"] == 2


def test_the_low_end_of_the_speedups_interval(tmp_path: Path, reference: dict[str, Any]) -> None:
    low = reference["speedup_low"]
    assert low < reference["speedup"]
    for limit, code in ((low * 0.99, 0), (low * 1.01, 1)):
        path = _expectations(tmp_path, f"""\
            version: 1
            checks:
              amp:
                trace: TRACE
                whatif: [amp]
                expect:
                  speedup_low_at_least: {limit}
            """)
        document = _json_of_exit(["check", str(path), "--json"], code)
        (bound,) = document["checks"][0]["bounds"]
        assert bound["value"] == pytest.approx(low, rel=1e-12)


def _json_of_exit(argv: list[str], code: int) -> Any:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == code
    return json.loads(out.getvalue())


def test_iteration_time_against_the_stored_value(tmp_path: Path, reference: dict[str, Any]) -> None:
    predicted = reference["predicted_ns"]
    stored = int(predicted / 1.05)  # the code got 5% slower since the values were stored
    text = f"""\
        version: 1
        checks:
          amp:
            trace: TRACE
            whatif: [amp]
            expect: {{iteration_time_vs_stored_at_most: PERCENT}}
            stored: {{iteration_ns: {stored}}}
        """
    document = _json_of_exit(["check", str(_expectations(tmp_path, text.replace("PERCENT", "+4%"))), "--json"], 1)
    bound = document["checks"][0]["bounds"][0]
    assert bound["value"] == predicted and bound["previous"] == stored
    assert bound["limit"] == pytest.approx(stored * 1.04)
    assert main(["check", str(_expectations(tmp_path, text.replace("PERCENT", "6")))]) == 0


def _memory_trace(folder: Path) -> Path:
    """Two iterations; each allocates 4,000 then 1,000 bytes and frees them, over 10,000 allocated before the window."""
    def memory(ts: float, addr: int, nbytes: int) -> dict[str, Any]:
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                "args": {"Addr": addr, "Bytes": nbytes, "Total Allocated": 0, "Total Reserved": 0,
                         "Device Type": 1, "Device Id": 0}}
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100)]
    for base in (0, 100):
        events += [op("aten::mm", base + 10, 50, ext=base + 1), memory(base + 12, 7000 + base, 4000),
                   memory(base + 40, 7000 + base, -4000), op("aten::add", base + 70, 20, ext=base + 2),
                   memory(base + 72, 9000 + base, 1000), memory(base + 80, 9000 + base, -1000)]
    total = 10_000
    for event in (e for e in events if e["name"] == "[memory]"):
        total += event["args"]["Bytes"]
        event["args"]["Total Allocated"] = total
    return write_trace(folder, events, "memory.json")


def test_peak_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _memory_trace(tmp_path)
    peak = 10_000 + 4_000
    text = f"version: 1\nchecks:\n  mem:\n    trace: {trace}\n    expect: {{peak_memory_at_most: LIMIT}}\n"
    path = tmp_path / "expect.yaml"
    path.write_text(text.replace("LIMIT", str(peak)))
    assert _json_of_exit(["check", str(path), "--json"], 0)["checks"][0]["values"]["peak_memory_bytes"] == peak
    path.write_text(text.replace("LIMIT", "13 KiB"))  # 13,312 bytes
    bound = _json_of_exit(["check", str(path), "--json"], 1)["checks"][0]["bounds"][0]
    assert bound["value"] == peak and bound["limit"] == 13 * 1024


def test_a_memory_bound_on_a_trace_without_memory_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _expectations(tmp_path, "version: 1\nchecks:\n  m:\n    trace: TRACE\n    expect: {peak_memory_at_most: 1 GiB}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "check 'm'" in err and "no [memory] events" in err and len(err.strip().splitlines()) == 1


def _junit(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return suites[0]


def test_junit(tmp_path: Path, reference: dict[str, Any]) -> None:
    speedup = reference["speedup"]
    path = _expectations(tmp_path, f"""\
        version: 1
        checks:
          amp:
            trace: TRACE
            whatif: [amp]
            expect: {{speedup_at_least: {speedup * 0.9}, speedup_at_most: {speedup * 0.95}}}
          untouched:
            trace: TRACE
            expect: {{replay_error_at_most: 5%}}
        """)
    report = tmp_path / "out" / "junit.xml"
    assert main(["check", str(path), "--junit", str(report)]) == 1
    suite = _junit(report)
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("amp", "speedup_at_least"), ("amp", "speedup_at_most"), ("untouched", "replay_error_at_most")]
    assert suite.get("tests") == "3" and suite.get("failures") == "1" and suite.get("errors") == "0"
    failures = [(c.get("name"), c.find("failure")) for c in cases if c.find("failure") is not None]
    assert len(failures) == 1 and failures[0][0] == "speedup_at_most"
    message = failures[0][1].get("message")  # type: ignore[union-attr]
    assert "speedup_at_most" in message and f"{speedup:.3f}x" in message and f"{speedup * 0.95:.3f}x" in message
    assert all(float(c.get("time", "-1")) >= 0 for c in cases)


def test_update_rewrites_the_stored_values(tmp_path: Path, reference: dict[str, Any],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = _expectations(tmp_path, """\
        # guarded numbers
        version: 1
        checks:
          amp:                      # mixed precision
            trace: TRACE
            whatif: [amp]
            expect:
              speedup_at_least: 2
              iteration_time_vs_stored_at_most: +1%
              replay_error_at_most: 1%
            stored:
              iteration_ns: 1000    # far too fast: the bound above breaks
              speedup: 9.9
        """)
    original = path.read_text()
    assert main(["check", str(path)]) == 1
    capsys.readouterr()
    report = tmp_path / "junit.xml"
    assert main(["check", str(path), "--update", "--junit", str(report)]) == 0
    assert "stored values updated" in capsys.readouterr().out
    updated = path.read_text()
    expected = original.replace("iteration_ns: 1000 ", f"iteration_ns: {reference['predicted_ns']} ").replace(
        "speedup: 9.9", f"speedup: {round(reference['speedup'], 4)}\n      replay_error_percent: "
                        f"{round(reference['replay_error_percent'], 4)}")
    assert updated == expected
    assert _junit(report).get("failures") == "0"
    assert main(["check", str(path)]) == 0


def test_update_leaves_the_file_alone_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    body = """\
        version: 1
        checks:
          amp:
            trace: TRACE
            whatif: [amp]
            expect: {speedup_at_least: 1}
        """
    broken = "  broken:\n    command: exit 7\n    trace: never.json\n    expect: {replay_error_at_most: 1}\n"
    path = _expectations(tmp_path, textwrap.dedent(body) + broken)
    original = path.read_bytes()
    assert main(["check", str(path), "--update"]) == 2
    assert "exited with code 7" in capsys.readouterr().err
    assert path.read_bytes() == original

    path = _expectations(tmp_path, body)
    original = path.read_bytes()

    def refuse(source: object, target: object) -> None:
        raise OSError(28, "No space left on device", str(target))

    monkeypatch.setattr(os, "replace", refuse)
    assert main(["check", str(path), "--update"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert path.read_bytes() == original and sorted(p.name for p in tmp_path.iterdir()) == ["expect.yaml"]


def test_a_command_writes_the_trace_and_runs_once(tmp_path: Path, reference: dict[str, Any]) -> None:
    # The command runs in the expectations file's folder; two checks share it.
    command = f"cp {EXAMPLE} copied.json.gz && echo run >> runs.txt"
    path = _expectations(tmp_path, f"""\
        version: 1
        checks:
          amp:
            command: {command}
            trace: copied.json.gz
            whatif: [amp]
            expect: {{speedup_at_least: {reference['speedup'] * 0.99}}}
          untouched:
            command: {command}
            trace: copied.json.gz
            expect: {{replay_error_at_most: 1%}}
        """)
    document = _json_of_exit(["check", str(path), "--json"], 0)
    assert (tmp_path / "runs.txt").read_text() == "run\n"
    assert document["checks"][0]["values"]["speedup"] == pytest.approx(reference["speedup"], rel=1e-12)


A = "version: 1\nchecks: {a: {%s}}\n"  # one check named a


@pytest.mark.parametrize("body, message", [
    (None, "no such file"),
    ("version: 1\nchecks: {a: [unclosed\n", "not valid YAML"),
    ("version: 3\nchecks: {}\n", "version 3 is not supported — this daydream reads version 1"),
    (A % "trace: TRACE, whatif: [amp], expect: {speedup_min: 1}",
     "check 'a': unknown bound 'speedup_min' — known: speedup_at_least"),
    (A % "trace: TRACE, whatif: [amp], expect: {speedup_at_least: 1}, colour: red",
     "check 'a': unknown key 'colour'"),
    (A % "trace: missing.json.gz, expect: {replay_error_at_most: 1}", "check 'a': trace: missing.json.gz not found"),
    (A % "command: 'echo building; echo broke >&2; exit 3', trace: t.json, expect: {replay_error_at_most: 1}",
     "check 'a': command 'echo building; echo broke >&2; exit 3' exited with code 3 (broke)"),
    (A % "command: 'true', trace: t.json, expect: {replay_error_at_most: 1}",
     "exited with code 0 but did not write"),
    # A command that outlives its timeout is stopped, children included (sleep holds the output pipe).
    (A % "command: 'sleep 60 & sleep 60', timeout: 1s, trace: t.json, expect: {replay_error_at_most: 1}",
     "did not finish within 1 s and was stopped"),
    (A % "command: 'true', timeout: forever, trace: t.json, expect: {replay_error_at_most: 1}",
     "timeout: 'forever' is not a duration"),
    (A % "trace: TRACE, whatif: [amp], expect: {speedup_at_least: .nan}", "not a finite number"),
    ("a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: &d [*c, *c, *c, *c]\n"
     "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, "
     "*d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, "
     "*d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
     "more than 100 aliases"),
    ("version: 1\nchecks:\n  ? [a, b]\n  : {trace: TRACE}\n", "a key must be a plain value"),
])
def test_input_errors_exit_2_with_one_line_and_write_nothing(tmp_path: Path, body: str | None, message: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "expect.yaml"
    if body is not None:
        path.write_text(body.replace("TRACE", str(EXAMPLE)))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["check", str(path), "--junit", str(tmp_path / "junit.xml"), "--update"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"daydream: error: {path}") and message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if body is not None:
        assert path.read_text() == body.replace("TRACE", str(EXAMPLE))


def test_a_relative_bound_needs_a_stored_value(tmp_path: Path, reference: dict[str, Any],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = _expectations(tmp_path, "version: 1\nchecks:\n  a:\n    trace: TRACE\n"
                                   "    expect: {iteration_time_vs_stored_at_most: 5%}\n")
    original = path.read_text()
    assert main(["check", str(path), "--junit", str(tmp_path / "junit.xml")]) == 2
    err = capsys.readouterr().err
    assert "check 'a': iteration_time_vs_stored_at_most needs stored.iteration_ns — record it with daydream check" in err
    assert path.read_text() == original and not (tmp_path / "junit.xml").exists()
    # --update records it (the untouched trace: the simulated baseline), and then the bound runs.
    assert main(["check", str(path), "--update"]) == 0
    assert path.read_text() == original + f"    stored:\n      speedup: 1.0\n      iteration_ns: {reference['simulated_ns']}\n"
    assert main(["check", str(path)]) == 0


def test_at_80_columns_the_broken_bound_keeps_its_figures_whole(tmp_path: Path, reference: dict[str, Any],
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    speedup = reference["speedup"]
    limit = speedup * 1.001
    path = _expectations(tmp_path, f"version: 1\nchecks: {{amp: {{trace: TRACE, whatif: [amp], "
                                   f"expect: {{speedup_at_least: {limit}}}}}}}\n")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["check", str(path)]) == 1  # stdout captured: not a terminal, as in a CI log
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) <= 80
    for figure in (f"{speedup:.3f}x", f"{limit:.3f}x", f"{limit - speedup:.3f}x"):
        assert figure in shown, figure
