/* The chunk scan of prime_rl.analysis.parser in C (optional: the parser falls back to its Python
 * scan when this module is not built; the tests hold the two to the same output).
 *
 * scan(buffer, size, heads, split, fields=None) walks a chunk's first `size` bytes once, without the GIL: it
 * counts the newlines and visits every "[". A "[" that starts one of `heads` (the known tag
 * markers, "[weights]" and so on) is a marker; the first marker of each line is kept with the line's
 * number (counted from 0 at the chunk's start), where the line starts and ends (the end is its
 * newline: a chunk ends with one) and where the marker is. A "[" that is not a marker is a candidate
 * for an unknown tag's head when it starts a line or follows "| "; the caller matches those against
 * its pattern.
 *
 * With `split`, a kept line in the one shape format_tagged writes through loguru's file sink is
 * also taken apart here ("clean"): ASCII only; "YYYY-MM-DD HH:MM:SS.mmm | LEVEL    | " at its start
 * (digits, separators and a level of A-Z and spaces where they belong) and the marker at byte 36; no tab, CR, VT or FF in the message; the
 * head "[tag]" or "[tag][trace id]" (1-64 of A-Za-z0-9_.-) followed by one space and a first word
 * that is an event name or a key=value; the rest after the next space, if any; every token of the
 * fields part (what single spaces separate) a key=value, with a key before its first "=" (the
 * grammar's: a line with "garbage" or "=5" among its fields is malformed). Every other kept
 * line (malformed ones among them) is left to the caller. A clean line's event is its first word,
 * or "" when that word is a key=value (an event-less line); its fields part is the rest ("" when
 * none) or, on an event-less line, the first word, a space and the rest (what the parser's _finish
 * makes of them).
 * A chunk of more than MAX_SPLIT bytes (one line longer than 1 GiB) is scanned as without `split`.
 *
 * `fields` (one tuple of keys as bytes per head, at most MAX_FIELDS each) names the fields read from
 * a clean line of that head as it is taken apart: each key's value is that of its last token
 * "key=value" (tokens are what single spaces separate; the value runs to the token's end) in the
 * line's fields part (the rest, or from the first word on when that word is a key=value); null
 * where no token has the key. That is what the parser's read_fields finds in ASCII text with no
 * whitespace but spaces, which clean lines are.
 *
 * `kinds` (with `fields`: one bytes per head, a byte a key) says which values are also read as
 * numbers: KIND_NUMBER, a float64 where the value is a plain decimal (plain_decimal), null elsewhere
 * (other text is left to the caller); KIND_STEP, an int64 where it is 1-8 digits, null elsewhere.
 *
 * Returns (newlines, candidates, rows, texts, clean):
 *   candidates  int64 bytes: the candidates' positions;
 *   rows        int64 bytes, 4 a kept line that is not clean: line, start, end, marker;
 *   texts       those lines decoded as bytes.decode("utf-8", "replace") decodes them (no newline);
 *   clean       None, or (lines, dates, times, tags, tid, event, rest, values, nums, steps) of the clean lines:
 *               lines int64 bytes; dates int32 bytes (YYYYMMDD); times int32 bytes, 4 a line (hour,
 *               minute, second, millisecond); tags uint8 bytes (the index of the head in `heads`);
 *               tid, event and rest (the fields part) each an Arrow string-view column as a pair
 *               of PyCapsules ("arrow_schema", "arrow_array": the Arrow C data interface; tid
 *               nullable);
 *               values a list of such nullable columns, the i-th holding each line's i-th key's
 *               value (as many as the most keys of a head); nums and steps lists as long, the
 *               i-th the i-th value as a number (an Arrow float64 column) and as a step (int64),
 *               each None when no head's kinds ask for it (null on the lines of other heads).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --- growable byte buffers (malloc'd: an exported column's are freed by its consumer, maybe
 * without the GIL) -------------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_put(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (grown == NULL)
            return -1;
        b->data = grown;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int put_i64(Buf *b, int64_t x) { return buf_put(b, &x, sizeof x); }
static int put_i32(Buf *b, int32_t x) { return buf_put(b, &x, sizeof x); }

/* --- the Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html) --- */

