/* The scanner of scan.py in C: the same reading, event for event and bit for bit, without numba.
 *
 * Built with the package where a C compiler is at hand (an optional extension: without one, the
 * numba kernels of scan_jit.py read the windows). Python never sees this module's functions
 * directly: scan.py wraps them so that both implementations take and give the same values, and
 * tests/trace/test_scan.py runs every test on both.
 *
 * What is read, and where it goes, is scan.py's: the layout of the output columns and the tables
 * of keys come from there with each call (`layout`, `keys`), so the two cannot drift apart.
 * Positions are int64 offsets into the text; below zero they are OUT (the text ended first) or
 * BAD (not what the scanner reads).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define OUT (-1)
#define BAD (-2)
#define MAX_DEPTH 64
enum { END = 0, PARTIAL = 1, FAILED = 2 };

/* scan.py's LAYOUT, in this order */
enum {
    L_WIDTH, L_PH, L_CAT, L_NAME, L_PID, L_TID, L_ID, L_ARGS, L_FULL, L_HOT, L_DIMS, L_RAWS,
    L_SEEN, L_FLAGS, L_TS, L_DUR, L_CAT_HASH, L_NAME_HASH, L_F_CAT, L_F_NAME, L_F_PID, L_F_TID,
    L_F_TS_SLOW, L_F_DUR_SLOW, L_COUNT
};

typedef struct {
    const uint8_t *bytes;   /* the keys' UTF-8 bytes end to end */
    const int64_t *starts;  /* where each starts; one more entry: the end */
    Py_ssize_t count;
} Keys;

/* Where a key of `size` bytes from `text` goes in a table's slots. */
static inline int key_slot(const uint8_t *text, int64_t size)
{
    return size ? (int)((size * 131 + text[0] * 31 + text[size - 1] * 7 + text[size / 2]) & 1023)
                : 0;
}

/* Keys of one or more tables, found by an open-addressed table of their slots. */
#define MAX_KEYS 256
typedef struct {
    const uint8_t *key[MAX_KEYS];
    int64_t size[MAX_KEYS];
    int16_t what[MAX_KEYS]; /* its table * 64 + its index there */
    int count;
    uint64_t lengths;       /* bit n: a key of n bytes (bit 63: of 63 or more) */
    int16_t slot[1024];     /* from `key_slot` on, the first free one: 1 + the entry, 0 for none */
} KeyIndex;

typedef struct {
    const uint8_t *buf;
    int64_t end;
    int64_t *out;
    double *times;
    int64_t l[L_COUNT];
    Keys top, hot, dims, raws, known;
    KeyIndex top_index; /* the top-level keys */
    KeyIndex arg_index; /* args keys: hot, launch dimensions, shapes, other known (tables 0-3) */
    const int64_t *blank; /* a row as `event` starts it */
} Scan;

static const int64_t MAX_INT = 922337203685477579LL; /* (2**63 - 1 - 9) // 10 */
static const int64_t TWO_53 = (int64_t)1 << 53;
static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#define CELL(s, row, column) ((s)->out[(row) * (s)->l[L_WIDTH] + (column)])

static inline int64_t ws(const uint8_t *b, int64_t pos, int64_t end)
{
    while (pos < end && (b[pos] == 32 || b[pos] == 10 || b[pos] == 13 || b[pos] == 9))
        pos++;
    return pos;
}

static inline int is_digit(uint8_t c) { return c >= 48 && c <= 57; }

/* Past the one UTF-8 character at `pos` (a byte over 127); BAD if it is not one. */
static int64_t utf8_end(const uint8_t *b, int64_t pos, int64_t end)
{
    uint8_t lead = b[pos], low, high;
    int count;
    if (lead >= 0xC2 && lead <= 0xDF) {
        count = 1; low = 0x80; high = 0xBF;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        count = 2; low = lead == 0xE0 ? 0xA0 : 0x80; high = lead == 0xED ? 0x9F : 0xBF;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        count = 3; low = lead == 0xF0 ? 0x90 : 0x80; high = lead == 0xF4 ? 0x8F : 0xBF;
    } else {
        return BAD;
    }
    if (pos + count >= end)
        return OUT;
    if (b[pos + 1] < low || b[pos + 1] > high)
        return BAD;
    for (int k = 2; k <= count; k++)
        if (b[pos + k] < 0x80 || b[pos + k] > 0xBF)
            return BAD;
    return pos + count + 1;
}

/* Past the escape whose backslash is at `pos`; BAD if JSON does not have it. */
static int64_t escape_end(const uint8_t *b, int64_t pos, int64_t end)
{
    if (pos + 1 >= end)
        return OUT;
    uint8_t c = b[pos + 1];
    if (c == 'u') {
        if (pos + 6 > end)
            return OUT;
        for (int k = 2; k < 6; k++) {
            uint8_t h = b[pos + k];
            if (!(is_digit(h) || (h >= 'A' && h <= 'F') || (h >= 'a' && h <= 'f')))
                return BAD;
        }
        return pos + 6;
    }
    if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
        c == 't')
        return pos + 2;
    return BAD;
}

/* Which bytes end a run of plain string text: the quote, the backslash, control bytes, bytes
 * over 127 (filled in by PyInit__scan). */
static uint8_t stops_plain[256];

/* Past the closing quote of the string that opens at `pos`; *marked: it holds escapes or
 * non-ASCII text. */
