"""The window scanner (daydream/trace/kineto/scan.py) reads what msgspec reads, the same way, in both of its
implementations (the C extension and numba's kernels: every test runs on each that is here).

msgspec is the reference throughout: each trace is read twice, once by msgspec alone and once with the scanner
reading every window it can, and the two results must be equal to the bit; numbers are checked against
msgspec's own parse of the same text.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import numpy as np
import pytest

from daydream.trace import read_job
from daydream.trace.kineto import layout, scan, scanned, stream
from daydream.trace.kineto.schema import _Args
from daydream.trace.model import Trace

IMPLEMENTATIONS = scan.available()


@pytest.fixture(autouse=True, params=IMPLEMENTATIONS or ["none"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once per implementation of the scanner that is here."""
    if request.param == "none":
        pytest.skip("neither the C scanner was built nor numba is here")
    monkeypatch.setattr(scan, "IMPLEMENTATION", request.param)
    return str(request.param)


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch, window: int | None = None) -> tuple[Trace, Trace]:
    """(the trace msgspec alone reads, the trace read with the scanner first); the scanner must have read
    some of the events itself."""
    if window is not None:
        monkeypatch.setattr(stream, "WINDOW", window)
    monkeypatch.setattr(stream, "SCANNER", False)
    plain = read_job(path, cache=False).traces[0]
    monkeypatch.setattr(stream, "SCANNER", True)
    monkeypatch.setattr(stream, "SCAN_FROM", 0)
    read = _counted(monkeypatch)
    with_scanner = read_job(path, cache=False).traces[0]
    assert sum(read) > 0
    return plain, with_scanner


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The events the scanner reads from here on, a call at a time."""
    read: list[int] = []
    original = scanned.scan_events

    def counted(buffer: bytearray, start: int, end: int,
                scratch: scanned.Scratch | None) -> tuple[scanned.ScannedRows | None, int, int]:
        found = original(buffer, start, end, scratch)
        read.append(0 if found[0] is None else found[0].size)
        return found

    monkeypatch.setattr(scanned, "scan_events", counted)
    return read


def _assert_same(a: Trace, b: Trace) -> None:
    assert a.strings == b.strings
    assert a.tracks == b.tracks
    assert a.meta == b.meta
    assert a.columns.keys() == b.columns.keys()
    for key in a.columns:
        assert np.array_equal(a.columns[key], b.columns[key]), key
    assert a.tables.keys() == b.tables.keys()
    for name in a.tables:
        for column in a.tables[name]:
            assert np.array_equal(a.tables[name][column], b.tables[name][column], equal_nan=True), (name, column)


# One event per line; each is what a profiler of some vintage writes, or a way a file goes wrong. Times in µs
# as 2023 Kineto writes them (13 digits and a fraction), some past what a double holds exactly.
_EVENTS = [
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 9, "ts": 4458676522689.047, "dur": 12.5,'
    ' "args": {"External id": 3, "Sequence number": 11, "Input Dims": [[4, 8], [8, 16]],'
    ' "Input type": ["float", "float"], "Fwd thread id": 0}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 7, "tid": 9, "ts": 4458676522702.5, "dur": 3,'
    ' "args": {"External id": 4, "Input Dims": [[4, 16], [4, 16], []], "Input type": ["float", "float", "Scalar"]}}',
    '{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":7,"tid":9,"ts":4458676522690,"dur":4,'
    '"args":{"correlation":101,"External id":3,"cbid":211}}',
    '{"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn \\"tiled\\" \\u00e9", "pid": 0, "tid": 7,'
    ' "ts": 4458676522695.001, "dur": 20.125, "args": {"correlation": 101, "External id": 3, "device": 0,'
    ' "stream": 7, "grid": [8, 4, 1], "block": [256, 1, 1], "registers per thread": 128, "shared memory": 0}}',
    '{"ph": "X", "cat": "Kernel", "name": "legacy_kernel", "pid": 0, "tid": "stream 7", "ts": 100, "dur": 2,'
    ' "args": {"correlation": 102, "external id": 5}}',
    '{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 13, "ts": 120,'
    ' "dur": 50, "args": {"correlation": 103, "device": "0x0", "stream": "13", "Collective name": "allreduce",'
    ' "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "dtype": "Float",'
    ' "Process Group Ranks": [0, 1]}}',
    '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 9, "ts": 4458676522700, "s": "t",'
    ' "args": {"Device Type": 1, "Device Id": 0, "Addr": 140000000000, "Bytes": 4096, "Total Allocated": 8192,'
    ' "Total Reserved": 2097152}}',
    '{"ph": "i", "name": "[memory]", "pid": 7, "tid": 9, "ts": 4458676522701, "args": {"Bytes": -4096}}',
    '{"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": 7, "ts": 130, "dur": 1,'
    ' "args": {"cuda_sync_kind": "event", "wait_on_stream": 13, "wait_on_cuda_event_record_corr_id": 99}}',
    '{"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 11, "pid": 7, "tid": 9, "ts": 4458676522689.5}',
    '{"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 11, "pid": 7, "tid": 10, "ts": 4458676522800, "bp": "e"}',
    '{"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": "not-an-int", "pid": 7, "tid": 9, "ts": 1}',
    '{"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 7, "tid": 9,'
    ' "ts": 4458676522688, "dur": 40, "args": {"Python id": 3, "Python parent id": 1}}',
    '{"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1520): _call_impl", "pid": 7,'
    ' "tid": 9, "ts": 4458676522688, "dur": 40}',
    '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 7, "tid": 9, "ts": 4458676522680,'
    ' "dur": 500, "args": null, "id": null}',
    '{"ph": "X", "cat": "cpu_op", "name": "名前 😀", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1e2, "dur": 0,'
    ' "args": {}}',
    '{"ph": "M", "name": "thread_name", "pid": 7, "tid": 9, "args": {"name": "thread 9 (python)"}}',
    '{"cat": "cpu_op", "name": "aten::empty", "pid": 7, "tid": 9, "ts": 4458676522690.25, "dur": 0.5,'
    ' "args": {"External id": 12, "Sequence number": 99999999999999999999}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::deep", "pid": 7, "tid": 9, "ts": 50, "dur": 1,'
    ' "args": {"trace": ' + "[" * 70 + "]" * 70 + '}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::escaped_key", "pid": 7, "tid": 9, "ts": 51, "dur": 1,'
    ' "\\u0061rgs": {"External id": 13}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::twice", "pid": 7, "tid": 9, "ts": 52, "dur": 1, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "late", "pid": 0, "tid": 7, "ts": "late", "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "no_dur", "pid": 0, "tid": 7, "ts": 60}',
    '{"ph": "X", "cat": "kernel", "name": "exact", "pid": 0, "tid": 7, "ts": 4458676522701.12345, "dur": 0.333}',
    '{"ph": "X", "cat": "kernel", "name": "long", "pid": 0, "tid": 7, "ts": 4458676522700.12345678, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "negative", "pid": 0, "tid": 7, "ts": 61, "dur": -1}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 7, "tid": 9, "ts": -0.0, "dur": 1E3,'
    ' "args": {"External id": 14, "Input Dims": [[1024], [1024], []], "Input type": ["c10::Half", "float", ""],'
    ' "Concrete Inputs": ["", "", "False"], "Input Strides": [[1], [1], []]}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::int_as_float", "pid": 7, "tid": 9, "ts": 70, "dur": 1,'
    ' "args": {"External id": 1.5}}',
]


def _document(events: list[str], spacing: str) -> str:
    return '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-16GB"}],' \
        f' "traceEvents": [{spacing}' + f",{spacing}".join(events) + f'{spacing}], "baseTimeNanoseconds": 17}}'


@pytest.mark.parametrize("window", [None, 700, 257])
@pytest.mark.parametrize("spacing", ["", "\n  "])
def test_the_scanner_reads_every_kind_of_event_as_msgspec_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int | None, spacing: str) -> None:
    # Small windows cut the text inside events, numbers and strings; the events the scanner is unsure of (a key
    # written with an escape, a key given twice, a mistyped field, nesting past its depth) go to msgspec, which
    # skips and counts the malformed ones as it always has.
    path = tmp_path / "t.json"
    path.write_text(_document(_EVENTS * 3, spacing), encoding="utf-8")
    plain, scanned = _read_both(path, monkeypatch, window)
    _assert_same(plain, scanned)
    assert plain.meta.skipped  # the malformed events were met, and counted alike
    assert len(plain) > 40


def test_a_bare_list_of_events_ends_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bare.json"
    path.write_text("[" + ",".join(_EVENTS[:6]) + "]\n")
    _assert_same(*_read_both(path, monkeypatch, 300))


def test_events_are_counted_once_the_text_after_them_is_read() -> None:
    events = [json.dumps({"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": i, "dur": 1})
              for i in range(3)]
    text = "[" + ", ".join(events)
    cut = bytearray(text[:-5].encode())  # the third event is not all there
    read, stop, status = scanned.scan_events(cut, 1)
    assert read is not None and read.size == 2 and status == scan.PARTIAL
    assert stop == text.index(events[2])
    whole = bytearray((text + "]").encode())
    read, stop, status = scanned.scan_events(whole, 1)
    assert read is not None and read.size == 3 and status == scan.END and whole[stop:] == b"]"
    refused = bytearray(("[" + events[0] + ', {"ph": "X", "ph": "X"}, ' + events[1] + "]").encode())
    read, stop, status = scanned.scan_events(refused, 1)
    assert read is not None and read.size == 1 and status == scan.FAILED
    assert refused[stop:].startswith(b'{"ph": "X", "ph"')
    assert scanned.scan_events(bytearray(b"[]"), 1) == (None, 1, scan.END)


def test_the_hot_args_are_fields_of_the_args_struct() -> None:
    # The scanner reads these args itself; they must be the very fields `_Args` gives for those keys.
    fields = {field.encode_name: field.name for field in msgspec.structs.fields(_Args)}
    assert [fields[key] for key in layout.HOT_KEYS] == list(layout.HOT_FIELDS)
    assert [fields[key] for key in layout.RAW_KEYS] == list(layout.RAW_FIELDS)
    assert [fields[key] for key in layout.DIM_KEYS] == list(layout.DIM_KEYS)


def _numbers(count: int) -> list[str]:
    generator = random.Random(7)
    texts = ["0", "-0", "1", "-1", "9007199254740992", "9007199254740993", "4503599627370496.5",
             "4503599627370497.5", "0.1", "0.5", "1.0005", "123456789012345678", "9223372036854775807",
             "9223372036854775808", "1712195495519689.047", "1712195495519689.125", "1712195495519689.375",
             "99999999999999999.99", "2.5e-3", "1E5", "1e-400", "0.000000000000000000001", "1.7976931348623157e308"]
    for _ in range(count):
        whole = generator.choice([generator.randrange(10**6), generator.randrange(10**15, 2 * 10**15),
                                  generator.randrange(2**53 - 1000, 2**53 + 1000), generator.randrange(10**18)])
        places = generator.choice([0, 1, 3, 3, 6, 9, 17])
        fraction = f".{generator.randrange(10**places):0{places}d}" if places else ""
        texts.append(f"{'-' if generator.random() < 0.2 else ''}{whole}{fraction}")
    return texts


def test_numbers_are_read_to_the_bit_msgspec_reads() -> None:
    for text in _numbers(3000):
        after, kind, value, number = scan.number((text + ",").encode(), 0)
        assert after == len(text), text
        if kind == 1:
            assert value == int(text) and number == msgspec.json.decode(text, type=float), text
        elif kind == 3:
            expected = msgspec.json.decode(text, type=float)
            assert np.float64(number).tobytes() == np.float64(expected).tobytes(), text
        else:  # read in Python: as msgspec does, where msgspec reads it at all
            assert kind in (2, 4), text
            try:
                expected = msgspec.json.decode(text, type=float)
            except msgspec.ValidationError:
                continue
            assert float(text) == expected, text


def test_corpus_traces_read_the_same(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Real traces of three vintages and two vendors, read in windows small enough to cut each many times.
    for name in ("kineto/tb_plugin_samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
                 "hta/nccl_parser_config/nccl_data.json.gz",
                 "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                 "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"):
        _assert_same(*_read_both(corpus / name, monkeypatch, 1 << 20))


def test_a_small_document_is_scanned_only_where_loading_the_scanner_costs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, implementation: str) -> None:
    # Loading numba's scanner costs more than it saves on a document of a few MB, so msgspec reads it alone; the C
    # scanner costs nothing to load and reads every document (where it is the default).
    assert stream.SCAN_FROM == (0 if IMPLEMENTATIONS[0] == "c" else 64 << 20)
    scanned_rows = _counted(monkeypatch)
    monkeypatch.setattr(stream, "SCAN_FROM", 0 if implementation == "c" else 64 << 20)
    path = tmp_path / "small.json"
    path.write_text(_document(_EVENTS[:6] * 100, "\n"))
    assert len(read_job(path, cache=False).traces[0]) == 600
    assert sum(scanned_rows) == (600 if implementation == "c" else 0)


def test_a_window_still_viewed_is_copied_not_overwritten() -> None:
    # The window keeps one buffer as events are dropped from it; where something still views its text (a value
    # msgspec decoded), that text is left as it was and the window goes on in a copy.
    class Blocks:
        def blocks(self, progress: object = None) -> list[bytes]:
            return [b'[{"a": 1}, ', b'{"b": 2}]']

    window = stream._Window(Blocks(), None)  # type: ignore[arg-type]
    window.fill(100)
    assert window.text[:window.size] == bytearray(b'[{"a": 1}, {"b": 2}]')
    kept = window.text
    view = memoryview(kept)
    window.drop(window.text.index(b'{"b"'))
    assert window.text[:window.size] == bytearray(b'[{"b": 2}]') and window.text is not kept
    assert view.tobytes().startswith(b'[{"a": 1}')
    view.release()
    copy = window.text
    window.drop(1)  # nothing read: the same text, in the same buffer
    assert window.text is copy and window.text[:window.size] == bytearray(b'[{"b": 2}]')


def test_two_texts_that_share_a_hash_are_not_taken_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Names are told apart by a hash of their bytes; two names whose hashes agree (made to here) are found out by
    # comparing the bytes, and the window goes to msgspec instead: the trace is the same.
    text = bytearray(b'[{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1}, '
                     b'{"ph": "X", "cat": "cpu_op", "name": "aten::bmm", "pid": 1, "tid": 1, "ts": 2, "dur": 1}]')
    read, _, _ = scanned.scan_events(text, 1)
    assert read is not None and sorted(read.names()[0]) == ["aten::bmm", "aten::mm"]
    out = np.zeros((2, layout.WIDTH), dtype=np.int64)
    times = np.zeros((2, 2), dtype=np.float64)
    scan.scan(text, 1, len(text), out, times)
    out[:, layout.I_NAME_HASH] = 7  # both names, one hash
    with pytest.raises(scanned.NotScanned, match="share a hash"):
        scanned.ScannedRows(text, out, times)


def test_a_value_skipped_ends_where_its_text_ends() -> None:
    # The scanner skips the values it does not keep (a call stack, an unknown arg) and keeps the text of the recorded
    # shapes by where a skip ends: that end must be the value's own, and a value the text cuts short must be "more
    # needed" (OUT), never a wrong end. Checked against the JSON's own length, every number msgspec reads included.
    values = [*_numbers(500), '"a \\"quoted\\" \\u00e9 string"', "true", "false", "null", "[]", "{}",
              "[[4, 8], [8, 16], []]", '{"a": [1, {"b": null}], "c": -2.5e-3}', "[" * 60 + "]" * 60]
    for text in values:
        encoded = text.encode()
        assert scan.value_end(encoded + b",", 0) == len(encoded), text
        for cut in range(1, len(encoded)):
            assert scan.value_end(encoded[:cut], 0) in (layout.OUT, layout.BAD), (text, cut)
    for bad in ("01", "1.", "1.e5", "-", "1e", "tru", "[1 2]", '{"a" 1}', "[" * 70 + "]" * 70):
        assert scan.value_end((bad + ",").encode(), 0) == layout.BAD, bad
