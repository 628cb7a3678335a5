"""A new user's first hour: every --help example runs as written, mistakes get a suggestion, output says what it did."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from daydream.cli import main
from tests.builders import op, write_trace
from tests.conftest import REPO

try:
    import torch  # noqa: F401  (in CI the test extras install torch; its absence is a failure)
except ImportError:
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("torch is not installed", allow_module_level=True)

COMMANDS = ("trace", "inspect", "replay", "whatif", "memory", "report", "diff", "check")
EXAMPLE_TRACE = REPO / "examples" / "traces" / "cnn_v100.json.gz"


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("daydream: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/mlp.py recorded on the CPU (3 iterations)."""
    out = tmp_path_factory.mktemp("cpu") / "mlp.json.gz"
    assert main(["trace", "--backend", "torch", "-o", str(out), str(REPO / "examples" / "mlp.py"), "--", "--steps", "6"]) == 0
    return out


def _help_examples(command: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    return [line.strip() for line in text.splitlines() if line.strip().startswith("daydream ")]


def test_every_help_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # From a copy of the repository's examples, as the help text says ("from daydream's repository folder").
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("daydream-traces"))
    monkeypatch.chdir(tmp_path)
    ran = []
    for command in COMMANDS:
        examples = _help_examples(command, capsys)
        assert examples, f"daydream {command} --help shows no example"
        for example in examples:
            argv = example.split()[1:]
            code = main(argv)
            captured = capsys.readouterr()
            # check's exit 1 is a broken bound: its example's bounds hold CPU timings, which a loaded machine moves.
            assert code == 0 or (command == "check" and code == 1), (example, captured.err[-500:])
            ran.append(example)
    assert len(ran) >= 2 * len(COMMANDS) - 2
    assert (tmp_path / "run.json.gz").is_file() and (tmp_path / "report.html").is_file()
    assert (tmp_path / "memory.png").is_file() and (tmp_path / "simulated.json.gz").is_file()


def test_the_help_examples_that_read_a_trace_run_outside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # They read the traces shipped in the package (example:NAME), so they run from an installed wheel in any folder.
    monkeypatch.chdir(tmp_path)
    for command in ("inspect", "replay", "whatif", "report", "diff"):
        examples = _help_examples(command, capsys)
        reading = [e for e in examples if "example:" in e]
        assert reading and all("examples/" not in e for e in examples), examples
        assert main(reading[0].split()[1:]) == 0, reading[0]
        capsys.readouterr()
    assert main(["inspect", "example:no-such"]) == 2
    assert "the examples are example:cnn_v100, example:ddp_a100_rank0" in _one_error_line(capsys.readouterr().err)


def test_bare_daydream_shows_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "Usage: daydream" in captured.out and all(command in captured.out for command in COMMANDS)


