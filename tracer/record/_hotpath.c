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
 *
 * Lean(...): fastpath.py's lean path for all_reduce, broadcast, reduce, send and recv (their readers _lean_one and
 * _lean_p2p), as one C callable the Python wrapper calls after its own checks. It returns the op's Work as the wrapper
 * would, or the walk's (site, api, origin) at a key's first sight (the Python code decides it, Tracer.lean_entry, with
 * that walk: one walk an op), or GENERAL (the general path: not the common case, or a failure, handed to t.fail as
 * the wrapper does). Offered with walk (3.11-3.13), as are Method (the wrapper itself: its checks, then the Lean, else
 * fastpath's rest) and Wait (Work.wait's lean branch, everything else hooks.py's wait).
 *
 * RingWriter: the black box's ring written from C (ring.py); Ender: Completion.lean_done, end() with (rec, agg).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
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
walk_impl(long depth, PyObject *depth_obj)
{
    if (users == NULL || depth < 1)
        return fallback(depth_obj);
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

static PyObject *
walk(PyObject *self, PyObject *depth_obj)
{
    long depth = PyLong_AsLong(depth_obj);
    if (depth == -1 && PyErr_Occurred())
        return NULL;
    return walk_impl(depth, depth_obj);
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

/* -- the black box's ring, written from C (ring.py's Ring.write_raw, its twin) ---------------------------------
 * RingWriter(map, data_at, ring): the ring's map held through the buffer protocol from here to release() (Ring.close
 * and Ring.stop call it before the map is closed: an exported buffer blocks mmap.close). The header's pos (offset 8)
 * is the next write's offset and the only one: every line of the ring goes through write() (Ring.write_raw is it), so
 * the map's own position is not used. A line is copied and the header stored in one C call under the GIL: lines of
 * several threads never interleave, and the header never lags. A line that does not fit before the end: the rest
 * zeroed, the wraps counted, the line at data_at (as Ring._wrap does); longer than the whole ring: lost. */
typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int held;
    Py_ssize_t data_at;
    Py_ssize_t lost;     /* lines longer than the whole ring */
    PyObject *ring;      /* a weak reference to the Ring: its Python write for what is not bytes */
} RingWriter;

static PyTypeObject RingWriterType;
static PyObject *s_write_py;

/* head[0:hn] + tail[0:tn] into the ring */
static void
ring_put(RingWriter *w, const char *head, Py_ssize_t hn, const char *tail, Py_ssize_t tn)
{
    if (!w->held)
        return;  /* stopped or closed: Ring.write_raw's `if not self.enabled` */
    char *base = (char *)w->view.buf;
    Py_ssize_t size = w->view.len, n = hn + tn;
    unsigned long long hdr[2];  /* pos, wraps (little-endian: Ring makes a writer only there) */
    memcpy(hdr, base + 8, sizeof hdr);
    Py_ssize_t pos = (Py_ssize_t)hdr[0];
    if (pos < w->data_at || pos > size)
        pos = size;  /* (not ours: start again at the data's start) */
    if (n > size - pos) {
        if (n > size - w->data_at) {
            w->lost++;
            return;
        }
        memset(base + pos, 0, size - pos);  /* the reader reads the old lines up to these zeros */
        pos = w->data_at;
        hdr[1]++;
    }
    memcpy(base + pos, head, hn);
    memcpy(base + pos + hn, tail, tn);
    hdr[0] = (unsigned long long)(pos + n);
    memcpy(base + 8, hdr, sizeof hdr);
}

static PyObject *
ring_write(RingWriter *w, PyObject *line)
{
    if (PyBytes_CheckExact(line)) {
        ring_put(w, PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line), "", 0);
        Py_RETURN_NONE;
    }
    PyObject *ring = w->ring ? PyWeakref_GetObject(w->ring) : Py_None;  /* borrowed */
    if (ring == NULL || ring == Py_None)
        Py_RETURN_NONE;
    return PyObject_CallMethodOneArg(ring, s_write_py, line);  /* the Python write: its own checks and errors */
}

static PyObject *
ring_release(RingWriter *w, PyObject *unused)
{
    if (w->held) {
        w->held = 0;
        PyBuffer_Release(&w->view);
    }
    Py_RETURN_NONE;
}

static PyObject *
ring_lost(RingWriter *w, void *unused)
{
    return PyLong_FromSsize_t(w->lost);
}

static PyObject *
ring_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *map, *ring;
    Py_ssize_t data_at;
    if (!PyArg_ParseTuple(args, "OnO:RingWriter", &map, &data_at, &ring))
        return NULL;
    RingWriter *w = (RingWriter *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    if (PyObject_GetBuffer(map, &w->view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    w->held = 1;
    if (data_at < 24 || data_at > w->view.len || (w->ring = PyWeakref_NewRef(ring, NULL)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "RingWriter: data_at out of the map");
        Py_DECREF(w);
        return NULL;
    }
    w->data_at = data_at;
    return (PyObject *)w;
}

static void
ring_dealloc(RingWriter *w)
{
    if (w->held)
        PyBuffer_Release(&w->view);
    Py_XDECREF(w->ring);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef ring_methods[] = {
    {"write", (PyCFunction)ring_write, METH_O, "write(line): Ring.write_raw."},
    {"release", (PyCFunction)ring_release, METH_NOARGS, "release(): let go of the map (writes are dropped after)."},
    {NULL, NULL, 0, NULL}
};

static PyGetSetDef ring_getset[] = {
    {"lost", (getter)ring_lost, NULL, "lines longer than the whole ring (never written)", NULL},
    {NULL}
};

static PyTypeObject RingWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disttrace.tracer.record._hotpath.RingWriter",
    .tp_basicsize = sizeof(RingWriter),
    .tp_dealloc = (destructor)ring_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RingWriter(map, data_at, ring): ring.py's Ring.write_raw in C, straight into the map.",
    .tp_methods = ring_methods,
    .tp_getset = ring_getset,
    .tp_new = ring_new,
};

/* The RingWriter whose write `raw` is (the black box's rec.raw, where C writes the ring), else NULL */
static RingWriter *
ring_of(PyObject *raw)
{
    if (PyCFunction_Check(raw)) {
        PyObject *self = PyCFunction_GET_SELF(raw);
        if (self != NULL && Py_TYPE(self) == &RingWriterType)
            return (RingWriter *)self;
    }
    return NULL;
}

/* head + tail[0:n] as one bytes object */
static PyObject *line_of(PyObject *head, const char *tail, Py_ssize_t n);

/* head + tail to rec: straight into the ring where rec.raw is a RingWriter's; else rec.raw(line), or
 * rec.write_raw(line) where the map is full or closed (ValueError): the wrapper's own rule */
static int
write_line(PyObject *rec, PyObject *head, const char *tail, Py_ssize_t n);

/* write_line where rec.raw is known to be w's (the black box's raw, which BlackBox sets once), else write_line */
static int
write_to(RingWriter *w, PyObject *rec, PyObject *head, const char *tail, Py_ssize_t n)
{
    if (w == NULL)
        return write_line(rec, head, tail, n);
    ring_put(w, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head), tail, n);
    return 0;
}

/* The RingWriter of rec.raw, a new reference, or NULL (no error): what write_to may be handed for rec */
static PyObject *
writer_of(PyObject *rec)
{
    PyObject *raw = PyObject_GetAttr(rec, s_raw);
    if (raw == NULL) {
        PyErr_Clear();
        return NULL;
    }
    RingWriter *w = ring_of(raw);
    PyObject *r = w != NULL ? Py_NewRef((PyObject *)w) : NULL;
    Py_DECREF(raw);
    return r;
}

static int
write_line(PyObject *rec, PyObject *head, const char *tail, Py_ssize_t n)
{
    PyObject *raw = PyObject_GetAttr(rec, s_raw);
    if (raw == NULL)
        return -1;
    RingWriter *w = ring_of(raw);
    if (w != NULL) {
        ring_put(w, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head), tail, n);
        Py_DECREF(raw);
        return 0;
    }
    PyObject *line = line_of(head, tail, n);
    if (line == NULL) {
        Py_DECREF(raw);
        return -1;
    }
    PyObject *r = PyObject_CallOneArg(raw, line);
    Py_DECREF(raw);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) {
            Py_DECREF(line);
            return -1;
        }
        PyErr_Clear();
        r = PyObject_CallMethodOneArg(rec, s_write_raw, line);
        if (r == NULL) {
            Py_DECREF(line);
            return -1;
        }
    }
    Py_DECREF(line);
    Py_DECREF(r);
    return 0;
}

