"""Option defaults from daydream.toml or pyproject.toml's [tool.daydream] in the folder daydream runs in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daydream.cli import main
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "traces" / "cnn_v100.json.gz")


def _run(folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(folder)
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_command_table_sets_defaults_and_the_command_line_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.daydream.whatif]\njson = true\nopt = ["amp"]\n')
    code, out, _ = _run(tmp_path, monkeypatch, capsys, "whatif", EXAMPLE)
    assert code == 0 and json.loads(out)["optimizations"] == ["amp"]
    code, out, _ = _run(tmp_path, monkeypatch, capsys, "whatif", EXAMPLE, "--opt", "fused-optimizer")
    assert code == 0 and json.loads(out)["optimizations"] == ["fused-optimizer"]
    code, out, _ = _run(tmp_path, monkeypatch, capsys, "inspect", EXAMPLE)  # the whatif table is whatif's only
    assert code == 0 and not out.lstrip().startswith("{")


def test_top_level_keys_apply_to_every_command_that_has_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "daydream.toml").write_text("json = true\n")
    for command in (["inspect", EXAMPLE], ["replay", EXAMPLE], ["whatif", EXAMPLE, "--opt", "amp"]):
        code, out, _ = _run(tmp_path, monkeypatch, capsys, *command)
        assert code == 0 and isinstance(json.loads(out), dict), command
    code, out, _ = _run(tmp_path, monkeypatch, capsys, "whatif", "--list")  # --list has no --json: unaffected
    assert code == 0


@pytest.mark.parametrize(("text", "message"), [
    ("[whatif]\nfoo = 1\n", "daydream.toml: [whatif] foo: 'daydream whatif' has no option --foo"),
    ("[whatiff]\njson = true\n", "daydream.toml: [whatiff] names no daydream command"),
    ("json = \n", "daydream.toml: not valid TOML"),
    ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "daydream.toml: nested too deeply"),
    ("workers = " + "9" * 5000 + "\n", "daydream.toml: not valid TOML"),
    ("[whatif]\njson = [1, {a = 2}]\n", "daydream.toml: [whatif] json: a list where --json takes a value"),
    ("[whatif]\nmeasure-budget = -1\n", "daydream.toml: [whatif] measure-budget = -1: Invalid value for '--measure-budget'"),
    ("json = 'maybe'\n", "daydream.toml: json = maybe: Invalid value for '--json'"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    (tmp_path / "daydream.toml").write_text(text)
    code, out, err = _run(tmp_path, monkeypatch, capsys, "whatif", EXAMPLE, "--opt", "amp")
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_quiet_and_verbose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "predicted.json"
    code, stdout, stderr = _run(tmp_path, monkeypatch, capsys, "-q", "whatif", EXAMPLE, "--opt", "amp", "--timeline", str(out))
    assert code == 0 and "amp" in stdout and stderr == "" and out.is_file()
    code, _, stderr = _run(tmp_path, monkeypatch, capsys, "-v", "whatif", EXAMPLE, "--opt", "amp", "--no-cache")
    assert code == 0 and "daydream: decompressing (" in stderr and "daydream: predicting (" in stderr
    code, _, stderr = _run(tmp_path, monkeypatch, capsys, "-q", "-v", "inspect", EXAMPLE)
    assert code == 2 and "opposite" in stderr
    (tmp_path / "daydream.toml").write_text("quiet = true\n")  # the group's own options from the file's top level
    code, _, stderr = _run(tmp_path, monkeypatch, capsys, "whatif", EXAMPLE, "--opt", "amp", "--timeline", str(out))
    assert code == 0 and stderr == ""


def test_a_project_file_that_is_not_a_regular_small_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import os

    os.mkfifo(tmp_path / "daydream.toml")  # a pipe is no project file: skipped, never opened (it would hang)
    code, out, _ = _run(tmp_path, monkeypatch, capsys, "whatif", EXAMPLE, "--opt", "amp", "--json")
    assert code == 0 and json.loads(out)["optimizations"] == ["amp"]
    (tmp_path / "daydream.toml").unlink()
    (tmp_path / "daydream.toml").write_text("# padding\n" * 200_000)
    code, out, err = _run(tmp_path, monkeypatch, capsys, "whatif", EXAMPLE, "--opt", "amp")
    assert code == 2 and "more than a project file holds" in err
