"""The examples' variant flags, and the predicted-against-measured comparison gpu_check.sh runs on a GPU, driven on the CPU."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from daydream.cli import main
from tests.builders import load_raw, ns
from tests.conftest import REPO

if os.environ.get("CI") == "true":
    import torch  # noqa: F401
else:
    pytest.importorskip("torch")

sys.path.insert(0, str(REPO / "scripts"))
import whatif_truth  # noqa: E402

MLP = str(REPO / "examples" / "mlp.py")


def _trace(tmp_path: Path, name: str, *script_args: str) -> Path:
    out = tmp_path / f"{name}.json.gz"
    assert main(["trace", "--backend", "torch", "--warmup", "1", "--iterations", "2", "-o", str(out), MLP, "--",
                 "--steps", "4", *script_args]) == 0
    return out


def _input_types(path: Path) -> set[str]:
    return {t for e in load_raw(path)["traceEvents"] if e.get("cat") == "cpu_op"
            for t in e.get("args", {}).get("Input type", []) if isinstance(t, str)}


def _op_names(path: Path) -> set[str]:
    return {e["name"] for e in load_raw(path)["traceEvents"] if e.get("cat") == "cpu_op"}


def test_amp_on_the_cpu_really_autocasts_and_optim_picks_the_implementation(tmp_path: Path) -> None:
    plain = _trace(tmp_path, "plain", "--optim", "loop")
    amp = _trace(tmp_path, "amp", "--amp", "--optim", "foreach")
    assert "c10::BFloat16" not in _input_types(plain)
    assert "c10::BFloat16" in _input_types(amp)  # the linear layers ran in bf16 under autocast
    assert not any(name.startswith("aten::_foreach_") for name in _op_names(plain))
    assert any(name.startswith("aten::_foreach_") for name in _op_names(amp))


@pytest.mark.parametrize("flags, message", [
    (["--cuda-graphs"], "--cuda-graphs needs a CUDA device"),
    (["--optim", "fused"], "--optim fused needs a CUDA device"),
    (["--amp", "fp16"], "--amp fp16 needs a CUDA device"),
])
def test_variants_that_need_a_gpu_say_so(flags: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, MLP, "--steps", "1", "--device", "cpu", *flags], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode != 0 and message in done.stderr


def test_the_step_function_of_the_shared_loop_is_found_beside_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    # training:train_step is imported from the script's folder (it ends iterations under --cuda-graphs);
    # on the CPU the eager loop never calls it, which is said, rather than "cannot import".
    assert main(["trace", "--step-fn", "training:train_step", MLP, "--", "--steps", "3"]) == 2
    assert "--step-fn training:train_step was never called" in capsys.readouterr().err


def test_the_table_from_hand_computed_rows() -> None:
    rows = [whatif_truth.Row("mlp", "amp", 10e6, 6e6, 5e6),
            whatif_truth.Row("mlp", "cuda-graphs", 10e6, problem="needs a CUDA device"),
            whatif_truth.Row("cnn", "fused-optimizer", 8e6, 7e6, 8e6)]
    text = whatif_truth.table(rows)
    assert "| mlp | `amp` | 10.00 ms | 6.00 ms | 5.00 ms | +20.0% |" in text
    assert "| mlp | `cuda-graphs` | 10.00 ms | — | — | needs a CUDA device |" in text
    assert "| cnn | `fused-optimizer` | 8.00 ms | 7.00 ms | 8.00 ms | -12.5% |" in text
    assert "2 of 3 what-ifs measured; mean |error| 16.2%, median 16.2%, worst 20.0%." in text
    # Rows the cost stage timed nothing for (no model on this device) are summarized apart from those it timed.
    tiered = [whatif_truth.Row("mlp", "amp", 10e6, 6e6, 5e6, tiers="3 measured"),
              whatif_truth.Row("mlp", "batch-size:factor=2", 10e6, 19e6, 20e6, tiers="5 modelled"),
              whatif_truth.Row("mlp", "fuse-elementwise", 10e6, 10e6, 5e6)]
    assert whatif_truth.table(tiered).endswith(
        "3 of 3 what-ifs measured; mean |error| 41.7%, median 20.0%, worst 100.0%. The 2 with a model here (the "
        "others predict their baseline): mean 12.5%, median 12.5%, worst 20.0%, 1 within 10%.\n")


def test_the_memory_table_compares_predicted_peaks_with_the_allocators(tmp_path: Path) -> None:
    mib = 2**20
    rows = [whatif_truth.Row("cnn", "amp", 10e6, 6e6, 5e6, predicted_peak=300 * mib, baseline_peak=500 * mib,
                             real_peak=400 * mib),
            whatif_truth.Row("cnn", "checkpoint", 10e6, 6e6, 5e6, predicted_peak=None, baseline_peak=500 * mib,
                             real_peak=250 * mib),
            whatif_truth.Row("cnn", "fused-optimizer", 10e6, 6e6, 5e6)]  # no real peak (the CPU): no row
    text = whatif_truth.memory_table(rows)
    assert "| cnn | `amp` | 500 MiB | 300 MiB | 400 MiB | -25.0% |" in text
    assert "| cnn | `checkpoint` | 500 MiB | — | 250 MiB | — |" in text and "fused-optimizer" not in text
    assert "1 peaks compared; mean |error| 25.0%" in text
    assert whatif_truth.memory_table(rows[2:]) == ""
    # examples/training.py writes the allocator's peak beside the trace; a missing or empty file is no peak
    trace = tmp_path / "cnn-amp.json.gz"
    assert whatif_truth.real_peak(trace) is None
    whatif_truth.peak_file(trace).write_text("123456")
    assert whatif_truth.peak_file(trace).name == "cnn-amp.peak" and whatif_truth.real_peak(trace) == 123456


def test_rounds_combine_by_example_and_whatif_when_a_round_is_cut_short() -> None:
    # Round 2 stopped after its first example (the table is written as each example ends): the second example keeps
    # its round-1 row, and each row's medians come from its own rounds only.
    first = [whatif_truth.Row("cnn", "amp", 10e6, 12e6, 10e6), whatif_truth.Row("transformer", "amp", 20e6, 18e6, 20e6)]
    second = [whatif_truth.Row("cnn", "amp", 10e6, 8e6, 10e6)]
    rows = whatif_truth.combined([first, second])
    assert [(r.example, r.whatif) for r in rows] == [("cnn", "amp"), ("transformer", "amp")]
    assert rows[0].round_errors == [0.2, -0.2] and rows[0].predicted_ns == 10e6
    assert rows[1].round_errors == [-0.1] and rows[1].predicted_ns == 18e6


def test_a_variant_replaces_the_baselines_flag() -> None:
    assert whatif_truth._merged(["--batch-size", "64", "--optim", "loop"], ["--optim", "fused"]) == \
        ["--batch-size", "64", "--optim", "fused"]
    assert whatif_truth._merged(["--batch-size", "64"], ["--checkpoint"]) == ["--batch-size", "64", "--checkpoint"]
    assert whatif_truth._merged(["--batch-size", "64"], ["--batch-size", "128"]) == ["--batch-size", "128"]


def test_whatifs_take_first_words_or_whole_specs_and_refuse_unknown_names() -> None:
    assert whatif_truth.chosen_whatifs("batch-size:factor=2, amp") == {"batch-size", "amp"}
    assert whatif_truth.chosen_whatifs("") == set()
    with pytest.raises(SystemExit, match=r"--whatifs bach-size: no such what-if here; choose from .*batch-size"):
        whatif_truth.chosen_whatifs("amp,bach-size")


_OWN_SCRIPT = """
import argparse, torch
p = argparse.ArgumentParser()
for flag in ("--device", "--optim"):
    p.add_argument(flag, default="cpu")