/* A record's tail, written by hand: glibc's snprintf costs some 2k instructions a call, a third of the lean path */
static char *
put_str(char *at, const char *s)
{
    while (*s)
        *at++ = *s++;
    return at;
}

static char *
put_int(char *at, long long v)  /* as Python's %d writes it */
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *at++ = '-';
    while (n)
        *at++ = digits[--n];
    return at;
}

/* head + tail[0:n] as one bytes object */
static PyObject *
line_of(PyObject *head, const char *tail, Py_ssize_t n)
{
    Py_ssize_t h = PyBytes_GET_SIZE(head);
    PyObject *line = PyBytes_FromStringAndSize(NULL, h + n);
    if (line != NULL) {
        memcpy(PyBytes_AS_STRING(line), PyBytes_AS_STRING(head), h);
        memcpy(PyBytes_AS_STRING(line) + h, tail, n);
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

/* begin(rec, head, i, gs[, ps]) -> t: the begin record BEGIN_LINE % (head, i, t) (BEGIN_LINE_GS with gs, unless gs is
 * None; else BEGIN_LINE_PS with ps, unless it is None or not given), the time taken last, written to rec as the
 * wrapper writes it. */
static PyObject *begin_to(RingWriter *w, PyObject *const *args, Py_ssize_t nargs);

static PyObject *
begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return begin_to(NULL, args, nargs);
}

/* begin, writing to w where given (rec.raw's writer, known) */
static PyObject *
begin_to(RingWriter *w, PyObject *const *args, Py_ssize_t nargs)
{
    if ((nargs != 4 && nargs != 5) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "begin(rec, head: bytes, i, gs[, ps])");
        return NULL;
    }
    long long i = PyLong_AsLongLong(args[2]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    int has_gs = args[3] != Py_None;
    long long gs = has_gs ? PyLong_AsLongLong(args[3]) : 0;
    if (gs == -1 && PyErr_Occurred())
        return NULL;
    int has_ps = !has_gs && nargs == 5 && args[4] != Py_None;
    long long ps = has_ps ? PyLong_AsLongLong(args[4]) : 0;
    if (ps == -1 && PyErr_Occurred())
        return NULL;
    long long now = monotonic_now();  /* last: everything above is our own cost, not the op's */
    char tail[128], *at = put_int(tail, i);  /* op_records.BEGIN_LINE(_GS, _PS) after the head */
    if (has_gs)
        at = put_int(put_str(at, ",\"gs\":"), gs);
    else if (has_ps)
        at = put_int(put_str(at, ",\"ps\":"), ps);
    at = put_str(put_int(put_str(at, ",\"t\":"), now), "}\n");
    return write_to(w, args[0], args[1], tail, at - tail) ? NULL : PyLong_FromLongLong(now);
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
    int over;  /* (windows of steps: a deadline that never comes, 1 << 63, past any long long) */
    long long dl = PyLong_AsLongLongAndOverflow(deadline, &over);
    Py_DECREF(deadline);
    if (dl == -1 && PyErr_Occurred())
        return -1;
    if (over < 0 || (over == 0 && t >= dl)) {
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
static PyObject *end_to(RingWriter *w, PyObject *const *args, Py_ssize_t nargs);

static PyObject *
end(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return end_to(NULL, args, nargs);
}

/* end, writing to w where given (rec.raw's writer, known) */
static PyObject *
end_to(RingWriter *w, PyObject *const *args, Py_ssize_t nargs)
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
    char tail[96], *at = put_int(put_str(put_int(tail, i), ",\"t\":"), t);  /* op_records.END_LINE(_SEQ) */
    if (seq != Py_None) {
        long long s = PyLong_AsLongLong(seq);
        if (s == -1 && PyErr_Occurred())
            return NULL;
        at = put_int(put_str(at, ",\"seq\":"), s);
    }
    at = put_str(at, "}\n");
    if (write_to(w, args[0], end_open, tail, at - tail))
        return NULL;
    Py_RETURN_NONE;
}

/* Ender(rec, agg)(entry, t): end(rec, agg, entry, t), Completion.lean_done where the compiled part is built (the
 * compiled Work.wait calls it without a Python call) */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *rec, *agg;
    PyObject *ring;  /* rec.raw's RingWriter (the black box), or NULL */
} Ender;

static PyObject *
ender_call(Ender *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "lean_done(entry, t)");
        return NULL;
    }
    PyObject *args[4] = {self->rec, self->agg, argv[0], argv[1]};
    return end_to((RingWriter *)self->ring, args, 4);
}

