"""`daydream whatif`: the JSON contract, the default trace, the list, and its errors."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from daydream.cli import main
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"


def test_json_contract(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "predicted.json.gz"
    assert main(["whatif", str(EXAMPLE), "--opt", "amp", "--opt", "fused-adam", "--json", "--timeline", str(out)]) == 0
    document = json.loads(capsys.readouterr().out)
    times = document["iteration_ns"]
    assert {"measured", "simulated", "predicted"} <= times.keys()
    assert all(isinstance(times[k], int) for k in ("measured", "simulated", "predicted"))
    assert document["speedup"] == pytest.approx(times["simulated"] / times["predicted"])
    assert document["optimizations"] == ["amp", "fused-adam"]
    assert document["speedup"] > 1.2  # a GPU-bound V100 trace gains from tensor cores
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    assert any(e["cat"] == "kernel" for e in events)


def test_default_trace_is_the_newest_in_daydream_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["whatif", "--opt", "amp"]) == 2
    assert "daydream trace" in capsys.readouterr().err
    folder = tmp_path / "daydream-traces"
    folder.mkdir()
    shutil.copy(REPO / "examples" / "traces" / "ddp_a100_rank0.json.gz", folder / "old.json.gz")
    shutil.copy(EXAMPLE, folder / "new.json.gz")
    os.utime(folder / "old.json.gz", (1, 1))
    assert main(["whatif", "--opt", "faster-gpu:factor=2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"].endswith("new.json.gz")


def test_list_shows_every_optimization(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--list", "--json"]) == 0
    listed = [entry["name"] for entry in json.loads(capsys.readouterr().out)]
    names = set(listed)
    assert listed == sorted(names)  # by name, whatever order the families register in
    assert {"amp", "fused-optimizer", "cuda-graphs", "fuse-elementwise", "batch-size", "checkpoint", "faster-host",
            "no-host-overhead", "faster-gpu"} <= names


@pytest.mark.parametrize("args, message", [
    (["--opt", "warp-drive"], "unknown optimization"),
    (["--opt", "amp:speed=2"], "no parameter"),
    ([], "--opt"),
    (["--opt", "checkpoint:layers=nothing_matches_this"], "the trace names no layers"),  # cnn_v100: no module paths
    (["--opt", "amp", "--device", "Voodoo5"], "unknown device"),
])
def test_errors_are_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(EXAMPLE), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_json_says_what_bounds_the_prediction(capsys: pytest.CaptureFixture[str], corpus: Path) -> None:
    # A host-bound DDP rank: a GPU twice as fast does not move it, and the output says why.
    path = corpus / "hta/nccl_parser_config/nccl_data.json.gz"
    assert main(["whatif", str(path), "--opt", "faster-gpu:factor=2", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    bound = document["bound_by"]
    assert bound["bound"] == "host" and abs(sum(bound["shares"].values()) - 1) < 1e-3
    # The walk over the critical path covers each predicted iteration exactly, from its start marker to its end.
    iterations = document["ranks"][0]["iterations"]
    assert sum(bound["by_category_ns"].values()) == sum(it["predicted_ns"] for it in iterations)
    for iteration in iterations:
        assert sum(iteration["bound_by"]["by_category_ns"].values()) == iteration["predicted_ns"]
    assert 0 <= document["pinned_on_critical_path"] <= 0.05
    assert any("did not move" in warning and "host-bound" in warning for warning in document["warnings"])


def test_a_single_rank_bound_by_its_peers_carries_a_warning(capsys: pytest.CaptureFixture[str], corpus: Path) -> None:
    path = corpus / "hta/negative_queue_length_values_check/rank0.json.gz"
    assert main(["whatif", str(path), "--opt", "faster-host:factor=1000", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["pinned_on_critical_path"] > 0.05
    assert any("cannot explain" in warning for warning in document["warnings"])
    assert main(["whatif", str(path), "--opt", "faster-host:factor=1000"]) == 0
    assert "warning:" in capsys.readouterr().out