p.add_argument("--steps", type=int, default=5)
p.add_argument("--batch-size", type=int, default=4)
a = p.parse_args()
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=a.optim == "foreach")
x, y = torch.randn(a.batch_size, 32), torch.randint(0, 4, (a.batch_size,))
for _ in range(a.steps):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_a_script_of_ones_own_is_compared_under_its_stem(tmp_path: Path) -> None:
    script = tmp_path / "mytrain.py"
    script.write_text(_OWN_SCRIPT)
    out, keep = tmp_path / "table.md", tmp_path / "kept"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "whatif_truth.py"), "--device", "cpu", "--script", str(script),
                           "--script-args", "--batch-size 4", "--whatifs", "fused-optimizer", "--warmup", "1",
                           "--iterations", "2", "--keep", str(keep), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| mytrain |")]
    assert len(rows) == 1 and "`fused-optimizer`" in rows[0] and "%" in rows[0]
    assert sorted(p.name for p in keep.iterdir()) == ["mytrain-baseline.json.gz", "mytrain-fused-optimizer.json.gz"]
    # the variant really ran the script's foreach optimizer, the baseline its loop
    names = {e["name"] for e in load_raw(keep / "mytrain-fused-optimizer.json.gz")["traceEvents"] if e.get("cat") == "cpu_op"}
    assert "aten::_foreach_add_" in names


