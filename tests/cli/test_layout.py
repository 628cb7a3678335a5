"""The layout sweep: every dp × tp × pp of a world, each row the what-if run alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daydream.api import parse_layout_sweep, predict_job
from daydream.cli import main
from daydream.errors import InputError
from tests.conftest import REPO

#: A CPU trace `daydream trace` recorded (layers, their parameters, op shapes): every layout applies to it.
RECORDED = REPO / "examples" / "fsdp" / "round-2" / "transformer-baseline.json.gz"
#: A trace of set 1 (torch.profiler on a V100, 2021): no per-layer parameters and no shapes.
SET_1 = Path("kineto/tb_plugin_samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
LINK = "bandwidth=1,latency=1000"


def _alone(path: Path, spec: str) -> tuple[int | None, str | None]:
    """(predicted ns, None) of `spec` run alone, or (None, the error it stops with)."""
    try:
        return predict_job(path, [spec])[0].predicted_ns, None
    except InputError as exc:
        return None, str(exc).removeprefix(f"{path}: ")


def test_each_row_of_a_set_1_trace_is_the_what_if_alone(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus / SET_1
    assert main(["whatif", str(path), "--opt", "layout:params=97MB", "--sweep", "dp=1,2,4,tp=1,2,pp=1,2", "--world",
                 "4", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(r["dp"], r["tp"], r["pp"]) for r in found["rows"]] == [(1, 2, 2), (2, 1, 2), (2, 2, 1), (4, 1, 1)]
    for row in found["rows"]:
        predicted, error = _alone(path, row["spec"])
        assert row.get("predicted_ns") == predicted
        assert row.get("error") == error
    # without recorded layers or shapes only data parallelism applies; it is the fastest there is
    assert [r["dp"] for r in found["rows"] if "predicted_ns" in r] == [4]
    assert found["fastest"]["dp"] == 4


def test_each_row_of_a_recorded_trace_is_the_what_if_alone_and_the_fastest_is_by_samples(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(RECORDED), "--opt", f"layout:{LINK}", "--sweep", "dp=1,2,tp=1,2,pp=1,2", "--world",
                 "4", "--memory", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    rows = {(r["dp"], r["tp"], r["pp"]): r for r in found["rows"]}
    assert sorted(rows) == [(1, 2, 2), (2, 1, 2), (2, 2, 1)]
    for row in rows.values():
        assert "error" not in row
        assert row["predicted_ns"] == _alone(RECORDED, row["spec"])[0]
        assert row["samples_per_s"] == pytest.approx(8 * row["dp"] * 1e9 / row["predicted_ns"])  # batch 8 per replica
    best = max(rows.values(), key=lambda r: r["samples_per_s"])
    assert found["fastest"]["spec"] == best["spec"]


def test_a_layout_of_one_degree_is_that_what_if() -> None:
    assert _alone(RECORDED, f"layout:tp=2,{LINK}") == _alone(RECORDED, f"tp:degree=2,{LINK}")
    assert _alone(RECORDED, f"layout:pp=2,{LINK}") == _alone(RECORDED, f"pp:stages=2,{LINK}")


def test_layout_sweeps_refuse_what_they_cannot_lay_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_layout_sweep("tp=1,2,pp=2") == {"dp": [1], "tp": [1, 2], "pp": [2]}
    with pytest.raises(InputError, match="'ep' is not a degree of a layout"):
        parse_layout_sweep("ep=2")
    with pytest.raises(InputError, match="whole degrees from 1"):
        parse_layout_sweep("dp=0")
    assert main(["whatif", str(RECORDED), "--opt", "layout", "--sweep", "dp=1,2", "--world", "8"]) == 2
    assert "no dp × tp × pp of these is 8 ranks" in capsys.readouterr().err
    assert main(["whatif", str(RECORDED), "--opt", "layout", "--sweep", "tp=1,16", "--world", "8"]) == 2
    assert "tp=16 is more ranks than the world of 8" in capsys.readouterr().err
    assert main(["whatif", str(RECORDED), "--opt", "amp", "--world", "8"]) == 2
    assert "--world is the ranks of a layout sweep" in capsys.readouterr().err
    assert main(["whatif", str(RECORDED), "--opt", "layout", "--sweep", "dp=1,2"]) == 2
    assert "give --world N" in capsys.readouterr().err


@pytest.mark.parametrize(("spec", "message"), [
    ("pp:stages=3", "stages=3 but the model has 2 repeated blocks to cut between"),
    ("pp:stages=2,microbatches=3", "microbatches=3 does not divide the trace's batch of 8 — use one of 1, 2, 4, 8"),
    ("tp:degree=3", "degree=3 does not divide TinyTransformer.blocks.0.mlp.up's 1024 outputs — use a degree that divides 256"),
    ("tp:degree=8", "degree=8 does not divide the 4 attention heads — use one of 1, 2, 4"),
    ("tp:degree=2,layers=decoder", "layers='decoder' matches no linear layer"),
])
def test_a_layout_the_model_cannot_take_is_one_line_and_exit_2(spec: str, message: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(RECORDED), "--opt", spec]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1 and "Traceback" not in error


def _collective_calls(path: Path, prefix: str) -> float:
    """The CPU ops named `prefix`... per recorded iteration of a rank's trace (what torch.distributed issued)."""
    from daydream.mapping import find_iterations
    from daydream.trace import EventKind, read_job

    trace = read_job(path).traces[0]
    ops = trace.indices(EventKind.CPU_OP)
    names = [trace.strings[i] for i in trace.name[ops].tolist()]
    return sum(name.startswith(prefix) for name in names) / len(find_iterations(trace))


