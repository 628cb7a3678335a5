"""The window scanner (layout.py says what it reads) as numba kernels: the implementation where the
C extension `_scan` was not built. Every kernel works on a uint8 view of the window and positions in
it; a position below zero is `OUT` (the text ended first: more is needed) or `BAD` (not what the
scanner reads). _scan.c is the same reading in C, line for line.
"""

from __future__ import annotations

import numpy as np

from daydream._jit import jit
from daydream.trace.kineto.layout import (
    BAD,
    DIMS,
    END,
    F_CAT,
    F_DUR_SLOW,
    F_NAME,
    F_PID,
    F_TID,
    F_TS_SLOW,
    FAILED,
    HOT,
    HOT_KEYS,
    I_ARGS,
    I_CAT,
    I_CAT_HASH,
    I_DIMS,
    I_DUR,
    I_FLAGS,
    I_FULL,
    I_HOT,
    I_ID,
    I_NAME,
    I_NAME_HASH,
    I_PH,
    I_PID,
    I_RAWS,
    I_SEEN,
    I_TID,
    I_TS,
    KNOWN,
    MAX_DEPTH,
    OUT,
    PARTIAL,
    RAWS,
    TOP,
    WIDTH,
)

_MAX_INT = 922337203685477579  # (2**63 - 1 - 9) // 10: one more digit cannot overflow
_INT64_MAX = 2**63 - 1
_TWO_53 = 1 << 53
_POW10 = np.array([10.0**k for k in range(23)])
_TOP, _TOP_STARTS = TOP
_HOT, _HOT_STARTS = HOT
_KNOWN, _KNOWN_STARTS = KNOWN
_DIMS, _DIMS_STARTS = DIMS
_RAWS, _RAWS_STARTS = RAWS
_N_HOT = len(HOT_KEYS)
_N_HOT_DIMS = _N_HOT + _DIMS_STARTS.size - 1


@jit
def _ws(buf: np.ndarray, pos: int, end: int) -> int:
    while pos < end and (buf[pos] == 32 or buf[pos] == 10 or buf[pos] == 13 or buf[pos] == 9):
        pos += 1
    return pos


@jit
def _utf8_end(buf: np.ndarray, pos: int, end: int) -> int:
    """Past the one UTF-8 character that starts at `pos` (a byte over 127); BAD if it is not one."""
    lead = buf[pos]
    if 0xC2 <= lead <= 0xDF:
        count, low, high = 1, 0x80, 0xBF
    elif 0xE0 <= lead <= 0xEF:
        count = 2
        low = 0xA0 if lead == 0xE0 else 0x80
        high = 0x9F if lead == 0xED else 0xBF
    elif 0xF0 <= lead <= 0xF4:
        count = 3
        low = 0x90 if lead == 0xF0 else 0x80
        high = 0x8F if lead == 0xF4 else 0xBF
    else:
        return BAD
    if pos + count >= end:
        return OUT
    if not low <= buf[pos + 1] <= high:
        return BAD
    for k in range(2, count + 1):
        if not 0x80 <= buf[pos + k] <= 0xBF:
            return BAD
    return pos + count + 1


@jit
def _escape_end(buf: np.ndarray, pos: int, end: int) -> int:
    """Past the escape whose backslash is at `pos`; BAD if JSON does not have it."""
    if pos + 1 >= end:
        return OUT
    c = buf[pos + 1]
    if c == 117:  # \uXXXX
        if pos + 6 > end:
            return OUT
        for k in range(2, 6):
            h = buf[pos + k]
            if not (48 <= h <= 57 or 65 <= h <= 70 or 97 <= h <= 102):
                return BAD
        return pos + 6
    # " \ / b f n r t
    if c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110 or c == 114 or c == 116:
        return pos + 2
    return BAD


