"""Network namespaces: open one by path, check that it is one, enter it and come back, refuse our own.

A plugin acts in two namespaces: its own (the node's) and the container's (``CNI_NETNS``). Three facts
shape this module:

- Any path form names a netns: ``/run/netns/x``, ``/var/run/netns/x``, ``/proc/PID/ns/net``,
  ``/proc/self/ns/net``, or a bind mount of one of those anywhere. We open the path and ask the kernel
  what the open file is (``ioctl(NS_GET_NSTYPE)``), so a regular file, a directory or a *mount*
  namespace file is rejected before anything is changed. (Go's pkg/ns only checks the filesystem magic,
  so a mount-ns file passes there.)
- ``setns()`` moves only the calling thread. Netlink sockets and ``/proc/sys/net/...`` files bind to the
  netns of the thread that *opens* them, so: enter, open the socket or sysctl file, leave. A socket opened
  inside stays bound to that netns after leaving.
- The plugin's own netns as ``CNI_NETNS`` (a stale ``/proc/<pid>/ns/net`` after PID reuse, a runtime bug)
  would make the plugin reconfigure the node itself: ``is_own()`` recognises it by identity, and
  ``skb.linux.guard`` (the policy) refuses it *before* anything changes (Go's skel only notices after the
  damage: docs/REFERENCE.md#network-namespaces).

Only C modules are imported here: this module is loaded on every plugin call. It is also the home of
``libc_function``, the few libc calls Python's ``os`` lacks (``setns`` before 3.12; ``mount``,
``umount2``, ``unshare`` for scratch namespaces), through ``_ctypes``, loaded on first use.
"""
import errno
import os
import sys

from skb.cni.errors import (CNIError, INTERNAL, INVALID_ENV, INVALID_NETNS, IO_FAILURE, UNKNOWN_CONTAINER,
                            errno_reason)

CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703             # _IO(0xb7, 0x3): which kind of namespace an nsfs file is
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY   # NONBLOCK: a FIFO must not hang us
_OWN_PATH = "/proc/thread-self/ns/net"
_NS_KINDS = {0x00020000: "mnt", 0x02000000: "cgroup", 0x04000000: "uts", 0x08000000: "ipc",
             0x10000000: "user", 0x20000000: "pid", 0x40000000: "net", 0x00000080: "time"}
_VALID = ("CNI_NETNS must name a network namespace: a file that a netns is bind-mounted on "
          "(e.g. /run/netns/NAME, as `ip netns add` makes) or /proc/PID/ns/net of a process inside it")

# (st_dev, st_ino) of the netns each active enter() came from, outermost first: is_own() compares
# against the first, so the guard stays right even when called while inside a container netns.
_origins = []


class NetNSNotFound(CNIError):
    """The netns path does not exist (code 3). DEL handlers catch this and succeed: the namespace, and
    with it everything the plugin put inside, is already gone."""


class NetNS:
    """An open handle on a network namespace. Keeps the namespace alive while open.

    ``path`` is what the caller gave (used in messages), ``fd`` an O_CLOEXEC descriptor of the nsfs file.
    """

    __slots__ = ("path", "fd", "_ident")

    def __init__(self, path, fd):
        self.path = path
        self.fd = fd
        self._ident = None

    @classmethod
    def open(cls, path):
        """Open ``path`` and check it is a network namespace; raise NetNSNotFound (3) when it does not
        exist, CNIError 4 when it is something else, 5 when we may not open it."""
        if not path:
            raise CNIError(INVALID_ENV, "CNI_NETNS is empty", _VALID)
        if "\0" in path:
            raise CNIError(INVALID_ENV, "invalid CNI_NETNS: it contains a NUL byte", _VALID)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            raise NetNSNotFound(UNKNOWN_CONTAINER, f'network namespace "{path}" does not exist',
                                "the path is gone: the container (or its namespace) was probably deleted") from None
        except PermissionError as e:
            raise CNIError(IO_FAILURE, f'cannot open CNI_NETNS "{path}": {errno_reason(e.errno)}',
                           "entering a network namespace needs root (CAP_SYS_ADMIN); "
                           "check the plugin runs as root and that no LSM policy denies the path") from None
        except OSError as e:
            raise CNIError(INVALID_ENV, f'cannot open CNI_NETNS "{path}": {errno_reason(e.errno)}', _VALID) from None
        kind = _ns_kind(fd)
        if kind != "net":
            what = _describe(fd, kind)
            os.close(fd)
            raise CNIError(INVALID_ENV, f'CNI_NETNS "{path}" is not a network namespace ({what})', _VALID)
        return cls(path, fd)

    def ident(self):
        """(st_dev, st_ino) of the namespace: equal for every path that names the same netns."""
        if self._ident is None:
            st = os.fstat(self.fd)
            self._ident = (st.st_dev, st.st_ino)
        return self._ident

    def same_as(self, other):
        return self.ident() == other.ident()

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return f"NetNS({self.path!r}, fd={self.fd})"