#define ARROW_FLAG_NULLABLE 2

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* A string-view column being built (Arrow's Utf8View, what polars keeps strings as: no conversion
 * when polars takes it): 16 bytes a row (the length, then the string itself when it has at most 12
 * bytes, else its first 4 bytes, buffer 0 and its offset in the data), the longer strings' bytes,
 * and the validity bitmap (bit i set: row i has a value) when it may hold nulls. The data stays
 * under 2 GiB: scan takes apart no line of a chunk over MAX_SPLIT bytes. */
typedef struct {
    Buf views, data, validity;
    int64_t length, nulls;
    int nullable;
} StrCol;

#define VIEW_INLINE 12
#define MAX_SPLIT ((Py_ssize_t)1 << 30)

static void strcol_init(StrCol *c, int nullable) {
    memset(c, 0, sizeof *c);
    c->nullable = nullable;
}

/* the validity bit of row `row` (the next one) appended to the bitmap: set when `valid` */
static int validity_add(Buf *validity, int64_t row, int valid) {
    if (row % 8 == 0) {
        char zero = 0;
        if (buf_put(validity, &zero, 1))
            return -1;
    }
    if (valid)
        validity->data[row / 8] |= (char)(1 << (row % 8));
    return 0;
}

/* append s1[0:n1] + s2[0:n2]; n1 < 0: a null */
static int strcol_add2(StrCol *c, const char *s1, Py_ssize_t n1, const char *s2, Py_ssize_t n2) {
    unsigned char view[16] = {0};
    if (c->nullable && validity_add(&c->validity, c->length, n1 >= 0))
        return -1;
    if (n1 < 0) {
        c->nulls++;
    } else {
        int32_t n = (int32_t)(n1 + n2), offset = (int32_t)c->data.len, buffer = 0;
        memcpy(view, &n, 4);
        if (n <= VIEW_INLINE) {
            memcpy(view + 4, s1, (size_t)n1);
            memcpy(view + 4 + n1, s2, (size_t)n2);
        } else {
            if (buf_put(&c->data, s1, (size_t)n1) || buf_put(&c->data, s2, (size_t)n2))
                return -1;
            memcpy(view + 4, c->data.data + offset, 4);
            memcpy(view + 8, &buffer, 4);
            memcpy(view + 12, &offset, 4);
        }
    }
    c->length++;
    return buf_put(&c->views, view, sizeof view);
}

/* append s[0:n]; n < 0: a null */
static int strcol_add(StrCol *c, const char *s, Py_ssize_t n) { return strcol_add2(c, s, n, "", 0); }

/* A column of 8-byte numbers being built (float64 or int64), nullable: the values and the validity
 * bitmap (bit i set: row i has a value). */
typedef struct {
    Buf data, validity;
    int64_t length, nulls;
} NumCol;

/* append the 8 bytes at v; NULL: a null */
static int numcol_add(NumCol *c, const void *v) {
    static const char zeros[8] = {0};
    if (validity_add(&c->validity, c->length, v != NULL))
        return -1;
    if (v == NULL)
        c->nulls++;
    c->length++;
    return buf_put(&c->data, v ? v : zeros, 8);
}

static void numcol_free(NumCol *c) {
    free(c->data.data);
    free(c->validity.data);
    memset(c, 0, sizeof *c);
}

/* The number a field's value is when it is written as a plain decimal, -?[0-9]+(.[0-9]+)?, with
 * at most 15 digits: the digits as an integer (exact in a double) over a power of ten (exact too),
 * one correctly rounded division, so the same double as any correctly rounding parser (polars'
 * cast among them). 0: some other text (the caller's polars cast reads it). */
static int plain_decimal(const char *v, Py_ssize_t n, double *out) {
    static const double tens[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    Py_ssize_t i = (n > 0 && v[0] == '-') ? 1 : 0, digits = 0, point = -1;
    uint64_t m = 0;
    if (i == n)
        return 0;
    for (; i < n; i++) {
        char c = v[i];
        if (c >= '0' && c <= '9') {
            m = m * 10 + (uint64_t)(c - '0');
            if (++digits > 15)
                return 0;
        } else if (c == '.' && point < 0 && digits > 0 && i + 1 < n) {
            point = digits;
        } else {
            return 0;
        }
    }
    double d = (double)m / tens[point < 0 ? 0 : digits - point];
    *out = v[0] == '-' ? -d : d;
    return 1;
}

/* The step a value is: 1-8 ASCII digits (what the parser's step_number_expr takes); 0: none. */
static int step_digits(const char *v, Py_ssize_t n, int64_t *out) {
    int64_t x = 0;
    if (n < 1 || n > 8)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return 0;
        x = x * 10 + (v[i] - '0');
    }
    *out = x;
    return 1;
}