static PyObject *
ender_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *rec, *agg;
    if (!PyArg_ParseTuple(args, "OO:Ender", &rec, &agg))
        return NULL;
    Ender *self = (Ender *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)ender_call;
    self->rec = Py_NewRef(rec);
    self->agg = Py_NewRef(agg);
    self->ring = writer_of(rec);
    return (PyObject *)self;
}

static void
ender_dealloc(Ender *self)
{
    Py_XDECREF(self->rec);
    Py_XDECREF(self->agg);
    Py_XDECREF(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject EnderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disttrace.tracer.record._hotpath.Ender",
    .tp_basicsize = sizeof(Ender),
    .tp_dealloc = (destructor)ender_dealloc,
    .tp_vectorcall_offset = offsetof(Ender, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Ender(rec, agg)(entry, t): end(rec, agg, entry, t).",
    .tp_new = ender_new,
};

#ifdef HOTPATH_FRAMES
/* -- the lean path, as one C callable (fastpath._wrap's lean branch) ------------------------------------------ */
static PyObject *walk_impl(long depth, PyObject *depth_obj);

/* fastpath.py's, given once (init_lean): torch.Tensor, torch.strided, torch.autograd.profiler, the inflight check,
 * GENERAL, current.safe, _lean_failed, _lean_async, PENDING_LIMIT, fastpath's globals (its `walk`, which a test
 * may wrap, is looked up per call as the Python code does), this module's walk */
static PyObject *tensor_type, *strided, *profiler, *inflight, *general, *safe, *lean_failed, *lean_async;
static PyObject *fastpath_globals, *c_walk, *one, *two, *dict_get;
static Py_ssize_t pending_limit;
static PyObject *s_lean, *s_groups, *s_get, *s_of, *s_gloo, *s_ids, *s_next_seq, *s_rec, *s_read_seq, *s_seqno,
    *s_completion, *s_lean_sync, *s_fail, *s_is_cpu, *s_layout, *s_rootRank, *s_asyncOp, *s_dtype, *s_shape,
    *s_enabled, *s_walk;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int p2p;            /* the reader: _lean_p2p (send/recv) or _lean_one */
    int root;           /* _lean_one(..., root=True): broadcast, reduce */
    PyObject *opts;     /* _lean_one's options class */
    PyObject *spec;     /* the c10d op's spec */
    PyObject *direct;   /* the gloo backend's method */
    /* The last call's lookups, for the next call with the same arguments: t.groups' entry for pg, and t.lean's for
     * the key. A dict is compared by address and version (ma_version_tag: new for every dict and every change of
     * one), never dereferenced from here; what was found is held (a Group lets go of its pg at release). */
    PyObject *groups_at, *pg_at, *last_g, *lean_at, *last_key, *last_entry;
    uint64_t groups_version, lean_version;
    /* ... and, with t.lean's entry, the tracer's own fields that the call reads (capture.Tracer sets them once):
     * t._ids, t.rec, t.read_seq, t.completion.lean_sync. The same t.lean (each Tracer has its own) is the same t. */
    PyObject *ids_c, *rec_c, *read_seq_c, *sync_c, *ring_c;  /* ring_c: rec.raw's RingWriter, or NULL */
} Lean;

/* A dict's version tag: 3.12 and 3.13 keep it (deprecated), changed on every modification */
static inline uint64_t
dict_version(PyObject *d)
{
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)d)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

/* t's fields that the Lean keeps with t.lean's entry: 0, or -1 (nothing kept, no error) */
static int
remember(Lean *self, PyObject *t)
{
    PyObject *ids = PyObject_GetAttr(t, s_ids), *rec = ids ? PyObject_GetAttr(t, s_rec) : NULL;
    PyObject *read = rec ? PyObject_GetAttr(t, s_read_seq) : NULL;
    PyObject *completion = read ? PyObject_GetAttr(t, s_completion) : NULL;
    PyObject *sync = completion ? PyObject_GetAttr(completion, s_lean_sync) : NULL;
    Py_XDECREF(completion);
    if (sync == NULL) {
        PyErr_Clear();  /* (the call reads them itself, and meets the error there) */
        Py_XDECREF(ids);
        Py_XDECREF(rec);
        Py_XDECREF(read);
        return -1;
    }
    Py_XSETREF(self->ids_c, ids);
    Py_XSETREF(self->rec_c, rec);
    Py_XSETREF(self->read_seq_c, read);
    Py_XSETREF(self->sync_c, sync);
    Py_XSETREF(self->ring_c, writer_of(rec));
    return 0;
}

/* Is the key made of items equal to `key` (a tuple of 11)? As the dict's comparison: identity, else ==. */
static int
same_key(PyObject *key, PyObject *const *items)
{
    if (key == NULL)
        return 0;
    for (Py_ssize_t k = 0; k < 11; k++) {
        PyObject *a = PyTuple_GET_ITEM(key, k), *b = items[k];
        if (a == b)
            continue;
        if (b == NULL)
            return 0;
        int eq = PyObject_RichCompareBool(a, b, Py_EQ);
        if (eq <= 0) {
            if (eq < 0)
                PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

static PyObject *
init_lean(PyObject *self, PyObject *args)
{
    PyObject *o[9];
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OOOOOOOOnO!:init_lean", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &limit, &PyDict_Type, &o[8]))
        return NULL;
    PyObject **to[9] = {&tensor_type, &strided, &profiler, &inflight, &general, &safe, &lean_failed, &lean_async,
                        &fastpath_globals};
    for (int k = 0; k < 9; k++) {
        Py_INCREF(o[k]);
        Py_XSETREF(*to[k], o[k]);
    }
    pending_limit = limit;
    Py_RETURN_NONE;
}


static PyObject *
PyErr_GetRaisedException_compat(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

static void
PyErr_SetRaisedException_compat(PyObject *e)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(e);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(e)), e, PyException_GetTraceback(e));
#endif
}

/* _one_plain: the tensor of ts if ts is a list of one plain dense CPU tensor (borrowed), else NULL (no error) */
static PyObject *
one_plain(PyObject *ts, int *err)
{
    if (!PyList_CheckExact(ts) || PyList_GET_SIZE(ts) != 1)
        return NULL;
    PyObject *first = PyList_GET_ITEM(ts, 0);
    if ((PyObject *)Py_TYPE(first) != tensor_type)
        return NULL;
    PyObject *v = PyObject_GetAttr(first, s_is_cpu);
    if (v == NULL) {
        *err = 1;
        return NULL;
    }
    int yes = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (yes <= 0) {
        *err = yes < 0;
        return NULL;
    }
    v = PyObject_GetAttr(first, s_layout);
    if (v == NULL) {
        *err = 1;
        return NULL;
    }
    Py_DECREF(v);
    return v == strided ? first : NULL;
}

/* The Python wrapper's `except Exception as e: t.fail(e)`: GENERAL after it; any other exception goes on up. */
static PyObject *
failed(PyObject *t)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *e = PyErr_GetRaisedException_compat();
    PyObject *r = PyObject_CallMethodOneArg(t, s_fail, e);
    Py_DECREF(e);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    return Py_NewRef(general);
}