@pytest.mark.parametrize("argv, suggestion", [
    (["inpsect", "x.json"], "no command 'inpsect' — did you mean 'inspect'?"),
    (["trace", "--warmpu", "2", "train.py"], "no option '--warmpu' — did you mean '--warmup'?"),
    (["whatif", str(EXAMPLE_TRACE), "--opt", "ampp"], "unknown optimization 'ampp' — did you mean 'amp'?"),
    (["whatif", str(EXAMPLE_TRACE), "--opt", "batch-size:factr=2"],
     "no parameter 'factr' (parameters: factor, batch, fixed_percentile) — did you mean 'factor'?"),
    (["whatif", str(EXAMPLE_TRACE), "--opt", "batch-size:factor"], "factor has no value — write factor=VALUE"),
])
def test_a_mistake_gets_a_suggestion(argv: list[str], suggestion: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert suggestion in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e308"])
def test_parameters_are_finite_and_in_range(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(EXAMPLE_TRACE), "--opt", f"faster-gpu:factor={value}"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"factor={value}" in line and ("finite" in line or "out of range" in line)


def test_bandwidth_takes_units(capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(REPO / "examples" / "traces" / "ddp_a100_rank0.json.gz")
    results = []
    for bandwidth in ("25", "25GB/s", "200Gbps", "200Gb/s"):
        assert main(["whatif", trace, "--opt", "no-comm", "--opt", f"ddp:world=8,bandwidth={bandwidth}", "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out)["iteration_ns"]["predicted"])
    assert len(set(results)) == 1  # 200 Gbit/s is 25 GB/s
    assert main(["whatif", trace, "--opt", "no-comm", "--opt", "ddp:bandwidth=fast"]) == 2
    assert "is not a bandwidth (e.g. 25GB/s or 200Gbps)" in _one_error_line(capsys.readouterr().err)


def test_square_brackets_print_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLE_TRACE, "exp[red].json.gz")
    assert main(["whatif", "exp[red].json.gz", "--opt", "amp"]) == 0
    assert "exp[red].json.gz" in capsys.readouterr().out
    no_memory = write_trace(tmp_path, [op("aten::add", 1, 2, ext=1), op("aten::mul", 4, 2, ext=2)], "plain.json")
    assert main(["memory", str(no_memory)]) == 0
    assert f"{no_memory}: no [memory] events — record with profile_memory=True" in capsys.readouterr().out


def test_options_after_the_script_are_refused_or_noticed(capsys: pytest.CaptureFixture[str]) -> None:
    script = str(REPO / "examples" / "mlp.py")
    assert main(["trace", script, "--warmup", "2"]) == 2  # an option only daydream has
    line = _one_error_line(capsys.readouterr().err)
    assert "--warmup after" in line and "put daydream's options before" in line and f"daydream trace {script} -- --warmup" in line
    # -o is an option many scripts have: it goes to the script, which refuses it here, and the notice says why.
    assert main(["trace", script, "-o", "x.json.gz"]) == 1
    err = capsys.readouterr().err
    assert f"daydream: -o after {script} goes to the script; daydream's own -o goes before" in err
    assert "unrecognized arguments: -o x.json.gz" in err


def test_a_script_that_fails_before_the_capture_shows_its_own_traceback(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "crash.py"
    script.write_text("def helper():\n    raise ValueError('boom in the script')\n\nhelper()\n")
    assert main(["trace", str(script)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err and "in helper" in err and "ValueError: boom in the script" in err
    assert err.strip().splitlines()[-1].startswith("daydream: error: ")
    assert "daydream/" not in err.replace(str(REPO / "examples"), "")  # daydream's own frames are left out


def test_a_step_function_never_called_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "--step-fn", "no_such_function", str(REPO / "examples" / "mlp.py"), "--", "--steps", "3"]) == 2
    assert "--step-fn no_such_function was never called" in _one_error_line(capsys.readouterr().err)


def test_trace_without_torch_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["trace", str(REPO / "examples" / "mlp.py")]) == 2
    assert "torch is not installed" in _one_error_line(capsys.readouterr().err)


def test_plot_without_matplotlib_fails_before_the_work(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setattr("daydream.api.open_job", lambda *a, **k: pytest.fail("read the trace before saying"))
    assert main(["memory", str(EXAMPLE_TRACE), "--plot", "m.png"]) == 2
    assert "--plot needs matplotlib" in _one_error_line(capsys.readouterr().err)


def test_cpu_traces_are_described_in_cpu_words(cpu_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(cpu_trace)]) == 0
    text = capsys.readouterr().out
    assert "GPU idle" not in text and "launch queue depth" not in text and "rank None" not in text
    assert "CPU only" in text
    assert main(["replay", str(cpu_trace), "--json"]) == 0
    assert [rank["device"] for rank in json.loads(capsys.readouterr().out)["ranks"]] == ["cpu"]
    assert main(["whatif", str(cpu_trace), "--opt", "no-host-overhead", "--json"]) == 2
    assert "faster-host" in _one_error_line(capsys.readouterr().err)


def test_every_command_reads_the_newest_trace_by_default(cpu_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "daydream-traces"
    (folder / "train-ranks").mkdir(parents=True)
    shutil.copy(EXAMPLE_TRACE, folder / "old.json.gz")
    os.utime(folder / "old.json.gz", (time.time() - 3600,) * 2)
    shutil.copy(cpu_trace, folder / "train-ranks" / "rank0.json.gz")  # the newest: a ranks folder
    for command in ("inspect", "replay", "memory"):
        assert main([command, "--json"]) == 0, command
        captured = capsys.readouterr()
        assert "daydream-traces/train-ranks (the newest trace" in captured.err
    assert main(["whatif", "--opt", "faster-host", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"].endswith("train-ranks")


def test_every_file_written_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    timeline = tmp_path / "t.json.gz"
    assert main(["replay", str(EXAMPLE_TRACE), "--timeline", str(timeline)]) == 0
    assert f"daydream: wrote {timeline}" in capsys.readouterr().err
    assert main(["whatif", str(EXAMPLE_TRACE), "--opt", "amp", "--timeline", str(timeline)]) == 0
    assert f"daydream: wrote {timeline}" in capsys.readouterr().err
    with gzip.open(timeline, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    names = {(e["name"], e["args"]["name"]) for e in events if e["ph"] == "M"}
    assert ("process_name", "GPU 0 (Tesla V100-SXM2-32GB)") in names and ("thread_name", "stream 7") in names
    assert min(e["tid"] for e in events if e["ph"] == "X") >= 0
    # Every thread and process that holds an event is named.
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"} <= named


def test_the_distribution_has_a_name_of_its_own() -> None:
    from importlib.metadata import version

    from daydream import __version__

    assert version("daydream-profiler") == __version__
    text = (REPO / "examples" / "ci" / "daydream.yml").read_text()
    assert not re.search(r"pip install daydream(\s|$)", text)


def test_ranks_that_disagree_on_the_world_size_are_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with gzip.open(REPO / "examples" / "traces" / "ddp_a100_rank0.json.gz", "rt") as handle:
        document = json.load(handle)
    for rank, world in ((0, 2), (1, 4)):
        document["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(document))
    assert main(["replay", str(tmp_path), "--json"]) == 0
    notes = [note for rank in json.loads(capsys.readouterr().out)["ranks"] for note in rank["notes"]]
    assert any("the ranks disagree on the world size (rank 0: 2, rank 1: 4)" in note for note in notes)


def test_at_80_columns_the_replay_table_keeps_every_figure_whole(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from daydream.report.console import format_ns

    trace = str(REPO / "examples" / "traces" / "cnn_v100.json.gz")
    assert main(["replay", "--json", trace]) == 0
    iterations = json.loads(capsys.readouterr().out)["ranks"][0]["iterations"]
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["replay", trace]) == 0
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) <= 80
    for it in iterations:  # each figure on one line, uncut
        assert format_ns(it["measured_ns"]) in shown and f"{it['signed_error'] * 100:+.2f}%" in shown
    assert "…" not in shown.split("╭")[0]  # the replay table itself: nothing cut to an ellipsis


def test_data_parallel_throughput_is_the_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(REPO / "examples" / "h200" / "mlp-baseline.json.gz")  # examples/mlp.py at --batch-size 2048
    assert main(["whatif", trace, "--opt", "ddp:world=8", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["job_ranks"] == {"baseline": 1, "predicted": 8}
    assert summary["samples_per_s"]["predicted"] == pytest.approx(8 * 2048 * 1e9 / summary["iteration_ns"]["predicted"])


def test_two_captures_of_one_process_are_runs_not_a_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    source = REPO / "examples" / "h200" / "mlp-baseline.json.gz"  # records no rank
    document = json.loads(gzip.decompress(source.read_bytes()))
    (folder / "host_1234.1.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(document).encode()))
    document["baseTimeNanoseconds"] += 3_600 * 10**9  # the same process, captured an hour later
    (folder / "host_1234.2.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(document).encode()))
    assert main(["replay", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    ranks = json.loads(captured.out)["ranks"]
    assert len(ranks) == 1 and ranks[0]["source"].endswith("host_1234.2.pt.trace.json.gz")  # the newest
    said = captured.err.strip().splitlines()
    assert len(said) == 1 and "2 captures of one process" in said[0] and "reading the newest" in said[0]
    assert main(["replay", str(folder), "--json", "--run", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["source"].endswith("host_1234.1.pt.trace.json.gz")
    assert main(["inspect", str(folder), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [Path(run).name for run in runs] == ["host_1234.1.pt.trace.json.gz", "host_1234.2.pt.trace.json.gz"]
    assert main(["whatif", str(folder), "--opt", "amp", "--run", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--run 2" in err[0] and "runs 0 to 1" in err[0]


def _figures(command: list[str], document: dict[str, Any]) -> list[str]:
    """The figures a command's default output must show whole, taken from its --json output."""
    from daydream.report.console import format_bytes, format_ns

    if command[0] == "whatif" and "points" in document:
        return [format_ns(point["predicted_ns"]) for point in document["points"]]
    if command[0] == "whatif":
        return [format_ns(document["iteration_ns"]["predicted"]), f"{document['speedup']:.2f}x"]
    if command[0] == "inspect":
        return [format_ns(it["measured_ns"]) for it in document["ranks"][0]["iterations"]]
    if command[0] == "memory":
        return [format_bytes(device["peak_allocated_bytes"]) for device in document["devices"]]
    if command[0] == "replay":
        return [format_ns(it["measured_ns"]) for rank in document["ranks"] for it in rank["iterations"]]
    return []


@pytest.mark.parametrize("command", [
    ["whatif", "examples/traces/cnn_v100.json.gz", "--opt", "amp"],
    ["whatif", "examples/traces/cnn_v100.json.gz", "--opt", "gpu", "--sweep", "target=A100,H100"],
    ["inspect", "examples/traces/cnn_v100.json.gz"],
    ["memory", "examples/loading/round-1/cnn-workers-0.json.gz"],
    ["replay", "CORPUS/param/et_replay_inputs/dlrm_kineto.tar.gz"],
    ["diff", "examples/h200/mlp-baseline.json.gz", "examples/h200/mlp-amp.json.gz"],
])
def test_at_80_columns_every_command_keeps_its_figures_whole(command: list[str], corpus: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    command = [part.replace("CORPUS", str(corpus)) if part.startswith("CORPUS") else
               str(REPO / part) if part.startswith("examples/") else part for part in command]
    if command[0] != "diff":
        assert main([*command, "--json"]) == 0
        figures = _figures(command, json.loads(capsys.readouterr().out))
        assert figures
    else:
        figures = []
    monkeypatch.setenv("COLUMNS", "80")
    assert main(command) == 0  # stdout is captured: not a terminal, as in a CI log or a pipe
    shown = capsys.readouterr().out
    assert shown and max(len(line) for line in shown.splitlines()) <= 80
    for figure in figures:
        assert figure in shown, figure