static void strcol_free(StrCol *c) {
    free(c->views.data);
    free(c->data.data);
    free(c->validity.data);
    memset(c, 0, sizeof *c);
}

static void release_schema(struct ArrowSchema *s) { s->release = NULL; }

static void release_array(struct ArrowArray *a) {
    for (int64_t i = 0; i < a->n_buffers; i++)
        free((void *)a->buffers[i]);
    free(a->buffers);
    a->release = NULL;
}

static void schema_capsule_free(PyObject *capsule) {
    struct ArrowSchema *s = PyCapsule_GetPointer(capsule, "arrow_schema");
    if (s == NULL) {
        PyErr_Clear();
        return;
    }
    if (s->release != NULL)
        s->release(s);
    free(s);
}

static void array_capsule_free(PyObject *capsule) {
    struct ArrowArray *a = PyCapsule_GetPointer(capsule, "arrow_array");
    if (a == NULL) {
        PyErr_Clear();
        return;
    }
    if (a->release != NULL)
        a->release(a);
    free(a);
}

/* (schema capsule, array capsule) owning s and a (released on failure). */
static PyObject *capsules(struct ArrowSchema *s, struct ArrowArray *a) {
    PyObject *schema = PyCapsule_New(s, "arrow_schema", schema_capsule_free);
    if (schema == NULL) {
        release_array(a);
        free(a);
        free(s);
        return NULL;
    }
    PyObject *array = PyCapsule_New(a, "arrow_array", array_capsule_free);
    if (array == NULL) {
        Py_DECREF(schema);
        release_array(a);
        free(a);
        return NULL;
    }
    return Py_BuildValue("NN", schema, array);
}

/* The column as (schema capsule, array capsule); its buffers are handed over (c is emptied). */
static PyObject *strcol_export(StrCol *c) {
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    const void **buffers = calloc(4, sizeof(void *));
    int64_t *sizes = malloc(sizeof(int64_t));
    /* valid pointers even when empty */
    void *views = c->views.data ? c->views.data : malloc(1), *data = c->data.data ? c->data.data : malloc(1);
    if (s == NULL || a == NULL || buffers == NULL || sizes == NULL || views == NULL || data == NULL) {
        free(s);
        free(a);
        free(buffers);
        free(sizes);
        if (views != c->views.data)
            free(views);
        if (data != c->data.data)
            free(data);
        return PyErr_NoMemory();
    }
    s->format = "vu";
    s->name = "";
    s->flags = c->nullable ? ARROW_FLAG_NULLABLE : 0;
    s->release = release_schema;
    if (c->nulls == 0) { /* no nulls: no bitmap */
        free(c->validity.data);
        c->validity.data = NULL;
    }
    /* validity, views, one data buffer, then the data buffers' sizes */
    *sizes = (int64_t)c->data.len;
    buffers[0] = c->validity.data;
    buffers[1] = views;
    buffers[2] = data;
    buffers[3] = sizes;
    a->length = c->length;
    a->null_count = c->nulls;
    a->n_buffers = 4;
    a->buffers = buffers;
    a->release = release_array;
    memset(c, 0, sizeof *c); /* the array owns the buffers now */
    return capsules(s, a);
}

/* The column as (schema capsule, array capsule) of Arrow format `format` ("g": float64, "l": int64);
 * its buffers are handed over (c is emptied). */