@pytest.mark.parametrize(("make", "arguments", "message"), [
    (False, "--batch-size 4", "--script {path}: no such file"),
    (True, "--size 32", "--script-args '--size 32': name the baseline's batch (--batch-size N)"),
])
def test_a_script_of_ones_own_that_cannot_run_says_why(tmp_path: Path, make: bool, arguments: str, message: str) -> None:
    path = tmp_path / "train.py"
    if make:
        path.write_text(_OWN_SCRIPT)
    with pytest.raises(SystemExit, match=re.escape(message.format(path=path))):
        whatif_truth.own_script(path, arguments, r"blocks\.\d+$")


def test_keep_freed_heap_reaches_every_process_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str]] = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(dict(kwargs["env"]))  # type: ignore[call-overload]
        return subprocess.CompletedProcess(command, 0, stdout="{}", stderr="")

    monkeypatch.setattr(whatif_truth.subprocess, "run", run)
    whatif_truth.daydream(["whatif", "t.json"], 10.0)
    assert "MALLOC_MMAP_THRESHOLD_" not in seen[-1] or os.environ.get("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("DAYDREAM_CACHE_DIR", "/somewhere")
    monkeypatch.setattr(whatif_truth, "HEAP_ENV", whatif_truth.keep_freed())
    whatif_truth.daydream(["trace", "x.py"], 10.0, env={"DAYDREAM_PEAK_FILE": "p"})
    assert seen[-1]["MALLOC_MMAP_THRESHOLD_"] == str(32 * 2**20) and seen[-1]["MALLOC_TRIM_THRESHOLD_"] == str(64 * 2**20)
    # its measured times kept apart from the default heap's
    assert seen[-1]["DAYDREAM_CACHE_DIR"] == "/somewhere/heap-keep-freed" and seen[-1]["DAYDREAM_PEAK_FILE"] == "p"


def test_the_comparison_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    options = argparse.Namespace(device="cpu", backend="torch", warmup=1, iterations=3, budget=180.0)
    rows = whatif_truth.compare("mlp", options, tmp_path)
    offload = f"offload:layers={whatif_truth.CHECKPOINT.partition('layers=')[2]},prefetch=0,stream=compute"
    width = f"width:layers={whatif_truth.CHECKPOINT.partition('layers=')[2]},factor=2"  # the mlp names its --width
    assert [row.whatif for row in rows] == ["amp", "fused-optimizer", "cuda-graphs", "batch-size:factor=2",
                                            whatif_truth.CHECKPOINT, "compile", offload, width]
    # The baseline's measured time is the median of its recorded ProfilerSteps, read from the file itself.
    steps = [e for e in load_raw(tmp_path / "mlp-baseline.json.gz")["traceEvents"]
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 3
    assert rows[0].baseline_ns == pytest.approx(statistics.median(ns(e["dur"]) for e in steps), abs=1)
    for row in rows:
        if row.whatif in ("cuda-graphs", offload):
            assert row.problem == "needs a CUDA device" and row.error is None
        else:
            assert not row.problem, row.problem
            assert row.predicted_ns and row.measured_ns and row.error is not None
    assert whatif_truth.table(rows).count("\n| mlp |") == 8


def test_gpu_check_without_a_gpu_exits_2_with_one_line() -> None:
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable}, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["gpu_check: no CUDA GPU visible to torch (needs python3 with a CUDA "
                                                "build of torch and a GPU)"]


def test_rounds_combine_into_medians_and_the_median_error() -> None:
    rounds = [[whatif_truth.Row("mlp", "amp", 10e6, 6e6, 5e6)],   # +20%
              [whatif_truth.Row("mlp", "amp", 12e6, 6e6, 6e6)],   # 0%
              [whatif_truth.Row("mlp", "amp", 11e6, 5e6, 4e6)]]   # +25%
    row = whatif_truth.combined(rounds)[0]
    assert (row.baseline_ns, row.predicted_ns, row.measured_ns) == (11e6, 6e6, 5e6)
    assert row.error == pytest.approx(0.20)
    assert "| mlp | `amp` | 11.00 ms | 6.00 ms | 5.00 ms | +20.0% | 3 (+0.0% to +25.0%) |" in whatif_truth.table([row])


@pytest.mark.parametrize("round_number", [1, 2])
def test_paired_rounds_predict_each_variant_from_a_baseline_traced_next_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, round_number: int) -> None:
    traced: list[str] = []
    predicted_from: list[str] = []

    def trace(script: Path, out: Path, *rest: object, **keywords: object) -> float:
        traced.append(out.name)
        return float(len(traced))  # the n-th run traced took n ns

    def predicted(path: Path, whatif: str, budget: float, memory: bool = False) -> tuple[float, str, None]:
        predicted_from.append(path.name)
        return 100.0, "", None

    monkeypatch.setattr(whatif_truth, "trace", trace)
    monkeypatch.setattr(whatif_truth, "predicted_ns", predicted)
    monkeypatch.setattr(whatif_truth, "drift", lambda *arguments: None)
    monkeypatch.setattr(whatif_truth, "CHOSEN", {"amp", "batch-size", "compile"})
    options = argparse.Namespace(device="cpu", paired=True, round=round_number, budget=10.0)
    rows = whatif_truth.compare("mlp", options, tmp_path)
    if round_number == 1:  # odd rounds: each baseline just before its variant (the first variant's is the round's)
        assert traced == ["mlp-baseline.json.gz", "mlp-amp.json.gz", "mlp-baseline-batch-x2.json.gz",
                          "mlp-batch-x2.json.gz", "mlp-baseline-compile.json.gz", "mlp-compile.json.gz"]
        assert [(r.baseline_ns, r.measured_ns) for r in rows] == [(1, 2), (3, 4), (5, 6)]
    else:  # even rounds: just after it
        assert traced == ["mlp-baseline.json.gz", "mlp-amp.json.gz", "mlp-batch-x2.json.gz",
                          "mlp-baseline-batch-x2.json.gz", "mlp-compile.json.gz", "mlp-baseline-compile.json.gz"]
        assert [(r.baseline_ns, r.measured_ns) for r in rows] == [(1, 2), (4, 3), (6, 5)]
    assert predicted_from == ["mlp-baseline.json.gz", "mlp-baseline-batch-x2.json.gz", "mlp-baseline-compile.json.gz"]


