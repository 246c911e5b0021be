"""One safe way to open a file that a configuration, a record or an environment variable names.

Such a path is untrusted input. It may name a FIFO (an open or a read blocks until someone else acts),
a device (``/dev/zero`` never ends; opening some devices has side effects), a directory, a dangling
symbolic link (``O_CREAT`` would create the file wherever the link points) or a relative path (resolved
against whatever directory the runtime happens to run in). Every such open goes through here:

- the path must be absolute and free of NUL bytes (``skb.cni.netconf.check_path``);
- it is ``stat()``-ed first and refused unless it is a regular file, so a device is never opened;
- it is opened with ``O_NONBLOCK | O_NOCTTY`` (a FIFO swapped in after the stat cannot block the open)
  and ``fstat()``-ed: the type check holds for the file actually opened;
- a file is only created with ``O_EXCL``, which never follows a symbolic link;
- nothing is appended to a procfs or sysfs file (they look regular, and writing one changes the node);
- reads are bounded.

Errors are CNIErrors naming the key and the path: code 7 when the value is wrong (relative, missing, not
a regular file, too large), code 5 when the file system refused (permissions, read-only, I/O).
Only ``os`` is used: this module is loaded on plugin calls that name a file, and by host-local, whose
store reads and writes through ``read_bounded`` and ``write_all``.
"""
import os

from skb.cni.errors import CNIError, INVALID_CONFIG, IO_FAILURE
from skb.cni.jsonio import read_bounded, write_all  # (their home: see there)
from skb.cni.netconf import check_path

__all__ = ["check_path", "read_regular", "read_bounded", "open_append", "append", "is_regular", "kind_name",
           "write_all"]

_S_IFMT, _S_IFREG = 0o170000, 0o100000
_KINDS = {_S_IFREG: "a regular file", 0o040000: "a directory", 0o010000: "a FIFO (named pipe)",
          0o020000: "a character device", 0o060000: "a block device", 0o140000: "a socket",
          0o120000: "a symbolic link"}
# errno values that say the path itself is wrong (Linux numbering): ENOENT, ENOTDIR, EISDIR,
# ENAMETOOLONG, ELOOP, ENXIO (a FIFO without a reader, a device without its driver).
_WRONG_PATH = {2, 20, 21, 36, 40, 6}
_RW_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_RD = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def is_regular(st):
    return st.st_mode & _S_IFMT == _S_IFREG


def kind_name(mode):
    """The type of a file (an ``st_mode``) as a message says it: "a directory", "a FIFO (named pipe)" ..."""
    return _KINDS.get(mode & _S_IFMT, "a special file")


def _not_regular(key, path, st, fix):
    kind = kind_name(st.st_mode)
    return CNIError(INVALID_CONFIG, f"{key} {path!r} is {kind}, not a regular file",
                    fix or f"point {key} at a regular file")


def _failed(e, key, path, doing, fix):
    if isinstance(e, UnicodeError):
        return CNIError(INVALID_CONFIG, f"{key} {path!r} cannot be encoded as a file name", fix)
    reason = e.strerror or str(e)
    if e.errno == 2:
        try:
            if os.lstat(path).st_mode & _S_IFMT == 0o120000:
                reason = "a symbolic link to a missing file"
        except OSError:
            pass
    code = INVALID_CONFIG if e.errno in _WRONG_PATH else IO_FAILURE
    return CNIError(code, f"cannot {doing} {key} {path!r}: {reason}", fix)


def read_regular(path, key, max_bytes, fix=""):
    """The bytes of the regular file ``path`` (named by ``key``), at most ``max_bytes`` of them."""
    check_path(path, key)
    try:
        st = os.stat(path)
        if not is_regular(st):
            raise _not_regular(key, path, st, fix)
        fd = os.open(path, _RD)
    except (OSError, UnicodeError) as e:
        raise _failed(e, key, path, "read", fix) from None
    try:
        st = os.fstat(fd)
        if not is_regular(st):
            raise _not_regular(key, path, st, fix)
        data = read_bounded(fd, max_bytes + 1)
    except OSError as e:
        raise _failed(e, key, path, "read", fix) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise CNIError(INVALID_CONFIG, f"{key} {path!r} is larger than {max_bytes} bytes",
                       fix or f"point {key} at a smaller file")
    return data


def open_append(path, key, mode=0o600, fix=""):
    """A descriptor for appending to the regular file ``path`` (named by ``key``), created with ``mode``
    if missing. The caller closes it. O_NONBLOCK stays set: it changes nothing for a regular file."""
    check_path(path, key)
    try:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not is_regular(st):
            raise _not_regular(key, path, st, fix)
        if st is None:
            try:
                fd = os.open(path, _RW_APPEND | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:  # made since the stat, or a dangling link (O_EXCL does not follow it)
                fd = os.open(path, _RW_APPEND)
        else:
            fd = os.open(path, _RW_APPEND)
    except (OSError, UnicodeError) as e:
        raise _failed(e, key, path, "append to", fix) from None
    try:
        st = os.fstat(fd)
        if not is_regular(st):
            raise _not_regular(key, path, st, fix)
        _not_a_kernel_file(fd, key, path, fix)
    except BaseException:
        os.close(fd)
        raise
    return fd


# procfs and sysfs files look regular, and writing one changes the node (/proc/sys/kernel/hostname,
# /proc/sys/kernel/core_pattern, /sys/class/net/*/mtu): a record is never appended there.
_KERNEL_DIRS = ("/proc/", "/sys/", "/dev/")


def _not_a_kernel_file(fd, key, path, fix):
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: nothing to ask, and no /proc to write to either
        return
    if real.startswith(_KERNEL_DIRS):
        raise CNIError(INVALID_CONFIG, f"{key} {path!r} is the kernel interface file {real!r}, not a log file",
                       fix or f"point {key} at a regular file, e.g. under /var/log")


def append(path, key, data, mode=0o600, fix=""):
    """Append ``data`` (bytes) to ``path`` in one write: with O_APPEND, concurrent writers' records do
    not interleave."""
    fd = open_append(path, key, mode, fix)
    try:
        write_all(fd, data)
    except OSError as e:
        raise _failed(e, key, path, "append to", fix) from None
    finally:
        os.close(fd)
