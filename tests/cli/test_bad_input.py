"""Bad input: one line naming the file and the problem, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from daydream.cli import main
from tests.builders import op, write_trace

VALID = json.dumps({"traceEvents": [op("aten::add", 1, 2, ext=1)] * 200}).encode()


def _bad_files(folder: Path) -> dict[str, Path]:
    files = {
        "empty": b"",
        "truncated gzip": gzip.compress(VALID)[: len(gzip.compress(VALID)) // 2],
        "not JSON": b"\x00\x01binary garbage\xff",
        "empty object": b"{}",
        "empty list": b"[]",
        "list of numbers": b"[1, 2, 3]",
        "trace events not a list": b'{"traceEvents": 5}',
        "no usable events": b'{"traceEvents": [{"foo": 1}, {"bar": 2}]}',
        "all events mistyped": json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": "x", "dur": 1}]}).encode(),
        "all events missing ts": json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "dur": 1}]}).encode(),
        "truncated JSON": VALID[: len(VALID) // 2],
    }
    paths = {}
    for label, data in files.items():
        suffix = ".json.gz" if label == "truncated gzip" else ".json"
        path = folder / (label.replace(" ", "_") + suffix)
        path.write_bytes(data)
        paths[label] = path
    return paths


@pytest.mark.parametrize(
    "label",
    ["empty", "truncated gzip", "not JSON", "empty object", "empty list", "list of numbers",
     "trace events not a list", "no usable events", "all events mistyped", "all events missing ts", "truncated JSON"],
)
def test_bad_file_is_one_line_exit_2_nothing_written(
    label: str, tmp_path: Path, isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _bad_files(tmp_path)[label]
    before = sorted(tmp_path.iterdir())
    code = main(["inspect", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert str(path) in lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert sorted(tmp_path.iterdir()) == before
    assert list(isolated_cache.iterdir()) == []


def test_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["inspect", str(tmp_path / "nope.json")])
    err = capsys.readouterr().err
    assert code == 2 and "no such file" in err and len(err.strip().splitlines()) == 1


def test_folder_without_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code = main(["inspect", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and str(tmp_path) in err and len(err.strip().splitlines()) == 1


def test_corrupt_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "job.tar.gz"
    archive.write_bytes(gzip.compress(b"not a tar archive at all" * 100))
    code = main(["inspect", str(archive)])
    err = capsys.readouterr().err
    assert code == 2 and str(archive) in err and len(err.strip().splitlines()) == 1


def test_bad_iteration_marker_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path, [op("aten::add", 1, 2, ext=1)])
    code = main(["inspect", "--iteration-marker", "(unclosed", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "--iteration-marker" in err and len(err.strip().splitlines()) == 1


def test_unknown_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["inspect", "--frobnicate", "x.json"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--frobnicate" in err


def test_partly_malformed_trace_is_read_with_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = [op("aten::add", 1, 2, ext=1), {"ph": "X", "cat": "cpu_op", "name": "x", "ts": [], "dur": 1}, "junk"]
    path = write_trace(tmp_path, events)
    code = main(["inspect", "--json", str(path)])
    captured = capsys.readouterr()
    assert code == 0
    rank = json.loads(captured.out)["ranks"][0]
    assert rank["events"]["skipped_malformed"] == 2
    assert rank["events"]["kept"] == 1


def test_an_output_that_is_a_device_is_written_in_place_never_replaced(tmp_path: Path) -> None:
    import os
    import stat

    trace = Path(__file__).resolve().parents[2] / "examples" / "traces" / "cnn_v100.json.gz"
    before = os.stat("/dev/null")
    assert main(["report", str(trace), "-o", "/dev/null"]) == 0
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert not list(Path("/dev").glob(".tmp-*"))


def test_an_output_that_is_a_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from daydream._files import write_atomically
    from daydream.errors import InputError

    with pytest.raises(InputError, match="is a directory, not a file"):
        write_atomically(tmp_path, b"x")
    assert tmp_path.is_dir() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("value", ["1e999", "0", "1.2.3"])
def test_a_max_bytes_that_is_no_size_is_one_line(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYDREAM_MAX_BYTES", value)
    trace = Path(__file__).resolve().parents[2] / "examples" / "traces" / "cnn_v100.json.gz"
    assert main(["inspect", str(trace)]) == 2  # the autouse fixture gives each test an empty cache: the file is read
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DAYDREAM_MAX_BYTES" in err[0] and "64GB" in err[0]


def test_an_ascii_only_terminal_gets_the_tables_not_an_internal_error() -> None:
    import os
    import subprocess
    import sys

    trace = Path(__file__).resolve().parents[2] / "examples" / "traces" / "cnn_v100.json.gz"
    done = subprocess.run([sys.executable, "-m", "daydream", "replay", str(trace)], capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"}, check=False)
    assert done.returncode == 0, done.stderr
    assert b"replay of" in done.stdout and b"internal error" not in done.stderr


def test_a_trace_path_with_bytes_that_are_not_utf8_is_read(tmp_path: Path) -> None:
    import os
    import shutil

    path = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"caf\xe9.json.gz"))  # as the shell passes it
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "traces" / "cnn_v100.json.gz", path)
    assert main(["inspect", path]) == 0
    assert main(["inspect", path]) == 0  # and from the cache, whose key is the path


def test_a_rank_that_fails_in_a_worker_process_is_the_same_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pickle
    import shutil

    from daydream.errors import TraceFormatError

    again = pickle.loads(pickle.dumps(TraceFormatError("r.json", "no traceEvents", "hint")))
    assert (again.source, again.problem, again.hint, str(again)) == ("r.json", "no traceEvents", "hint", "r.json: no traceEvents — hint")
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "h200" / "mlp-baseline.json.gz", tmp_path / "rank0.json.gz")
    (tmp_path / "rank1.json").write_text("{}")
    assert main(["replay", str(tmp_path), "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank1.json" in err[0] and "internal error" not in err[0]
