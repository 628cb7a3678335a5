"""Hostile input for the CLI: mutated real traces, hostile files and options, and a runner.

`cases(seeds, rng, count, folder)` writes `count` hostile inputs into `folder` and returns
one `Case` per input: the daydream command line that reads it. `run(case)` runs the
command in a forked child (so a hang or a memory blow-up cannot take the caller down)
and returns what happened: exit code, stderr, seconds and peak RSS. The contract the
fuzz test and `scripts/fuzz.py` hold every case to is `violation(outcome)`: exit 0 or 2
(never 1, an internal error), at most one line on stderr when it fails, never a traceback,
within the time and memory limits.

The mutation classes are the ones a damaged, hand-edited or malicious file shows: deep
nesting, out-of-range and mistyped numbers, timestamps that overflow nanoseconds, swapped
ids that make dependency cycles, events of one kind only, truncation and flipped bytes,
decompression bombs, special files, archives whose members shadow each other, YAML alias
bombs, hostile regular expressions and non-finite parameters.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import random
import resource
import signal
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: exit codes a hostile input may end with: success, or bad input.
ALLOWED_CODES = (0, 2)


@dataclass(frozen=True, slots=True)
class Case:
    mutation: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    allowed: tuple[int, ...] = ALLOWED_CODES
    cwd: str | None = None  # the folder to run in (one holding a project file), else the campaign's


@dataclass(frozen=True, slots=True)
class Outcome:
    case: Case
    code: int | None      # None: killed at the time limit
    stderr: str
    seconds: float
    peak_rss_mb: float


def violation(outcome: Outcome, seconds: float, rss_mb: float) -> str | None:
    """Why `outcome` breaks the contract, or None."""
    err = outcome.stderr.strip()
    if outcome.code is None:
        return f"still running after {seconds:.0f} s"
    if "Traceback" in err:
        return "printed a traceback"
    if outcome.code not in outcome.case.allowed:
        return f"exit {outcome.code}: {err[:300]}"
    if outcome.code != 0 and len(err.splitlines()) != 1:
        return f"exit {outcome.code} with {len(err.splitlines())} lines on stderr: {err[:300]!r}"
    if outcome.seconds > seconds:
        return f"took {outcome.seconds:.1f} s"
    if outcome.peak_rss_mb > rss_mb:
        return f"peak RSS {outcome.peak_rss_mb:.0f} MB"
    return None


# ----------------------------------------------------------------------------- running


def run(case: Case, timeout_s: float, cwd: Path) -> Outcome:
    """Run `daydream ARGV` in a forked child with stdout discarded and stderr captured."""
    err_path = cwd / f".stderr-{os.getpid()}-{time.monotonic_ns()}"
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 99
        try:
            os.setsid()
            os.chdir(case.cwd or cwd)
            os.environ.update(case.env)
            sink = os.open(os.devnull, os.O_WRONLY)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(sink, 1)
            os.dup2(err, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            sys.stdin = open(os.devnull)  # noqa: SIM115
            from daydream.cli import main

            code = main(case.argv)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 — anything escaping main is a failure to report
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            code = 98
        os._exit(code)
    code: int | None = None
    usage = None
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() - started > timeout_s:
            os.killpg(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            break
        time.sleep(0.01)
    seconds = time.monotonic() - started
    try:
        stderr = err_path.read_text(errors="replace")
    finally:
        err_path.unlink(missing_ok=True)
    return Outcome(case, code, stderr, seconds, usage.ru_maxrss / 1024 if usage else 0.0)


def parent_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------- trace mutations

Document = dict[str, Any]
_DEEP = "__daydream_fuzz_deep__"
_HUGE_INTS = (300, -1, 2**31, 2**40, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**100, -(2**63) - 1)
_HUGE_FLOATS = (1e17, 1e19, 1e300, -1e17, 1.7976931348623157e308, 5e-324)
_INT_ARGS = ("External id", "correlation", "Device Type", "Device Id", "device", "stream", "Bytes", "bytes", "Addr",
             "Total Allocated", "Sequence number", "Group size", "In msg nelems", "wait_on_stream")
_WRONG_TYPES: tuple[Any, ...] = ("x", "", "0x", [], [1, 2], {}, {"a": 1}, None, True, 1.5, -7, "NaN", "1e999")
_HOSTILE_NAMES = ("[bold]x[/bold]", "[memory]", "\x00\x1b[31mred\n", "a" * 100_000, "🙂" * 500, "%s%n{0}", "../../etc/passwd",
                  "<script>alert(1)</script>", "")


def _events(doc: Document) -> list[Any]:
    events = doc.get("traceEvents")
    return events if isinstance(events, list) else []


def _pick_events(doc: Document, rng: random.Random, n: int) -> list[dict[str, Any]]:
    events = [e for e in _events(doc) if isinstance(e, dict)]
    return rng.sample(events, min(n, len(events))) if events else []


def m_deep_nesting(doc: Document, rng: random.Random) -> Document:
    for event in _pick_events(doc, rng, 1):
        event.setdefault("args", {})["nested"] = _DEEP
    if not _events(doc):
        doc["deep"] = _DEEP
    return doc


def m_huge_int(doc: Document, rng: random.Random) -> Document:
    for event in _pick_events(doc, rng, rng.randint(1, 20)):
        value = rng.choice(_HUGE_INTS)
        where = rng.random()
        if where < 0.5:
            args = event.setdefault("args", {})
            if isinstance(args, dict):
                args[rng.choice(_INT_ARGS)] = value
        elif where < 0.7:
            event[rng.choice(("pid", "tid", "id"))] = value
        else:
            event.setdefault("args", {})["grid" if where < 0.85 else "block"] = [value, 1, 1]
    return doc


def m_huge_time(doc: Document, rng: random.Random) -> Document:
    for event in _pick_events(doc, rng, rng.randint(1, 10)):
        event[rng.choice(("ts", "dur"))] = rng.choice(_HUGE_FLOATS)
    if rng.random() < 0.3:
        doc["baseTimeNanoseconds"] = rng.choice(_HUGE_INTS)
    return doc


def m_swap_ids(doc: Document, rng: random.Random) -> Document:
    linked = [e for e in _events(doc) if isinstance(e, dict) and isinstance(e.get("args"), dict)
              and "correlation" in e["args"]]
    for _ in range(min(len(linked) // 2, rng.randint(1, 50))):
        a, b = rng.sample(linked, 2)
        a["args"]["correlation"], b["args"]["correlation"] = b["args"]["correlation"], a["args"]["correlation"]
    flows = [e for e in _events(doc) if isinstance(e, dict) and e.get("ph") in ("s", "f")]
    for event in rng.sample(flows, min(len(flows), 20)):
        event["id"] = rng.choice(flows)["id"] if rng.random() < 0.7 else rng.choice(_HUGE_INTS)
    return doc


def m_one_kind(doc: Document, rng: random.Random) -> Document:
    categories = sorted({str(e.get("cat")) for e in _events(doc) if isinstance(e, dict)})
    if categories:
        keep = set(rng.sample(categories, rng.randint(1, min(2, len(categories)))))
        doc["traceEvents"] = [e for e in _events(doc) if isinstance(e, dict) and str(e.get("cat")) in keep]
    return doc


def m_wrong_type(doc: Document, rng: random.Random) -> Document:
    for event in _pick_events(doc, rng, rng.randint(1, 30)):
        keys = list(event) + list(event.get("args", {}) if isinstance(event.get("args"), dict) else [])
        key = rng.choice(keys) if keys else "ts"
        target = event if key in event else event["args"]
        target[key] = copy.deepcopy(rng.choice(_WRONG_TYPES))
    if rng.random() < 0.3:
        doc[rng.choice(("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceEvents"))] = copy.deepcopy(
            rng.choice(_WRONG_TYPES))
    return doc


def m_drop_fields(doc: Document, rng: random.Random) -> Document:
    for event in _pick_events(doc, rng, rng.randint(1, len(_events(doc)) or 1)):
        for key in rng.sample(list(event), min(len(event), rng.randint(1, 3))):
            del event[key]
    return doc


def m_world(doc: Document, rng: random.Random) -> Document:
    doc["distributedInfo"] = {
        "backend": rng.choice(("nccl", "gloo", 7)),
        "rank": rng.choice((0, 5, -1, 10**9, 2**64, "0")),
        "world_size": rng.choice((1, 2, 10**9, 2**63, -4, 0, "8")),
        "pg_count": 1,
    }
    return doc


def m_devices(doc: Document, rng: random.Random) -> Document:
    doc["deviceProperties"] = [
        {"id": rng.choice((0, 1, 300, -1, 2**64)), "name": rng.choice(_HOSTILE_NAMES + ("NVIDIA H100 80GB HBM3",)),
         "totalGlobalMem": rng.choice((0, -1, 2**70, 80 * 2**30, "x")), "numSms": rng.choice((0, -5, 2**40, 132)),
         "computeMajor": rng.choice((9, -1, "9"))}
        for _ in range(rng.randint(0, 3))
    ]
    return doc


def m_names(doc: Document, rng: random.Random) -> Document:
    for event in _pick_events(doc, rng, rng.randint(1, 50)):
        event["name"] = rng.choice(_HOSTILE_NAMES)
    return doc


def m_duplicate(doc: Document, rng: random.Random) -> Document:
    events = _events(doc)
    if events:
        doc["traceEvents"] = events + copy.deepcopy(rng.sample(events, min(len(events), rng.randint(1, 200))))
        rng.shuffle(doc["traceEvents"])
    return doc


def m_negative(doc: Document, rng: random.Random) -> Document:
    for event in _pick_events(doc, rng, rng.randint(1, 40)):
        event[rng.choice(("ts", "dur"))] = -abs(float(event.get("dur", 1) or 1)) * rng.randint(1, 1000)
    return doc


DOCUMENT_MUTATIONS: dict[str, Callable[[Document, random.Random], Document]] = {
    "deep nesting": m_deep_nesting,
    "huge integers": m_huge_int,
    "huge timestamps": m_huge_time,
    "swapped ids": m_swap_ids,
    "one kind of event": m_one_kind,
    "wrong types": m_wrong_type,
    "dropped fields": m_drop_fields,
    "world size": m_world,
    "device properties": m_devices,
    "hostile names": m_names,
    "duplicated events": m_duplicate,
    "negative times": m_negative,
}


def encode(doc: Document, rng: random.Random) -> bytes:
    text = json.dumps(doc, allow_nan=True)
    depth = rng.choice((1_000, 5_000, 100_000))
    return text.replace(json.dumps(_DEEP), "[" * depth + "]" * depth).encode()


def m_bytes(data: bytes, rng: random.Random) -> bytes:
    """Truncate, flip bytes, or splice JSON's non-finite literals into raw text."""
    choice = rng.random()
    if choice < 0.35:
        return data[: rng.randint(0, len(data))]
    if choice < 0.7:
        buffer = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            if buffer:
                buffer[rng.randrange(len(buffer))] = rng.randrange(256)
        return bytes(buffer)
    return data.replace(b'"dur": ', rng.choice((b'"dur": NaN, "x": ', b'"dur": Infinity, "x": ', b'"dur": -Infinity, "x": ')), 5)


