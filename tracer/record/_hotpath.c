/* The recorder's compiled part: what the lean path (fastpath.py) does on every op, in C.
 *
 * Optional (setup.py builds it with optional=True; wheels carry it): compiled.py loads it unless DISTTRACE_PURE is set,
 * and every function here has a pure-Python twin that produces the same bytes (tests/record/test_hotpath.py runs both).
 * Plain C on CPython's API; no torch.
 *
 * walk(depth): callsite.walk without frame objects. On CPython 3.11-3.13 it reads the interpreter's frames
 * (_PyInterpreterFrame: code object and instruction offset) through the internal headers; on any other version the
 * module has no walk and callsite.py's is used. It shares callsite.py's caches (set by init_walk) and hands every miss
 * to Python: an unknown code object to callsite._enter, an unknown call site to callsite's own walk (which makes the
 * frame object it needs for the line number), so that both give the same results from the same caches.
 *
 * begin(rec, head, i, gs) and end(rec, agg, entry, t): the lean path's begin and end records, formatted and written
 * as fastpath.py's wrapper and Completion.lean_end write them (op_records.py's templates; the end also into the black
 * box's aggregates, as Aggregates.add counts it), without the Python frames and the `%` formatting.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <time.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define HOTPATH_FRAMES 1
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#undef _PyGC_FINALIZED
#include "internal/pycore_frame.h"
#if PY_VERSION_HEX >= 0x030D0000
#define FRAME_CODE(f) ((PyObject *)(f)->f_executable)
#define CURRENT_FRAME(ts) ((ts)->current_frame)
#else
#define FRAME_CODE(f) ((PyObject *)(f)->f_code)
#define CURRENT_FRAME(ts) ((ts)->cframe->current_frame)
#endif
#endif

#ifdef HOTPATH_FRAMES
/* callsite.py's: _users, _others, _enter, its own walk, and the kind C10D */
static PyObject *users, *others, *enter, *py_walk;
static long c10d_kind = -1;

static PyObject *
init_walk(PyObject *self, PyObject *args)
{
    PyObject *u, *o, *e, *w;
    long k;
    if (!PyArg_ParseTuple(args, "O!O!OOl:init_walk", &PyDict_Type, &u, &PyDict_Type, &o, &e, &w, &k))
        return NULL;
    Py_INCREF(u); Py_INCREF(o); Py_INCREF(e); Py_INCREF(w);
    Py_XSETREF(users, u); Py_XSETREF(others, o); Py_XSETREF(enter, e); Py_XSETREF(py_walk, w);
    c10d_kind = k;
    Py_RETURN_NONE;
}

/* The next frame out that a frame object would show (f_back skips incomplete frames and C shims). */
static _PyInterpreterFrame *
complete(_PyInterpreterFrame *f)
{
    while (f != NULL && _PyFrame_IsIncomplete(f))
        f = f->previous;
    return f;
}

static PyObject *
fallback(PyObject *depth)
{
    return PyObject_CallOneArg(py_walk, depth);
}

static PyObject *
result(PyObject *site, PyObject *api, PyObject *origin)
{
    return PyTuple_Pack(3, site, api ? api : Py_None, origin ? origin : Py_None);
}

/* (site, api, origin) for the code that called into the frame `depth` levels up, counted as callsite.walk counts
 * them: its own frame is level 0, so the frame that called this function is level 1. */
static PyObject *
walk(PyObject *self, PyObject *depth_obj)
{
    if (users == NULL)
        return fallback(depth_obj);
    long depth = PyLong_AsLong(depth_obj);
    if (depth < 1) {
        if (depth == -1 && PyErr_Occurred())
            return NULL;
        return fallback(depth_obj);
    }
    _PyInterpreterFrame *f = complete(CURRENT_FRAME(PyThreadState_Get()));
    for (long d = 1; d < depth && f != NULL; d++)
        f = complete(f->previous);
    if (f == NULL)
        return fallback(depth_obj);  /* (sys._getframe's error, raised by the same call) */
    PyObject *api = NULL, *origin = NULL;  /* borrowed from the caches' entries, which outlive the walk */
    int entered = 0;
    while (f != NULL) {
        PyObject *code = FRAME_CODE(f);
        if (!PyCode_Check(code))
            return fallback(depth_obj);
        PyObject *key = PyLong_FromVoidPtr(code);
        if (key == NULL)
            return NULL;
        PyObject *sites = PyDict_GetItemWithError(users, key);
        if (sites != NULL) {  /* the user's code: its call site by instruction offset, as f.f_lasti reads it */
            Py_DECREF(key);
            PyObject *lasti = PyLong_FromLong((long)_PyInterpreterFrame_LASTI(f) * (long)sizeof(_Py_CODEUNIT));
            if (lasti == NULL)
                return NULL;
            PyObject *site = PyDict_Check(sites) ? PyDict_GetItemWithError(sites, lasti) : NULL;
            Py_DECREF(lasti);
            if (site == NULL) {
                if (PyErr_Occurred())
                    return NULL;
                return fallback(depth_obj);  /* a new call site: its line number from a frame object */
            }
            return result(site, api, origin);
        }
        PyObject *entry = PyErr_Occurred() ? NULL : PyDict_GetItemWithError(others, key);
        Py_DECREF(key);
        if (entry == NULL) {
            if (PyErr_Occurred() || entered)
                return PyErr_Occurred() ? NULL : fallback(depth_obj);
            PyObject *r = PyObject_CallOneArg(enter, code);  /* classified once; looked at again, now known */
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
            entered = 1;
            continue;
        }
        entered = 0;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 2)
            return fallback(depth_obj);
        PyObject *name = PyTuple_GET_ITEM(entry, 1);
        if (name != Py_None) {
            long kind = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
            if (kind == -1 && PyErr_Occurred())
                return NULL;
            if (kind == c10d_kind)
                api = name;  /* the outermost one wins */
            else if (origin == NULL)
                origin = name;  /* the innermost one wins */
        }
        f = complete(f->previous);
    }
    return result(Py_None, api, origin);
}
#endif