static int64_t string_end(const uint8_t *b, int64_t pos, int64_t end, int *marked)
{
    *marked = 0;
    pos += 1;
    for (;;) {
        while (pos < end && !stops_plain[b[pos]])
            pos++;
        if (pos >= end)
            break;
        uint8_t c = b[pos];
        if (c == '"')
            return pos + 1;
        if (c == '\\') {
            pos = escape_end(b, pos, end);
            *marked = 1;
        } else if (c >= 128) {
            pos = utf8_end(b, pos, end);
            *marked = 1;
        } else { /* a control byte */
            *marked = 0;
            return BAD;
        }
        if (pos < 0) {
            *marked = 0;
            return pos;
        }
    }
    *marked = 0;
    return OUT;
}

/* Past the run of digits at `pos`; *value -1 past int64. */
static int64_t digits(const uint8_t *b, int64_t pos, int64_t end, int64_t *value, int64_t *count)
{
    int64_t start = pos;
    uint64_t quick = 0;
    while (pos < end && is_digit(b[pos]))
        quick = quick * 10 + (b[pos++] - 48);
    *count = pos - start;
    if (*count <= 18) { /* below 10**18: no overflow to watch for */
        *value = (int64_t)quick;
        return pos;
    }
    *value = 0;
    for (int64_t k = start; k < pos; k++)
        if (*value >= 0)
            *value = *value <= MAX_INT ? *value * 10 + (b[k] - 48) : -1;
    return pos;
}

static int leading_zeros(int64_t value)
{
    int count = 64;
    uint64_t v = (uint64_t)value;
    while (v) {
        v >>= 1;
        count--;
    }
    return count;
}

/* whole.fraction (`places` digits) as the nearest double; -1.0 where this cannot be done exactly
 * in int64. */
static double fraction_value(int64_t whole, int64_t fraction, int64_t places)
{
    if (whole < 0 || fraction < 0 || places > 18)
        return -1.0;
    int64_t scale = 1;
    for (int64_t k = 0; k < places; k++)
        scale *= 10;
    if (whole > (INT64_MAX - fraction) / scale)
        return -1.0;
    int64_t all = whole * scale + fraction;
    if (all <= TWO_53 && places <= 22)
        return (double)all / POW10[places];
    if (whole == 0 || whole >= TWO_53)
        return -1.0;
    int shift = 53 - (64 - leading_zeros(whole));
    if (shift > 0 && scale > ((int64_t)1 << (62 - shift)))
        return -1.0;
    int64_t scaled = fraction << shift;
    int64_t mantissa = (whole << shift) + scaled / scale;
    int64_t remainder = scaled % scale;
    if (2 * remainder > scale || (2 * remainder == scale && (mantissa & 1)))
        mantissa += 1;
    return (double)mantissa / (double)((int64_t)1 << shift);
}

/* The JSON number at `pos`: past it; *kind 1 an int (exact), 2 an int beyond int64, 3 a fraction
 * read exactly, 4 a number to read in Python. */
static int64_t number(const uint8_t *b, int64_t pos, int64_t end, int *kind, int64_t *integer,
                      double *real)
{
    *kind = 0;
    *integer = 0;
    *real = 0.0;
    int negative = b[pos] == '-';
    if (negative)
        pos++;
    if (pos >= end)
        return OUT;
    if (!is_digit(b[pos]))
        return BAD;
    int64_t start = pos, whole, count, fraction = 0, places = 0, unused;
    pos = digits(b, pos, end, &whole, &count);
    if (count > 1 && b[start] == '0')
        return BAD;
    int k = 1;
    if (pos < end && b[pos] == '.') {
        pos = digits(b, pos + 1, end, &fraction, &places);
        if (places == 0)
            return pos >= end ? OUT : BAD;
        k = 3;
    }
    if (pos < end && (b[pos] == 'e' || b[pos] == 'E')) {
        pos++;
        if (pos < end && (b[pos] == '+' || b[pos] == '-'))
            pos++;
        int64_t exponent_digits;
        pos = digits(b, pos, end, &unused, &exponent_digits);
        if (exponent_digits == 0)
            return pos >= end ? OUT : BAD;
        k = 4;
    }
    if (pos >= end)
        return OUT;
    if (k == 1) {
        if (whole < 0) {
            *kind = 2;
            return pos;
        }
        *kind = 1;
        *integer = negative ? -whole : whole;
        *real = (double)*integer;
        return pos;
    }
    if (k == 3) {
        double value = fraction_value(whole, fraction, places);
        if (value < 0.0) {
            *kind = 4;
            return pos;
        }
        *kind = 3;
        *real = negative ? -value : value;
        return pos;
    }
    *kind = 4;
    return pos;
}

/* Past the run of digits at `pos` (none: `pos`). */
static inline int64_t digits_end(const uint8_t *b, int64_t pos, int64_t end)
{
    while (pos < end && is_digit(b[pos]))
        pos++;
    return pos;
}

/* Past the JSON number at `pos`, read no further than its grammar: `number` without its value
 * (the same positions, OUT and BAD), for the numbers of values skipped. */
