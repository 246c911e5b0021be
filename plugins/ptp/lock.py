"""One ADD or DEL of an attachment at a time (docs/PTP.md#one-call-per-attachment-at-a-time).

A runtime should never send two ADDs, or an ADD and a DEL, of one attachment at once, but one that retries
after a timeout while its first call still runs does. The checks ADD makes before IPAM (no interface of
that name in the netns, no host veth of the attachment) do not hold against a call running beside them:
both ADDs pass them, our host-local answers the second with the address it reserved for the first, and
whichever loses the race for the veth undoes its IPAM ADD, which releases the address of the pod the other
one made. So ADD and DEL run under the attachment's lock, an ADD's undo included: one byte of
``/run/skb-cni/ptp.lock`` at an offset derived from the attachment's hash, a POSIX record lock (the kernel
drops it when the process ends, however it ends; one file serves every attachment, with nothing to clean
up). The lock is taken for the call and released when it ends, so a process that runs several calls (a
test, a tool) never keeps one.

A lock anyone else could take is no lock: the dir and the file must be root's and closed to writes by
group and others (as the warm-start launcher requires of the same dir), else the call goes on unlocked,
as the reference's ptp always does, with a line on stderr; so it does where the file cannot be had at all
(a read-only ``/run``). The wait is bounded (LOCK_WAIT, then code 11, try again later), and a call whose
attachment is locked by one of its own ancestors (ptp reached again through a wrapper that ptp runs as its
IPAM plugin) is refused at once (code 7) instead of waiting for itself.
"""
import contextlib
import fcntl
import os
import stat
import struct
import sys
import time

from skb.cni.errors import CNIError, INVALID_CONFIG, TRY_AGAIN
from skb.linux import guard

RUN_DIR = "/run/skb-cni"
LOCK_FILE = "ptp.lock"
LOCK_WAIT = 30.0    # seconds a call waits for another call of its attachment to end
_POLL = 0.005       # seconds between two tries while it waits
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FLOCK = struct.Struct("hhqqi4x")   # struct flock on x86-64: l_type, l_whence, l_start, l_len, l_pid
_ANCESTORS = 64     # parents walked up from this call's process, looking for the holder


def _root_only(st):
    return st.st_uid == 0 and not st.st_mode & 0o022


def _open():
    """The lock file's fd, or (None, why) when it cannot be had or is not root's alone."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            d = os.open(RUN_DIR, flags)
        except FileNotFoundError:
            try:
                os.mkdir(RUN_DIR, 0o755)
            except FileExistsError:
                pass
            d = os.open(RUN_DIR, flags)
        try:
            if not _root_only(os.fstat(d)):
                return None, f"{RUN_DIR} is not a root-owned dir closed to writes by group and others"
            fd = os.open(LOCK_FILE, _FLAGS, 0o600, dir_fd=d)
        finally:
            os.close(d)
    except OSError as e:
        return None, f"{RUN_DIR}/{LOCK_FILE} cannot be had: {os.strerror(e.errno)}"
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not _root_only(st):
        os.close(fd)
        return None, f"{RUN_DIR}/{LOCK_FILE} is not a root-owned file closed to writes by group and others"
    return fd, ""


def _holder(fd, offset):
    """The pid holding the byte (0: none, or one in a pid namespace this one cannot see)."""
    got = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0))
    kind, _whence, _start, _len, pid = _FLOCK.unpack(got)
    return pid if kind != fcntl.F_UNLCK else 0


def _is_ancestor(pid):
    """Whether pid is a parent, grandparent... of the process the caller knows as this plugin (a warm
    call's launcher: guard.own_pid)."""
    me = int(guard.own_pid())
    for _ in range(_ANCESTORS):
        try:
            with open(f"/proc/{me}/stat", "rb") as f:
                me = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if me == pid:
            return True
        if me <= 1:
            return False
    return False


@contextlib.contextmanager
def attachment_locked(digest, what, undo=None):
    """Run the block under the lock of the attachment whose hash (hex) is ``digest``; ``what`` names it for
    messages. An exception in the block unwinds ``undo`` (the ADD's stack) before the lock goes."""
    fd = _locked(int(digest[:15], 16), what)
    try:
        try:
            yield
        except BaseException as e:
            if undo is not None:
                undo.unwind(e)
            raise
    finally:
        if fd is not None:
            os.close(fd)        # (drops the lock)


def _locked(offset, what):
    """The lock file's fd, holding the byte at ``offset`` of the file that is still at the lock's name (one
    unlinked or replaced meanwhile locks nothing: a call that opened the new one would not wait for us);
    None when the call goes on unlocked (said on stderr)."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        fd, why = _open()
        if fd is None:
            sys.stderr.write(f"skb-cni ptp: {why}: {what} runs without the attachment lock\n")
            return None
        try:
            _wait(fd, offset, what, deadline)
            if _still_there(fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _still_there(fd):
    try:
        a, b = os.fstat(fd), os.stat(f"{RUN_DIR}/{LOCK_FILE}", follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _wait(fd, offset, what, deadline):
    checked = False
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            return
        except (BlockingIOError, PermissionError):
            pass
        late = time.monotonic() >= deadline
        pid = _holder(fd, offset) if not checked or late else 0
        if pid and not checked:
            checked = True
            if _is_ancestor(pid):
                raise CNIError(INVALID_CONFIG, f"{what} is already running in process {pid}, an ancestor of "
                                               "this call",
                               "ptp was reached again from within its own call for the same attachment (its "
                               "IPAM plugin runs ptp, through a wrapper?); give ipam.type an IPAM plugin")
        if late:
            raise CNIError(TRY_AGAIN, f"{what} waited {LOCK_WAIT:.0f} s for another call of the same attachment"
                                      + (f" (process {pid})" if pid else "") + " to end",
                           "an ADD or DEL of this network, container ID and interface is still running; try "
                           "again once it has ended")
        time.sleep(_POLL)
