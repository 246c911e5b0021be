"""Functions of the C library, for the few system calls Python's ``os`` lacks (``setns`` before 3.12,
``mount``, ``umount2``, ``unshare``).

Built on ``_ctypes``, the C module: ``import ctypes`` costs ~3 ms (it imports struct and its own Python
layers), this a fraction of a millisecond. Argument and result types are ``int``, ``ulong``, ``char_p``
(bytes or None) and ``void_p``.
"""
import _ctypes
import os

__all__ = ["function"]

_types = {}
_handle = None


def _ctype(name):
    if not _types:
        for key, code in (("int", "i"), ("ulong", "L"), ("char_p", "z"), ("void_p", "P")):
            _types[key] = type(f"c_{key}", (_ctypes._SimpleCData,), {"_type_": code})
    return _types[name]


def function(name, restype, *argtypes):
    """The libc function ``name`` as a Python callable that raises OSError (with errno) when the call
    returns -1, and returns the result otherwise."""
    global _handle
    if _handle is None:
        _handle = _ctypes.dlopen(None)
    cls = type(f"_{name}", (_ctypes.CFuncPtr,), {
        "_flags_": _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO,
        "_restype_": _ctype(restype), "_argtypes_": tuple(_ctype(a) for a in argtypes)})
    func = cls(_ctypes.dlsym(_handle, name))

    def call(*args):
        result = func(*args)
        if result == -1:
            err = _ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return result
    call.__name__ = name
    return call
