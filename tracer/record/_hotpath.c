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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static PyMethodDef methods[] = {
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
    return PyModule_Create(&module);
}
