/* The sparse chunk scan of prime_rl.analysis.parser in C (optional: the parser falls back to its
 * Python scan when this module is not built; the tests hold the two to the same output).
 *
 * sparse(buffer, size, heads) walks a chunk's first `size` bytes once, without the GIL: it counts
 * the newlines and visits every "[". A "[" that starts one of `heads` (the known tag markers,
 * "[weights]" and so on) is a marker; the first marker of each line is kept with the line's number
 * (counted from 0 at the chunk's start), where the line starts and ends (the end is its newline: a
 * chunk ends with one) and where the marker is. A "[" that is not a marker is a candidate for an
 * unknown tag's head when it starts a line or follows "| "; the caller matches those against its
 * pattern. Returns (newlines, rows, candidates, texts): rows the int64 bytes of 4 values a kept
 * line (line, start, end, marker), candidates those of the candidates' positions, texts the kept
 * lines decoded as bytes.decode("utf-8", "replace") decodes them (without their newline).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} Vec;

static int vec_push(Vec *v, int64_t x) {
    if (v->len == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 1024;
        int64_t *grown = PyMem_RawRealloc(v->data, (size_t)cap * sizeof(int64_t));
        if (grown == NULL)
            return -1;
        v->data = grown;
        v->cap = cap;
    }
    v->data[v->len++] = x;
    return 0;
}

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

#define MAX_HEADS 32

static PyObject *sparse(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t size;
    PyObject *heads_obj;
    if (!PyArg_ParseTuple(args, "y*nO!", &view, &size, &PyTuple_Type, &heads_obj))
        return NULL;
    Py_ssize_t nheads = PyTuple_GET_SIZE(heads_obj);
    if (size < 0 || size > view.len || nheads > MAX_HEADS) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "sparse: size out of range or too many heads");
        return NULL;
    }
    const char *head_bytes[MAX_HEADS];
    Py_ssize_t head_len[MAX_HEADS];
    for (Py_ssize_t k = 0; k < nheads; k++) {
        PyObject *h = PyTuple_GET_ITEM(heads_obj, k);
        if (!PyBytes_Check(h) || PyBytes_GET_SIZE(h) < 2) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "sparse: heads must be bytes starting with '['");
            return NULL;
        }
        head_bytes[k] = PyBytes_AS_STRING(h);
        head_len[k] = PyBytes_GET_SIZE(h);
    }
    const char *s = view.buf;
    Vec rows = {0}, cands = {0};
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
        int known = 0;
        for (Py_ssize_t k = 0; k < nheads; k++) {
            if (head_len[k] <= size - at && memcmp(p, head_bytes[k], (size_t)head_len[k]) == 0) {
                known = 1;
                break;
            }
        }
        if (known) {
            if (newlines != kept_line) {
                const char *end = memchr(p, '\n', (size_t)(size - at));
                Py_ssize_t stop = end ? end - s : size;
                kept_line = newlines;
                if (vec_push(&rows, newlines) || vec_push(&rows, line_start) || vec_push(&rows, stop) ||
                    vec_push(&rows, at)) {
                    failed = 1;
                    break;
                }
            }
        } else if (at == 0 || s[at - 1] == '\n' || (at > 1 && s[at - 2] == '|' && s[at - 1] == ' ')) {
            if (vec_push(&cands, at)) {
                failed = 1;
                break;
            }
        }
        p = at + 1 < size ? memchr(p + 1, '[', (size_t)(size - at - 1)) : NULL;
    }
    if (!failed)
    {
        const char *last = NULL;
        newlines += count_newlines(s + counted, size - counted, &last);
    }
    Py_END_ALLOW_THREADS

    PyObject *out = NULL;
    if (failed) {
        PyErr_NoMemory();
    } else {
        PyObject *r = PyBytes_FromStringAndSize((const char *)rows.data, rows.len * (Py_ssize_t)sizeof(int64_t));
        PyObject *c = PyBytes_FromStringAndSize((const char *)cands.data, cands.len * (Py_ssize_t)sizeof(int64_t));
        PyObject *texts = PyList_New(rows.len / 4);
        for (Py_ssize_t i = 0; texts != NULL && i < rows.len / 4; i++) {
            int64_t a = rows.data[4 * i + 1], b = rows.data[4 * i + 2];
            PyObject *t = PyUnicode_DecodeUTF8(s + a, (Py_ssize_t)(b - a), "replace");
            if (t == NULL) {
                Py_CLEAR(texts);
                break;
            }
            PyList_SET_ITEM(texts, i, t);
        }
        if (r && c && texts)
            out = Py_BuildValue("nNNN", newlines, r, c, texts);
        else {
            Py_XDECREF(r);
            Py_XDECREF(c);
            Py_XDECREF(texts);
        }
    }
    PyBuffer_Release(&view);
    PyMem_RawFree(rows.data);
    PyMem_RawFree(cands.data);
    return out;
}

static PyMethodDef methods[] = {
    {"sparse", sparse, METH_VARARGS,
     "sparse(buffer, size, heads) -> (newlines, rows, candidates, texts): see the module's docstring."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "The sparse chunk scan of prime_rl.analysis.parser in C (optional; see sparse).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
