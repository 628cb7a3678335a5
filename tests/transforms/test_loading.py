"""overlap-data-loading on hand-made CPU traces whose step times are worked out by hand.

Each trace: iterations of a DataLoader range of L ms (one collate `aten::stack` inside) followed by S ms of compute
(`aten::mm`). With N workers the training thread keeps S plus the cost of receiving a batch; the workers make a batch
every L / N ms at best, so a steady step takes max(S + receive, L / N).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daydream.cost.host import DEFAULT_UNIT_NS, RECORDED_HOST_UNITS
from daydream.errors import InputError
from daydream.simulate.whatif import predict
from daydream.trace import read_job
from tests.builders import annotation, op, write_trace

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
#: A batch of one tensor (one aten::stack in the collate), on the default host unit (the traces hold no unit ops).
RECEIVE_MS = (RECORDED_HOST_UNITS["dataloader.receive.batch"] + RECORDED_HOST_UNITS["dataloader.receive.tensor"]) \
    * DEFAULT_UNIT_NS / 1e6


def _trace(folder: Path, load_ms: float, step_ms: float, cpus: int = 4, iterations: int = 6, loader: str = SINGLE,
           threads: int = 1) -> Path:
    events, at, ext = [], 0.0, 1
    for number in range(iterations):
        length = load_ms + step_ms
        events.append(annotation(f"ProfilerStep#{number}", at, length * 1e3))
        events.append(annotation(loader, at, load_ms * 1e3))
        events.append(op("aten::stack", at + 0.2 * load_ms * 1e3, 0.6 * load_ms * 1e3, ext))
        events.append(op("aten::mm", at + load_ms * 1e3, step_ms * 1e3, ext + 1))
        at, ext = at + length * 1e3, ext + 2
    return write_trace(folder, events, daydream={"host": {"cpus": cpus, "intra_op_threads": threads}})


def _steady_ms(path: Path, spec: str) -> tuple[float, list[str]]:
    prediction = predict(read_job(path).traces[0], [spec])
    return prediction.predicted_ns / 1e6, prediction.notes


@pytest.mark.parametrize(("load_ms", "step_ms", "workers", "expected_ms"), [
    (4.0, 10.0, 1, 10.0),    # the worker keeps ahead: the step loses its 4 ms of loading
    (30.0, 10.0, 1, 30.0),   # one worker makes a batch every 30 ms: the step waits for it
    (30.0, 10.0, 2, 15.0),   # two: every 15 ms
    (30.0, 10.0, 4, 10.0),   # four: every 7.5 ms, faster than the step
])
def test_the_step_takes_the_longer_of_its_own_work_and_the_workers_pace(
        tmp_path: Path, load_ms: float, step_ms: float, workers: int, expected_ms: float) -> None:
    baseline, _ = _steady_ms(_trace(tmp_path, load_ms, step_ms), "faster-host:factor=1")
    assert baseline == pytest.approx(load_ms + step_ms, rel=1e-3)
    predicted, notes = _steady_ms(_trace(tmp_path, load_ms, step_ms), f"overlap-data-loading:workers={workers}")
    bound_by_workers = load_ms / workers > step_ms + RECEIVE_MS
    expected = expected_ms if bound_by_workers else step_ms + RECEIVE_MS
    assert predicted == pytest.approx(expected, rel=0.01)
    assert any("DataLoader batches" in note and f"{workers} worker" in note for note in notes)


def test_workers_share_the_cores_the_training_process_leaves(tmp_path: Path) -> None:
    # 2 CPUs, 1 intra-op thread: one spare core. Three workers share it, each batch taking 3 x 30 ms: a batch every
    # 30 ms, as with one worker.
    predicted, notes = _steady_ms(_trace(tmp_path, 30.0, 10.0, cpus=2), "overlap-data-loading:workers=3")
    assert predicted == pytest.approx(30.0, rel=0.01)
    assert any("share the host's 1 spare CPU" in note for note in notes)


def test_no_spare_core_predicts_no_change_and_says_why(tmp_path: Path) -> None:
    path = _trace(tmp_path, 4.0, 10.0, cpus=2, threads=2)
    predicted, notes = _steady_ms(path, "overlap-data-loading:workers=2")
    assert predicted == pytest.approx(14.0, rel=1e-3)
    assert any("all compute for the training process" in note for note in notes)


def test_a_loader_that_already_has_workers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="already runs worker processes"):
        predict(read_job(_trace(tmp_path, 4.0, 10.0, loader=MULTI)).traces[0], ["overlap-data-loading"])


def test_a_trace_without_a_dataloader_is_refused(tmp_path: Path) -> None:
    path = write_trace(tmp_path, [annotation(f"ProfilerStep#{n}", n * 1e4, 1e4) for n in range(3)]
                       + [op("aten::mm", n * 1e4 + 10, 9e3, n + 1) for n in range(3)])
    with pytest.raises(InputError, match="no DataLoader batches"):
        predict(read_job(path).traces[0], ["overlap-data-loading"])


def test_the_workers_appear_in_the_predicted_timeline(tmp_path: Path) -> None:
    import json

    from daydream.cli import main

    out = tmp_path / "predicted.json"
    path = _trace(tmp_path, 30.0, 10.0, iterations=4)
    assert main(["whatif", str(path), "--opt", "overlap-data-loading:workers=2", "--timeline", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert threads.get("data-loader worker 0") == "data-loader worker 0"
    assert threads.get("data-loader worker 1") == "data-loader worker 1"
    batches = [e for e in events if e.get("name") == "DataLoader worker: batch"]
    assert len(batches) == 4 and {e["tid"] for e in batches} == {"data-loader worker 0", "data-loader worker 1"}
    # Each batch ends before the compute that waits for it starts.
    computes = sorted((e for e in events if e.get("name") == "aten::mm"), key=lambda e: e["ts"])
    for batch, compute in zip(sorted(batches, key=lambda e: e["ts"] + e["dur"]), computes):
        assert batch["ts"] + batch["dur"] <= compute["ts"] + 1e-3