static PyObject *numcol_export(NumCol *c, const char *format) {
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    const void **buffers = calloc(2, sizeof(void *));
    void *data = c->data.data ? c->data.data : malloc(1); /* a valid pointer even when empty */
    if (s == NULL || a == NULL || buffers == NULL || data == NULL) {
        free(s);
        free(a);
        free(buffers);
        if (data != c->data.data)
            free(data);
        return PyErr_NoMemory();
    }
    s->format = format;
    s->name = "";
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = release_schema;
    if (c->nulls == 0) {
        free(c->validity.data);
        c->validity.data = NULL;
    }
    buffers[0] = c->validity.data;
    buffers[1] = data;
    a->length = c->length;
    a->null_count = c->nulls;
    a->n_buffers = 2;
    a->buffers = buffers;
    a->release = release_array;
    memset(c, 0, sizeof *c);
    return capsules(s, a);
}

/* --- the scan ------------------------------------------------------------------------------ */

/* the newlines of s[0:n], counted a memchr at a time (lines are tens to hundreds of bytes: memchr's
 * vector search beats a byte loop), and the last one's position in *last (unchanged: none) */
static Py_ssize_t count_newlines(const char *s, Py_ssize_t n, const char **last) {
    Py_ssize_t c = 0;
    const char *end = s + n;
    const char *p = s;
    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        c++;
        *last = p;
        p++;
    }
    return c;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_tid(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' || c == '.' || c == '-';
}

/* Whether the first word w[0:n] makes a well-formed line (the parser's _finish): an event name
 * ([A-Za-z_][A-Za-z0-9_.]*), or the first field of an event-less line (a "=" after a key). */
