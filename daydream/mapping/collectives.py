"""Matching each collective across the ranks of its group.

NCCL runs the collectives of one communicator in the same order on every rank, so
the k-th collective of a process group on one rank is the k-th on every other rank.
A collective is matched when every rank of its group is in the job and the ranks
agree on the sequence (same length, same operation at each position, and the same
message size where the metadata records it); then one id
names all its instances and the simulator lets it finish on every rank together.

    matching = match_collectives(job.traces)
    matching.ids[0]        # matched communication row of trace 0 -> job-wide id (from 1)
    matching.notes         # why some collectives stay as recorded

A collective of a group with ranks missing from the job (sampled ranks, one rank of
a DDP job) is left unmatched: the other ranks' arrival is not in the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from daydream.interconnect import normalize_operation
from daydream.trace import COLLECTIVE_KINDS, Trace

DEFAULT_GROUP = "default"


@dataclass(slots=True)
class CollectiveInfo:
    """One rank's collectives, in issue order: rows in the trace, group, operation and size."""

    rows: np.ndarray
    groups: list[str]
    members: list[tuple[int, ...] | None]  # the group's ranks when the trace names them
    operations: list[str]
    message_bytes: np.ndarray  # -1 when the trace does not say


@dataclass(slots=True)
class CollectiveMatching:
    """Per trace (in job order): the matched collective id of each
    matched communication row (from 1)."""

    ids: list[dict[int, int]]
    matched: int = 0
    notes: list[str] = field(default_factory=list)


_DTYPE_BYTES = {"float": 4, "float32": 4, "float16": 2, "half": 2, "bfloat16": 2, "double": 8,
                "float64": 8, "long": 8, "int64": 8, "int": 4, "int32": 4, "byte": 1, "char": 1,
                "int8": 1, "uint8": 1, "bool": 1}


def collectives_of(trace: Trace) -> CollectiveInfo:
    """The communication kernels of `trace` in issue (start) order, with their group metadata."""
    rows = trace.indices(*COLLECTIVE_KINDS)
    rows = rows[np.argsort(trace.ts_ns[rows], kind="stable")]
    table = trace.tables.get("collective", {})
    by_row = {int(r): i
              for i, r in enumerate(table.get("event", np.empty(0, dtype=np.int64)).tolist())}
    groups: list[str] = []
    members: list[tuple[int, ...] | None] = []
    operations: list[str] = []
    sizes = np.full(rows.size, -1, dtype=np.int64)
    for k, row in enumerate(rows.tolist()):
        i = by_row.get(row)
        kernel = trace.strings[int(trace.name[row])]
        operation = _operation(kernel)
        if i is None:
            groups.append(DEFAULT_GROUP)
            members.append(None)
        else:
            name = trace.strings[int(table["group_name_str"][i])]
            groups.append(name or DEFAULT_GROUP)
            members.append(_parse_ranks(trace.strings[int(table["group_ranks_str"][i])]))
            width = _DTYPE_BYTES.get(trace.strings[int(table["dtype_str"][i])].lower())
            elements = max(int(table["in_nelems"][i]), int(table["out_nelems"][i]))
            if width and elements > 0:
                sizes[k] = elements * width
        operations.append(operation)
    return CollectiveInfo(rows=rows, groups=groups, members=members, operations=operations,
                          message_bytes=sizes)


def _operation(name: str) -> str:
    try:
        return normalize_operation(name.split("(")[0])
    except ValueError:
        return name.split("(")[0]


def _parse_ranks(text: str) -> tuple[int, ...] | None:
    numbers = re.findall(r"-?\d+", text)
    return tuple(int(n) for n in numbers) if numbers else None


def match_collectives(traces: list[Trace]) -> CollectiveMatching:
    """Match the collectives of a job's ranks by process group and issue order."""
    infos = [collectives_of(trace) for trace in traces]
    matching = CollectiveMatching(ids=[{} for _ in traces])
    ranks = [trace.meta.rank if trace.meta.rank is not None else index
             for index, trace in enumerate(traces)]
    world = max((trace.meta.world_size or 1) for trace in traces) if traces else 1
    sizes = {rank: trace.meta.world_size for rank, trace in zip(ranks, traces)
             if trace.meta.world_size is not None}
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"rank {rank}: {size}" for rank, size in sorted(sizes.items())[:6])
        matching.notes.append(f"the ranks disagree on the world size ({shown}) — are they from one "
                              f"job? the largest, {world}, is taken")
    present = set(ranks)
    next_id = 1  # 0 means unmatched in the graph's collective column
    for group in sorted({g for info in infos for g in info.groups}):
        sequences = {t: [k for k, g in enumerate(info.groups) if g == group]
                     for t, info in enumerate(infos)}
        sequences = {t: positions for t, positions in sequences.items() if positions}
        members = _group_members(infos, sequences, world)
        label = f"process group {group!r}" if group != DEFAULT_GROUP else "the collectives"
        missing = sorted(set(members) - present)
        if missing:
            matching.notes.append(
                f"{label}: ranks {_ranks_text(missing)} of its {len(members)} are not in the job — "
                "its collectives are replayed as recorded (their time includes waiting for those "
                "ranks)"
            )
            continue
        problem = _disagreement(infos, sequences, ranks)
        if problem:
            matching.notes.append(f"{label}: {problem} — its collectives are replayed as recorded")
            continue
        length = len(next(iter(sequences.values())))
        for t, positions in sequences.items():
            for offset, k in enumerate(positions):
                matching.ids[t][int(infos[t].rows[k])] = next_id + offset
        next_id += length
        matching.matched += length
    return matching


def _group_members(infos: list[CollectiveInfo], sequences: dict[int, list[int]],
                   world: int) -> tuple[int, ...]:
    for t, positions in sequences.items():
        named = infos[t].members[positions[0]]
        if named:
            return named
    return tuple(range(world))


def _disagreement(infos: list[CollectiveInfo], sequences: dict[int, list[int]],
                  ranks: list[int]) -> str | None:
    lengths = {ranks[t]: len(p) for t, p in sequences.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"rank {r}: {n}" for r, n in sorted(lengths.items()))
        return f"the ranks issued different numbers of collectives ({shown})"
    reference_trace, reference = next(iter(sequences.items()))
    first = infos[reference_trace]
    for t, positions in sequences.items():
        for index, (a, b) in enumerate(zip(reference, positions)):
            if first.operations[a] != infos[t].operations[b]:
                return (f"collective #{index + 1} is {first.operations[a]} on rank "
                        f"{ranks[reference_trace]} but {infos[t].operations[b]} on rank {ranks[t]}")
            size_a, size_b = int(first.message_bytes[a]), int(infos[t].message_bytes[b])
            if min(size_a, size_b) >= 0 and size_a != size_b:
                return (f"collective #{index + 1} ({first.operations[a]}) moves {size_a:,} bytes "
                        f"on rank {ranks[reference_trace]} but {size_b:,} on rank {ranks[t]}")
    return None


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) <= 6:
        return ", ".join(map(str, ranks))
    return f"{', '.join(map(str, ranks[:5]))}, … ({len(ranks)} in all)"