@jit
def _string_end(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """(past the closing quote of the string that opens at `pos`, 1 when it holds escapes or
    non-ASCII text else 0)."""
    pos += 1
    plain = 0
    while pos < end:
        c = buf[pos]
        if c == 34:
            return pos + 1, plain
        if c == 92:
            pos = _escape_end(buf, pos, end)
            plain = 1
        elif c >= 128:
            pos = _utf8_end(buf, pos, end)
            plain = 1
        elif c < 32:
            return BAD, 0
        else:
            pos += 1
        if pos < 0:
            return pos, 0
    return OUT, 0


@jit
def _digits(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int]:
    """(past the run of digits at `pos`, their value, how many); the value is -1 past int64."""
    value, count = 0, 0
    while pos < end and 48 <= buf[pos] <= 57:
        if value >= 0:
            value = value * 10 + (buf[pos] - 48) if value <= _MAX_INT else -1
        pos += 1
        count += 1
    return pos, value, count


@jit
def _number(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int, float]:  # noqa: C901
    """The JSON number at `pos`: (past it, kind, its int, its float). Kind 1: an int (exact),
    2: an int beyond int64, 3: a fraction read exactly, 4: a number to read in Python."""
    negative = buf[pos] == 45
    if negative:
        pos += 1
    if pos >= end:
        return OUT, 0, 0, 0.0
    if not 48 <= buf[pos] <= 57:
        return BAD, 0, 0, 0.0
    start = pos
    pos, whole, count = _digits(buf, pos, end)
    if count > 1 and buf[start] == 48:
        return BAD, 0, 0, 0.0  # a leading zero
    kind, fraction, places = 1, 0, 0
    if pos < end and buf[pos] == 46:
        pos, fraction, places = _digits(buf, pos + 1, end)
        if places == 0:
            return (OUT if pos >= end else BAD), 0, 0, 0.0
        kind = 3
    if pos < end and (buf[pos] == 101 or buf[pos] == 69):
        pos += 1
        if pos < end and (buf[pos] == 43 or buf[pos] == 45):
            pos += 1
        pos, _, exponent_digits = _digits(buf, pos, end)
        if exponent_digits == 0:
            return (OUT if pos >= end else BAD), 0, 0, 0.0
        kind = 4
    if pos >= end:
        return OUT, 0, 0, 0.0  # the number may go on in text not yet read
    if kind == 1:
        if whole < 0:
            return pos, 2, 0, 0.0
        return pos, 1, -whole if negative else whole, float(-whole if negative else whole)
    if kind == 3:
        value = _fraction(whole, fraction, places)
        if value < 0.0:
            return pos, 4, 0, 0.0
        return pos, 3, 0, -value if negative else value
    return pos, 4, 0, 0.0


@jit
def _fraction(whole: int, fraction: int, places: int) -> float:
    """whole.fraction (`places` digits) as the nearest double, as a correctly rounding parser reads
    it; -1.0 where this cannot be done exactly in int64 (the caller reads it in Python)."""
    if whole < 0 or fraction < 0 or places > 18:
        return -1.0
    scale = 10**places
    if whole > (_INT64_MAX - fraction) // scale:
        return -1.0
    digits = whole * scale + fraction
    if digits <= _TWO_53 and places <= 22:
        return float(digits) / _POW10[places]  # both exact: one correctly rounded division
    if whole == 0 or whole >= _TWO_53:
        return -1.0
    shift = 53 - (64 - _leading_zeros(whole))  # the double's last bit is 2**-shift
    if shift > 0 and scale > (1 << (62 - shift)):
        return -1.0
    scaled = fraction << shift
    mantissa = (whole << shift) + scaled // scale
    remainder = scaled % scale
    if 2 * remainder > scale or (2 * remainder == scale and mantissa & 1):
        mantissa += 1
    return float(mantissa) / float(1 << shift)


@jit
def _leading_zeros(value: int) -> int:
    count = 64
    while value:
        value >>= 1
        count -= 1
    return count


@jit
def _digits_end(buf: np.ndarray, pos: int, end: int) -> int:
    """Past the run of digits at `pos` (none: `pos`)."""
    while pos < end and 48 <= buf[pos] <= 57:
        pos += 1
    return pos


@jit
def _number_end(buf: np.ndarray, pos: int, end: int) -> int:  # noqa: C901
    """Past the JSON number at `pos`, read no further than its grammar: `_number` without its
    value (the same positions, OUT and BAD), for the numbers of values skipped."""
    if buf[pos] == 45:
        pos += 1
    if pos >= end:
        return OUT
    if not 48 <= buf[pos] <= 57:
        return BAD
    start = pos
    pos = _digits_end(buf, pos, end)
    if pos - start > 1 and buf[start] == 48:
        return BAD  # a leading zero
    if pos < end and buf[pos] == 46:
        fraction = pos + 1
        pos = _digits_end(buf, fraction, end)
        if pos == fraction:
            return OUT if pos >= end else BAD
    if pos < end and (buf[pos] == 101 or buf[pos] == 69):
        pos += 1
        if pos < end and (buf[pos] == 43 or buf[pos] == 45):
            pos += 1
        exponent = pos
        pos = _digits_end(buf, exponent, end)
        if pos == exponent:
            return OUT if pos >= end else BAD
    return OUT if pos >= end else pos  # the number may go on in text not yet read


@jit
def _literal_end(buf: np.ndarray, pos: int, end: int) -> int:
    """Past the true, false or null at `pos`."""
    c = buf[pos]
    size = 5 if c == 102 else 4
    if pos + size > end:
        return OUT
    word = (116, 114, 117, 101, 0) if c == 116 else (
        (102, 97, 108, 115, 101) if c == 102 else (110, 117, 108, 108, 0))
    for k in range(size):
        if buf[pos + k] != word[k]:
            return BAD
    return pos + size


@jit
def _scalar_end(buf: np.ndarray, pos: int, end: int) -> int:
    """Past the string, number or literal at `pos`."""
    c = buf[pos]
    if c == 34:
        return _string_end(buf, pos, end)[0]
    if c == 45 or 48 <= c <= 57:
        return _number_end(buf, pos, end)
    if c == 116 or c == 102 or c == 110:
        return _literal_end(buf, pos, end)
    return BAD


@jit
def _skip_value(buf: np.ndarray, pos: int, end: int) -> int:  # noqa: C901
    """Past the JSON value at `pos` (any value: objects and lists to MAX_DEPTH)."""
    open_in = np.zeros(MAX_DEPTH + 1, dtype=np.uint8)  # 123 object, 91 list, per depth
    depth = 0
    while True:
        pos = _ws(buf, pos, end)
        if pos >= end:
            return OUT
        c = buf[pos]
        if c == 123 or c == 91:
            if depth == MAX_DEPTH:
                return BAD
            depth += 1
            open_in[depth] = c
            pos = _ws(buf, pos + 1, end)
            if pos >= end:
                return OUT
            if buf[pos] != c + 2:  # not {} or []: a value (after an object's key) comes next
                pos = _key(buf, pos, end)[0] if c == 123 else pos
                if pos < 0:
                    return pos
                continue
            depth -= 1
            pos += 1
        else:
            pos = _scalar_end(buf, pos, end)
            if pos < 0:
                return pos
        pos, depth, more = _close(buf, pos, end, open_in, depth)
        if pos < 0 or not more:
            return pos


@jit
def _close(buf: np.ndarray, pos: int, end: int, open_in: np.ndarray,
           depth: int) -> tuple[int, int, bool]:
    """After a value inside `depth` open lists and objects: past the closing brackets that follow,
    or past the comma that follows instead (and an object's next key). (where, the depth there,
    whether a value is to be read next)."""
    while depth > 0:
        pos = _ws(buf, pos, end)
        if pos >= end:
            return OUT, depth, False
        c = buf[pos]
        if c == 44:
            pos = _ws(buf, pos + 1, end)
            if pos >= end:
                return OUT, depth, False
            if open_in[depth] == 123:
                pos = _key(buf, pos, end)[0]
            return pos, depth, True
        if c != open_in[depth] + 2:
            return BAD, depth, False
        pos += 1
        depth -= 1
    return pos, 0, False


@jit
def _skip(buf: np.ndarray, pos: int, end: int) -> int:
    """Past the value at `pos`; scalars without the bookkeeping nesting needs."""
    c = buf[pos]
    if c == 123 or c == 91:
        return _skip_value(buf, pos, end)
    return _scalar_end(buf, pos, end)


@jit
def _key_id(buf: np.ndarray, start: int, stop: int, keys: np.ndarray, starts: np.ndarray) -> int:
    """Which of the table's keys the text buf[start:stop] is; -1 for none."""
    size = stop - start
    for k in range(starts.size - 1):
        if starts[k + 1] - starts[k] != size:
            continue
        at = starts[k]
        same = True
        for j in range(size):
            if buf[start + j] != keys[at + j]:
                same = False
                break
        if same:
            return k
    return -1


@jit
def _key(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int, int]:
    """The `"key":` at `pos`: (past the colon and the space after it, where the key's text starts,
    where it ends, 1 when it holds escapes or non-ASCII text)."""
    if buf[pos] != 34:
        return BAD, 0, 0, 0
    start = pos + 1
    pos, marked = _string_end(buf, pos, end)
    if pos < 0:
        return pos, 0, 0, 0
    stop = pos - 1
    pos = _ws(buf, pos, end)
    if pos >= end:
        return OUT, 0, 0, 0
    if buf[pos] != 58:
        return BAD, 0, 0, 0
    pos = _ws(buf, pos + 1, end)
    if pos >= end:
        return OUT, 0, 0, 0
    return pos, start, stop, marked


@jit
def _open_object(buf: np.ndarray, pos: int, end: int) -> tuple[int, bool]:
    """Past the "{" at `pos` and the space after it: (there, True) where a member follows, (past
    the "}", False) for an empty object."""
    pos = _ws(buf, pos + 1, end)
    if pos >= end:
        return OUT, False
    if buf[pos] == 125:
        return pos + 1, False
    return pos, True


@jit
def _next_member(buf: np.ndarray, pos: int, end: int) -> tuple[int, bool]:
    """After a member of an object: (past the comma and the space after it, True) or (past the
    closing brace, False)."""
    pos = _ws(buf, pos, end)
    if pos >= end:
        return OUT, False
    if buf[pos] == 125:
        return pos + 1, False
    if buf[pos] != 44:
        return BAD, False
    pos = _ws(buf, pos + 1, end)
    if pos >= end:
        return OUT, False
    return pos, True


@jit
def _hot_value(buf: np.ndarray, pos: int, end: int, out: np.ndarray, row: int,
               column: int) -> int:
    """Read one of HOT_KEYS' values into `out`; past it. A value that is not an int in int64
    sends the event's args to msgspec."""
    c = buf[pos]
    if c == 45 or 48 <= c <= 57:
        after, kind, value, _ = _number(buf, pos, end)
        if after >= 0 and kind == 1:
            out[row, column] = value
            return after
        out[row, I_FULL] = 1
        return after
    out[row, I_FULL] = 1
    return _skip(buf, pos, end)


@jit
def _dim_value(buf: np.ndarray, pos: int, end: int, out: np.ndarray, row: int,
               column: int) -> int:
    """A launch dimension: a list of three ints in int64 into `out` (three columns); past it.
    Anything else sends the event's args to msgspec."""
    at = _ws(buf, pos + 1, end) if buf[pos] == 91 else -1
    for k in range(3):
        if at >= 0 and k:
            at = _ws(buf, at + 1, end) if at < end and buf[at] == 44 else -1
        if at < 0 or at >= end or not (buf[at] == 45 or 48 <= buf[at] <= 57):
            at = -1
            break
        after, kind, value, _ = _number(buf, at, end)
        if after < 0 or kind != 1:
            at = -1
            break
        out[row, column + k] = value
        at = _ws(buf, after, end)
    if 0 <= at < end and buf[at] == 93:
        return at + 1
    out[row, I_FULL] = 1
    return _skip(buf, pos, end)


@jit
def _arg(buf: np.ndarray, pos: int, end: int, out: np.ndarray, row: int, start: int, stop: int,
         marked: int, seen: int) -> tuple[int, int]:
    """One member of args, its key at buf[start:stop] and its value at `pos`: (past it, `seen`
    with its bit)."""
    which = -1 if marked else _key_id(buf, start, stop, _HOT, _HOT_STARTS)
    dim = -1 if marked or which >= 0 else _key_id(buf, start, stop, _DIMS, _DIMS_STARTS)
    raw = -1 if marked or which >= 0 or dim >= 0 else _key_id(buf, start, stop, _RAWS,
                                                                _RAWS_STARTS)
    bit = which if which >= 0 else (
        _N_HOT + dim if dim >= 0 else (_N_HOT_DIMS + raw if raw >= 0 else -1))
    if marked or (bit >= 0 and seen & (1 << bit)) or (
            bit < 0 and _key_id(buf, start, stop, _KNOWN, _KNOWN_STARTS) >= 0):
        out[row, I_FULL] = 1  # msgspec reads what these keys hold
    if bit >= 0:
        seen |= 1 << bit
    if which >= 0:
        return _hot_value(buf, pos, end, out, row, I_HOT + which), seen
    if dim >= 0:
        return _dim_value(buf, pos, end, out, row, I_DIMS + 3 * dim), seen
    after = _skip(buf, pos, end)
    if raw >= 0 and after >= 0:  # the value's text, as msgspec.Raw keeps it
        out[row, I_RAWS + 2 * raw] = pos
        out[row, I_RAWS + 2 * raw + 1] = after
    return after, seen


@jit
def _args(buf: np.ndarray, pos: int, end: int, out: np.ndarray, row: int) -> int:
    """Read the args object at `pos` into `out`'s row; past it."""
    out[row, I_ARGS] = pos
    seen = 0
    pos, more = _open_object(buf, pos, end)
    while more:
        pos, start, stop, marked = _key(buf, pos, end)
        if pos < 0:
            return pos
        pos, seen = _arg(buf, pos, end, out, row, start, stop, marked, seen)
        if pos < 0:
            return pos
        pos, more = _next_member(buf, pos, end)
    if pos >= 0:
        out[row, I_ARGS + 1] = pos
        out[row, I_SEEN] = seen
    return pos


@jit
def _text(buf: np.ndarray, pos: int, end: int, out: np.ndarray, row: int, column: int,
          flag: int) -> int:
    """A string field: where its text starts and ends into `out` (and for cat and name, its
    hash); past it."""
    if buf[pos] != 34:
        return BAD
    out[row, column] = pos + 1
    after, marked = _string_end(buf, pos, end)
    if after < 0:
        return after
    out[row, column + 1] = after - 1
    if marked:
        out[row, I_FLAGS] |= flag
    if column == I_CAT or column == I_NAME:
        out[row, I_CAT_HASH if column == I_CAT else I_NAME_HASH] = _hash(buf, pos + 1, after - 1)
    return after


@jit
def _hash(buf: np.ndarray, start: int, stop: int) -> int:
    """FNV-1a over buf[start:stop]'s 8-byte words (little-endian), then its last bytes one at a
    time, as an int64."""
    value = np.uint64(14695981039346656037)
    prime = np.uint64(1099511628211)
    k = start
    while k + 8 <= stop:
        word = np.uint64(0)
        for j in range(7, -1, -1):
            word = (word << np.uint64(8)) | np.uint64(buf[k + j])
        value = (value ^ word) * prime
        k += 8
    while k < stop:
        value = (value ^ np.uint64(buf[k])) * prime
        k += 1
    return int(np.int64(value))


@jit
def _ph(buf: np.ndarray, pos: int, end: int, out: np.ndarray, row: int) -> int:
    if buf[pos] != 34:
        return BAD
    after, marked = _string_end(buf, pos, end)
    if after < 0 or marked:
        return BAD if after >= 0 else after
    out[row, I_PH] = buf[pos + 1] if after - pos == 3 else -2
    return after


@jit
def _int_or_text(buf: np.ndarray, pos: int, end: int, out: np.ndarray, row: int, column: int,
                 flag: int) -> int:
    """pid, tid and id: an int in int64 or a string (kind 1 or 2 into `out[row, column]`)."""
    c = buf[pos]
    if c == 34:
        out[row, column] = 2
        return _text(buf, pos, end, out, row, column + 1, flag)
    if c != 45 and not 48 <= c <= 57:
        return BAD
    after, kind, value, _ = _number(buf, pos, end)
    if after >= 0 and kind != 1:
        return BAD
    out[row, column] = 1
    out[row, column + 1] = value
    return after


@jit
def _time(buf: np.ndarray, pos: int, end: int, out: np.ndarray, times: np.ndarray, row: int,
          slot: int) -> int:
    """ts (slot 0) or dur (1) into `times`; a number read in Python is marked and its text kept."""
    c = buf[pos]
    if c != 45 and not 48 <= c <= 57:
        return BAD
    after, kind, _, number = _number(buf, pos, end)
    if after < 0:
        return after
    if kind == 1 or kind == 3:
        times[row, slot] = number
    else:
        out[row, I_FLAGS] |= F_TS_SLOW if slot == 0 else F_DUR_SLOW
        column = I_TS if slot == 0 else I_DUR
        out[row, column] = pos
        out[row, column + 1] = after
    return after


@jit
def _member(buf: np.ndarray, pos: int, end: int, which: int, out: np.ndarray,
            times: np.ndarray, row: int) -> int:
    """The value of top-level key `which` (TOP_KEYS; -1: a key `_Event` does not have)."""
    if which == 0:
        return _ph(buf, pos, end, out, row)
    if which == 1 or which == 2:
        return _text(buf, pos, end, out, row, I_CAT if which == 1 else I_NAME,
                     F_CAT if which == 1 else F_NAME)
    if which == 3 or which == 4:
        return _int_or_text(buf, pos, end, out, row, I_PID if which == 3 else I_TID,
                            F_PID if which == 3 else F_TID)
    if which == 5 or which == 6:
        return _time(buf, pos, end, out, times, row, which - 5)
    if which == 7 or which == 8:
        if buf[pos] == 110:  # null: as absent
            return _literal_end(buf, pos, end)
        if which == 7:
            return _int_or_text(buf, pos, end, out, row, I_ID, 0)
        if buf[pos] != 123:
            return BAD
        return _args(buf, pos, end, out, row)
    return _skip(buf, pos, end)


@jit
def _event(buf: np.ndarray, pos: int, end: int, out: np.ndarray, times: np.ndarray,
           row: int) -> int:
    """Read the event object at `pos` into row `row`; past it."""
    for column in range(WIDTH):
        out[row, column] = -1
    out[row, I_CAT_HASH] = out[row, I_NAME_HASH] = _hash(buf, 0, 0)
    out[row, I_PID] = out[row, I_TID] = out[row, I_ID] = out[row, I_FULL] = out[row, I_FLAGS] = 0
    out[row, I_SEEN] = 0
    times[row, 0] = times[row, 1] = np.nan
    seen = 0
    pos, more = _open_object(buf, pos, end)
    while more:
        pos, start, stop, marked = _key(buf, pos, end)
        if pos < 0 or marked:
            return BAD if pos >= 0 else pos
        which = _key_id(buf, start, stop, _TOP, _TOP_STARTS)
        if which >= 0:
            if seen & (1 << which):
                return BAD  # a key given twice: msgspec keeps the last
            seen |= 1 << which
        pos = _member(buf, pos, end, which, out, times, row)
        if pos < 0:
            return pos
        pos, more = _next_member(buf, pos, end)
    return pos


@jit
def scan(buf: np.ndarray, pos: int, end: int, out: np.ndarray,
         times: np.ndarray) -> tuple[int, int, int]:
    """Read the events of buf[pos:end] (the text after a list's "[" or an event's comma) into
    `out` and `times`: (events read, where reading stopped, END, PARTIAL or FAILED). Reading stops
    at the "]" (END); where the text or `out` ends, before the event there (PARTIAL); before an
    event the scanner does not read (FAILED). An event counts once the comma or "]" after it is
    read."""
    count = 0
    pos = _ws(buf, pos, end)
    while True:
        if pos >= end:
            return count, pos, PARTIAL
        if buf[pos] == 93 and count == 0:
            return 0, pos, END
        if buf[pos] != 123:
            return count, pos, FAILED
        if count == out.shape[0]:
            return count, pos, PARTIAL
        after = _event(buf, pos, end, out, times, count)
        if after < 0:
            return count, pos, PARTIAL if after == OUT else FAILED
        after = _ws(buf, after, end)
        if after >= end or (buf[after] != 44 and buf[after] != 93):
            return count, pos, PARTIAL if after >= end else FAILED
        count += 1
        if buf[after] == 93:
            return count, after, END
        pos = _ws(buf, after + 1, end)


@jit
def span_hashes(buf: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """`_hash` of each span's bytes (an absent span, start -1, as the empty text)."""
    hashes = np.empty(starts.size, dtype=np.int64)
    for row in range(starts.size):
        hashes[row] = _hash(buf, max(starts[row], 0), max(stops[row], 0))
    return hashes


@jit
def same_spans(buf: np.ndarray, starts: np.ndarray, stops: np.ndarray, first: np.ndarray) -> bool:
    """Whether each span holds the same bytes as the span `first` names for it."""
    for row in range(starts.size):
        other = first[row]
        size = max(stops[row], 0) - max(starts[row], 0)
        if other == row or size != max(stops[other], 0) - max(starts[other], 0):
            if other != row:
                return False
            continue
        for k in range(size):
            if buf[starts[row] + k] != buf[starts[other] + k]:
                return False
    return True


@jit
def joined_spans(buf: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The spans' bytes as one JSON list: "[" span "," span ... "]"."""
    size = 2 + max(starts.size - 1, 0)
    for k in range(starts.size):
        size += stops[k] - starts[k]
    joined = np.empty(size, dtype=np.uint8)
    joined[0] = 91
    at = 1
    for k in range(starts.size):
        if k:
            joined[at] = 44
            at += 1
        length = stops[k] - starts[k]
        joined[at:at + length] = buf[starts[k]:stops[k]]
        at += length
    joined[at] = 93
    return joined