/* Lean(t, pg, args) -> Work, the walk's result or GENERAL: fastpath._wrap's lean branch from `fields = lean_args(args)` on. */
static PyObject *lean_impl(Lean *self, PyObject *t, PyObject *pg, PyObject *args, long depth);

static PyObject *
lean_call(Lean *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 3 || kwnames != NULL || !PyTuple_Check(argv[2]) || general == NULL) {
        PyErr_SetString(PyExc_TypeError, "Lean(t, pg, args), after init_lean");
        return NULL;
    }
    return lean_impl(self, argv[0], argv[1], argv[2], 2);  /* walk(2) from the Python method: its caller's frame */
}

/* depth: the walk's, counted from the frame that called into C (1: that frame itself, where no Python method of ours
 * is between, as under Method) */
static PyObject *
lean_impl(Lean *self, PyObject *t, PyObject *pg, PyObject *args, long depth)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *first, *root = NULL, *peer = Py_None, *tag = Py_None, *is_async = NULL;
    PyObject *g = NULL, *backend = NULL, *walked = NULL, *tid = NULL, *key = NULL, *entry, *lean = NULL;
    PyObject *i = NULL, *gs = NULL, *now = NULL, *rec = NULL, *work = NULL, *result = NULL;
    int err = 0, cached = 0;  /* cached: t's fields from the Lean's cache (t.lean's entry was found there or kept) */
    /* the reader: (first tensor, root, peer, tag, async) of the common case, or the general path */
    if (self->p2p) {
        if (n != 3 || !PyLong_CheckExact(PyTuple_GET_ITEM(args, 1)) || !PyLong_CheckExact(PyTuple_GET_ITEM(args, 2)))
            return Py_NewRef(general);
        first = one_plain(PyTuple_GET_ITEM(args, 0), &err);
        if (first == NULL)
            return err ? failed(t) : Py_NewRef(general);
        peer = PyTuple_GET_ITEM(args, 1);
        tag = PyTuple_GET_ITEM(args, 2);
        is_async = Py_NewRef(Py_None);
    } else {
        if (n != 2 || (PyObject *)Py_TYPE(PyTuple_GET_ITEM(args, 1)) != self->opts)
            return Py_NewRef(general);
        first = one_plain(PyTuple_GET_ITEM(args, 0), &err);
        if (first == NULL)
            return err ? failed(t) : Py_NewRef(general);
        PyObject *opts = PyTuple_GET_ITEM(args, 1);
        if (self->root && (root = PyObject_GetAttr(opts, s_rootRank)) == NULL)
            return failed(t);
        is_async = PyObject_GetAttr(opts, s_asyncOp);
        if (is_async == NULL) {
            Py_XDECREF(root);
            return failed(t);
        }
    }
    Py_INCREF(first);  /* (the job's list holds it; Python code runs below) */
    /* not under the profiler, nor with in-flight collectives as graph inputs */
    PyObject *on = PyObject_GetAttr(profiler, s_enabled);
    if (on == NULL)
        goto fail;
    int yes = PyObject_IsTrue(on);
    Py_DECREF(on);
    if (yes < 0)
        goto fail;
    if (yes)
        goto general_path;
    on = PyObject_CallNoArgs(inflight);
    if (on == NULL)
        goto fail;
    yes = PyObject_IsTrue(on);
    Py_DECREF(on);
    if (yes < 0)
        goto fail;
    if (yes)
        goto general_path;
    /* g = t.groups.get(id(self)) or t.groups.of(self); backend = g.gloo */
    PyObject *groups = PyObject_GetAttr(t, s_groups);
    if (groups == NULL)
        goto fail;
    if (self->last_g != NULL && groups == self->groups_at && pg == self->pg_at && PyDict_Check(groups)
            && dict_version(groups) == self->groups_version) {
        g = Py_NewRef(self->last_g);  /* the same dict, unchanged since: the same lookup's result */
    } else {
        PyObject *pid = PyLong_FromVoidPtr(pg);
        g = pid ? PyObject_CallMethodOneArg(groups, s_get, pid) : NULL;
        Py_XDECREF(pid);
        if (g != NULL && (yes = PyObject_IsTrue(g)) <= 0) {
            Py_DECREF(g);
            g = yes < 0 ? NULL : PyObject_CallMethodOneArg(groups, s_of, pg);
        }
        if (g != NULL && PyDict_Check(groups) && _PyType_Lookup(Py_TYPE(groups), s_get) == dict_get) {  /* dict's get */
            self->groups_at = groups;
            self->pg_at = pg;
            self->groups_version = dict_version(groups);
            Py_XSETREF(self->last_g, Py_NewRef(g));
        }
    }
    Py_DECREF(groups);
    if (g == NULL || (backend = PyObject_GetAttr(g, s_gloo)) == NULL)
        goto fail;
    /* walked = walk(2): fastpath's global, as the Python code calls it */
    PyObject *w = PyDict_GetItemWithError(fastpath_globals, s_walk);
    if (w == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_NameError, "walk");
        goto fail;
    }
    walked = w == c_walk ? walk_impl(depth, depth == 2 ? two : one) : PyObject_CallOneArg(w, depth == 2 ? two : one);
    if (walked == NULL || (tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident())) == NULL)
        goto fail;
    /* key = (spec, walked, g, root, peer, tag, first.dtype, first.shape, is_async, size, tid) */
    PyObject *dtype = PyObject_GetAttr(first, s_dtype);
    PyObject *shape = dtype ? PyObject_GetAttr(first, s_shape) : NULL;
    PyObject *size = shape ? PyLong_FromLong(-1) : NULL;
    PyObject *items[11] = {self->spec, walked, g, root ? root : Py_None, peer, tag, dtype, shape, is_async, size, tid};
    lean = size ? PyObject_GetAttr(t, s_lean) : NULL;
    if (lean != NULL && PyDict_CheckExact(lean) && lean == self->lean_at && dict_version(lean) == self->lean_version
            && same_key(self->last_key, items)) {
        entry = self->last_entry;  /* lean[key] as the last call found it: the dict is unchanged since */
        cached = 1;
    } else if (lean != NULL && lean != Py_None && PyDict_Check(lean)) {
        key = PyTuple_Pack(11, items[0], items[1], items[2], items[3], items[4], items[5], items[6], items[7],
                           items[8], items[9], items[10]);
        entry = key ? PyDict_GetItemWithError(lean, key) : NULL;  /* borrowed: the cache keeps it */
        if (entry != NULL && PyDict_CheckExact(lean) && remember(self, t) == 0) {
            self->lean_at = lean;
            self->lean_version = dict_version(lean);
            Py_XSETREF(self->last_key, Py_NewRef(key));
            Py_XSETREF(self->last_entry, Py_NewRef(entry));
            cached = 1;
        }
    } else {
        entry = NULL;
    }
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(size);
    if (lean == NULL || PyErr_Occurred())
        goto fail;
    if (lean == Py_None || !PyDict_Check(lean)) {
        result = Py_NewRef(walked);  /* (not a dict: the Python code's own lookup) */
        goto done;
    }
    if (entry == NULL) {
        if (PyErr_Occurred())
            goto fail;
        result = Py_NewRef(walked);  /* a key's first sight: Tracer.lean_entry, in the Python code */
        goto done;
    }
    if ((yes = PyObject_IsTrue(entry)) < 0)
        goto fail;
    if (!yes || backend == Py_None)
        goto general_path;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 6) {
        PyErr_SetString(PyExc_TypeError, "a lean entry is (head, collective, async, op, slot, pair)");
        goto fail;
    }
    Py_INCREF(entry);  /* head, collective, is_async, op, slot, pair = entry */
    PyObject *head = PyTuple_GET_ITEM(entry, 0), *op = PyTuple_GET_ITEM(entry, 3), *slot = PyTuple_GET_ITEM(entry, 4);
    PyObject *pair = PyTuple_GET_ITEM(entry, 5);
    Py_SETREF(is_async, Py_NewRef(PyTuple_GET_ITEM(entry, 2)));
    int collective = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 1));
    PyObject *ids = collective < 0 ? NULL : (cached ? Py_NewRef(self->ids_c) : PyObject_GetAttr(t, s_ids));
    i = ids ? PyIter_Next(ids) : NULL;
    Py_XDECREF(ids);
    if (i == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetNone(PyExc_StopIteration);
        Py_DECREF(entry);
        goto fail;
    }
    if (collective) {
        gs = PyObject_GetAttr(g, s_next_seq);
        PyObject *next = gs ? PyNumber_Add(gs, one) : NULL;
        int bad = next == NULL || PyObject_SetAttr(g, s_next_seq, next) < 0;
        Py_XDECREF(next);
        if (bad) {
            Py_DECREF(entry);
            goto fail;
        }
    } else {
        gs = Py_NewRef(Py_None);
    }
    PyObject *ps = Py_NewRef(Py_None);  /* a send's or recv's number in its pair (op_records.PairSeq) */
    if (!collective && pair != Py_None) {
        Py_SETREF(ps, PyObject_GetAttr(pair, s_next_seq));
        PyObject *next = ps ? PyNumber_Add(ps, one) : NULL;
        int bad = next == NULL || PyObject_SetAttr(pair, s_next_seq, next) < 0;
        Py_XDECREF(next);
        if (bad) {
            Py_XDECREF(ps);
            Py_DECREF(entry);
            goto fail;
        }
    }
    rec = (cached ? Py_NewRef(self->rec_c) : PyObject_GetAttr(t, s_rec));
    PyObject *bargs[5] = {rec, head, i, gs, ps};
    now = rec ? begin_to(cached ? (RingWriter *)self->ring_c : NULL, bargs, 5) : NULL;
    Py_DECREF(ps);
    if (now == NULL) {
        Py_DECREF(entry);
        goto fail;
    }
    /* issued: the backend's method with the same arguments */
    PyObject *full = PyTuple_New(n + 1);
    if (full == NULL) {
        Py_DECREF(entry);
        goto error;
    }
    PyTuple_SET_ITEM(full, 0, Py_NewRef(backend));
    for (Py_ssize_t k = 0; k < n; k++)
        PyTuple_SET_ITEM(full, k + 1, Py_NewRef(PyTuple_GET_ITEM(args, k)));
    work = PyObject_Call(self->direct, full, NULL);
    Py_DECREF(full);
    if (work == NULL) {  /* current.safe(_lean_failed, t, i, is_async, op, g, gs, now, tid, slot, e); raise */
        PyObject *e = PyErr_GetRaisedException_compat();
        PyObject *r = PyObject_CallFunctionObjArgs(safe, lean_failed, t, i, is_async, op, g, gs, now, tid, slot, e,
                                                   NULL);
        Py_DECREF(entry);
        if (r == NULL) {
            Py_DECREF(e);
            goto error;
        }
        Py_DECREF(r);
        PyErr_SetRaisedException_compat(e);
        goto error;
    }
    yes = PyObject_IsTrue(is_async);
    if (yes < 0) {
        Py_DECREF(entry);
        goto error;
    }
    if (yes || work == Py_None) {  /* current.safe(_lean_async, t, i, op, g, gs, now, tid, slot, work) */
        PyObject *r = PyObject_CallFunctionObjArgs(safe, lean_async, t, i, op, g, gs, now, tid, slot, work, NULL);
        Py_DECREF(entry);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
        result = Py_NewRef(work);
        goto done;
    }
    /* the backend's own sequence number, read right after issue: Flight Recorder's id for it */
    PyObject *seq = Py_NewRef(Py_None);
    PyObject *read = (cached ? Py_NewRef(self->read_seq_c) : PyObject_GetAttr(t, s_read_seq));
    if (read == NULL || (yes = PyObject_IsTrue(read)) < 0) {
        Py_XDECREF(read);
        Py_DECREF(seq);
        Py_DECREF(entry);
        goto error;
    }
    Py_DECREF(read);
    if (yes) {
        PyObject *got = PyObject_CallMethodNoArgs(pg, s_seqno);
        if (got != NULL)
            Py_SETREF(seq, got);
        else if (PyErr_ExceptionMatches(PyExc_Exception))
            PyErr_Clear();
        else {
            Py_DECREF(seq);
            Py_DECREF(entry);
            goto error;
        }
    }
    /* t.completion.lean_sync[id(work)] = (op, g, gs, now, tid, i, seq, slot): Work.wait ends it */
    PyObject *sync = cached ? Py_NewRef(self->sync_c) : NULL;
    if (sync == NULL) {
        PyObject *completion = PyObject_GetAttr(t, s_completion);
        sync = completion ? PyObject_GetAttr(completion, s_lean_sync) : NULL;
        Py_XDECREF(completion);
    }
    PyObject *item = sync ? PyTuple_Pack(8, op, g, gs, now, tid, i, seq, slot) : NULL;
    Py_DECREF(seq);
    Py_DECREF(entry);
    PyObject *wid = item ? PyLong_FromVoidPtr(work) : NULL;
    int bad = wid == NULL || !PyDict_Check(sync);
    if (!bad && PyDict_GET_SIZE(sync) > pending_limit)  /* Works never waited on (an exception between) */
        PyDict_Clear(sync);
    bad = bad || PyDict_SetItem(sync, wid, item) < 0;
    Py_XDECREF(sync);
    Py_XDECREF(item);
    Py_XDECREF(wid);
    if (bad) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "Completion.lean_sync is a dict");
        goto error;
    }
    result = Py_NewRef(work);
    goto done;