static int64_t number_end(const uint8_t *b, int64_t pos, int64_t end)
{
    if (b[pos] == '-')
        pos++;
    if (pos >= end)
        return OUT;
    if (!is_digit(b[pos]))
        return BAD;
    int64_t start = pos;
    pos = digits_end(b, pos, end);
    if (pos - start > 1 && b[start] == '0')
        return BAD; /* a leading zero */
    if (pos < end && b[pos] == '.') {
        int64_t fraction = pos + 1;
        if ((pos = digits_end(b, fraction, end)) == fraction)
            return pos >= end ? OUT : BAD;
    }
    if (pos < end && (b[pos] == 'e' || b[pos] == 'E')) {
        pos++;
        if (pos < end && (b[pos] == '+' || b[pos] == '-'))
            pos++;
        int64_t exponent = pos;
        if ((pos = digits_end(b, exponent, end)) == exponent)
            return pos >= end ? OUT : BAD;
    }
    return pos >= end ? OUT : pos; /* the number may go on in text not yet read */
}

/* Past the true, false or null at `pos`. */
static int64_t literal_end(const uint8_t *b, int64_t pos, int64_t end)
{
    const char *word = b[pos] == 't' ? "true" : (b[pos] == 'f' ? "false" : "null");
    int64_t size = (int64_t)strlen(word);
    if (pos + size > end)
        return OUT;
    for (int64_t k = 0; k < size; k++)
        if (b[pos + k] != (uint8_t)word[k])
            return BAD;
    return pos + size;
}

static int64_t scalar_end(const uint8_t *b, int64_t pos, int64_t end)
{
    uint8_t c = b[pos];
    int marked;
    if (c == '"')
        return string_end(b, pos, end, &marked);
    if (c == '-' || is_digit(c))
        return number_end(b, pos, end);
    if (c == 't' || c == 'f' || c == 'n')
        return literal_end(b, pos, end);
    return BAD;
}

/* The `"key":` at `pos`: past the colon and the space after it; the key's text in
 * [*start, *stop), *marked when it holds escapes or non-ASCII text. */
static int64_t key(const uint8_t *b, int64_t pos, int64_t end, int64_t *start, int64_t *stop,
                   int *marked)
{
    *marked = 0;
    if (b[pos] != '"')
        return BAD;
    *start = pos + 1;
    pos = string_end(b, pos, end, marked);
    if (pos < 0)
        return pos;
    *stop = pos - 1;
    pos = ws(b, pos, end);
    if (pos >= end)
        return OUT;
    if (b[pos] != ':')
        return BAD;
    pos = ws(b, pos + 1, end);
    if (pos >= end)
        return OUT;
    return pos;
}

static int64_t key_only(const uint8_t *b, int64_t pos, int64_t end)
{
    int64_t start, stop;
    int marked;
    return key(b, pos, end, &start, &stop, &marked);
}

/* After a value inside `*depth` open lists and objects: past the closing brackets that follow, or
 * past the comma that follows instead (and an object's next key); *more: a value comes next. */
static int64_t close_up(const uint8_t *b, int64_t pos, int64_t end, const uint8_t *open_in,
                        int *depth, int *more)
{
    *more = 0;
    while (*depth > 0) {
        pos = ws(b, pos, end);
        if (pos >= end)
            return OUT;
        uint8_t c = b[pos];
        if (c == ',') {
            pos = ws(b, pos + 1, end);
            if (pos >= end)
                return OUT;
            if (open_in[*depth] == '{')
                pos = key_only(b, pos, end);
            *more = 1;
            return pos;
        }
        if (c != open_in[*depth] + 2)
            return BAD;
        pos++;
        (*depth)--;
    }
    return pos;
}

/* Past the JSON value at `pos` (objects and lists to MAX_DEPTH). */
static int64_t skip_value(const uint8_t *b, int64_t pos, int64_t end)
{
    uint8_t open_in[MAX_DEPTH + 1];
    int depth = 0, more;
    for (;;) {
        pos = ws(b, pos, end);
        if (pos >= end)
            return OUT;
        uint8_t c = b[pos];
        if (c == '{' || c == '[') {
            if (depth == MAX_DEPTH)
                return BAD;
            depth++;
            open_in[depth] = c;
            pos = ws(b, pos + 1, end);
            if (pos >= end)
                return OUT;
            if (b[pos] != c + 2) {
                if (c == '{')
                    pos = key_only(b, pos, end);
                if (pos < 0)
                    return pos;
                continue;
            }
            depth--;
            pos++;
        } else {
            pos = scalar_end(b, pos, end);
            if (pos < 0)
                return pos;
        }
        pos = close_up(b, pos, end, open_in, &depth, &more);
        if (pos < 0 || !more)
            return pos;
    }
}

static int64_t skip(const uint8_t *b, int64_t pos, int64_t end)
{
    if (b[pos] == '{' || b[pos] == '[')
        return skip_value(b, pos, end);
    return scalar_end(b, pos, end);
}

/* Which indexed key b[start:stop] is: its table * 64 + its index there; -1 for none. */
static int find_key(const uint8_t *b, int64_t start, int64_t stop, const KeyIndex *keys)
{
    int64_t size = stop - start;
    if (!((keys->lengths >> (size < 63 ? size : 63)) & 1))
        return -1;
    for (int at = key_slot(b + start, size);; at = (at + 1) & 1023) {
        int k = keys->slot[at] - 1;
        if (k < 0)
            return -1;
        if (keys->size[k] == size && memcmp(keys->key[k], b + start, size) == 0)
            return keys->what[k];
    }
}

/* After a member of an object: past the comma and the space after it (*more), or past the
 * closing brace. */