def gone(path):
    """True when ``path`` names no network namespace any more: it does not exist, or it is something else (the
    empty file a namespace was mounted on, left by a crash or a reboot). What cannot be told (no permission,
    no fd left) is not gone: callers keep a pod they cannot judge. Only a regular file (which a mounted
    namespace looks like) is opened: a device named by a hostile record is not (review 16: opening some
    arms them)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    if st.st_mode & 0o170000 != 0o100000:     # (not a regular file; stat.S_ISREG without its module)
        return True
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    try:
        return _ns_kind(fd) != "net"
    finally:
        os.close(fd)


def own_netns():
    """A handle on the calling thread's current netns (the plugin's own, outside ``enter()``)."""
    return NetNS(_OWN_PATH, os.open(_OWN_PATH, _OPEN_FLAGS))


def is_own(ns):
    """True when ``ns`` is the plugin's own netns: the one the process was in before any ``enter()``
    (compared by device and inode, so every path form is recognised)."""
    if _origins:
        return ns.ident() == _origins[0]
    st = os.stat(_OWN_PATH)
    return ns.ident() == (st.st_dev, st.st_ino)


def current_label():
    """How to name the calling thread's netns in messages: the path of the innermost ``enter()``, else
    the plugin's own netns with its kernel id."""
    if _labels:
        return _labels[-1]
    try:
        return f"{os.readlink(_OWN_PATH)} (the plugin's own)"
    except OSError:
        return "the plugin's own"


_labels = []


def enter(ns):
    """Context manager: switch the calling thread into ``ns`` (a NetNS or a path) and always switch back.

        with enter(ns):
            nl = RtNetlink(label=ns.path)     # the socket stays bound to ns after leaving

    Only the calling thread moves. If switching back fails, the process is in the wrong netns and must not
    do anything else (an undo handler would then delete the *container's* links thinking they are the
    node's): we print a CNI error on stdout and a note on stderr, and ``os._exit(1)`` without running any
    further Python code. A runtime treats that as a failed call and retries DEL later.
    """
    return _Entered(ns)


class _Entered:
    __slots__ = ("ns", "_orig", "_opened")

    def __init__(self, ns):
        self._opened = isinstance(ns, str)
        self.ns = NetNS.open(ns) if self._opened else ns
        self._orig = -1

    def __enter__(self):
        orig = os.open(_OWN_PATH, _OPEN_FLAGS)
        try:
            _setns(self.ns.fd, CLONE_NEWNET)
        except OSError as e:
            os.close(orig)
            if self._opened:
                self.ns.close()
            code = IO_FAILURE if e.errno == errno.EPERM else INTERNAL
            raise CNIError(code, f'cannot enter network namespace "{self.ns.path}": {errno_reason(e.errno)}',
                           "setns() needs root (CAP_SYS_ADMIN)") from None
        st = os.fstat(orig)
        _origins.append((st.st_dev, st.st_ino))
        _labels.append(self.ns.path)
        self._orig = orig
        return self.ns

    def __exit__(self, *exc):
        orig, self._orig = self._orig, -1
        try:
            _setns(orig, CLONE_NEWNET)
        except OSError as e:
            _stranded(self.ns.path, e)
        os.close(orig)
        _origins.pop()
        _labels.pop()
        if self._opened:
            self.ns.close()


