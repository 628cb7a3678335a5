"""The warning on recorded iterations that spent much of their time in the kernel (simulate/kernel_time.py)."""

from __future__ import annotations

from daydream.simulate.kernel_time import kernel_time_warning

MiB = 2**20


def _iteration(faults: int, system_ms: float, wall_ms: float) -> dict[str, int]:
    return {"minor_faults": faults, "major_faults": 0, "system_ns": int(system_ms * 1e6), "wall_ns": int(wall_ms * 1e6)}


def test_kernel_bound_iterations_are_said_with_their_medians() -> None:
    collector = {"host_usage": {"iterations": [_iteration(10, 1, 430), _iteration(16384, 550, 1000),
                                               _iteration(16384, 570, 1020), _iteration(12000, 60, 500)],
                                "max_rss_bytes": [545 * MiB, 1058 * MiB]}}
    warning = kernel_time_warning(collector)
    assert warning is not None
    # three are at least a tenth in the kernel (60 of 500 is 12%): medians of 60, 550, 570 and of 500, 1000, 1020
    assert warning.startswith("3 of the 4 recorded iterations spent a median 550.0 ms of 1,000.0 ms in the kernel "
                              "(16,384 page faults an iteration; the process's resident memory grew from 545 to 1,058 MiB")


def test_quiet_iterations_and_other_traces_say_nothing() -> None:
    assert kernel_time_warning({"host_usage": {"iterations": [_iteration(0, 0, 430), _iteration(5, 40, 430)]}}) is None
    assert kernel_time_warning({}) is None                      # not a daydream recording, or an older one
    assert kernel_time_warning(None) is None
    assert kernel_time_warning({"host_usage": {"iterations": [{"minor_faults": "x"}, _iteration(1, 1, 0)]}}) is None


def test_all_iterations_bound_and_no_growth() -> None:
    warning = kernel_time_warning({"host_usage": {"iterations": [_iteration(100, 50, 100)],
                                                  "max_rss_bytes": [10 * MiB, 10 * MiB]}})
    assert warning is not None and warning.startswith("the recorded iterations spent a median 50.0 ms of 100.0 ms "
                                                      "in the kernel (100 page faults an iteration): ")