static int64_t next_member(const uint8_t *b, int64_t pos, int64_t end, int *more)
{
    *more = 0;
    pos = ws(b, pos, end);
    if (pos >= end)
        return OUT;
    if (b[pos] == '}')
        return pos + 1;
    if (b[pos] != ',')
        return BAD;
    pos = ws(b, pos + 1, end);
    if (pos >= end)
        return OUT;
    *more = 1;
    return pos;
}

/* Past the "{" at `pos` and the space after it; *more where a member follows. */
static int64_t open_object(const uint8_t *b, int64_t pos, int64_t end, int *more)
{
    *more = 0;
    pos = ws(b, pos + 1, end);
    if (pos >= end)
        return OUT;
    if (b[pos] == '}')
        return pos + 1;
    *more = 1;
    return pos;
}

/* FNV-1a over the text's 8-byte words (little-endian), then its last bytes one at a time. */
static int64_t fnv1a(const uint8_t *b, int64_t start, int64_t stop)
{
    uint64_t value = 14695981039346656037ULL;
    int64_t k = start;
    for (; k + 8 <= stop; k += 8) {
        uint64_t word = 0;
        for (int j = 7; j >= 0; j--)
            word = (word << 8) | b[k + j];
        value = (value ^ word) * 1099511628211ULL;
    }
    for (; k < stop; k++)
        value = (value ^ (uint64_t)b[k]) * 1099511628211ULL;
    return (int64_t)value;
}

/* One of the hot keys' values: an int in int64 into `column`, anything else sends the event's
 * args to msgspec. */
static int64_t hot_value(Scan *s, int64_t pos, int64_t row, int64_t column)
{
    const uint8_t *b = s->buf;
    uint8_t c = b[pos];
    if (c == '-' || is_digit(c)) {
        int kind;
        int64_t integer;
        double real;
        int64_t after = number(b, pos, s->end, &kind, &integer, &real);
        if (after >= 0 && kind == 1) {
            CELL(s, row, column) = integer;
            return after;
        }
        CELL(s, row, s->l[L_FULL]) = 1;
        return after;
    }
    CELL(s, row, s->l[L_FULL]) = 1;
    return skip(b, pos, s->end);
}

/* A launch dimension: a list of three ints in int64 into `column` and the two after it; past it.
 * Anything else sends the event's args to msgspec. */
static int64_t dim_value(Scan *s, int64_t pos, int64_t row, int64_t column)
{
    const uint8_t *b = s->buf;
    int64_t end = s->end, at = b[pos] == '[' ? ws(b, pos + 1, end) : -1;
    for (int k = 0; k < 3; k++) {
        if (at >= 0 && k)
            at = at < end && b[at] == ',' ? ws(b, at + 1, end) : -1;
        if (at < 0 || at >= end || !(b[at] == '-' || is_digit(b[at]))) {
            at = -1;
            break;
        }
        int kind;
        int64_t integer;
        double real;
        int64_t after = number(b, at, end, &kind, &integer, &real);
        if (after < 0 || kind != 1) {
            at = -1;
            break;
        }
        CELL(s, row, column + k) = integer;
        at = ws(b, after, end);
    }
    if (at >= 0 && at < end && b[at] == ']')
        return at + 1;
    CELL(s, row, s->l[L_FULL]) = 1;
    return skip(b, pos, end);
}

/* One member of args, its key at b[start:stop] and its value at `pos`: past it; its bit into
 * *seen. */
static int64_t arg(Scan *s, int64_t pos, int64_t row, int64_t start, int64_t stop, int marked,
                   int64_t *seen)
{
    const uint8_t *b = s->buf;
    int found = marked ? -1 : find_key(b, start, stop, &s->arg_index);
    int table = found < 0 ? -1 : found / 64, index = found < 0 ? -1 : found % 64;
    int which = table == 0 ? index : -1, dim = table == 1 ? index : -1;
    int raw = table == 2 ? index : -1;
    int bit = which >= 0 ? which
              : dim >= 0 ? (int)s->hot.count + dim
              : raw >= 0 ? (int)(s->hot.count + s->dims.count) + raw : -1;
    if (marked || (bit >= 0 && (*seen & ((int64_t)1 << bit))) || table == 3)
        CELL(s, row, s->l[L_FULL]) = 1; /* msgspec reads what these keys hold */
    if (bit >= 0)
        *seen |= (int64_t)1 << bit;
    if (which >= 0)
        return hot_value(s, pos, row, s->l[L_HOT] + which);
    if (dim >= 0)
        return dim_value(s, pos, row, s->l[L_DIMS] + 3 * dim);
    int64_t after = skip(b, pos, s->end);
    if (raw >= 0 && after >= 0) { /* the value's text, as msgspec.Raw keeps it */
        CELL(s, row, s->l[L_RAWS] + 2 * raw) = pos;
        CELL(s, row, s->l[L_RAWS] + 2 * raw + 1) = after;
    }
    return after;
}

static int64_t args(Scan *s, int64_t pos, int64_t row)
{
    const uint8_t *b = s->buf;
    int64_t end = s->end, start, stop;
    int64_t seen = 0;
    int more, marked;
    CELL(s, row, s->l[L_ARGS]) = pos;
    pos = open_object(b, pos, end, &more);
    while (more) {
        pos = key(b, pos, end, &start, &stop, &marked);
        if (pos < 0)
            return pos;
        pos = arg(s, pos, row, start, stop, marked, &seen);
        if (pos < 0)
            return pos;
        pos = next_member(b, pos, end, &more);
    }
    if (pos >= 0) {
        CELL(s, row, s->l[L_ARGS] + 1) = pos;
        CELL(s, row, s->l[L_SEEN]) = seen;
    }
    return pos;
}