def _stranded(path, e):
    """Switching back failed: stop the process before it acts on the wrong namespace."""
    msg = f"cannot switch back from network namespace {path}: {errno_reason(e.errno)}"
    details = "the plugin stopped at once rather than go on configuring the wrong namespace; nothing was undone"
    out = '{"code": 999, "msg": "%s", "details": "%s"}\n' % (_json_str(msg), _json_str(details))
    try:
        sys.stdout.flush()
        os.write(1, out.encode())
        os.write(2, f"skb: FATAL: {msg}\n".encode())
    finally:
        os._exit(1)


def _json_str(s):
    return "".join(c if c >= " " and c not in '"\\' else "\\u%04x" % ord(c) for c in s)


def _setns(fd, nstype):
    global _setns
    if hasattr(os, "setns"):        # Python >= 3.12
        _setns = os.setns
    else:
        _setns = libc_function("setns", "int", "int", "int")
    _setns(fd, nstype)


_ctypes_mod = None
_ctypes_types = {}
_libc_handle = None


def libc_function(name, restype, *argtypes):
    """The libc function ``name`` as a callable that raises OSError (with errno) when the call returns -1,
    and returns its result otherwise. Types: ``int``, ``ulong``, ``char_p`` (bytes or None), ``void_p``.
    Through ``_ctypes``, the C module, loaded here on first use (~0.5 ms; ``import ctypes`` costs ~3 ms:
    it imports struct and its own Python layers); a call that enters no namespace never loads it."""
    global _ctypes_mod, _libc_handle
    if _ctypes_mod is None:
        import _ctypes    # (see above)
        _ctypes_mod = _ctypes
        _libc_handle = _ctypes.dlopen(None)
    c = _ctypes_mod

    def ctype(key):
        t = _ctypes_types.get(key)
        if t is None:
            code = {"int": "i", "ulong": "L", "char_p": "z", "void_p": "P"}[key]
            t = _ctypes_types[key] = type(f"c_{key}", (c._SimpleCData,), {"_type_": code})
        return t

    cls = type(f"_{name}", (c.CFuncPtr,), {"_flags_": c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO,
                                            "_restype_": ctype(restype),
                                            "_argtypes_": tuple(ctype(a) for a in argtypes)})
    func = cls(c.dlsym(_libc_handle, name))

    def call(*args):
        result = func(*args)
        if result == -1:
            err = c.get_errno()
            raise OSError(err, os.strerror(err))
        return result
    call.__name__ = name
    return call


def _ns_kind(fd):
    """'net', 'mnt', ... for an nsfs file; None for anything else."""
    import fcntl    # (a C module, ~0.1 ms: only for a call that opens a namespace; STATUS and GC open none)
    try:
        return _NS_KINDS.get(fcntl.ioctl(fd, NS_GET_NSTYPE), "unknown")
    except OSError:
        pass
    # Kernels before 4.11 lack NS_GET_NSTYPE: an nsfs fd reads back as "net:[4026531993]".
    try:
        link = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    kind, sep, rest = link.partition(":[")
    return kind if sep and rest.endswith("]") and kind.isalpha() else None


def _describe(fd, kind):
    """What an open file is, for messages: 'a mnt namespace', 'a regular file on ext4', ..."""
    if kind:
        return f"a {kind} namespace"
    # Local import, on this error path only: skb.linux.files is not loaded by a plugin call that names no file.
    from skb.linux.files import kind_name
    st = os.fstat(fd)
    what = kind_name(st.st_mode)
    if what == "a regular file" and st.st_size == 0:
        what = "an empty regular file (nothing is mounted on it: a deleted namespace?)"
    fstype = _fs_type(st.st_dev)
    return f"{what} on {fstype}" if fstype else what


def _fs_type(dev):
    """The filesystem type of device ``dev`` from /proc/self/mountinfo (Python has no fstatfs)."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[2] == want and "-" in fields:
                    return fields[fields.index("-") + 1]
    except OSError:
        pass
    return None