/* -- the lean path's records ---------------------------------------------------------------------------- */
static PyObject *end_open;  /* op_records.END_LINE up to its id: b'{"k":"e","i":' */
static PyObject *s_raw, *s_write_raw, *s_deadline, *s_acc, *s_roll;

static PyObject *
init_records(PyObject *self, PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "init_records(end_open: bytes)");
        return NULL;
    }
    Py_INCREF(arg);
    Py_XSETREF(end_open, arg);
    Py_RETURN_NONE;
}

/* rec.raw(line), or rec.write_raw(line) where the map is full or closed (ValueError): the wrapper's own rule */
static int
write_line(PyObject *rec, PyObject *line)
{
    PyObject *raw = PyObject_GetAttr(rec, s_raw);
    if (raw == NULL)
        return -1;
    PyObject *r = PyObject_CallOneArg(raw, line);
    Py_DECREF(raw);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        r = PyObject_CallMethodOneArg(rec, s_write_raw, line);
        if (r == NULL)
            return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* A line: `head` (bytes, or NULL) then the formatted tail (at most 96 bytes). */
static PyObject *
line_of(PyObject *head, const char *fmt, ...)
{
    va_list va;
    Py_ssize_t n = head ? PyBytes_GET_SIZE(head) : 0;
    PyObject *line = PyBytes_FromStringAndSize(NULL, n + 96);
    if (line == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(line);
    if (n)
        memcpy(at, PyBytes_AS_STRING(head), n);
    va_start(va, fmt);
    int k = vsnprintf(at + n, 96, fmt, va);
    va_end(va);
    if (k < 0 || k >= 96 || _PyBytes_Resize(&line, n + k) < 0) {
        Py_XDECREF(line);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a record's tail too long");
        return NULL;
    }
    return line;
}

static long long
monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* time.monotonic_ns's clock */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* begin(rec, head, i, gs) -> t: the begin record BEGIN_LINE % (head, i, t) (BEGIN_LINE_GS with gs, unless gs is None),
 * the time taken last, written to rec as the wrapper writes it. */
static PyObject *
begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "begin(rec, head: bytes, i, gs)");
        return NULL;
    }
    long long i = PyLong_AsLongLong(args[2]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    int has_gs = args[3] != Py_None;
    long long gs = has_gs ? PyLong_AsLongLong(args[3]) : 0;
    if (gs == -1 && PyErr_Occurred())
        return NULL;
    long long now = monotonic_now();  /* last: everything above is our own cost, not the op's */
    PyObject *line = has_gs ? line_of(args[1], "%lld,\"gs\":%lld,\"t\":%lld}\n", i, gs, now)
                            : line_of(args[1], "%lld,\"t\":%lld}\n", i, now);
    if (line == NULL)
        return NULL;
    int err = write_line(args[0], line);
    Py_DECREF(line);
    return err ? NULL : PyLong_FromLongLong(now);
}

static int
add_item(PyObject *row, Py_ssize_t k, long long by, int keep_max)
{
    long long v = PyLong_AsLongLong(PyList_GET_ITEM(row, k));
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (keep_max && by <= v)
        return 0;
    PyObject *n = PyLong_FromLongLong(keep_max ? by : v + by);
    if (n == NULL)
        return -1;
    return PyList_SetItem(row, k, n);  /* (steals n, lets go of the old value) */
}

/* Aggregates.add(slot, t0, t): an op of slot (key id, bytes) that began at t0 and ended at t, into its key's row
 * [count, total ns, max ns, bytes] of the window in progress; no Python call between a row's read and its write. */