# ----------------------------------------------------------------------------- cases

#: the command lines a mutated trace is read with, in rotation
TRACE_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("inspect", "{trace}"),
    ("inspect", "{trace}", "--json"),
    ("replay", "{trace}", "--no-cache"),
    ("whatif", "{trace}", "--opt", "amp", "--memory", "--no-cache"),
    ("whatif", "{trace}", "--opt", "cuda-graphs", "--opt", "fused-optimizer", "--json"),
    ("memory", "{trace}"),
    ("whatif", "{trace}", "--opt", "ddp:world=4", "--no-cache"),
    ("report", "{trace}", "--opt", "amp", "-o", "{trace}.html", "--no-cache"),
    ("diff", "{trace}", "{trace}", "--no-cache"),
    ("replay", "{trace}", "--critical-path", "--timeline", "{trace}.timeline.json", "--no-cache"),
    ("memory", "{trace}", "--json", "--plot", "{trace}.png", "--no-cache"),
    ("whatif", "{trace}", "--opt", "batch-size:factor=2", "--timeline", "{trace}.timeline.json.gz", "--memory", "--no-cache"),
)

#: hostile --opt values, run against a valid trace whose names include "aaaa...a!" and "xxxx...x"
HOSTILE_SPECS = (
    "checkpoint:layers=(", "faster-gpu:kernels=(a+)+$", "faster-gpu:kernels=(x*)*y,factor=2", "batch-size:factor=nan",
    "faster-gpu:factor=inf", "faster-gpu:factor=-1", "faster-gpu:factor=0", "ddp:world=1000000000",
    "ddp:world=4,bandwidth=1e-300", "ddp:world=4,bandwidth=10Gbps", "grad-compression:ratio=nan", "nosuchopt",
    "amp:nosuchparam=1", "checkpoint:layers=(?=x)y",
)
OPTION_CASES: tuple[tuple[str, ...], ...] = tuple(("whatif", "{trace}", "--opt", spec) for spec in HOSTILE_SPECS) + (
    ("whatif", "{trace}", "--opt", "batch-size:factor=1e308", "--memory"),
    ("whatif", "{trace}", "--opt", "amp", "--sweep", "factor=1,nan"),
    ("whatif", "{trace}", "--opt", "ddp", "--sweep", "world=1,100000000"),
    ("inspect", "{trace}", "--iteration-marker", "(a+)+$"),
    ("inspect", "{trace}", "--iteration-marker", "("),
    ("inspect", "{trace}", "--rank", "-5"),
    ("inspect", "{trace}", "--rank", "99999999999999999999"),
)
_BACKTRACKING_BAIT = ("a" * 40 + "!", "x" * 40)