/* A string field: where its text starts and ends into `column` and the next (and its hash into
 * `hash_column`, where that is not -1); past it. */
static int64_t text(Scan *s, int64_t pos, int64_t row, int64_t column, int64_t flag,
                    int64_t hash_column)
{
    const uint8_t *b = s->buf;
    int marked;
    if (b[pos] != '"')
        return BAD;
    CELL(s, row, column) = pos + 1;
    int64_t after = string_end(b, pos, s->end, &marked);
    if (after < 0)
        return after;
    CELL(s, row, column + 1) = after - 1;
    if (marked)
        CELL(s, row, s->l[L_FLAGS]) |= flag;
    if (hash_column >= 0)
        CELL(s, row, hash_column) = fnv1a(b, pos + 1, after - 1);
    return after;
}

static int64_t ph(Scan *s, int64_t pos, int64_t row)
{
    const uint8_t *b = s->buf;
    int marked;
    if (b[pos] != '"')
        return BAD;
    int64_t after = string_end(b, pos, s->end, &marked);
    if (after < 0 || marked)
        return after >= 0 ? BAD : after;
    CELL(s, row, s->l[L_PH]) = after - pos == 3 ? (int64_t)b[pos + 1] : -2;
    return after;
}

/* pid, tid and id: an int in int64 or a string (kind 1 or 2 into `column`). */
static int64_t int_or_text(Scan *s, int64_t pos, int64_t row, int64_t column, int64_t flag)
{
    const uint8_t *b = s->buf;
    uint8_t c = b[pos];
    if (c == '"') {
        CELL(s, row, column) = 2;
        return text(s, pos, row, column + 1, flag, -1);
    }
    if (c != '-' && !is_digit(c))
        return BAD;
    int kind;
    int64_t integer;
    double real;
    int64_t after = number(b, pos, s->end, &kind, &integer, &real);
    if (after >= 0 && kind != 1)
        return BAD;
    CELL(s, row, column) = 1;
    CELL(s, row, column + 1) = integer;
    return after;
}

/* ts (slot 0) or dur (1) into `times`; a number read in Python is marked and its text kept. */
static int64_t time_value(Scan *s, int64_t pos, int64_t row, int slot)
{
    const uint8_t *b = s->buf;
    uint8_t c = b[pos];
    if (c != '-' && !is_digit(c))
        return BAD;
    int kind;
    int64_t integer;
    double real;
    int64_t after = number(b, pos, s->end, &kind, &integer, &real);
    if (after < 0)
        return after;
    if (kind == 1 || kind == 3) {
        s->times[row * 2 + slot] = real;
    } else {
        CELL(s, row, s->l[L_FLAGS]) |= slot == 0 ? s->l[L_F_TS_SLOW] : s->l[L_F_DUR_SLOW];
        int64_t column = slot == 0 ? s->l[L_TS] : s->l[L_DUR];
        CELL(s, row, column) = pos;
        CELL(s, row, column + 1) = after;
    }
    return after;
}

/* The value of top-level key `which` (scan.py's TOP_KEYS; -1: a key `_Event` does not have). */
static int64_t member(Scan *s, int64_t pos, int which, int64_t row)
{
    const uint8_t *b = s->buf;
    switch (which) {
    case 0:
        return ph(s, pos, row);
    case 1:
        return text(s, pos, row, s->l[L_CAT], s->l[L_F_CAT], s->l[L_CAT_HASH]);
    case 2:
        return text(s, pos, row, s->l[L_NAME], s->l[L_F_NAME], s->l[L_NAME_HASH]);
    case 3:
        return int_or_text(s, pos, row, s->l[L_PID], s->l[L_F_PID]);
    case 4:
        return int_or_text(s, pos, row, s->l[L_TID], s->l[L_F_TID]);
    case 5:
    case 6:
        return time_value(s, pos, row, which - 5);
    case 7:
    case 8:
        if (b[pos] == 'n') /* null: as absent */
            return literal_end(b, pos, s->end);
        if (which == 7)
            return int_or_text(s, pos, row, s->l[L_ID], 0);
        if (b[pos] != '{')
            return BAD;
        return args(s, pos, row);
    default:
        return skip(b, pos, s->end);
    }
}

/* Read the event object at `pos` into row `row`; past it. */
static int64_t event(Scan *s, int64_t pos, int64_t row)
{
    const uint8_t *b = s->buf;
    int64_t end = s->end, start, stop;
    int more, marked;
    memcpy(&CELL(s, row, 0), s->blank, sizeof(int64_t) * s->l[L_WIDTH]);
    s->times[row * 2] = s->times[row * 2 + 1] = NAN;
    int64_t seen = 0;
    pos = open_object(b, pos, end, &more);
    while (more) {
        pos = key(b, pos, end, &start, &stop, &marked);
        if (pos < 0 || marked)
            return pos >= 0 ? BAD : pos;
        int which = find_key(b, start, stop, &s->top_index);
        if (which >= 0) {
            if (seen & ((int64_t)1 << which))
                return BAD; /* a key given twice: msgspec keeps the last */
            seen |= (int64_t)1 << which;
        }
        pos = member(s, pos, which, row);
        if (pos < 0)
            return pos;
        pos = next_member(b, pos, end, &more);
    }
    return pos;
}