general_path:
    result = Py_NewRef(general);
    goto done;
fail:  /* before the op was issued: the Python wrapper's except clause */
    result = failed(t);
    goto done;
error:  /* after: as the Python code raises it */
    result = NULL;
done:
    Py_DECREF(first);
    Py_XDECREF(root);
    Py_XDECREF(is_async);
    Py_XDECREF(g);
    Py_XDECREF(backend);
    Py_XDECREF(walked);
    Py_XDECREF(tid);
    Py_XDECREF(key);
    Py_XDECREF(lean);
    Py_XDECREF(i);
    Py_XDECREF(gs);
    Py_XDECREF(now);
    Py_XDECREF(rec);
    Py_XDECREF(work);
    return result;
}

static PyObject *
lean_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    int p2p, root;
    PyObject *opts, *spec, *direct;
    if (!PyArg_ParseTuple(args, "ppOOO:Lean", &p2p, &root, &opts, &spec, &direct))
        return NULL;
    Lean *self = (Lean *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)lean_call;
    self->p2p = p2p;
    self->root = root;
    self->opts = Py_NewRef(opts);
    self->spec = Py_NewRef(spec);
    self->direct = Py_NewRef(direct);
    return (PyObject *)self;
}

static void
lean_dealloc(Lean *self)
{
    Py_XDECREF(self->opts);
    Py_XDECREF(self->spec);
    Py_XDECREF(self->direct);
    Py_XDECREF(self->last_g);
    Py_XDECREF(self->last_key);
    Py_XDECREF(self->last_entry);
    Py_XDECREF(self->ids_c);
    Py_XDECREF(self->rec_c);
    Py_XDECREF(self->read_seq_c);
    Py_XDECREF(self->sync_c);
    Py_XDECREF(self->ring_c);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject LeanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disttrace.tracer.record._hotpath.Lean",
    .tp_basicsize = sizeof(Lean),
    .tp_dealloc = (destructor)lean_dealloc,
    .tp_vectorcall_offset = offsetof(Lean, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Lean(p2p, root, opts, spec, direct)(t, pg, args) -> Work, (site, api, origin) or GENERAL: "
              "fastpath.py's lean path.",
    .tp_new = lean_new,
};

/* -- Work.wait's lean branch (hooks.py's wait, its twin) ------------------------------------------------------
 * Wait(orig, wait, current's globals): Work.wait, a method descriptor (self comes first, unbound, as a function's
 * would). Where the tracer's Completion.lean_sync holds this Work (a synchronous op of the lean path): the job's wait
 * (orig), then its end (Completion.lean_done: an Ender's, without a Python call), as hooks.py's wait does; anything
 * else is hooks.py's wait itself, which looks again and takes its other branches. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *orig, *py_wait, *cur, *dict;
    /* the last tracer's t.completion.lean_sync and .lean_done (Completion sets both once), with a weak reference to
     * that tracer: another tracer, even at the same address, is another weak reference's object */
    PyObject *t_ref, *sync_c, *done_c;
} Wait;