@dataclass
class Seeds:
    """Valid traces to mutate, decoded once."""

    paths: list[Path]
    documents: list[Document] = field(default_factory=list)

    def __post_init__(self) -> None:
        for path in self.paths:
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rb") as handle:  # type: ignore[operator]
                self.documents.append(json.load(handle))


def cases(seeds: Seeds, rng: random.Random, count: int, folder: Path) -> list[Case]:
    """`count` hostile cases (files written into `folder`), every class represented."""
    folder.mkdir(parents=True, exist_ok=True)
    made: list[Case] = []
    made += _file_cases(seeds, rng, folder)
    made += _yaml_cases(seeds, rng, folder)
    made += _cache_cases(seeds, rng, folder)
    made += _project_file_cases(seeds, folder)
    valid = folder / "valid.json.gz"
    bait = copy.deepcopy(seeds.documents[0])
    for event, name in zip(_pick_events(bait, random.Random(0), len(_BACKTRACKING_BAIT)), _BACKTRACKING_BAIT):
        event["name"] = name
    valid.write_bytes(gzip.compress(json.dumps(bait).encode(), 1))
    made += [Case("hostile option", [part.format(trace=valid) for part in argv]) for argv in OPTION_CASES]
    names = list(DOCUMENT_MUTATIONS) + ["bytes"]
    index = 0
    while len(made) < count:
        name = names[index % len(names)]
        document = copy.deepcopy(rng.choice(seeds.documents))
        if name == "bytes":
            data = m_bytes(json.dumps(document).encode(), rng)
        else:
            data = encode(DOCUMENT_MUTATIONS[name](document, rng), rng)
        path = folder / (f"case{index:05d}.json" + (".gz" if rng.random() < 0.5 else ""))
        path.write_bytes(gzip.compress(data, 1) if path.name.endswith(".gz") else data)
        command = TRACE_COMMANDS[index % len(TRACE_COMMANDS)]
        made.append(Case(name, [part.format(trace=path) for part in command]))
        index += 1
    return made[:count] if count < len(made) else made


