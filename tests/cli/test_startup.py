"""Start-up: `daydream --help` and commands that do not simulate do not import the simulator (numba)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import daydream.cli


def _imported(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sys.modules))"],
                          capture_output=True, text=True, timeout=120, check=True)
    return set(done.stdout.split())


def test_help_and_inspect_do_not_import_numba() -> None:
    # `daydream --help` imports every command's module to list it: none may load the simulator at import.
    commands = [m.name for m in pkgutil.iter_modules(daydream.cli.__path__) if not m.name.startswith("_")]
    assert {"whatif", "replay", "check", "report", "diff"} <= set(commands)
    assert "numba" not in _imported("import contextlib, io\nfrom daydream.cli import main\n"
                                    "with contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])")
    assert "numba" not in _imported("import daydream.cli.inspect")
    # nor does reading and inspecting a trace of a few tens of thousands of events
    example = Path(daydream.__file__).resolve().parents[1] / "examples" / "traces" / "cnn_v100.json.gz"
    assert "numba" not in _imported("import contextlib, io\nfrom daydream.cli import main\n"
                                    "with contextlib.redirect_stdout(io.StringIO()):\n"
                                    f"    assert main(['inspect', '--no-cache', {str(example)!r}]) == 0")
    # whatif --list needs the optimizations, which need it: the checks above are not vacuous
    assert "numba" in _imported("import contextlib, io\nfrom daydream.cli import main\n"
                                "with contextlib.redirect_stdout(io.StringIO()):\n    main(['whatif', '--list'])")


def test_ctrl_c_while_daydream_is_still_importing_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import sys
    import types

    from daydream import _start

    class Interrupted(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            if name == "run":
                raise KeyboardInterrupt  # as if Ctrl-C came while `from daydream.cli import run` ran
            raise AttributeError(name)

    monkeypatch.setitem(sys.modules, "daydream.cli", Interrupted("daydream.cli"))
    with pytest.raises(SystemExit) as ended:
        _start.run()
    assert ended.value.code == 130
    assert capsys.readouterr().err == "daydream: error: interrupted\n"


def test_sigterm_ends_a_command_through_its_cleanup(tmp_path: Path) -> None:
    # A CI runner's timeout sends SIGTERM: the half-written output's temporary file must go with the process.
    import os
    import signal

    from daydream._files import atomic_output
    from daydream.cli import _terminate_cleanly

    previous = _terminate_cleanly()
    try:
        with pytest.raises(SystemExit) as ended, atomic_output(tmp_path / "report.html") as out:
            out.write(b"half")
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert ended.value.code == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary file