/* The object of weak reference ref, borrowed (None once it is gone) */
static inline PyObject *
referent(PyObject *ref)
{
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return PyWeakref_GetObject(ref);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

static PyObject *s_tracer, *s_lean_end, *s_lean_done;

/* d.pop(key, None): 0, or -1 with an error */
static int
discard(PyObject *d, PyObject *key)
{
    if (PyDict_DelItem(d, key) == 0)
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_KeyError))
        return -1;
    PyErr_Clear();
    return 0;
}

static PyObject *
wait_call(Wait *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1)
        return PyObject_Vectorcall(self->py_wait, argv, nargsf, kwnames);  /* (its own error) */
    PyObject *t = PyDict_GetItemWithError(self->cur, s_tracer);  /* current.tracer, borrowed */
    if (t == NULL || t == Py_None) {
        if (t == NULL && PyErr_Occurred())
            return NULL;
        return PyObject_Vectorcall(self->orig, argv, nargsf, kwnames);
    }
    Py_INCREF(t);
    PyObject *c = NULL, *lean = NULL, *done_fn = NULL, *key = NULL, *entry = NULL, *result = NULL;
    if (self->t_ref != NULL && referent(self->t_ref) == t) {
        lean = Py_NewRef(self->sync_c);
        done_fn = Py_NewRef(self->done_c);
    } else {
        c = PyObject_GetAttr(t, s_completion);
        lean = c ? PyObject_GetAttr(c, s_lean_sync) : NULL;
        done_fn = lean ? PyObject_GetAttr(c, s_lean_done) : NULL;
        if (done_fn == NULL)
            goto done;
        PyObject *ref = PyWeakref_NewRef(t, NULL);
        if (ref == NULL)
            PyErr_Clear();  /* (nothing kept: looked up again next time) */
        else {
            Py_XSETREF(self->t_ref, ref);
            Py_XSETREF(self->sync_c, Py_NewRef(lean));
            Py_XSETREF(self->done_c, Py_NewRef(done_fn));
        }
    }
    if (!PyDict_Check(lean) || PyDict_GET_SIZE(lean) == 0)
        goto python;
    key = PyLong_FromVoidPtr(argv[0]);
    if (key == NULL)
        goto done;
    entry = PyDict_GetItemWithError(lean, key);
    if (entry == NULL) {
        if (PyErr_Occurred())
            goto done;
        goto python;
    }
    Py_INCREF(entry);
    result = PyObject_Vectorcall(self->orig, argv, nargsf, kwnames);
    if (result == NULL) {  /* lean.pop(key, None); current.safe(c.lean_end, entry, monotonic_ns(), e); raise */
        PyObject *e = PyErr_GetRaisedException_compat();
        PyObject *now = discard(lean, key) == 0 ? PyLong_FromLongLong(monotonic_now()) : NULL;
        if (now != NULL && c == NULL)
            c = PyObject_GetAttr(t, s_completion);
        PyObject *lean_end = now && c ? PyObject_GetAttr(c, s_lean_end) : NULL;
        PyObject *r = lean_end ? PyObject_CallFunctionObjArgs(safe, lean_end, entry, now, e, NULL) : NULL;
        Py_XDECREF(now);
        Py_XDECREF(lean_end);
        if (r == NULL) {
            Py_DECREF(e);
            goto done;
        }
        Py_DECREF(r);
        PyErr_SetRaisedException_compat(e);
        goto done;
    }
    PyObject *now = PyLong_FromLongLong(monotonic_now());
    if (now == NULL || discard(lean, key) < 0) {
        Py_XDECREF(now);
        Py_CLEAR(result);
        goto done;
    }
    PyObject *r = NULL;
    {  /* c.lean_done(entry, now); an Exception: t.fail(e) */
        if (Py_IS_TYPE(done_fn, &EnderType)) {
            PyObject *args[4] = {((Ender *)done_fn)->rec, ((Ender *)done_fn)->agg, entry, now};
            r = end_to((RingWriter *)((Ender *)done_fn)->ring, args, 4);
        } else {
            PyObject *args[2] = {entry, now};
            r = PyObject_Vectorcall(done_fn, args, 2, NULL);
        }
    }
    Py_XDECREF(now);
    if (r != NULL) {
        Py_DECREF(r);
    } else if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyObject *e = PyErr_GetRaisedException_compat();
        r = PyObject_CallMethodOneArg(t, s_fail, e);
        Py_DECREF(e);
        if (r == NULL)
            Py_CLEAR(result);
        else
            Py_DECREF(r);
    } else {
        Py_CLEAR(result);
    }
    goto done;