def _file_cases(seeds: Seeds, rng: random.Random, folder: Path) -> list[Case]:
    valid = json.dumps(seeds.documents[0]).encode()
    made = []
    # decompression bomb: a small gzip that inflates past the limit daydream is given
    bomb = folder / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as out:
        out.write(valid[:-2])
        chunk = b" " * (1 << 20)
        for _ in range(64):
            out.write(chunk)
        out.write(valid[-2:])
    made.append(Case("decompression bomb", ["inspect", str(bomb)], env={"DAYDREAM_MAX_BYTES": "32MB"}))
    plain_bomb = folder / "spaces.json"
    plain_bomb.write_bytes(valid[:-2] + b" " * (40 << 20) + valid[-2:])
    made.append(Case("oversized file", ["inspect", str(plain_bomb)], env={"DAYDREAM_MAX_BYTES": "32MB"}))
    made.append(Case("special file", ["inspect", "/dev/zero"]))
    made.append(Case("special file", ["inspect", "/dev/null"]))
    fifo = folder / "pipe.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    made.append(Case("special file", ["inspect", str(fifo)]))
    made.append(Case("special file", ["inspect", str(folder / "missing.json")]))
    # archives: a symlink shadowing a member, a member escaping the folder, a member that is a folder
    for label, build in (("tar shadowing symlink", _tar_shadow), ("tar odd members", _tar_odd)):
        path = folder / f"{label.replace(' ', '_')}.tar.gz"
        path.write_bytes(build(valid))
        made.append(Case(label, ["inspect", str(path)]))
        made.append(Case(label, ["replay", str(path), "--no-cache"]))
    # names of a megabyte, each distinct (every class pattern would scan them whole), and not UTF-8
    long_names = copy.deepcopy(seeds.documents[0])
    for index, event in enumerate(_pick_events(long_names, random.Random(1), 12)):
        event["name"] = f"void gemm_{index}_" + "(<" * (2**19)
    long_path = folder / "long-names.json"
    long_path.write_text(json.dumps(long_names))
    made += [Case("megabyte names", [command, str(long_path), *extra])
             for command, extra in (("inspect", []), ("report", ["-o", str(folder / "long.html")]), ("whatif", ["--opt", "amp"]))]
    not_utf8 = valid.replace(b'"name": "', b'"name": "\xed\xa0\x80\xff', 40)
    (folder / "not-utf8.json").write_bytes(not_utf8)
    made += [Case("names not UTF-8", [command, str(folder / "not-utf8.json")]) for command in ("inspect", "replay")]
    # an archive of 2,000 tiny ranks (each member reached by reading on from the last, not by rescanning)
    many = folder / "many-ranks.tar.gz"
    with tarfile.open(many, "w:gz") as archive:
        for rank in random.Random(2).sample(range(2000), 2000):
            data = json.dumps({"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2000},
                               "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                                                "ts": 10 + rank, "dur": 5}]}).encode()
            info = tarfile.TarInfo(f"ranks/rank{rank}.json")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    made.append(Case("archive of 2,000 ranks", ["inspect", str(many), "--no-cache"]))
    # a soft memory limit below what the command needs: it stops itself with one line
    limited = folder / "memory-limited.json"
    limited.write_bytes(valid)
    made += [Case("memory limit", [command, str(limited), "--no-cache", *extra], env={"DAYDREAM_MAX_MEMORY": "90MiB"})
             for command, extra in (("replay", []), ("report", ["-o", str(folder / "limited.html")]))]
    made.append(Case("memory limit", ["inspect", str(limited)], env={"DAYDREAM_MAX_MEMORY": "a lot"}))
    ranks = folder / "disagreeing-ranks"
    ranks.mkdir(exist_ok=True)
    for rank, world in ((0, 2), (1, 4)):
        doc = copy.deepcopy(seeds.documents[0])
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
        (ranks / f"rank{rank}.json").write_text(json.dumps(doc))
    made.append(Case("ranks disagree", ["inspect", str(ranks)]))
    made.append(Case("ranks disagree", ["whatif", str(ranks), "--opt", "amp"]))
    return made


def _tar_shadow(valid: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("rank0.json")
        info.size = len(valid)
        archive.addfile(info, io.BytesIO(valid))
        link = tarfile.TarInfo("rank0.json")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        archive.addfile(link)
        hard = tarfile.TarInfo("rank1.json")
        hard.type = tarfile.LNKTYPE
        hard.linkname = "missing.json"
        archive.addfile(hard)
    return buffer.getvalue()


def _tar_odd(valid: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in ("../../escape.json", "/abs/rank0.json", "dir.json"):
            info = tarfile.TarInfo(name)
            if name == "dir.json":
                info.type = tarfile.DIRTYPE
            else:
                info.size = len(valid)
            archive.addfile(info, io.BytesIO(valid) if info.isfile() else None)
        fifo = tarfile.TarInfo("fifo.json")
        fifo.type = tarfile.FIFOTYPE
        archive.addfile(fifo)
    return buffer.getvalue()


_ALIAS_BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(8)]
)


def _yaml_cases(seeds: Seeds, rng: random.Random, folder: Path) -> list[Case]:
    trace = folder / "yaml-trace.json"
    trace.write_text(json.dumps(seeds.documents[0]))
    documents = {
        "alias bomb": _ALIAS_BOMB + "\nversion: 1\nchecks: *i\n",
        "alias bomb in a check": _ALIAS_BOMB + f"\nversion: 1\nchecks:\n  c:\n    trace: {trace}\n    whatif: *i\n",
        "key is a list": f"version: 1\nchecks:\n  ? [a, b]\n  : {{trace: {trace}, whatif: [amp]}}\n",
        "nan bound": f"version: 1\nchecks:\n  c:\n    trace: {trace}\n    whatif: [amp]\n    expect: {{speedup_at_least: .nan}}\n",
        "inf bound": f"version: 1\nchecks:\n  c:\n    trace: {trace}\n    whatif: [amp]\n    expect: {{speedup_at_least: -.inf}}\n",
        "python tag": "version: 1\nchecks: !!python/object/apply:os.system ['true']\n",
        "deep yaml": "version: 1\nchecks: " + "[" * 5000 + "]" * 5000 + "\n",
    }
    made = []
    for label, text in documents.items():
        path = folder / f"{label.replace(' ', '_')}.yaml"
        path.write_text(text)
        made.append(Case(f"yaml {label}", ["check", str(path)], allowed=(0, 1, 2) if "bound" in label else ALLOWED_CODES))
    pipeline = folder / "pipeline-bomb.yaml"
    pipeline.write_text(_ALIAS_BOMB + "\nname: bomb\nsteps: *i\n")
    made.append(Case("yaml alias bomb in a pipeline", ["whatif", str(trace), "--opt", str(pipeline)]))
    pipelines = {  # each place a pipeline's value is read: name, description, a select, a factor
        "alias bomb in a pipeline name": _ALIAS_BOMB + "\nversion: 1\nname: *i\nsteps:\n  - select: {kind: kernel}\n"
                                         "    scale: {factor: 2}\n",
        "alias bomb in a pipeline description": _ALIAS_BOMB + "\nversion: 1\nname: b\ndescription: *i\nsteps:\n  - select: {kind: kernel}\n"
                                                "    scale: {factor: 2}\n",
        "alias bomb in a select": _ALIAS_BOMB + "\nversion: 1\nname: b\nsteps:\n  - select: {kind: *i}\n    scale: {factor: 2}\n",
        "alias bomb in a factor": _ALIAS_BOMB + "\nversion: 1\nname: b\nsteps:\n  - select: {kind: kernel}\n    scale: {factor: *i}\n",
        "factor 1e999": "version: 1\nname: b\nsteps:\n  - select: {kind: kernel}\n    scale: {factor: 1e999}\n",
        "factor 10^400": "version: 1\nname: b\nsteps:\n  - select: {kind: kernel}\n    scale: {factor: 1" + "0" * 400 + "}\n",
        "factor 1e999 in quotes": "version: 1\nname: b\nsteps:\n  - select: {kind: kernel}\n    scale: {factor: '1e999'}\n",
        "factor nan": "version: 1\nname: b\nsteps:\n  - select: {kind: kernel}\n    scale: {factor: .nan}\n",
        "200,000 keys": "version: 1\nname: b\nsteps:\n  - select: {kind: kernel}\n    scale: {factor: 2}\n"
                        + "".join(f"k{i}: {i}\n" for i in range(200_000)),
    }
    for label, text in pipelines.items():
        path = folder / f"pipeline-{label.replace(' ', '_').replace(',', '')}.yaml"
        path.write_text(text)
        made.append(Case(f"yaml {label}", ["whatif", str(trace), "--opt", str(path)]))
    fifo = folder / "pipeline-fifo.yaml"
    os.mkfifo(fifo)
    made += [Case("yaml pipeline is a FIFO", ["whatif", str(trace), "--opt", str(fifo)]),
             Case("yaml expectations are a FIFO", ["check", str(fifo)]),
             Case("yaml pipeline is /dev/zero", ["whatif", str(trace), "--opt", "/dev/zero"]),
             Case("yaml expectations are /dev/zero", ["check", "/dev/zero"])]
    evil = folder / "pipeline-regex.yaml"
    evil.write_text("name: evil\nsteps:\n  - select: {name: '(a+)+$'}\n    scale: {factor: 2}\n")
    made.append(Case("hostile regex in a pipeline", ["whatif", str(trace), "--opt", str(evil)]))
    return made


def _project_file_cases(seeds: Seeds, folder: Path) -> list[Case]:
    """Hostile project files (daydream.toml, pyproject.toml's [tool.daydream]) in the folder daydream runs in."""
    trace = folder / "project-trace.json"
    trace.write_text(json.dumps(seeds.documents[0]))
    files = {
        "deep nesting": ("daydream.toml", "x = " + "[" * 100_000 + "]" * 100_000 + "\n"),
        "huge integer": ("daydream.toml", "workers = " + "9" * 5000 + "\n"),
        "table in a list": ("daydream.toml", "[whatif]\njson = [1, {a = 2}]\n"),
        "unknown key": ("pyproject.toml", "[tool.daydream.whatif]\nfrobnicate = 1\n"),
        "unknown command": ("pyproject.toml", "[tool.daydream.whatiff]\njson = true\n"),
        "out of range": ("daydream.toml", "workers = -3\n[whatif]\nmeasure-budget = 1e999\n"),
        "not TOML": ("daydream.toml", "\x00\xff[[[\n"),
        "2 MiB": ("daydream.toml", "# x\n" * 600_000),
        "many keys": ("daydream.toml", "".join(f"k{i} = {i}\n" for i in range(50_000))),
    }
    made = []
    for label, (name, text) in files.items():
        home = folder / f"project-{label.replace(' ', '-')}"
        home.mkdir(exist_ok=True)
        (home / name).write_text(text, errors="surrogateescape")
        made.append(Case(f"project file: {label}", ["whatif", str(trace), "--opt", "amp"], cwd=str(home)))
    fifo_home = folder / "project-fifo"
    fifo_home.mkdir(exist_ok=True)
    os.mkfifo(fifo_home / "daydream.toml")
    made.append(Case("project file: a FIFO", ["whatif", str(trace), "--opt", "amp"], cwd=str(fifo_home)))
    return made


def _cache_cases(seeds: Seeds, rng: random.Random, folder: Path) -> list[Case]:
    """Damaged cache entries: the trace must be read afresh (the entry replaced), never trusted."""
    from daydream.trace import read_job

    trace = folder / "cached-trace.json"
    trace.write_text(json.dumps(seeds.documents[0]))
    made = []
    for damage in ("empty", "truncated", "garbage", "short column", "bad offsets", "stale temporary"):
        cache = folder / f"cache-{damage.replace(' ', '-')}"
        previous = os.environ.get("DAYDREAM_CACHE_DIR")
        os.environ["DAYDREAM_CACHE_DIR"] = str(cache)
        try:
            read_job(trace)
        finally:
            if previous is None:
                del os.environ["DAYDREAM_CACHE_DIR"]
            else:
                os.environ["DAYDREAM_CACHE_DIR"] = previous
        damage_cache(cache, damage)
        made.append(Case(f"cache {damage}", ["inspect", str(trace)], env={"DAYDREAM_CACHE_DIR": str(cache)}, allowed=(0,)))
    return made


def damage_cache(cache: Path, damage: str) -> None:
    """Damage every entry in `cache` the way `damage` says (used by the cache cases)."""
    import numpy as np

    for entry in cache.glob("*.npz"):
        if damage == "empty":
            entry.write_bytes(b"")
        elif damage == "truncated":
            entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
        elif damage == "garbage":
            entry.write_bytes(os.urandom(4096))
        elif damage in ("short column", "bad offsets"):
            with np.load(entry, allow_pickle=False) as stored:
                arrays = {key: stored[key] for key in stored.files}
            if damage == "short column":
                key = next(k for k in arrays if k.startswith("col."))
                arrays[key] = arrays[key][: len(arrays[key]) // 2]
            else:
                arrays["strings.offsets"] = arrays["strings.offsets"][::-1].copy()
            with open(entry, "wb") as out:
                np.savez(out, **arrays)  # type: ignore[arg-type]
        elif damage == "stale temporary":
            (cache / ".tmp-stale.npz").write_bytes(b"x" * 100)
            os.utime(cache / ".tmp-stale.npz", (0, 0))