def _inserted_per_iteration(spec: str) -> float:
    from daydream.graph import TaskKind

    prediction = predict_job(RECORDED, [spec])[0]
    graph = prediction.graph
    assert graph is not None
    iterations = len({int(i) for i in graph.tasks["iteration"].tolist() if i >= 0})
    return int((graph.tasks["kind"] == TaskKind.COLLECTIVE).sum()) / iterations


def test_the_pipeline_sends_what_the_real_stage_sent_and_received() -> None:
    # A real stage of two, 4 micro-batches: each micro-batch's activations one way and their gradients the other.
    real = REPO / "examples" / "layouts" / "transformer-pp-1f1b-rank0.json.gz"
    expected = _collective_calls(real, "c10d::send") + _collective_calls(real, "c10d::recv_")
    assert expected == 8
    assert _inserted_per_iteration(f"pp:stages=2,microbatches=4,{LINK}") == expected


def test_tensor_parallelism_all_reduces_as_often_as_the_real_rank() -> None:
    real = REPO / "examples" / "layouts" / "transformer-tp-rank0.json.gz"
    expected = _collective_calls(real, "c10d::allreduce_")
    assert expected == 8  # per block: the two row layers' outputs, the two column layers' input gradients
    assert _inserted_per_iteration(f"tp:degree=2,{LINK}") == expected


