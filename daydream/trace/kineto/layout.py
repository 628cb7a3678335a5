"""What the window scanner reads and where it writes it: the keys it knows, the columns of its
output, its flags. Shared by its two implementations (the C extension `_scan`, the numba kernels of
scan_jit.py) and by scanned.py, which reads the columns; scan.py chooses the implementation.

The scanner reads strict JSON and the fields `_Event` and `_Args` give, and nothing it is unsure of:
a key written with escapes, a field of a type msgspec would refuse, a key given twice, a number it
cannot round exactly, nesting deeper than `MAX_DEPTH`. Where it is unsure of an event's `args` it
marks them for msgspec (`I_FULL`); where it is unsure of anything else it stops with `BAD`, and the
window is read by msgspec as before. So the scanner only ever reads what msgspec would read the same
way.
"""

from __future__ import annotations

import msgspec
import numpy as np

from daydream.trace.kineto.schema import _Args

OUT = -1
BAD = -2
#: Deepest nesting of lists and objects inside a value the scanner skips.
MAX_DEPTH = 64
#: Events scanned stop (`PARTIAL`) at the end of the text or of the output columns; `END` at "]".
END, PARTIAL, FAILED = 0, 1, 2

# The top-level fields, in the order both implementations read them by position.
TOP_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args")
# The args read here ("hot"), as `_Args` names them in the file: ints (a value the scanner cannot
# read as one sends the event's args to msgspec); then the launch dimensions, lists of three ints;
# then every other key of `_Args`, whose presence sends the event's args to msgspec.
HOT_KEYS = ("correlation", "External id", "external id", "Sequence number", "bytes", "device",
            "stream", "Addr", "Bytes", "Total Allocated", "Total Reserved", "Device Type",
            "Device Id", "registers per thread", "shared memory")
HOT_FIELDS = ("correlation", "external_id", "external_id_legacy", "sequence", "bytes", "device",
              "stream", "addr", "memory_bytes", "total_allocated", "total_reserved", "device_type",
              "device_id", "registers", "shared_memory")
DIM_KEYS = ("grid", "block")
# The recorded shapes, kept as the JSON text of their values (`_Args` keeps them undecoded too).
RAW_KEYS = ("Input Dims", "Input type", "Concrete Inputs", "Input Strides")
RAW_FIELDS = ("input_dims", "input_types", "concrete_inputs", "input_strides")

# Columns of the integer output, one row per event.
I_PH = 0  # the one ASCII character of ph; -1 when absent, -2 any other string
I_CAT = 1  # start and end of the string's text (I_CAT + 1); -1 when absent
I_NAME = 3
I_PID = 5  # kind (0 absent, 1 int, 2 string), then the int or the string's start, then its end
I_TID = 8
I_ID = 11  # kind (0 absent or null, 1 int, 2 string), then the int
I_ARGS = 13  # start and end of the args object's text; -1 when absent or null
I_FULL = 15  # 1: msgspec reads these args (a key or value the scanner does not read)
I_HOT = 16  # the HOT_KEYS' values, -1 (NO_VALUE) when absent
I_DIMS = I_HOT + len(HOT_KEYS)  # DIM_KEYS' three values each, -1 when absent
I_RAWS = I_DIMS + 3 * len(DIM_KEYS)  # RAW_KEYS' values' text: start and end each, -1 when absent
# bit k: HOT_KEYS[k] was read; then one per DIM_KEYS, then one per RAW_KEYS
I_SEEN = I_RAWS + 2 * len(RAW_KEYS)
# bit per string with escapes or non-ASCII bytes (F_*), per number read in Python
I_FLAGS = I_SEEN + 1
I_TS = I_FLAGS + 1  # start and end of ts's text (read in Python when F_TS_SLOW)
I_DUR = I_TS + 2
I_CAT_HASH = I_DUR + 2  # FNV-1a of cat's text, of name's text (`span_hashes`)
I_NAME_HASH = I_CAT_HASH + 1
WIDTH = I_NAME_HASH + 1
F_CAT, F_NAME, F_PID, F_TID, F_TS_SLOW, F_DUR_SLOW = 1, 2, 4, 8, 16, 32

#: The columns and flags above in the order the C scanner takes them.
LAYOUT = np.array([WIDTH, I_PH, I_CAT, I_NAME, I_PID, I_TID, I_ID, I_ARGS, I_FULL, I_HOT, I_DIMS,
                   I_RAWS, I_SEEN, I_FLAGS, I_TS, I_DUR, I_CAT_HASH, I_NAME_HASH, F_CAT, F_NAME,
                   F_PID, F_TID, F_TS_SLOW, F_DUR_SLOW], dtype=np.int64)


def key_table(keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The keys' UTF-8 bytes end to end, and where each starts (one more entry: the end)."""
    encoded = [key.encode() for key in keys]
    starts = np.cumsum([0] + [len(key) for key in encoded]).astype(np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), starts


#: The bit of I_SEEN that says the scanner read a field, by the field's `_Args` name.
SEEN_BIT = {field: 1 << k for k, field in enumerate(HOT_FIELDS + DIM_KEYS + RAW_FIELDS)}

TOP = key_table(TOP_KEYS)
HOT = key_table(HOT_KEYS)
DIMS = key_table(DIM_KEYS)
RAWS = key_table(RAW_KEYS)
KNOWN = key_table(tuple(field.encode_name for field in msgspec.structs.fields(_Args)
                        if field.encode_name not in HOT_KEYS + DIM_KEYS + RAW_KEYS))
