"""The shape of the package's code: every function short enough to hold in one's head.

Branches per function are held by ruff (C901, `max-complexity` in pyproject.toml); length is held here,
and the width of every line (ruff's E501 holds it too, where ruff is installed).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

#: The most lines a function (its signature, docstring and body; not its decorators) may take.
MOST_LINES = 60
#: The most characters a line of the package may hold (ruff's `line-length`).
MOST_CHARACTERS = 100


def long_functions(package: Path) -> list[str]:
    """`path:line name (N lines)` of every function under `package` longer than MOST_LINES."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1  # from `def`; decorators apart
                if lines > MOST_LINES:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    assert long_functions(REPO / "daydream") == []


def wide_lines(package: Path) -> list[str]:
    """`path:line (N characters)` of every line under `package` wider than MOST_CHARACTERS."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if len(line) > MOST_CHARACTERS:
                found.append(f"{path.relative_to(package.parent)}:{number} ({len(line)} characters)")
    return found


def test_no_line_is_wider_than_the_limit() -> None:
    assert wide_lines(REPO / "daydream") == []


def test_the_limit_is_ruffs_line_length() -> None:
    assert f"line-length = {MOST_CHARACTERS}" in (REPO / "pyproject.toml").read_text()


def test_the_check_finds_a_wide_line(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    wide = "x = '" + "a" * (MOST_CHARACTERS - 5) + "'"  # exactly one character too wide
    (tmp_path / "p" / "m.py").write_text(f"y = 1\n{wide}\n{wide[:-2]}'\n")
    assert wide_lines(tmp_path / "p") == [f"p/m.py:2 ({MOST_CHARACTERS + 1} characters)"]


def test_the_check_counts_a_long_function(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MOST_LINES))  # def line + 60 = 61 lines
    (tmp_path / "p" / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path / "p") == [f"p/m.py:5 long ({MOST_LINES + 1} lines)"]