static int first_ok(const char *w, Py_ssize_t n) {
    if (memchr(w, '=', (size_t)n) != NULL)
        return w[0] != '=';
    if (!((w[0] >= 'a' && w[0] <= 'z') || (w[0] >= 'A' && w[0] <= 'Z') || w[0] == '_'))
        return 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        char c = w[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

#define LOGURU_LEN 36
#define MAX_TID 64

#define MAX_FIELDS 16
#define KIND_NUMBER 1
#define KIND_STEP 2

typedef struct {
    const char *key[MAX_FIELDS];
    Py_ssize_t len[MAX_FIELDS];
    unsigned char kind[MAX_FIELDS]; /* KIND_NUMBER | KIND_STEP: the value read as a number, a step */
    int n;
} Keys;

typedef struct {
    int32_t date, h, m, s, ms;
    Py_ssize_t tid, tid_n, first, first_n, rest, rest_n; /* _n < 0: none */
    Py_ssize_t from, to; /* the fields part s[from:to] (from < 0: none) */
    Py_ssize_t at[MAX_FIELDS], n[MAX_FIELDS]; /* where each key's value is, and its length (-1: none) */
} Clean;

/* The value of each of the first `nvalues` keys of `k` in the fields part s[a:e] (its last "key="
 * token; tokens are what single spaces separate, the value runs to the token's end) into at and n
 * (n -1: no token has the key). 0 when a token is no key=value (no '=' in it, or nothing before
 * its first one): the line does not follow the grammar, and is left to the caller, which names it
 * as malformed. */
static int find_values(const char *s, Py_ssize_t a, Py_ssize_t e, const Keys *k, int nvalues, Py_ssize_t *at,
                       Py_ssize_t *n) {
    for (int j = 0; j < nvalues; j++)
        n[j] = -1;
    for (Py_ssize_t t = a; a >= 0 && t <= e;) {
        Py_ssize_t u = t, eq = -1; /* the token s[t:u] (up to a space), its first '=' */
        for (; u < e && s[u] != ' '; u++)
            if (eq < 0 && s[u] == '=')
                eq = u;
        if (u > t && eq <= t)
            return 0; /* a token without a key=value: "garbage", "=5" */
        for (int j = 0; j < k->n; j++) { /* a key=value token: its key is s[t:eq] (keys hold no '=') */
            if (k->len[j] == eq - t && memcmp(s + t, k->key[j], (size_t)(eq - t)) == 0) {
                at[j] = eq + 1;
                n[j] = u - at[j];
            }
        }
        t = u + 1;
    }
    return 1;
}

static int two(const char *p) { return (p[0] - '0') * 10 + (p[1] - '0'); }

/* Whether s[i:e] is ASCII with no \t \r \v \f from p on, byte by byte. */
static int bytes_ok(const char *s, Py_ssize_t i, Py_ssize_t e, Py_ssize_t p) {
    for (; i < e; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80 || (i >= p && (c == '\t' || c == '\r' || c == '\v' || c == '\f')))
            return 0;
    }
    return 1;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* bytes_ok(s, a, e, p), eight bytes at a time: a word with no byte >= 0x80 and none below 0x0e (the
 * control characters, \t \r \v \f among them) is fine; the rare other word is read byte by byte. */
static int text_ok(const char *s, Py_ssize_t a, Py_ssize_t e, Py_ssize_t p) {
    Py_ssize_t i = a;
    for (; i + 8 <= e; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (((w | ((w - 0x0e * ONES) & ~w)) & HIGHS) && !bytes_ok(s, i, i + 8, p))
            return 0;
    }
    return bytes_ok(s, i, e, p);
}

/* Whether line s[a:e] with its marker (head_len bytes) at p is clean (see the module's comment);
 * its parts in *out. */
static int clean_line(const char *s, Py_ssize_t a, Py_ssize_t e, Py_ssize_t p, Py_ssize_t head_len, const Keys *k,
                      int nvalues, Clean *out) {
    static const int digits[] = {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22};
    const char *l = s + a;
    if (p - a != LOGURU_LEN)
        return 0;
    for (size_t i = 0; i < sizeof digits / sizeof digits[0]; i++)
        if (!is_digit(l[digits[i]]))
            return 0;
    if (l[4] != '-' || l[7] != '-' || l[10] != ' ' || l[13] != ':' || l[16] != ':' || l[19] != '.')
        return 0;
    /* " | LEVEL    | ": the message starts at the marker (else the marker is text in a message) */
    if (l[23] != ' ' || l[24] != '|' || l[25] != ' ' || l[34] != '|' || l[35] != ' ')
        return 0;
    for (int i = 26; i < 34; i++)
        if (!((l[i] >= 'A' && l[i] <= 'Z') || l[i] == ' '))
            return 0;
    if (!text_ok(s, a, e, p))
        return 0;
    out->date = (int32_t)(two(l) * 1000000 + two(l + 2) * 10000 + two(l + 5) * 100 + two(l + 8));
    out->h = two(l + 11);
    out->m = two(l + 14);
    out->s = two(l + 17);
    out->ms = (l[20] - '0') * 100 + two(l + 21);
    Py_ssize_t q = p + head_len; /* after "[tag]" */
    out->tid = 0;
    out->tid_n = -1;
    if (q < e && s[q] == '[') {
        Py_ssize_t t = q + 1;
        while (t < e && t - (q + 1) <= MAX_TID && is_tid(s[t]))
            t++;
        Py_ssize_t n = t - (q + 1);
        if (n < 1 || n > MAX_TID || t >= e || s[t] != ']')
            return 0;
        out->tid = q + 1;
        out->tid_n = n;
        q = t + 1;
    }
    if (q >= e || s[q] != ' ')
        return 0; /* the head ends at a space, and a first word follows */
    Py_ssize_t f = q + 1, g = q + 1;
    while (g < e && s[g] != ' ')
        g++;
    if (g == f)
        return 0;
    if (!first_ok(s + f, g - f))
        return 0; /* a malformed line: left to the caller, which names it */
    out->first = f;
    out->first_n = g - f;
    out->rest = g < e ? g + 1 : 0;
    out->rest_n = g < e ? e - (g + 1) : -1;
    /* the fields part: from the first word when it is a key=value (an event-less line), else the rest */
    int eventless = memchr(s + f, '=', (size_t)(g - f)) != NULL;
    out->from = eventless ? f : (out->rest_n >= 0 ? out->rest : -1);
    out->to = out->rest_n >= 0 ? out->rest + out->rest_n : g;
    return find_values(s, out->from, out->to, k, nvalues, out->at, out->n);
}

typedef struct {
    Buf lines, dates, times, tags;
    StrCol tid, event, rest;
    StrCol values[MAX_FIELDS];
    NumCol nums[MAX_FIELDS], steps[MAX_FIELDS];
    int nvalues;
    int has_num[MAX_FIELDS], has_step[MAX_FIELDS]; /* whether some head reads the j-th value so */
    Py_ssize_t n;
} CleanCols;

/* The values found in a clean line (find_values: x->at, x->n), into the columns. */
static int add_values(CleanCols *c, const char *s, const Clean *x, const Keys *k) {
    const Py_ssize_t *at = x->at, *n = x->n;
    for (int j = 0; j < c->nvalues; j++) {
        const char *v = n[j] >= 0 ? s + at[j] : NULL;
        double d;
        int64_t x;
        if (strcol_add(&c->values[j], v, n[j]))
            return -1;
        if (c->has_num[j] &&
            numcol_add(&c->nums[j], v && (k->kind[j] & KIND_NUMBER) && plain_decimal(v, n[j], &d) ? &d : NULL))
            return -1;
        if (c->has_step[j] &&
            numcol_add(&c->steps[j], v && (k->kind[j] & KIND_STEP) && step_digits(v, n[j], &x) ? &x : NULL))
            return -1;
    }
    return 0;
}

static int clean_add(CleanCols *c, const char *s, int64_t line, uint8_t tag, const Clean *x, const Keys *k) {
    c->n++;
    int eventless = memchr(s + x->first, '=', (size_t)x->first_n) != NULL;
    Py_ssize_t from = x->from, to = x->to;
    /* as the parser's _finish writes it: "" for an event line with no rest, and a space after the
     * first word of an event-less line with no rest */
    Py_ssize_t fields_n = from >= 0 ? to - from : 0;
    int space = eventless && x->rest_n < 0;
    return put_i64(&c->lines, line) || put_i32(&c->dates, x->date) || put_i32(&c->times, x->h) ||
           put_i32(&c->times, x->m) || put_i32(&c->times, x->s) || put_i32(&c->times, x->ms) ||
           buf_put(&c->tags, &tag, 1) || strcol_add(&c->tid, x->tid_n >= 0 ? s + x->tid : NULL, x->tid_n) ||
           strcol_add(&c->event, s + x->first, eventless ? 0 : x->first_n) ||
           strcol_add2(&c->rest, s + (from >= 0 ? from : 0), fields_n, " ", space) ||
           add_values(c, s, x, k);
}

static void clean_free(CleanCols *c) {
    free(c->lines.data);
    free(c->dates.data);
    free(c->times.data);
    free(c->tags.data);
    strcol_free(&c->tid);
    strcol_free(&c->event);
    strcol_free(&c->rest);
    for (int j = 0; j < c->nvalues; j++) {
        strcol_free(&c->values[j]);
        numcol_free(&c->nums[j]);
        numcol_free(&c->steps[j]);
    }
}

static PyObject *bytes_of(const Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len); }

static PyObject *clean_export(CleanCols *c) {
    if (c->n == 0)
        Py_RETURN_NONE;
    PyObject *tid = strcol_export(&c->tid);
    PyObject *event = tid ? strcol_export(&c->event) : NULL;
    PyObject *rest = event ? strcol_export(&c->rest) : NULL;
    PyObject *values = rest ? PyList_New(c->nvalues) : NULL;
    PyObject *nums = values ? PyList_New(c->nvalues) : NULL;
    PyObject *steps = nums ? PyList_New(c->nvalues) : NULL;
    for (int j = 0; steps != NULL && j < c->nvalues; j++) {
        PyObject *v = strcol_export(&c->values[j]);
        PyObject *num = v == NULL ? NULL : c->has_num[j] ? numcol_export(&c->nums[j], "g") : Py_NewRef(Py_None);
        PyObject *step = num == NULL ? NULL : c->has_step[j] ? numcol_export(&c->steps[j], "l") : Py_NewRef(Py_None);
        if (step == NULL) {
            Py_XDECREF(v);
            Py_XDECREF(num);
            Py_CLEAR(steps);
            break;
        }
        PyList_SET_ITEM(values, j, v);
        PyList_SET_ITEM(nums, j, num);
        PyList_SET_ITEM(steps, j, step);
    }
    if (steps == NULL) {
        Py_XDECREF(tid);
        Py_XDECREF(event);
        Py_XDECREF(rest);
        Py_XDECREF(values);
        Py_XDECREF(nums);
        return NULL;
    }
    return Py_BuildValue("NNNNNNNNNN", bytes_of(&c->lines), bytes_of(&c->dates), bytes_of(&c->times),
                         bytes_of(&c->tags), tid, event, rest, values, nums, steps);
}

#define MAX_HEADS 32

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t size;
    PyObject *heads_obj, *fields_obj = NULL, *kinds_obj = NULL;
    int split;
    if (!PyArg_ParseTuple(args, "y*nO!p|O!O!", &view, &size, &PyTuple_Type, &heads_obj, &split, &PyTuple_Type,
                          &fields_obj, &PyTuple_Type, &kinds_obj))
        return NULL;
    Py_ssize_t nheads = PyTuple_GET_SIZE(heads_obj);
    if (size > MAX_SPLIT)
        split = 0; /* a string view's offset is 32 bits */
    if (size < 0 || size > view.len || nheads > MAX_HEADS) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: size out of range or too many heads");
        return NULL;
    }
    const char *head_bytes[MAX_HEADS];
    Py_ssize_t head_len[MAX_HEADS];
    for (Py_ssize_t k = 0; k < nheads; k++) {
        PyObject *h = PyTuple_GET_ITEM(heads_obj, k);
        if (!PyBytes_Check(h) || PyBytes_GET_SIZE(h) < 2 || PyBytes_AS_STRING(h)[0] != '[') {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "scan: heads must be bytes starting with '['");
            return NULL;
        }
        head_bytes[k] = PyBytes_AS_STRING(h);
        head_len[k] = PyBytes_GET_SIZE(h);
    }
    Keys keys[MAX_HEADS];
    int nvalues = 0;
    memset(keys, 0, sizeof keys);
    if (fields_obj != NULL && PyTuple_GET_SIZE(fields_obj) != nheads) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: fields must have one tuple of keys per head");
        return NULL;
    }
    for (Py_ssize_t k = 0; fields_obj != NULL && k < nheads; k++) {
        PyObject *t = PyTuple_GET_ITEM(fields_obj, k);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > MAX_FIELDS) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "scan: each head's fields must be a tuple of at most 16 keys");
            return NULL;
        }
        keys[k].n = (int)PyTuple_GET_SIZE(t);
        for (int j = 0; j < keys[k].n; j++) {
            PyObject *key = PyTuple_GET_ITEM(t, j);
            if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) < 1 ||
                memchr(PyBytes_AS_STRING(key), '=', (size_t)PyBytes_GET_SIZE(key)) != NULL ||
                memchr(PyBytes_AS_STRING(key), ' ', (size_t)PyBytes_GET_SIZE(key)) != NULL) {
                PyBuffer_Release(&view);
                PyErr_SetString(PyExc_TypeError, "scan: field keys must be non-empty bytes without '=' or ' '");
                return NULL;
            }
            keys[k].key[j] = PyBytes_AS_STRING(key);
            keys[k].len[j] = PyBytes_GET_SIZE(key);
        }
        if (keys[k].n > nvalues)
            nvalues = keys[k].n;
    }
    if (kinds_obj != NULL && (fields_obj == NULL || PyTuple_GET_SIZE(kinds_obj) != nheads)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: kinds must have one bytes per head, with fields");
        return NULL;
    }
    int has_num[MAX_FIELDS] = {0}, has_step[MAX_FIELDS] = {0};
    for (Py_ssize_t k = 0; kinds_obj != NULL && k < nheads; k++) {
        PyObject *t = PyTuple_GET_ITEM(kinds_obj, k);
        if (!PyBytes_Check(t) || PyBytes_GET_SIZE(t) != keys[k].n) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "scan: each head's kinds must be bytes, one a key of its fields");
            return NULL;
        }
        for (int j = 0; j < keys[k].n; j++) {
            unsigned char kind = (unsigned char)PyBytes_AS_STRING(t)[j];
            if (kind > (KIND_NUMBER | KIND_STEP)) {
                PyBuffer_Release(&view);
                PyErr_SetString(PyExc_ValueError, "scan: a kind is 0-3 (1: a number, 2: a step)");
                return NULL;
            }
            keys[k].kind[j] = kind;
            has_num[j] |= kind & KIND_NUMBER;
            has_step[j] |= kind & KIND_STEP;
        }
    }
    const char *s = view.buf;
    Buf rows = {0}, cands = {0};
    CleanCols clean;
    memset(&clean, 0, sizeof clean);
    strcol_init(&clean.tid, 1);
    strcol_init(&clean.event, 0);
    strcol_init(&clean.rest, 0);
    clean.nvalues = nvalues;
    memcpy(clean.has_num, has_num, sizeof has_num);
    memcpy(clean.has_step, has_step, sizeof has_step);
    for (int j = 0; j < nvalues; j++)
        strcol_init(&clean.values[j], 1);
    int failed = 0;
    Py_ssize_t newlines = 0;

    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t counted = 0;    /* newlines are counted in s[0:counted] */
    Py_ssize_t line_start = 0; /* the start of the line holding s[counted - 1] (or 0) */
    int64_t kept_line = -1;    /* the last line a marker was kept for */
    const char *p = memchr(s, '[', (size_t)size);
    while (p != NULL) {
        Py_ssize_t at = p - s;
        Py_ssize_t gap = at - counted;
        const char *last = NULL;
        Py_ssize_t more = count_newlines(s + counted, gap, &last);
        if (more) {
            newlines += more;
            line_start = (last - s) + 1;
        }
        counted = at;
        int known = -1;
        for (Py_ssize_t k = 0; k < nheads; k++) {
            if (head_len[k] <= size - at && memcmp(p, head_bytes[k], (size_t)head_len[k]) == 0) {
                known = (int)k;
                break;
            }
        }
        if (known >= 0) {
            if (newlines != kept_line) {
                const char *end = memchr(p, '\n', (size_t)(size - at));
                Py_ssize_t stop = end ? end - s : size;
                Clean x;
                kept_line = newlines;
                if (split && clean_line(s, line_start, stop, at, head_len[known], &keys[known], nvalues, &x)) {
                    failed = clean_add(&clean, s, newlines, (uint8_t)known, &x, &keys[known]);
                } else {
                    failed = put_i64(&rows, newlines) || put_i64(&rows, line_start) || put_i64(&rows, stop) ||
                             put_i64(&rows, at);
                }
                if (failed)
                    break;
            }
        } else if (at == 0 || s[at - 1] == '\n' || (at > 1 && s[at - 2] == '|' && s[at - 1] == ' ')) {
            if ((failed = put_i64(&cands, at)))
                break;
        }
        p = at + 1 < size ? memchr(p + 1, '[', (size_t)(size - at - 1)) : NULL;
    }
    if (!failed) {
        const char *last = NULL;
        newlines += count_newlines(s + counted, size - counted, &last);
    }
    Py_END_ALLOW_THREADS

    PyObject *out = NULL;
    if (failed) {
        PyErr_NoMemory();
    } else {
        const int64_t *r = (const int64_t *)rows.data;
        Py_ssize_t n = (Py_ssize_t)(rows.len / (4 * sizeof(int64_t)));
        PyObject *texts = PyList_New(n);
        for (Py_ssize_t i = 0; texts != NULL && i < n; i++) {
            PyObject *t = PyUnicode_DecodeUTF8(s + r[4 * i + 1], (Py_ssize_t)(r[4 * i + 2] - r[4 * i + 1]), "replace");
            if (t == NULL) {
                Py_CLEAR(texts);
                break;
            }
            PyList_SET_ITEM(texts, i, t);
        }
        PyObject *c = texts ? bytes_of(&cands) : NULL;
        PyObject *rw = c ? bytes_of(&rows) : NULL;
        PyObject *cl = rw ? clean_export(&clean) : NULL;
        if (cl != NULL)
            out = Py_BuildValue("nNNNN", newlines, c, rw, texts, cl);
        else {
            Py_XDECREF(texts);
            Py_XDECREF(c);
            Py_XDECREF(rw);
        }
    }
    PyBuffer_Release(&view);
    free(rows.data);
    free(cands.data);
    clean_free(&clean);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, size, heads, split, fields=None, kinds=None) -> (newlines, candidates, rows, texts, clean): see the "
     "module's comment."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "The chunk scan of prime_rl.analysis.parser in C (optional; see scan).", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* What scan takes and gives, numbered: the parser uses a build of another version as none (a stale
 * build in a source tree after a checkout). */
#define SCAN_VERSION 7

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", SCAN_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