def test_the_plot_draws_each_predicted_layout_by_whether_it_fits(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    from daydream.report import layout

    drawn: list = []  # type: ignore[type-arg]
    save = layout.plotting.save_png
    monkeypatch.setattr(layout.plotting, "save_png", lambda figure, path: (drawn.append(figure), save(figure, path)))
    rows = [{"dp": 1, "tp": 2, "pp": 2, "spec": "a", "error": "2 stages of 1 block"},
            {"dp": 2, "tp": 1, "pp": 2, "spec": "b", "predicted_ns": 10**8, "samples_per_s": 160.0,
             "predicted_peak_bytes": 3 * 2**30, "capacity_bytes": 2 * 2**30, "fits": False},
            {"dp": 2, "tp": 2, "pp": 1, "spec": "c", "predicted_ns": 2 * 10**8, "samples_per_s": 80.0,
             "predicted_peak_bytes": 2**30, "capacity_bytes": 2 * 2**30, "fits": True}]
    layout.plot_layouts(tmp_path / "layouts.png", {"world": 4, "batch": 8, "source": "t.json", "rows": rows,
                                       "fastest": {"dp": 2, "tp": 2, "pp": 1, "spec": "c"}})
    speed, memory = drawn[0].axes
    assert [t.get_text() for t in speed.get_xticklabels()] == ["2×1×2", "2×2×1"]  # the layout that failed has no bar
    assert [p.get_height() for p in speed.patches] == [160.0, 80.0]
    assert [p.get_facecolor()[:3] for p in speed.patches] == [
        tuple(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)) for c in (layout.FIT_COLORS[False], layout.FIT_COLORS[True])]
    assert [p.get_height() for p in memory.patches] == [3.0, 1.0]
    assert [line.get_ydata()[0] for line in memory.get_lines()] == [2.0]  # the capacity, GiB
    assert speed.get_xticklabels()[1].get_fontweight() == "bold"  # the fastest that fits
    from matplotlib import pyplot

    assert not pyplot.get_fignums()  # written and closed


def test_the_layout_sweep_writes_its_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "layouts.png"
    assert main(["whatif", str(RECORDED), "--opt", f"layout:{LINK}", "--sweep", "dp=2,tp=1,2,pp=1", "--world", "4",
                 "--memory", "--plot", str(plot), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(r["dp"], r["tp"], r["pp"]) for r in found["rows"]] == [(2, 2, 1)]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _rendered(rows: list[dict]) -> str:  # type: ignore[type-arg]
    from rich.console import Console

    from daydream.report.layout import render_layouts, summarize_layouts

    console = Console(record=True, width=240)
    render_layouts(summarize_layouts("t.json.gz", 4, 100_000_000, 8, rows), console)
    return console.export_text()


def test_each_reason_a_layout_was_not_predicted_is_said_once_under_the_table() -> None:
    heads, link = "tp: degree=2 does not divide the 3 attention heads", "the link between ranks is unknown"
    rows = [{"dp": 1, "tp": 2, "pp": 2, "spec": "layout:dp=1,tp=2,pp=2", "error": heads},
            {"dp": 2, "tp": 2, "pp": 1, "spec": "layout:dp=2,tp=2,pp=1", "error": heads},
            {"dp": 2, "tp": 1, "pp": 2, "spec": "layout:dp=2,tp=1,pp=2", "error": link}]
    text = _rendered(rows)
    assert text.count(heads) == 1 and text.count(link) == 1
    assert f"(1) {heads}" in text and f"(2) {link}" in text
    assert text.count("not predicted (1)") == 2 and text.count("not predicted (2)") == 1
    assert "no layout of these could be predicted" in text


def test_the_fastest_of_a_trace_without_device_capacity_says_its_fit_is_unknown() -> None:
    # 2 × 1 × 2: 150 ms for 2 replicas' batches (75 ms a batch); 4 × 1 × 1: 240 ms for 4 (60 ms a batch): the faster
    rows = [{"dp": 2, "tp": 1, "pp": 2, "spec": "layout:dp=2,tp=1,pp=2", "predicted_ns": 150_000_000, "fits": None},
            {"dp": 4, "tp": 1, "pp": 1, "spec": "layout:dp=4,tp=1,pp=1", "predicted_ns": 240_000_000, "fits": None}]
    text = _rendered(rows)
    assert "fastest (whether it fits is unknown: no device capacity; add --memory): dp=4, tp=1, pp=1" in text
    rows[1]["fits"] = True
    assert "fastest that fits: dp=4, tp=1, pp=1" in _rendered(rows)
    rows[1]["fits"] = False
    assert "fastest that fits: dp=2, tp=1, pp=2" not in _rendered(rows)  # its fit is unknown
    assert "fastest (whether it fits is unknown" in _rendered(rows) and "dp=2, tp=1, pp=2" in _rendered(rows)
