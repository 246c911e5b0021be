"""Reading files the operator's set-up names, without ever blocking or reading without bound.

A FIFO where a config should be would hang a plain ``open``; ``/dev/zero`` would be read until memory
runs out; a directory or a socket fails in confusing ways. Every file ``skb doctor``, ``skb explain``
and ``skb log`` read goes through ``read_regular``: opened with ``O_NONBLOCK`` (a FIFO opens at once),
checked with ``fstat`` to be a regular file, read up to a bound. ``BadFile`` carries a one-line reason
naming the path.
"""
import os
import stat

from skb.linux.files import kind_name, read_bounded

CONFIG_LIMIT = 1 << 20        # a CNI or runtime config larger than this is not one


class BadFile(Exception):
    """A path that cannot be read as a regular file; ``str()`` is a one-line reason naming it."""

    def __init__(self, path, reason, errno_=0):
        Exception.__init__(self, f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.errno = errno_


def open_regular(path):
    """A file descriptor for reading ``path``, which must be a regular file (symlinks followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise BadFile(path, (e.strerror or str(e)).lower(), e.errno) from None
    except (ValueError, TypeError) as e:          # a NUL byte in the path
        raise BadFile(repr(path), f"not a usable path ({e})") from None
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise BadFile(path, (e.strerror or str(e)).lower(), e.errno) from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise BadFile(path, f"is {kind_name(st.st_mode)}, not a regular file")
    return fd


def read_regular(path, limit=CONFIG_LIMIT):
    """The bytes of a regular file of at most ``limit`` bytes."""
    fd = open_regular(path)
    try:
        data = read_bounded(fd, limit + 1)
    except OSError as e:
        raise BadFile(path, (e.strerror or str(e)).lower(), e.errno) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise BadFile(path, f"is larger than {limit} bytes: not a file this reads")
    return data


def lstat_kind(path):
    """(kind of the entry itself, kind of what it resolves to or None when that fails, the error)."""
    try:
        own = os.lstat(path)
    except OSError as e:
        return None, None, e
    if not stat.S_ISLNK(own.st_mode):
        return own.st_mode, own.st_mode, None
    try:
        return own.st_mode, os.stat(path).st_mode, None
    except OSError as e:
        return own.st_mode, None, e