static int
agg_add(PyObject *agg, PyObject *slot, long long t0, long long t, PyObject *t_obj)
{
    PyObject *deadline = PyObject_GetAttr(agg, s_deadline);
    if (deadline == NULL)
        return -1;
    long long dl = PyLong_AsLongLong(deadline);
    Py_DECREF(deadline);
    if (dl == -1 && PyErr_Occurred())
        return -1;
    if (t >= dl) {
        PyObject *r = PyObject_CallMethodOneArg(agg, s_roll, t_obj);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    if (!PyTuple_Check(slot) || PyTuple_GET_SIZE(slot) != 2) {
        PyErr_SetString(PyExc_TypeError, "an aggregates' slot is (key id, bytes)");
        return -1;
    }
    PyObject *kid = PyTuple_GET_ITEM(slot, 0);
    long long nbytes = PyLong_AsLongLong(PyTuple_GET_ITEM(slot, 1));
    if (nbytes == -1 && PyErr_Occurred())
        return -1;
    long long d = t - t0;
    PyObject *acc = PyObject_GetAttr(agg, s_acc);
    if (acc == NULL)
        return -1;
    if (!PyDict_Check(acc)) {
        Py_DECREF(acc);
        PyErr_SetString(PyExc_TypeError, "Aggregates.acc is a dict");
        return -1;
    }
    PyObject *row = PyDict_GetItemWithError(acc, kid);
    if (row == NULL && !PyErr_Occurred()) {
        PyObject *fresh = Py_BuildValue("[iiii]", 0, 0, 0, 0);
        if (fresh != NULL) {
            row = PyDict_SetDefault(acc, kid, fresh);
            Py_DECREF(fresh);
        }
    }
    int err = row == NULL || !PyList_Check(row) || PyList_GET_SIZE(row) != 4;
    if (!err) {
        Py_INCREF(row);
        err = add_item(row, 0, 1, 0) || add_item(row, 1, d, 0) || add_item(row, 2, d, 1) || add_item(row, 3, nbytes, 0);
        Py_DECREF(row);
    }
    Py_DECREF(acc);
    if (err && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "an aggregates' row is [count, total, max, bytes]");
    return err ? -1 : 0;
}

/* end(rec, agg, entry, t): Completion.lean_end(entry, t) of an op that ended without an error: into the aggregates
 * where the entry has a slot (entry: op, group, group_seq, start, thread, id, seq, slot), then END_LINE % (id, t), or
 * END_LINE_SEQ % (id, t, seq) where the backend's sequence number was read. */
static PyObject *
end(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) < 8 || end_open == NULL) {
        PyErr_SetString(PyExc_TypeError, "end(rec, agg, entry, t), after init_records");
        return NULL;
    }
    PyObject *entry = args[2];
    long long t = PyLong_AsLongLong(args[3]);
    if (t == -1 && PyErr_Occurred())
        return NULL;
    PyObject *slot = PyTuple_GET_ITEM(entry, 7);
    if (slot != Py_None) {
        long long t0 = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 3));
        if ((t0 == -1 && PyErr_Occurred()) || agg_add(args[1], slot, t0, t, args[3]) < 0)
            return NULL;
    }
    long long i = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 5));
    if (i == -1 && PyErr_Occurred())
        return NULL;
    PyObject *seq = PyTuple_GET_ITEM(entry, 6);
    PyObject *line;
    if (seq == Py_None) {
        line = line_of(end_open, "%lld,\"t\":%lld}\n", i, t);
    } else {
        long long s = PyLong_AsLongLong(seq);
        if (s == -1 && PyErr_Occurred())
            return NULL;
        line = line_of(end_open, "%lld,\"t\":%lld,\"seq\":%lld}\n", i, t, s);
    }
    if (line == NULL)
        return NULL;
    int err = write_line(args[0], line);
    Py_DECREF(line);
    if (err)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init_records", init_records, METH_O, "init_records(end_open): op_records.END_LINE up to its id."},
    {"begin", (PyCFunction)(void (*)(void))begin, METH_FASTCALL, "begin(rec, head, i, gs) -> t: the begin record."},
    {"end", (PyCFunction)(void (*)(void))end, METH_FASTCALL, "end(rec, agg, entry, t): a lean op's end record."},
#ifdef HOTPATH_FRAMES
    {"init_walk", init_walk, METH_VARARGS, "init_walk(users, others, enter, walk, c10d): callsite.py's caches."},
    {"walk", walk, METH_O, "walk(depth) -> (site, api, origin): callsite.walk without frame objects."},
#endif
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hotpath", "The recorder's compiled part (optional: see compiled.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    s_raw = PyUnicode_InternFromString("raw");
    s_write_raw = PyUnicode_InternFromString("write_raw");
    s_deadline = PyUnicode_InternFromString("deadline");
    s_acc = PyUnicode_InternFromString("acc");
    s_roll = PyUnicode_InternFromString("_roll");
    if (!s_raw || !s_write_raw || !s_deadline || !s_acc || !s_roll)
        return NULL;
    return PyModule_Create(&module);
}
