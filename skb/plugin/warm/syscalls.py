"""The system calls a warm-start child needs to take a call on that the os module lacks (prctl, I/O
priority, memory policy), through the suite's one libc loader
(skb.linux.netns.libc_function). What the child reads of itself, it reads in C (build/warm_snapshot.c).
x86_64 numbers: the bundle is built for that architecture only."""
import _signal
import errno
import os

from skb.linux.netns import libc_function

SYS_IOPRIO_SET, SYS_SET_MEMPOLICY, SYS_KCMP, SYS_LANDLOCK_CREATE_RULESET = 251, 238, 312, 444
KCMP_VM, LANDLOCK_CREATE_RULESET_VERSION = 1, 1
PR_SET_PDEATHSIG, PR_SET_NAME, PR_SET_TIMERSLACK, PR_SET_TSC, PR_MCE_KILL = 1, 15, 29, 26, 33
PR_SET_THP_DISABLE, PR_SET_SPECULATION_CTRL = 41, 53
SPEC_MISFEATURES = (0, 1, 2)  # store bypass, indirect branch, L1D flush
PR_SPEC_PRCTL, PR_SPEC_ENABLE, PR_SPEC_DISABLE, PR_SPEC_FORCE_DISABLE = 1, 2, 4, 8
NODEMASK_LONGS = 16       # 1024 nodes: more than any kernel config allows by default

_prctl = libc_function("prctl", "int", "int", "ulong", "ulong", "ulong", "ulong")
_prctl_name = libc_function("prctl", "int", "int", "char_p", "ulong", "ulong", "ulong")
_syscall3 = libc_function("syscall", "int", "ulong", "ulong", "ulong", "ulong")
_syscall_mask = libc_function("syscall", "int", "ulong", "ulong", "char_p", "ulong")
_syscall5 = libc_function("syscall", "int", "ulong", "ulong", "ulong", "ulong", "ulong", "ulong")


def _ok(call, *args):
    try:
        call(*args)
        return True
    except OSError:
        return False


def prctl(op, arg=0):
    """0, or -1 (the errno is in the OSError libc_function would raise: not needed here)."""
    return 0 if _ok(_prctl, op, arg, 0, 0, 0) else -1


def prctl_ok(op, arg=0, arg3=0):
    """prctl with a 3rd argument; True on success."""
    return _ok(_prctl, op, arg, arg3 & 0xFFFFFFFFFFFFFFFF, 0, 0)


def set_name(name):
    _ok(_prctl_name, PR_SET_NAME, name, 0, 0, 0)


def set_ioprio(value):
    return _ok(_syscall3, SYS_IOPRIO_SET, 1, 0, value)  # IOPRIO_WHO_PROCESS, self


def set_mempolicy(mode, words):
    mask = b"".join(w.to_bytes(8, "little") for w in (list(words) + [0] * NODEMASK_LONGS)[:NODEMASK_LONGS])
    return _ok(_syscall_mask, SYS_SET_MEMPOLICY, mode, mask, NODEMASK_LONGS * 64)


def may_read(pid):
    """0 when this process may read process ``pid`` (kcmp(2) asks for PTRACE_MODE_READ on it), else the
    errno (EPERM: it may not; ESRCH: no such process). Under Landlock a process may read only those in its
    domain or one nested in it. The launcher proves the same of itself towards us (build/warm_client.c
    proof_of_reading): both true, the domains are the same (row 31). A kernel without kcmp: 0 only while
    it has no Landlock either."""
    try:
        _syscall5(SYS_KCMP, os.getpid(), pid, KCMP_VM, 0, 0)
        return 0
    except OSError as e:
        if e.errno != errno.ENOSYS:
            return e.errno or errno.EPERM
    return errno.EPERM if _ok(_syscall3, SYS_LANDLOCK_CREATE_RULESET, 0, 0, LANDLOCK_CREATE_RULESET_VERSION) else 0


def fork_blocked():
    """os.fork() with every signal blocked across it: the server's handlers (SIGTERM, SIGINT: they stop the
    server, and SIGINT's raises into whatever Python runs) must never run in the new process before it has
    dropped them. Returns (pid, the signal mask to restore): restored here in the parent; the child
    restores it itself once its handlers are its own (or never, if it only ends)."""
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
    try:
        pid = os.fork()
    except OSError:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
        raise
    if pid:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
    return pid, old