python:  /* not a lean op's Work: hooks.py's wait, all of it */
    result = PyObject_Vectorcall(self->py_wait, argv, nargsf, kwnames);
done:
    Py_XDECREF(entry);
    Py_XDECREF(key);
    Py_XDECREF(lean);
    Py_XDECREF(done_fn);
    Py_XDECREF(c);
    Py_DECREF(t);
    return result;
}

static PyObject *
wait_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
wait_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *orig, *py_wait, *cur;
    if (!PyArg_ParseTuple(args, "OOO!:Wait", &orig, &py_wait, &PyDict_Type, &cur))
        return NULL;
    Wait *self = (Wait *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)wait_call;
    self->orig = Py_NewRef(orig);
    self->py_wait = Py_NewRef(py_wait);
    self->cur = Py_NewRef(cur);
    return (PyObject *)self;
}

static void
wait_dealloc(Wait *self)
{
    Py_XDECREF(self->orig);
    Py_XDECREF(self->py_wait);
    Py_XDECREF(self->cur);
    Py_XDECREF(self->t_ref);
    Py_XDECREF(self->sync_c);
    Py_XDECREF(self->done_c);
    Py_XDECREF(self->dict);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject WaitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disttrace.tracer.record._hotpath.Wait",
    .tp_basicsize = sizeof(Wait),
    .tp_dealloc = (destructor)wait_dealloc,
    .tp_vectorcall_offset = offsetof(Wait, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = wait_get,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_dictoffset = offsetof(Wait, dict),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Wait(orig, wait, current's globals): Work.wait, hooks.py's wait with its lean branch in C.",
    .tp_new = wait_new,
};

/* -- a ProcessGroup method's wrapper (fastpath._wrap's method, its twin) ---------------------------------------
 * Method(orig, lean, rest, current's globals, current.nested, _len_torch_dispatch_stack): the method, a method
 * descriptor as Wait is. Untraced, nested or under a dispatch mode: orig. Else the Lean (lean_call) where t.lean is
 * not None; its Work returned, anything else (a key's first sight, the general path) handed to fastpath's
 * rest(t, pg, args, lean, walked) as the Python method hands it. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *orig, *lean, *rest, *cur, *nested, *modes, *dict;
} Method;

static PyObject *
method_call(Method *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
        return PyObject_Vectorcall(self->orig, argv, nargsf, kwnames);
    PyObject *t = PyDict_GetItemWithError(self->cur, s_tracer);  /* current.tracer, borrowed */
    if (t == NULL && PyErr_Occurred())
        return NULL;
    if (t == NULL || t == Py_None)
        return PyObject_Vectorcall(self->orig, argv, nargsf, kwnames);
    if (PySet_GET_SIZE(self->nested) > 0) {  /* get_ident() in nested */
        PyObject *tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
        int in = tid ? PySet_Contains(self->nested, tid) : -1;
        Py_XDECREF(tid);
        if (in < 0)
            return NULL;
        if (in)
            return PyObject_Vectorcall(self->orig, argv, nargsf, kwnames);
    }
    PyObject *modes = PyObject_CallNoArgs(self->modes);
    int yes = modes ? PyObject_IsTrue(modes) : -1;
    Py_XDECREF(modes);
    if (yes < 0)
        return NULL;
    if (yes)
        return PyObject_Vectorcall(self->orig, argv, nargsf, kwnames);
    Py_INCREF(t);
    PyObject *args = PyTuple_New(nargs - 1);  /* the method's args, as the Python method's *args */
    for (Py_ssize_t k = 1; args != NULL && k < nargs; k++)
        PyTuple_SET_ITEM(args, k - 1, Py_NewRef(argv[k]));
    PyObject *lean = args ? PyObject_GetAttr(t, s_lean) : NULL;
    PyObject *walked = Py_NewRef(Py_None), *result = NULL;
    if (lean == NULL)
        goto done;
    if (lean != Py_None) {
        /* (no Python frame of ours between: the walk starts at the frame that called the method) */
        PyObject *got = general != NULL ? lean_impl((Lean *)self->lean, t, argv[0], args, 1) : NULL;
        if (general == NULL)
            PyErr_SetString(PyExc_TypeError, "Method before init_lean");
        if (got == NULL)
            goto done;
        if (PyTuple_CheckExact(got)) {
            Py_SETREF(walked, got);  /* a key's first sight: decided by rest, with this walk (one walk an op) */
        } else if (got == general) {
            Py_DECREF(got);
            Py_SETREF(lean, Py_NewRef(Py_None));
        } else {
            result = got;
            goto done;
        }
    }
    PyObject *rargs[5] = {t, argv[0], args, lean, walked};
    result = PyObject_Vectorcall(self->rest, rargs, 5, NULL);
done:
    Py_XDECREF(lean);
    Py_XDECREF(args);
    Py_DECREF(walked);
    Py_DECREF(t);
    return result;
}

static PyObject *
method_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *orig, *lean, *rest, *cur, *nested, *modes;
    if (!PyArg_ParseTuple(args, "OO!OO!O!O:Method", &orig, &LeanType, &lean, &rest, &PyDict_Type, &cur, &PySet_Type,
                          &nested, &modes))
        return NULL;
    Method *self = (Method *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)method_call;
    self->orig = Py_NewRef(orig);
    self->lean = Py_NewRef(lean);
    self->rest = Py_NewRef(rest);
    self->cur = Py_NewRef(cur);
    self->nested = Py_NewRef(nested);
    self->modes = Py_NewRef(modes);
    return (PyObject *)self;
}

