"""`daydream diff`: the JSON contract, the tables, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daydream.cli import main
from tests.conftest import REPO
from tests.simulate.diff_pairs import cpu_iteration_us, gpu_program, write_cpu_trace, write_gpu_trace


@pytest.fixture()
def cpu_pair(tmp_path: Path) -> tuple[Path, Path]:
    return (write_cpu_trace(tmp_path, "a.json", addmm_us=100, iterations=2),
            write_cpu_trace(tmp_path, "b.json", addmm_us=200, iterations=2))


def test_json_contract(cpu_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = cpu_pair
    assert main(["diff", str(a), str(b), "--json", "--top", "1", "--no-cache"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"schema_version", "daydream_version", "a", "b", "iteration_ns", "ranks"} <= document.keys()
    assert (document["a"], document["b"]) == (str(a), str(b))
    change_ns = (cpu_iteration_us(200) - cpu_iteration_us(100)) * 1000
    assert document["iteration_ns"] == {"a": cpu_iteration_us(100) * 1000, "b": cpu_iteration_us(200) * 1000, "change": change_ns}
    [rank] = document["ranks"]
    assert {"rank", "basis", "iterations", "iteration_ns", "phases", "classes", "host", "layers", "layers_in_common",
            "explanation", "notes"} <= rank.keys()
    assert {"a", "b", "change", "a_simulated"} <= rank["iteration_ns"].keys()
    assert {"together_ns", "measured_change_ns", "not_explained_ns"} <= rank["explanation"].keys()
    for entry in [*rank["classes"], *rank["phases"], rank["host"]]:
        assert set(entry) == {"name", "a_ns", "b_ns", "change_ns", "explains_ns"}
    gemm = next(c for c in rank["classes"] if c["name"] == "gemm")
    assert gemm["change_ns"] == change_ns
    assert rank["layers"] == [{"name": "Net.fc", "a_ns": 120_000, "b_ns": 220_000, "change_ns": 100_000}]  # --top 1


def test_tables(cpu_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    a, b = cpu_pair
    assert main(["diff", str(a), str(b), "--no-cache"]) == 0
    out = capsys.readouterr().out
    for label in ("iteration time", "by kernel class", "by phase", "explains", "gemm", "all together", "not explained",
                  "layers that changed most", "Net.fc"):
        assert label in out


@pytest.mark.parametrize("which", ["a", "b"])
def test_a_missing_path_is_one_line_exit_2(cpu_pair: tuple[Path, Path], tmp_path: Path, which: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    a, b = cpu_pair
    missing = tmp_path / "nowhere.json"
    args = [str(missing), str(b)] if which == "a" else [str(a), str(missing)]
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err
    assert "nowhere.json" in err and len(err.strip().splitlines()) == 1


def test_a_file_that_is_not_a_trace_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text("this is not JSON")
    assert main(["diff", str(bad), str(REPO / "examples" / "traces" / "cnn_v100.json.gz")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_different_ranks_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side, ranks in (("a", (0, 1)), ("b", (0,))):
        (tmp_path / side).mkdir()
        for rank in ranks:
            write_gpu_trace(tmp_path / side / f"rank{rank}.json", gpu_program(10_000, 100_000), rank=rank)
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "same ranks" in err and len(err.strip().splitlines()) == 1
