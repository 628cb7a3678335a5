"""Stored values written into the expectations text in place: everything else stays as the user wrote it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from daydream.check import Values, parse_expectations, rewrite_stored
from daydream.check.update import format_number, stored_form
from tests.conftest import REPO

TRACE = str(REPO / "examples" / "traces" / "cnn_v100.json.gz")


def _text(body: str) -> str:
    return textwrap.dedent(body).replace("TRACE", TRACE)


def _stored(text: str, name: str) -> Values:
    return next(c.stored for c in parse_expectations(text, Path("expect.yaml")).checks if c.name == name)


def test_values_replaced_where_they_stand_and_missing_ones_appended_to_the_block() -> None:
    before = _text("""\
        version: 1
        checks:
          a:
            trace: TRACE
            expect: {replay_error_at_most: 1%}
            stored:
              speedup: 1.5    # from the first run
              iteration_ns: "100"
          # the next check
          b:
            trace: TRACE
            expect: {replay_error_at_most: 1%}
        """)
    after = rewrite_stored(before, {"a": {"speedup": 2.25, "iteration_ns": 4321, "replay_error_percent": 0.5}})
    expected = before.replace("speedup: 1.5    # from", "speedup: 2.25    # from").replace(
        'iteration_ns: "100"', 'iteration_ns: 4321\n      replay_error_percent: 0.5')
    assert after == expected
    assert _stored(after, "a") == Values(speedup=2.25, iteration_ns=4321, replay_error_percent=0.5)


def test_a_check_without_stored_gets_a_block_after_its_last_line() -> None:
    before = _text("""\
        version: 1
        checks:
            first:      # four-space indentation
                trace: TRACE
                whatif:
                  - amp
                expect:
                    speedup_at_least: 2   # tensor cores

            # about the second check
            second:
                command: |
                    echo one
                    echo two
                trace: TRACE
                expect: {replay_error_at_most: 1}
        """)
    after = rewrite_stored(before, {"first": {"speedup": 2.409, "iteration_ns": 7},
                                    "second": {"iteration_ns": 8}})
    lines = after.splitlines()
    first = lines.index("            speedup_at_least: 2   # tensor cores")
    assert lines[first + 1:first + 4] == ["        stored:", "            speedup: 2.409", "            iteration_ns: 7"]
    assert lines[first + 4:first + 6] == ["", "    # about the second check"]
    assert lines[-2:] == ["        stored:", "            iteration_ns: 8"]
    # Nothing else moved: without the added lines, the text is the original.
    added = {first + 1, first + 2, first + 3, len(lines) - 2, len(lines) - 1}
    assert "\n".join(line for number, line in enumerate(lines) if number not in added) + "\n" == before
    assert _stored(after, "first") == Values(speedup=2.409, iteration_ns=7)
    assert _stored(after, "second") == Values(iteration_ns=8)


def test_a_block_scalar_at_the_end_of_a_check_keeps_its_text() -> None:
    before = _text("""\
        version: 1
        checks:
          a:
            trace: TRACE
            expect: {replay_error_at_most: 1}
            command: |
              echo one
              echo two
          b:
            trace: TRACE
            expect: {replay_error_at_most: 1}
        """)
    after = rewrite_stored(before, {"a": {"iteration_ns": 5}})
    assert "      echo two\n    stored:\n      iteration_ns: 5\n  b:\n" in after
    checks = parse_expectations(after, Path("expect.yaml")).checks
    assert checks[0].command == "echo one\necho two" and checks[0].stored == Values(iteration_ns=5)


@pytest.mark.parametrize("stored_text, expected_line", [
    ("stored:\n", "    stored:\n      speedup: 1.25\n      iteration_ns: 9\n"),
    ("stored: {}\n", "    stored: {speedup: 1.25, iteration_ns: 9}\n"),
    ("stored: {speedup: 3, peak_memory_bytes: 100}  # flow\n",
     "    stored: {speedup: 1.25, peak_memory_bytes: 100, iteration_ns: 9}  # flow\n"),
])
def test_empty_and_flow_stored(stored_text: str, expected_line: str) -> None:
    head = _text("""\
        version: 1
        checks:
          a:
            trace: TRACE
            expect: {replay_error_at_most: 1}
        """)
    after = rewrite_stored(head + "    " + stored_text, {"a": {"speedup": 1.25, "iteration_ns": 9}})
    assert after == head + expected_line


def test_a_flow_style_check_and_windows_newlines() -> None:
    before = f"version: 1\r\nchecks:\r\n  a: {{trace: {TRACE}, expect: {{replay_error_at_most: 1}}}}\r\n  b:\r\n" \
             f"    trace: {TRACE}\r\n    expect: {{replay_error_at_most: 1}}\r\n"
    after = rewrite_stored(before, {"a": {"speedup": 2.0}, "b": {"speedup": 3.0}})
    assert f"  a: {{trace: {TRACE}, expect: {{replay_error_at_most: 1}}, stored: {{speedup: 2.0}}}}\r\n" in after
    assert after.endswith("    expect: {replay_error_at_most: 1}\r\n    stored:\r\n      speedup: 3.0\r\n")
    assert "\n" not in after.replace("\r\n", "")
    assert _stored(after, "a") == Values(speedup=2.0) and _stored(after, "b") == Values(speedup=3.0)


def test_numbers_as_stored() -> None:
    assert format_number("speedup", 2.40895433919958) == "2.409"
    assert format_number("speedup", 1.0) == "1.0"
    assert format_number("replay_error_percent", 0.00001) == "0.0"
    assert format_number("iteration_ns", 32675577.0) == "32675577"
    assert stored_form(Values(speedup=2.40895433919958, iteration_ns=5, replay_error_percent=0.20831)) == {
        "speedup": 2.409, "iteration_ns": 5, "replay_error_percent": 0.2083}