static void scan_events(Scan *s, int64_t pos, int64_t rows, int64_t *count, int64_t *stop,
                        int *status)
{
    const uint8_t *b = s->buf;
    int64_t end = s->end;
    *count = 0;
    pos = ws(b, pos, end);
    for (;;) {
        if (pos >= end) {
            *stop = pos; *status = PARTIAL;
            return;
        }
        if (b[pos] == ']' && *count == 0) {
            *stop = pos; *status = END;
            return;
        }
        if (b[pos] != '{') {
            *stop = pos; *status = FAILED;
            return;
        }
        if (*count == rows) {
            *stop = pos; *status = PARTIAL;
            return;
        }
        int64_t after = event(s, pos, *count);
        if (after < 0) {
            *stop = pos; *status = after == OUT ? PARTIAL : FAILED;
            return;
        }
        after = ws(b, after, end);
        if (after >= end || (b[after] != ',' && b[after] != ']')) {
            *stop = pos; *status = after >= end ? PARTIAL : FAILED;
            return;
        }
        (*count)++;
        if (b[after] == ']') {
            *stop = after; *status = END;
            return;
        }
        pos = ws(b, after + 1, end);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Python entry points. Buffers: the text (any bytes-like object), int64 and float64 arrays
 * (C-contiguous, as scan.py makes them).
 */

static int int64_buffer(Py_buffer *view, Py_ssize_t at_least, const char *what)
{
    if (view->len % 8 != 0 || view->len / 8 < at_least) {
        PyErr_Format(PyExc_ValueError, "%s: expected at least %zd int64 values", what, at_least);
        return -1;
    }
    return 0;
}

static int load_keys(Keys *keys, Py_buffer *bytes, Py_buffer *starts)
{
    if (starts->len % 8 != 0 || starts->len < 8) {
        PyErr_SetString(PyExc_ValueError, "a key table's starts must be int64, one more than keys");
        return -1;
    }
    keys->bytes = (const uint8_t *)bytes->buf;
    keys->starts = (const int64_t *)starts->buf;
    keys->count = starts->len / 8 - 1;
    if (keys->count > 63) {
        PyErr_SetString(PyExc_ValueError, "at most 63 keys a table");
        return -1;
    }
    for (Py_ssize_t k = 0; k < keys->count; k++) {
        if (keys->starts[k + 1] < keys->starts[k] || keys->starts[k] < 0 ||
            keys->starts[k + 1] > bytes->len) {
            PyErr_SetString(PyExc_ValueError, "a key table's starts lie outside its bytes");
            return -1;
        }
    }
    return 0;
}

/* An index of the keys of `count` tables (`find_key`). */
static int index_keys(KeyIndex *index, const Keys *const *tables, int count)
{
    index->count = 0;
    index->lengths = 0;
    memset(index->slot, 0, sizeof(index->slot));
    for (int table = 0; table < count; table++) {
        for (Py_ssize_t k = 0; k < tables[table]->count; k++) {
            if (index->count == MAX_KEYS) {
                PyErr_SetString(PyExc_ValueError, "at most 256 keys in all");
                return -1;
            }
            const uint8_t *key = tables[table]->bytes + tables[table]->starts[k];
            int64_t size = tables[table]->starts[k + 1] - tables[table]->starts[k];
            int entry = index->count++;
            index->key[entry] = key;
            index->size[entry] = size;
            index->what[entry] = (int16_t)(table * 64 + k);
            index->lengths |= (uint64_t)1 << (size < 63 ? size : 63);
            int at = key_slot(key, size);
            while (index->slot[at])
                at = (at + 1) & 1023;
            index->slot[at] = (int16_t)(entry + 1);
        }
    }
    return 0;
}

static PyObject *py_scan(PyObject *self, PyObject *a)
{
    Py_buffer text, out, times, layout, top, top_starts, hot, hot_starts, dims, dims_starts, raws,
        raws_starts, known, known_starts;
    Py_ssize_t pos, end;
    if (!PyArg_ParseTuple(a, "y*nnw*w*y*y*y*y*y*y*y*y*y*y*y*", &text, &pos, &end, &out, &times,
                          &layout, &top, &top_starts, &hot, &hot_starts, &dims, &dims_starts,
                          &raws, &raws_starts, &known, &known_starts))
        return NULL;
    Py_buffer *views[] = {&text, &out, &times, &layout, &top, &top_starts, &hot, &hot_starts,
                          &dims, &dims_starts, &raws, &raws_starts, &known, &known_starts};
    PyObject *result = NULL;
    Scan s;
    int64_t *blank = NULL;
    int64_t count = 0, stop = 0;
    int status = FAILED;
    if (layout.len != (Py_ssize_t)sizeof(s.l)) {
        PyErr_SetString(PyExc_ValueError, "layout: not the columns this scanner was built for");
        goto done;
    }
    memcpy(s.l, layout.buf, sizeof(s.l));
    if (s.l[L_WIDTH] <= 0 || out.len % (8 * s.l[L_WIDTH]) != 0) {
        PyErr_SetString(PyExc_ValueError, "out: expected rows of the layout's width (int64)");
        goto done;
    }
    int64_t rows = out.len / (8 * s.l[L_WIDTH]);
    if (times.len != rows * 16) {
        PyErr_SetString(PyExc_ValueError, "times: expected two float64 values a row of out");
        goto done;
    }
    if (pos < 0 || end > text.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within the text");
        goto done;
    }
    /* every cell a row writes lies inside the row: (column, how many cells from it) */
    const int64_t extents[][2] = {
        {s.l[L_PH], 1}, {s.l[L_CAT], 2}, {s.l[L_NAME], 2}, {s.l[L_PID], 3}, {s.l[L_TID], 3},
        {s.l[L_ID], 2}, {s.l[L_ARGS], 2}, {s.l[L_FULL], 1}, {s.l[L_SEEN], 1}, {s.l[L_FLAGS], 1},
        {s.l[L_TS], 2}, {s.l[L_DUR], 2}, {s.l[L_CAT_HASH], 1}, {s.l[L_NAME_HASH], 1},
        {s.l[L_HOT], (int64_t)(hot_starts.len / 8 - 1)},
        {s.l[L_DIMS], 3 * (int64_t)(dims_starts.len / 8 - 1)},
        {s.l[L_RAWS], 2 * (int64_t)(raws_starts.len / 8 - 1)}};
    for (size_t k = 0; k < sizeof(extents) / sizeof(extents[0]); k++) {
        if (extents[k][0] < 0 || extents[k][0] + extents[k][1] > s.l[L_WIDTH]) {
            PyErr_SetString(PyExc_ValueError, "layout: a column outside the row");
            goto done;
        }
    }
    if (load_keys(&s.top, &top, &top_starts) < 0 || load_keys(&s.hot, &hot, &hot_starts) < 0 ||
        load_keys(&s.dims, &dims, &dims_starts) < 0 || load_keys(&s.raws, &raws, &raws_starts) < 0 ||
        load_keys(&s.known, &known, &known_starts) < 0)
        goto done;
    if (s.hot.count + s.dims.count + s.raws.count > 62) {
        PyErr_SetString(PyExc_ValueError, "at most 62 hot, launch-dimension and shape keys");
        goto done;
    }
    const Keys *top_tables[] = {&s.top}, *arg_tables[] = {&s.hot, &s.dims, &s.raws, &s.known};
    if (index_keys(&s.top_index, top_tables, 1) < 0 || index_keys(&s.arg_index, arg_tables, 4) < 0)
        goto done;
    blank = PyMem_Malloc(sizeof(int64_t) * s.l[L_WIDTH]);
    if (blank == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t column = 0; column < s.l[L_WIDTH]; column++)
        blank[column] = -1;
    blank[s.l[L_CAT_HASH]] = blank[s.l[L_NAME_HASH]] = fnv1a(NULL, 0, 0);
    blank[s.l[L_PID]] = blank[s.l[L_TID]] = blank[s.l[L_ID]] = 0;
    blank[s.l[L_FULL]] = blank[s.l[L_FLAGS]] = blank[s.l[L_SEEN]] = 0;
    s.blank = blank;
    s.buf = (const uint8_t *)text.buf;
    s.end = end;
    s.out = (int64_t *)out.buf;
    s.times = (double *)times.buf;
    Py_BEGIN_ALLOW_THREADS
    scan_events(&s, pos, rows, &count, &stop, &status);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("LLi", (long long)count, (long long)stop, status);
done:
    PyMem_Free(blank);
    for (size_t k = 0; k < sizeof(views) / sizeof(views[0]); k++)
        PyBuffer_Release(views[k]);
    return result;
}

/* Spans of a text: where each starts and ends (int64; a start below zero, an absent span, is the
 * empty text at 0), as the span functions below take them. */
typedef struct {
    Py_buffer text, starts, stops;
    Py_ssize_t count;
} Spans;

/* The text and spans from `a` (then `format`'s other buffers); -1 with an error set where they
 * do not parse or the ends are not one an int64 for each start. */
static int load_spans(Spans *spans, PyObject *a, const char *format, Py_buffer *more)
{
    memset(spans, 0, sizeof(*spans));
    int parsed = more ? PyArg_ParseTuple(a, format, &spans->text, &spans->starts, &spans->stops,
                                         more)
                      : PyArg_ParseTuple(a, format, &spans->text, &spans->starts, &spans->stops);
    if (!parsed)
        return -1;
    spans->count = spans->starts.len / 8;
    return int64_buffer(&spans->stops, spans->count, "stops");
}

/* Release what `load_spans` took (a buffer never taken, or given back already, is left alone). */
static void release_spans(Spans *spans, Py_buffer *more)
{
    PyBuffer_Release(&spans->text);
    PyBuffer_Release(&spans->starts);
    PyBuffer_Release(&spans->stops);
    if (more)
        PyBuffer_Release(more);
}

/* Span k's bytes: [*from, *to) within the text; -1 with an error set where it is not. */
static int span(const Spans *spans, Py_ssize_t k, int64_t *from, int64_t *to)
{
    const int64_t start = ((const int64_t *)spans->starts.buf)[k];
    const int64_t stop = ((const int64_t *)spans->stops.buf)[k];
    *from = start > 0 ? start : 0;
    *to = start < 0 ? 0 : stop;
    if (*to < *from || *to > spans->text.len) {
        PyErr_SetString(PyExc_ValueError, "a span outside the text");
        return -1;
    }
    return 0;
}

/* span_hashes(text, starts, stops, hashes): `fnv1a` of each span into `hashes`. */
static PyObject *py_span_hashes(PyObject *self, PyObject *a)
{
    Spans spans;
    Py_buffer hashes = {0};
    PyObject *result = NULL;
    if (load_spans(&spans, a, "y*y*y*w*", &hashes) == 0 &&
        int64_buffer(&hashes, spans.count, "hashes") == 0) {
        int64_t *hash = hashes.buf, from, to;
        Py_ssize_t k = 0;
        for (; k < spans.count && span(&spans, k, &from, &to) == 0; k++)
            hash[k] = fnv1a(spans.text.buf, from, to);
        if (k == spans.count)
            result = Py_NewRef(Py_None);
    }
    release_spans(&spans, &hashes);
    return result;
}

/* same_spans(text, starts, stops, first): whether each span holds the same bytes as the span
 * `first` names for it. */
static PyObject *py_same_spans(PyObject *self, PyObject *a)
{
    Spans spans;
    Py_buffer firsts = {0};
    PyObject *result = NULL;
    if (load_spans(&spans, a, "y*y*y*y*", &firsts) == 0 &&
        int64_buffer(&firsts, spans.count, "first") == 0) {
        const int64_t *first = firsts.buf;
        const uint8_t *b = spans.text.buf;
        int same = 1, failed = 0;
        for (Py_ssize_t row = 0; row < spans.count && same && !failed; row++) {
            int64_t from, to, o_from, o_to, other = first[row];
            if (other < 0 || other >= spans.count) {
                PyErr_SetString(PyExc_ValueError, "first: a row outside the spans");
                failed = 1;
            } else if (span(&spans, row, &from, &to) < 0 ||
                       span(&spans, other, &o_from, &o_to) < 0) {
                failed = 1;
            } else if (other != row) {
                same = to - from == o_to - o_from && memcmp(b + from, b + o_from, to - from) == 0;
            }
        }
        result = failed ? NULL : PyBool_FromLong(same);
    }
    release_spans(&spans, &firsts);
    return result;
}

/* joined_spans(text, starts, stops): the spans' bytes as one JSON list, "[" span "," ... "]". */
static PyObject *py_joined_spans(PyObject *self, PyObject *a)
{
    Spans spans;
    PyObject *result = NULL;
    if (load_spans(&spans, a, "y*y*y*", NULL) == 0) {
        Py_ssize_t size = 2 + (spans.count > 0 ? spans.count - 1 : 0), k = 0;
        int64_t from, to;
        for (; k < spans.count && span(&spans, k, &from, &to) == 0; k++)
            size += to - from;
        if (k == spans.count && (result = PyBytes_FromStringAndSize(NULL, size)) != NULL) {
            char *at = PyBytes_AS_STRING(result);
            *at++ = '[';
            for (k = 0; k < spans.count; k++) {
                span(&spans, k, &from, &to);
                if (k)
                    *at++ = ',';
                memcpy(at, (const char *)spans.text.buf + from, to - from);
                at += to - from;
            }
            *at = ']';
        }
    }
    release_spans(&spans, NULL);
    return result;
}

/* The text, a position in it and where it ends from `a`; -1 with an error set (and nothing held)
 * where they do not parse or do not lie within the text. */
static int load_position(PyObject *a, Py_buffer *text, Py_ssize_t *pos, Py_ssize_t *end)
{
    if (!PyArg_ParseTuple(a, "y*nn", text, pos, end))
        return -1;
    if (*pos < 0 || *pos >= *end || *end > text->len) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within the text");
        PyBuffer_Release(text);
        return -1;
    }
    return 0;
}

/* number(text, pos, end): (past it, kind, its int, its float), as scan.py's `_number`. */
static PyObject *py_number(PyObject *self, PyObject *a)
{
    Py_buffer text;
    Py_ssize_t pos, end;
    if (load_position(a, &text, &pos, &end) < 0)
        return NULL;
    int kind;
    int64_t integer;
    double real;
    int64_t after = number(text.buf, pos, end, &kind, &integer, &real);
    PyBuffer_Release(&text);
    return Py_BuildValue("LiLd", (long long)after, kind, (long long)integer, real);
}

/* value_end(text, pos, end): past the JSON value at pos, as a value skipped is read (OUT, BAD). */
static PyObject *py_value_end(PyObject *self, PyObject *a)
{
    Py_buffer text;
    Py_ssize_t pos, end;
    if (load_position(a, &text, &pos, &end) < 0)
        return NULL;
    int64_t after = skip(text.buf, pos, end);
    PyBuffer_Release(&text);
    return PyLong_FromLongLong((long long)after);
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, "Read the events of text[pos:end] into out and times."},
    {"span_hashes", py_span_hashes, METH_VARARGS, "FNV-1a of each span, into hashes."},
    {"same_spans", py_same_spans, METH_VARARGS, "Whether each span equals the one first names."},
    {"joined_spans", py_joined_spans, METH_VARARGS, "The spans as one JSON list (bytes)."},
    {"number", py_number, METH_VARARGS, "The JSON number at pos: (past it, kind, int, float)."},
    {"value_end", py_value_end, METH_VARARGS, "Past the JSON value at pos, as one skipped."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "The Kineto window scanner of scan.py, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    for (int c = 0; c < 256; c++)
        stops_plain[c] = c == '"' || c == '\\' || c < 32 || c >= 128;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "LAYOUT_SIZE", L_COUNT) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
