"""A job's ranks read in this process, in worker processes and as Ray tasks give the same replay and prediction."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from daydream import ranks
from daydream.api import open_job, predict_job, replay_job
from daydream.cli import main
from daydream.trace.sources import discover
from tests.generator import Program, generate

RANKS = 64


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 64-rank job: the generated training program, each rank's file with its own rank and a host a little slower
    than the one before, so that every rank's times differ."""
    folder = tmp_path_factory.mktemp("job")
    for rank in range(RANKS):
        program = Program(iterations=3, forward=[(30_000, 20_000)] * 40, backward=[(10_000, 40_000)] * 40,
                          optimizer=[(5_000, 10_000)] * 10)
        document = generate(program, host_scale=1.0 + rank / 100)
        document["distributedInfo"] = {"rank": rank, "world_size": RANKS, "backend": "nccl"}
        (folder / f"rank{rank:02d}.json.gz").write_bytes(gzip.compress(json.dumps(document).encode()))
    return folder


def _local_ray() -> Any:
    """Ray, started here with 2 CPUs; the test is skipped (and says why) where Ray itself cannot start."""
    ray = pytest.importorskip("ray")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - Ray's own start-up (ports, shared memory), not daydream's code
        pytest.skip(f"a local Ray could not start on this machine: {type(exc).__name__}: {str(exc)[:200]}")
    return ray


def _figures(replays: list) -> list[tuple[int | None, list[tuple[int, int]]]]:  # type: ignore[type-arg]
    return [(r.trace.meta.rank, [(it.simulated_start_ns, it.simulated_end_ns) for it in r.iterations]) for r in replays]


def test_worker_processes_give_what_one_process_gives(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranks.SETTINGS, "workers", 1)
    alone = replay_job(job, cache=False)
    assert [r.trace.meta.rank for r in alone] == list(range(RANKS))
    assert len({r.iterations[-1].simulated_end_ns - r.iterations[0].simulated_start_ns for r in alone}) == RANKS
    monkeypatch.setattr(ranks.SETTINGS, "workers", 2)
    spawned: list[int] = []
    original = ranks._with_processes
    monkeypatch.setattr(ranks, "_with_processes", lambda workers, *rest: spawned.append(workers) or original(workers, *rest))
    assert _figures(replay_job(job, cache=False)) == _figures(alone)
    predicted = predict_job(job, ["faster-host:factor=2"], cache=False)
    assert spawned == [2, 2]
    monkeypatch.setattr(ranks.SETTINGS, "workers", 1)
    assert [p.predicted_ns for p in predicted] == [p.predicted_ns for p in predict_job(job, ["faster-host:factor=2"], cache=False)]


def test_how_many_workers(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = discover(job)
    monkeypatch.setattr(ranks.SETTINGS, "workers", None)
    monkeypatch.delenv(ranks.WORKERS_ENV, raising=False)
    assert ranks.worker_count(sources) == 1  # a few MB in all: workers would cost more than they save
    monkeypatch.setattr(ranks, "PARALLEL_FROM_BYTES", 1)
    assert ranks.worker_count(sources) == min(RANKS, os.cpu_count() or 1)
    assert ranks.worker_count(sources[:1]) == 1
    monkeypatch.setenv(ranks.WORKERS_ENV, "3")
    assert ranks.worker_count(sources) == 3
    monkeypatch.setenv(ranks.WORKERS_ENV, "three")
    with pytest.raises(Exception, match="DAYDREAM_WORKERS='three' is not a number"):
        ranks.worker_count(sources)


def test_the_cli_reads_ranks_as_told(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(job), "--workers", "2", "--json", "--no-cache"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert main(["replay", str(job), "--workers", "1", "--json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out) == two
    assert ranks.SETTINGS.workers is None  # a command's --workers ends with it
    assert main(["replay", str(job), "--workers", "0"]) == 2


def test_ray_tasks_give_what_one_process_gives(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = _local_ray()
    try:
        monkeypatch.setattr(ranks.SETTINGS, "ray", "local")
        through_ray = replay_job(job, cache=False)
        monkeypatch.setattr(ranks.SETTINGS, "ray", None)
        monkeypatch.setattr(ranks.SETTINGS, "workers", 1)
        assert _figures(through_ray) == _figures(replay_job(job, cache=False))
        assert len(open_job(job, cache=False).traces) == RANKS
    finally:
        ray.shutdown()


def test_ray_missing_is_an_input_error(monkeypatch: pytest.MonkeyPatch, job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as where Ray is not installed: importing it fails
    assert main(["replay", str(job), "--ray", "local", "--no-cache"]) == 2
    assert "needs Ray: pip install 'ray>=2.40'" in capsys.readouterr().err


def test_a_sweep_through_ray_gives_what_one_process_gives(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ray = _local_ray()
    try:
        first = sorted(discover(job), key=lambda s: s.label)[:2]  # two ranks keep it short
        folder = job.parent / "two"
        folder.mkdir(exist_ok=True)
        for source in first:
            (folder / source.path.name).write_bytes(source.path.read_bytes())
        command = ["whatif", str(folder), "--opt", "faster-host", "--sweep", "factor=1.5,2,3", "--json", "--no-cache"]
        assert main([*command, "--workers", "1"]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert main([*command, "--ray", "local"]) == 0
        assert json.loads(capsys.readouterr().out) == alone
        assert len(alone["points"]) == 3
        # A task's own error comes back as itself: a parameter out of range is a usage error, not a Ray traceback.
        assert main(["whatif", str(folder), "--opt", "faster-host", "--sweep", "factor=2,-1", "--ray", "local"]) == 2
        assert "Traceback" not in capsys.readouterr().err
    finally:
        ray.shutdown()
