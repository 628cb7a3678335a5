"""The Kineto reader on tiny hand-built traces whose every value is known."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from daydream.errors import TraceFormatError
from daydream.trace import GPU_ACTIVITY_KINDS, NO_VALUE, EventKind, TrackKind, read_job
from tests.builders import annotation, kernel, op, runtime, write_trace


def _read(path: Path):  # type: ignore[no-untyped-def]
    return read_job(path, cache=False).traces[0]


def test_fractional_microseconds_become_exact_nanoseconds(tmp_path: Path) -> None:
    events = [
        op("aten::mm", 4458677009853.422, 2636.669, ext=5),
        kernel("gemm", 4458677009900.001, 0.999, correlation=9, ext=5),
    ]
    trace = _read(write_trace(tmp_path, events, name="t.json.gz", baseTimeNanoseconds=1711964646000000000))
    assert trace.ts_ns.tolist() == [4458677009853422, 4458677009900001]
    assert trace.dur_ns.tolist() == [2636669, 999]
    assert trace.meta.base_time_ns == 1711964646000000000
    assert "baseTimeNanoseconds" in trace.meta.features


def test_epoch_microseconds_keep_sub_microsecond_precision(tmp_path: Path) -> None:
    trace = _read(write_trace(tmp_path, [op("aten::add", 1712184698123456.5, 1.25, ext=1)]))
    assert trace.ts_ns[0] == 1712184698123456500
    assert trace.dur_ns[0] == 1250


def test_legacy_2021_categories_and_string_stream_tids(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#5", "pid": 10, "tid": "10", "ts": 100, "dur": 900,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 10, "tid": "10", "ts": 110, "dur": 50,
         "args": {"External id": 2}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": "10", "ts": 120, "dur": 5,
         "args": {"correlation": 77, "external id": 2}},
        {"ph": "X", "cat": "Kernel", "name": "implicit_gemm", "pid": 0, "tid": "stream 7", "ts": 130, "dur": 20,
         "args": {"device": 0, "stream": 7, "correlation": 77, "external id": 2, "grid": [4, 2, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": "stream 7", "ts": 160, "dur": 3,
         "args": {"correlation": 78, "external id": 2, "bytes": 4096}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 10, "tid": 10, "ts": 115,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Addr": 1234, "Total Allocated": 512}},
        {"ph": "s", "id": 77, "pid": 10, "tid": 10, "ts": 120, "cat": "async", "name": "launch"},
    ]
    trace = _read(write_trace(tmp_path, events))
    assert trace.meta.format.startswith("Kineto 2021")
    kinds = {trace.name_of(i): EventKind(int(trace.kind[i])) for i in range(len(trace))}
    assert kinds == {
        "ProfilerStep#5": EventKind.ANNOTATION,
        "aten::conv2d": EventKind.CPU_OP,
        "cudaLaunchKernel": EventKind.RUNTIME,
        "implicit_gemm": EventKind.KERNEL,
        "Memcpy HtoD": EventKind.MEMCPY,
        "[memory]": EventKind.MEMORY,
    }
    gpu_track = trace.tracks[int(trace.track[trace.indices(EventKind.MEMCPY)[0]])]
    assert (gpu_track.kind, gpu_track.device, gpu_track.stream) == (TrackKind.GPU, 0, 7)
    runtime_row = trace.indices(EventKind.RUNTIME)[0]
    assert trace.external_id[runtime_row] == 2  # the lowercase key points at the op
    assert trace.bytes[trace.indices(EventKind.MEMCPY)[0]] == 4096
    config = trace.tables["launch_config"]
    assert config["grid_x"].tolist() == [4] and config["block_x"].tolist() == [128]
    memory = trace.tables["memory"]
    assert memory["addr"].tolist() == [1234] and memory["total_allocated"].tolist() == [512]
    assert memory["total_reserved"].tolist() == [-1]  # not in the event
    assert trace.bytes[memory["event"][0]] == 512


def test_collective_and_sync_side_tables(tmp_path: Path) -> None:
    events = [
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 10, 5, correlation=3, ext=3, stream=40,
               **{"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2,
                  "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}),
        kernel("elementwise", 20, 5, correlation=4, ext=4),
        {"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": -1, "ts": 30, "dur": 2,
         "args": {"cuda_sync_kind": "Event Sync", "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 4,
                  "wait_on_cuda_event_id": 8, "stream": -1, "correlation": 5, "device": 0}},
    ]
    trace = _read(write_trace(tmp_path, events))
    assert trace.count(EventKind.COMMUNICATION) == 1 and trace.count(EventKind.KERNEL) == 1
    coll = trace.tables["collective"]
    assert trace.strings[int(coll["collective_str"][0])] == "allreduce"
    assert coll["in_nelems"].tolist() == [1024] and coll["group_size"].tolist() == [2]
    assert trace.name_of(int(coll["event"][0])).startswith("ncclKernel")
    sync = trace.tables["sync"]
    assert sync["wait_on_event_record_correlation"].tolist() == [4]
    assert sync["wait_on_stream"].tolist() == [7]


def test_rows_sorted_by_start_parents_first(tmp_path: Path) -> None:
    events = [
        runtime("cudaLaunchKernel", 12, 2, correlation=1, ext=1),
        op("aten::inner", 10, 5, ext=2),
        op("aten::outer", 10, 20, ext=3),
    ]
    trace = _read(write_trace(tmp_path, events))
    assert [trace.name_of(i) for i in range(len(trace))] == ["aten::outer", "aten::inner", "cudaLaunchKernel"]


def test_top_level_event_array_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "array.json"
    path.write_text('[{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]')
    trace = _read(path)
    assert len(trace) == 1 and trace.name_of(0) == "aten::add"


def test_malformed_events_are_skipped_and_counted(tmp_path: Path) -> None:
    events = [
        op("aten::good", 1, 2, ext=1),
        {"ph": "X", "cat": "cpu_op", "name": "aten::bad_ts", "pid": 1, "tid": 1, "ts": "soon", "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "aten::no_dur", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 4, "dur": 1, "args": {"correlation": "x"}},
        42,
        op("aten::also_good", 5, 2, ext=2),
    ]
    trace = _read(write_trace(tmp_path, events))
    # A number field that holds no number is read as absent: the kernel stays, unlinked.
    assert sorted(trace.name_of(i) for i in range(len(trace))) == ["aten::also_good", "aten::good", "k"]
    kernel = [i for i in range(len(trace)) if trace.name_of(i) == "k"][0]
    assert trace.correlation[kernel] == NO_VALUE
    assert trace.meta.skipped_total == 3
    assert trace.meta.skipped["missing dur"] == 1
    assert trace.meta.skipped["event is not a JSON object"] == 1


def test_numbers_written_as_strings_are_read_as_numbers(tmp_path: Path) -> None:
    # ROCm builds write some args as strings: "stream": "0x0", "bytes": "128".
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
         "args": {"correlation": "7", "bytes": "128", "stream": "0x1f"}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "pid": 0, "tid": 31, "ts": 4, "dur": 1,
         "args": {"correlation": 7, "bytes": "128", "stream": "0x1f", "device": "0"}},
    ]
    trace = _read(write_trace(tmp_path, events))
    assert len(trace) == 2 and trace.meta.skipped_total == 0
    assert trace.correlation.tolist() == [7, 7]
    assert trace.bytes.tolist() == [128, 128]
    gpu_track = trace.tracks[int(trace.track[1])]
    assert gpu_track.stream == 31 and gpu_track.device == 0


def test_unused_events_are_dropped_but_counted(tmp_path: Path) -> None:
    events = [
        op("aten::add", 1, 2, ext=1),
        {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 1, "tid": 1, "ts": 0, "dur": 9},
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "ac2g"},
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        annotation("ProfilerStep#1", 0, 10),
    ]
    trace = _read(write_trace(tmp_path, events))
    assert len(trace) == 2
    assert trace.meta.events_in_file == 5
    assert trace.meta.categories == {"<none>": 1, "ac2g": 1, "cpu_op": 1, "python_function": 1, "user_annotation": 1}


def test_metadata_gpus_rank_world_size(tmp_path: Path) -> None:
    events = [kernel("k", 1, 1, correlation=1, ext=1)]
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85, "computeMajor": 9, "computeMinor": 0,
              "numSms": 132}, {"id": 1, "name": "NVIDIA H100 80GB HBM3"}]
    trace = _read(write_trace(tmp_path, events, deviceProperties=props,
                              distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8}))
    assert (trace.meta.rank, trace.meta.world_size) == (3, 8)
    assert trace.gpu_names == ["NVIDIA H100 80GB HBM3"]
    assert trace.meta.gpus[0].compute_capability == "9.0" and trace.meta.gpus[0].sm_count == 132
    assert np.array_equal(trace.track_is_gpu(), [True])


def test_gloo_work_on_its_threads_is_communication(tmp_path: Path) -> None:
    events = [annotation("ProfilerStep#1", 0, 100), op("c10d::allreduce_", 10, 2, ext=1),
              annotation("gloo:all_reduce", 12, 30, tid=7), annotation("gloo:broadcast", 50, 5, tid=8),
              annotation("## backward ##", 5, 50)]
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    kinds = {trace.strings[int(n)]: EventKind(int(k)) for n, k in zip(trace.name, trace.kind)}
    assert kinds["gloo:all_reduce"] == kinds["gloo:broadcast"] == EventKind.HOST_COMMUNICATION
    assert kinds["## backward ##"] == EventKind.ANNOTATION and kinds["c10d::allreduce_"] == EventKind.CPU_OP
    # Still a CPU trace: gloo's threads are host threads, and there is no GPU activity.
    assert all(track.kind == TrackKind.HOST for track in trace.tracks) and trace.count(*GPU_ACTIVITY_KINDS) == 0


def _hard_to_cut(count: int) -> list[dict[str, object]]:
    """Events whose text holds what looks like a place two events meet: "},{" inside names and inside a nested
    list of objects in the args."""
    events: list[dict[str, object]] = []
    for i in range(count):
        events.append(op("aten::mm", 10.0 * i, 5.0, ext=i + 1, note='x"},{"y', shapes=[{"a": 1}, {"b": i}]))
        events.append(kernel(f"gemm_{i % 7}}},{{tail", 10.0 * i + 1, 2.0, correlation=1000 + i, ext=i + 1))
    return events


def test_a_streamed_read_cuts_only_between_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Read in windows of a few hundred bytes, the text is cut hundreds of times; every "},{" inside a string or a
    # nested list is a false cut that must be refused. Envelope keys on both sides of the events are kept.
    from daydream.trace import kineto

    events = _hard_to_cut(200)
    path = write_trace(tmp_path, events, "t.json.gz", deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    text = gzip.decompress(path.read_bytes())
    monkeypatch.setattr(kineto.stream, "WINDOW", 300)
    whole = kineto.document._split_checked
    monkeypatch.setattr(kineto.document, "_split_checked", None)  # the whole-document path is not taken
    streamed = _read(path)
    assert len(streamed) == 400 and streamed.meta.events_in_file == 400
    names = sorted(streamed.strings[n] for n in streamed.name[streamed.kind == EventKind.KERNEL])
    assert names == sorted(f"gemm_{i % 7}}},{{tail" for i in range(200))
    assert [gpu.name for gpu in streamed.meta.gpus] == ["NVIDIA H100 80GB HBM3"]
    # The envelope after the events too: the same document with the key moved behind them reads the same.
    document = json.loads(text)
    after = tmp_path / "after.json"
    after.write_text(json.dumps({"traceEvents": document["traceEvents"], "deviceProperties": document["deviceProperties"]}))
    moved = _read(after)
    monkeypatch.setattr(kineto.document, "_split_checked", whole)
    assert [gpu.name for gpu in moved.meta.gpus] == ["NVIDIA H100 80GB HBM3"]
    assert np.array_equal(moved.ts_ns, streamed.ts_ns) and moved.strings == streamed.strings
    # And as a bare list of events.
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(document["traceEvents"]))
    assert np.array_equal(_read(bare).name, streamed.name)


def test_a_document_the_stream_cannot_cut_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # "traceEvents" first appears as a key of another value: the stream gives up and the whole-document read finds
    # the document's own key, the same events.
    from daydream.trace import kineto

    monkeypatch.setattr(kineto.stream, "WINDOW", 300)
    whole = kineto.document._split_checked
    wholes: list[str] = []
    monkeypatch.setattr(kineto.document, "_split_checked",
                        lambda raw, source, progress: wholes.append(source) or whole(raw, source, progress))
    decoy = tmp_path / "decoy.json"
    decoy.write_text(json.dumps({"meta": {"traceEvents": [1]}, "traceEvents": _hard_to_cut(20)}))
    assert len(_read(decoy)) == 40 and wholes == [str(decoy)]
    malformed = tmp_path / "malformed.json"
    malformed.write_text(json.dumps({"traceEvents": [*_hard_to_cut(20), {"ph": "X", "cat": "kernel", "ts": "late"}]}))
    trace = _read(malformed)
    assert len(trace) == 40 and trace.meta.skipped == {"mistyped ts": 1}
    assert wholes == [str(decoy)]  # a malformed event is skipped within the stream


def test_an_event_nested_deeper_than_the_decoder_goes_is_one_error_in_the_stream_too(tmp_path: Path,
                                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # 100,000 levels inside one event's args, past the first window: the stream's cut stops on it and the
    # whole-document path names the problem, as for a small file.
    from daydream.trace import kineto

    monkeypatch.setattr(kineto.stream, "WINDOW", 300)
    depth = 100_000
    deep = '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "args": ' \
        + '{"a": ' * depth + "1" + "}" * depth + "}"
    events = [json.dumps(e) for e in _hard_to_cut(20)]
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [' + ", ".join([*events[:30], deep, *events[30:]]) + "]}")
    with pytest.raises(TraceFormatError, match="nested deeper than a trace ever is"):
        _read(path)


@pytest.mark.parametrize("window", [300, 8 << 20])  # cut many times, and read in one window
def test_names_that_are_not_utf8_are_kept_with_replacement_characters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       window: int) -> None:
    # The bytes of a lone surrogate (UTF-8 cannot hold one) and a Latin-1 byte, raw in two op names.
    from daydream.trace import kineto

    monkeypatch.setattr(kineto.stream, "WINDOW", window)
    events = [json.dumps(e) for e in _hard_to_cut(20)]
    named = [json.dumps(op(f"NAME{i}", 5000.0 + i, 1.0, ext=900 + i)).encode() for i in range(2)]
    bad = [named[0].replace(b"NAME0", b"aten::\xed\xa0\x80mm"), named[1].replace(b"NAME1", b"caf\xe9")]
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"traceEvents": [' + b", ".join([*(e.encode() for e in events[:25]), *bad, *(e.encode() for e in events[25:])])
                     + b"]}")
    trace = _read(path)
    assert len(trace) == 42 and not trace.meta.skipped
    names = {trace.strings[n] for n in trace.name}
    assert {"aten::\ufffd\ufffd\ufffdmm", "caf\ufffd"} <= names
    # and in the envelope (a device's name): the whole document is read with the bad bytes replaced
    envelope = tmp_path / "envelope.json"
    envelope.write_bytes(b'{"deviceProperties": [{"id": 0, "name": "H\xff100"}], "traceEvents": ['
                         + b", ".join(e.encode() for e in events) + b"]}")
    device = _read(envelope)
    assert len(device) == 40 and [gpu.name for gpu in device.meta.gpus] == ["H\ufffd100"]


def test_streaming_elementwise_ops_get_the_bytes_they_read_and_write(tmp_path: Path) -> None:
    shapes = {"aten::mul_": ([[512, 256], []], ["float", "double"]),  # in place by a 0-dim tensor: 512 KiB twice + 8
              "aten::add": ([[4, 8], [8]], ["c10::Half", "c10::Half"]),  # broadcast: 64 + 16 read, 64 written
              "aten::copy_": ([[[2], [2]], [2]], ["TensorList", "float"]),  # an untyped list counts nothing: 8 + 8
              "aten::relu": ([[1024]], ["float"])}  # not a streaming copy: no row
    events = [op(name, 10 * k, 5, ext=k, **{"Input Dims": dims, "Input type": types})
              for k, (name, (dims, types)) in enumerate(shapes.items())]
    events.append(op("aten::div_", 50, 5, ext=9))  # no shapes recorded
    trace = _read(write_trace(tmp_path, events))
    table = trace.tables["elementwise"]
    assert [trace.name_of(int(e)) for e in table["event"]] == ["aten::mul_", "aten::add", "aten::copy_"]
    assert table["bytes"].tolist() == [2 * 512 * 256 * 4 + 8, 64 + 16 + 64, 16]


@pytest.mark.parametrize("reader", ["read_job", "open_job"])
def test_an_archive_of_many_ranks_is_read_in_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    # 300 ranks packed out of name order: reading them in archive order opens the archive twice in all (the listing,
    # then one forward pass), however many members it holds; the ranks come back in rank order.
    import io
    import random
    import tarfile

    from daydream import api
    from daydream.trace import read_job

    world = 300
    archive = tmp_path / "ranks.tar.gz"
    order = list(range(world))
    random.Random(7).shuffle(order)
    with tarfile.open(archive, "w:gz") as packed:
        for rank in order:
            document = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
                        "traceEvents": [op("aten::mm", 10.0 + rank, 5.0, ext=1), annotation("ProfilerStep#1", 0.0, 50.0)]}
            data = json.dumps(document).encode()
            info = tarfile.TarInfo(f"rank{rank:04d}.json")
            info.size = len(data)
            packed.addfile(info, io.BytesIO(data))
    opened: list[str] = []
    real_open = tarfile.open

    def counting_open(*args: object, **kwargs: object) -> tarfile.TarFile:
        opened.append(str(args[0]))
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tarfile, "open", counting_open)
    job = read_job(archive, cache=False) if reader == "read_job" else api.open_job(archive, cache=False)
    assert [t.meta.rank for t in job.traces] == list(range(world))
    assert len(opened) == 2