static void
method_dealloc(Method *self)
{
    Py_XDECREF(self->orig);
    Py_XDECREF(self->lean);
    Py_XDECREF(self->rest);
    Py_XDECREF(self->cur);
    Py_XDECREF(self->nested);
    Py_XDECREF(self->modes);
    Py_XDECREF(self->dict);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disttrace.tracer.record._hotpath.Method",
    .tp_basicsize = sizeof(Method),
    .tp_dealloc = (destructor)method_dealloc,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = wait_get,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_dictoffset = offsetof(Method, dict),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Method(orig, lean, rest, current's globals, nested, dispatch_modes): fastpath.py's method in C.",
    .tp_new = method_new,
};
#endif

static PyMethodDef methods[] = {
    {"init_records", init_records, METH_O, "init_records(end_open): op_records.END_LINE up to its id."},
    {"begin", (PyCFunction)(void (*)(void))begin, METH_FASTCALL, "begin(rec, head, i, gs) -> t: the begin record."},
    {"end", (PyCFunction)(void (*)(void))end, METH_FASTCALL, "end(rec, agg, entry, t): a lean op's end record."},
#ifdef HOTPATH_FRAMES
    {"init_walk", init_walk, METH_VARARGS, "init_walk(users, others, enter, walk, c10d): callsite.py's caches."},
    {"walk", walk, METH_O, "walk(depth) -> (site, api, origin): callsite.walk without frame objects."},
    {"init_lean", init_lean, METH_VARARGS, "init_lean(Tensor, strided, profiler, inflight, GENERAL, safe, "
     "lean_failed, lean_async, PENDING_LIMIT, fastpath's globals)"},
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
    s_write_py = PyUnicode_InternFromString("_write_raw_py");
    if (!s_raw || !s_write_raw || !s_deadline || !s_acc || !s_roll || !s_write_py || PyType_Ready(&RingWriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyType_Ready(&EnderType) < 0 || PyModule_AddObjectRef(m, "Ender", (PyObject *)&EnderType) < 0
            || PyModule_AddObjectRef(m, "RingWriter", (PyObject *)&RingWriterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#ifdef HOTPATH_FRAMES
    PyObject **names[] = {&s_lean, &s_groups, &s_get, &s_of, &s_gloo, &s_ids, &s_next_seq, &s_rec, &s_read_seq, &s_seqno,
                          &s_completion, &s_lean_sync, &s_fail, &s_is_cpu, &s_layout, &s_rootRank, &s_asyncOp,
                          &s_dtype, &s_shape, &s_enabled, &s_walk};
    const char *strs[] = {"lean", "groups", "get", "of", "gloo", "_ids", "next_seq", "rec", "read_seq",
                          "_get_sequence_number_for_group", "completion", "lean_sync", "fail", "is_cpu", "layout",
                          "rootRank", "asyncOp", "dtype", "shape", "_is_profiler_enabled", "walk"};
    for (size_t k = 0; k < sizeof(strs) / sizeof(strs[0]); k++)
        if ((*names[k] = PyUnicode_InternFromString(strs[k])) == NULL)
            goto error;
    s_tracer = PyUnicode_InternFromString("tracer");
    s_lean_end = PyUnicode_InternFromString("lean_end");
    s_lean_done = PyUnicode_InternFromString("lean_done");
    if (!s_tracer || !s_lean_end || !s_lean_done || PyType_Ready(&WaitType) < 0
            || PyModule_AddObjectRef(m, "Wait", (PyObject *)&WaitType) < 0 || PyType_Ready(&MethodType) < 0
            || PyModule_AddObjectRef(m, "Method", (PyObject *)&MethodType) < 0)
        goto error;
    one = PyLong_FromLong(1);
    two = PyLong_FromLong(2);
    dict_get = _PyType_Lookup(&PyDict_Type, s_get);  /* (borrowed: the type keeps it) */
    c_walk = PyObject_GetAttrString(m, "walk");
    if (one == NULL || two == NULL || c_walk == NULL || PyType_Ready(&LeanType) < 0
            || PyModule_AddObjectRef(m, "Lean", (PyObject *)&LeanType) < 0)
        goto error;
#endif
    return m;
#ifdef HOTPATH_FRAMES
error:
    Py_DECREF(m);
    return NULL;
#endif
}
