"""Start-up: commands that do not simulate do not import the simulator (numba)."""

from __future__ import annotations

import subprocess
import sys


def _imported(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sys.modules))"],
                          capture_output=True, text=True, timeout=120, check=True)
    return set(done.stdout.split())


def test_help_and_inspect_do_not_import_numba() -> None:
    assert "numba" not in _imported("from daydream.cli import cli")
    assert "numba" not in _imported("import daydream.cli.inspect")
    # replay needs it: the check above is not vacuous
    assert "numba" in _imported("import daydream.cli.replay")
