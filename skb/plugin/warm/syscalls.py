"""The system calls warm start needs that the os module lacks: prctl, personality, ioprio, sched_getattr,
the memory policy, keyrings, madvise. Through ctypes, loaded once in the server before any fork (the
children share it). x86_64 numbers: the bundle is built for that architecture only."""
import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_prctl = _libc.prctl
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)

SYS_IOPRIO_SET, SYS_IOPRIO_GET = 251, 252
SYS_SET_MEMPOLICY, SYS_GET_MEMPOLICY = 238, 239
SYS_KEYCTL = 250
SYS_SCHED_GETATTR = 315

PR_SET_PDEATHSIG, PR_SET_NAME, PR_GET_DUMPABLE = 1, 15, 3
PR_GET_SECUREBITS, PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 27, 29, 30
PR_SET_THP_DISABLE, PR_GET_THP_DISABLE = 41, 42
PR_GET_SPECULATION_CTRL, PR_SET_SPECULATION_CTRL = 52, 53
SPEC_MISFEATURES = (0, 1, 2)  # store bypass, indirect branch, L1D flush
PR_GET_KEEPCAPS, PR_GET_TSC, PR_SET_TSC, PR_MCE_KILL, PR_MCE_KILL_GET = 7, 25, 26, 33, 34
PR_GET_CHILD_SUBREAPER, PR_GET_IO_FLUSHER, PR_SCHED_CORE, PR_GET_MDWE = 37, 58, 62, 66
AT_SECURE = 23
PR_SPEC_PRCTL, PR_SPEC_ENABLE, PR_SPEC_DISABLE, PR_SPEC_FORCE_DISABLE = 1, 2, 4, 8
KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, -3
KEYCTL_SET_REQKEY_KEYRING, KEY_REQKEY_DEFL_NO_CHANGE = 14, -1
MADV_POPULATE_WRITE = 23  # Linux 5.14+
NODEMASK_LONGS = 16       # 1024 nodes: more than any kernel config allows by default


def prctl(op, arg=0):
    return _prctl(op, arg, 0, 0, 0)


def prctl_ok(op, arg=0, arg3=0):
    """prctl with a 3rd argument; True on success."""
    return _prctl(op, arg, arg3 & 0xFFFFFFFFFFFFFFFF, 0, 0) == 0


def set_name(name):
    buf = ctypes.create_string_buffer(name)
    _prctl(PR_SET_NAME, ctypes.addressof(buf), 0, 0, 0)


def personality():
    return _libc.personality(ctypes.c_ulong(0xFFFFFFFF))


def ioprio():
    return _syscall(SYS_IOPRIO_GET, 1, 0)  # IOPRIO_WHO_PROCESS, self


def set_ioprio(value):
    return _syscall(SYS_IOPRIO_SET, 1, 0, value) == 0


def speculation():
    """The three speculation-control states (-1 where the kernel has no such control)."""
    return tuple(_prctl(PR_GET_SPECULATION_CTRL, m, 0, 0, 0) for m in SPEC_MISFEATURES)


_attr = (ctypes.c_ubyte * 56)()


def sched_attr():
    """(policy, flags, priority, runtime, deadline, period, util_min, util_max) from sched_getattr(2)."""
    if _syscall(SYS_SCHED_GETATTR, 0, _attr, 56, 0) != 0:
        return None
    _, policy, flags, _nice, prio, runtime, deadline, period, umin, umax = struct.unpack("<IIQiIQQQII", bytes(_attr))
    return policy, flags, prio, runtime, deadline, period, umin, umax


_mode = ctypes.c_int()
_mask = (ctypes.c_ulong * NODEMASK_LONGS)()


def mempolicy():
    """(mode with its flags, nodemask words) of the process's NUMA memory policy, or None."""
    if _syscall(SYS_GET_MEMPOLICY, ctypes.byref(_mode), _mask, NODEMASK_LONGS * 64, None, 0) != 0:
        return None
    return _mode.value, tuple(_mask)


def set_mempolicy(mode, words):
    mask = (ctypes.c_ulong * NODEMASK_LONGS)(*words)
    return _syscall(SYS_SET_MEMPOLICY, mode, mask, NODEMASK_LONGS * 64) == 0


def session_keyring():
    return _syscall(SYS_KEYCTL, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)


def reqkey_keyring():
    return _syscall(SYS_KEYCTL, KEYCTL_SET_REQKEY_KEYRING, KEY_REQKEY_DEFL_NO_CHANGE)


_int = ctypes.c_int()
_u64 = ctypes.c_ulonglong()


def prctl_int(op):
    """A prctl that writes an int through its 2nd argument; the int, or -1."""
    return _int.value if _prctl(op, ctypes.addressof(_int), 0, 0, 0) == 0 else -1


def core_sched_cookie():
    """The core-scheduling cookie (PR_SCHED_CORE_GET), or None without core scheduling."""
    return _u64.value if _prctl(PR_SCHED_CORE, 0, 0, 0, ctypes.addressof(_u64)) == 0 else None


_libc.getauxval.restype = ctypes.c_ulong
_libc.getauxval.argtypes = (ctypes.c_ulong,)


def at_secure():
    return _libc.getauxval(AT_SECURE)


def populate_write(start, length):
    return _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), MADV_POPULATE_WRITE)


def errno():
    return ctypes.get_errno()


def read_small(path):
    """The whole of a small /proc file, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)
