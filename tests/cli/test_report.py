"""`daydream report`: what-if rows as `daydream whatif` reports them, ranks, iterations, and errors that write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daydream.cli import main
from tests.builders import write_trace
from tests.report.test_html import embedded_document, tiny_trace

SPECS = ["faster-gpu:factor=2", "faster-host:factor=2"]


def report(args: list[str], out: Path) -> dict[str, Any]:
    assert main(["report", *args, "-o", str(out)]) == 0
    return embedded_document(out.read_text())


def test_whatif_rows_match_daydream_whatif(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(tiny_trace(tmp_path, kernels_per_step=4))
    document = report([trace, "--opt", SPECS[0], "--opt", SPECS[1]], tmp_path / "r.html")
    rows = document["whatif"]
    assert [row["optimizations"] for row in rows] == [[SPECS[0]], [SPECS[1]], SPECS]
    capsys.readouterr()
    for row in rows:
        args = [arg for spec in row["optimizations"] for arg in ("--opt", spec)]
        assert main(["whatif", trace, *args, "--json"]) == 0
        expected = json.loads(capsys.readouterr().out)
        assert row["iteration_ns"] == expected["iteration_ns"]
        assert row["speedup"] == pytest.approx(expected["speedup"])
        assert row["interval"] == expected["interval"]
    assert document["timeline"]["views"][1]["title"] == f"predicted: {' + '.join(SPECS)}"
    low, high = rows[-1]["interval"]["speedup"]
    assert f"interval {low:.2f}–{high:.2f}×" in (tmp_path / "r.html").read_text()  # on the speed-up's card


def test_rank_and_iteration_options(tmp_path: Path) -> None:
    for rank in (0, 1):
        source = tiny_trace(tmp_path)
        events = json.loads(source.read_text())["traceEvents"]
        write_trace(tmp_path, events, f"rank{rank}.json", distributedInfo={"rank": rank, "world_size": 2})
        source.unlink()
    document = report([str(tmp_path), "--rank", "1", "--iteration", "ProfilerStep#2"], tmp_path / "out" / "r.html")
    assert document["ranks"] == [0, 1] and document["rank"] == 1
    assert document["iteration"] == {**document["iteration"], "index": 1, "name": "ProfilerStep#2"}
    assert report([str(tmp_path), "--iteration", "0"], tmp_path / "out" / "r0.html")["iteration"]["name"] == "ProfilerStep#1"


@pytest.mark.parametrize("args, message", [
    (["missing.json.gz"], "missing.json.gz"),
    (["garbage.json"], "garbage.json"),
    (["TINY", "--opt", "warp-drive"], "unknown optimization"),
    (["TINY", "--iteration", "7"], "--iteration 7"),
    (["TINY", "--iteration", "ProfilerStep#9"], "--iteration ProfilerStep#9"),
    (["TINY", "--rank", "3"], "--rank 3"),
])
def test_errors_are_one_line_exit_2_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                                      message: str) -> None:
    (tmp_path / "garbage.json").write_text("this is not a trace")
    tiny = str(tiny_trace(tmp_path))
    args = [tiny if arg == "TINY" else str(tmp_path / arg) if arg.endswith(".json") or arg.endswith(".gz") else arg for arg in args]
    out = tmp_path / "report.html"
    kept = tmp_path / "kept.html"
    kept.write_text("an older report")
    assert main(["report", *args, "-o", str(out)]) == 2
    assert main(["report", *args, "-o", str(kept)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("daydream: error:")]
    assert len(lines) == 2 and message in lines[0]
    assert not out.exists()
    assert kept.read_text() == "an older report"
    assert not list(tmp_path.glob(".tmp-*"))
