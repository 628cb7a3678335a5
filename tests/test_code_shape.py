"""The shape of the package's code: every function short enough to hold in one's head.

Branches per function are held by ruff (C901, `max-complexity` in pyproject.toml); length is held here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

#: The most lines a function (its signature, docstring and body; not its decorators) may take.
MOST_LINES = 60


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


def test_the_check_counts_a_long_function(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MOST_LINES))  # def line + 60 = 61 lines
    (tmp_path / "p" / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path / "p") == [f"p/m.py:5 long ({MOST_LINES + 1} lines)"]