def test_kept_paired_rounds_are_compared_with_each_variants_own_baseline(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("mlp-baseline", "mlp-amp", "mlp-batch-x2", "mlp-baseline-batch-x2"):
        (tmp_path / f"{name}.json.gz").write_bytes(b"")
    times = {"mlp-baseline.json.gz": 10.0, "mlp-baseline-batch-x2.json.gz": 12.0, "mlp-amp.json.gz": 20.0,
             "mlp-batch-x2.json.gz": 30.0}
    predicted_from: list[str] = []

    def predicted(path: Path, whatif: str, budget: float, memory: bool = False) -> tuple[float, str, None]:
        predicted_from.append(path.name)
        return 100.0, "", None

    monkeypatch.setattr(whatif_truth, "measured_ns", lambda path, budget: times[path.name])
    monkeypatch.setattr(whatif_truth, "predicted_ns", predicted)
    monkeypatch.setattr(whatif_truth, "drift", lambda *arguments: None)
    monkeypatch.setattr(whatif_truth, "CHOSEN", {"amp", "batch-size"})
    rows = whatif_truth.recorded("mlp", tmp_path, argparse.Namespace(device="cpu", budget=10.0))
    assert [(r.whatif, r.baseline_ns, r.measured_ns) for r in rows] == [("amp", 10.0, 20.0),
                                                                        ("batch-size:factor=2", 12.0, 30.0)]
    assert predicted_from == ["mlp-baseline.json.gz", "mlp-baseline-batch-x2.json.gz"]


def test_a_paired_baseline_that_fails_says_so_on_its_variants_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def trace(script: Path, out: Path, *rest: object, **keywords: object) -> float:
        if out.name == "mlp-baseline-batch-x2.json.gz":
            raise whatif_truth.Failed("ran past its 10 s budget")
        return 1.0

    monkeypatch.setattr(whatif_truth, "trace", trace)
    monkeypatch.setattr(whatif_truth, "predicted_ns", lambda *arguments, **keywords: (1.0, "", None))
    monkeypatch.setattr(whatif_truth, "drift", lambda *arguments: None)
    monkeypatch.setattr(whatif_truth, "CHOSEN", {"amp", "batch-size"})
    for round_number in (1, 2):
        rows = whatif_truth.compare("mlp", argparse.Namespace(device="cpu", paired=True, round=round_number, budget=10.0),
                                    tmp_path)
        assert [r.problem for r in rows] == ["", "baseline: ran past its 10 s budget"]
