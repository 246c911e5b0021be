"""One ADD or DEL of an attachment at a time (docs/PTP.md#one-call-per-attachment-at-a-time).

A runtime should never send two ADDs, or an ADD and a DEL, of one attachment at once, but one that retries
after a timeout while its first call still runs does. The checks ADD makes before IPAM (no interface of
that name in the netns, no host veth of the attachment) do not hold against a call running beside them:
both ADDs pass them, our host-local answers the second with the address it reserved for the first, and
whichever loses the race for the veth undoes its IPAM ADD, which releases the address of the pod the other
one made. So ADD and DEL first lock the attachment: one byte of ``/run/skb-cni/ptp.lock``, at an offset
derived from the attachment's hash. It is a POSIX record lock: the kernel drops it when the process ends,
however it ends (an undo that runs after the verb returned is still under it), and one file serves every
attachment, so nothing is left to clean up. Where the file cannot be had (a read-only ``/run``, a link or
something other than a file at its name) the call goes on unlocked, as the reference's ptp always does.
"""
import fcntl
import os
import stat

RUN_DIR = "/run/skb-cni"
LOCK_FILE = "ptp.lock"
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_held = []          # the lock file's fd, kept open until the process ends (closing it drops every lock)


def _open_dir():
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(RUN_DIR, flags)
    except FileNotFoundError:
        try:
            os.mkdir(RUN_DIR, 0o755)
        except FileExistsError:
            pass
        return os.open(RUN_DIR, flags)


def _lock_fd():
    if _held:
        return _held[0]
    d = _open_dir()
    try:
        fd = os.open(LOCK_FILE, _FLAGS, 0o600, dir_fd=d)
    finally:
        os.close(d)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    _held.append(fd)
    return fd


def lock_attachment(digest):
    """Wait for, then hold until the process ends, the lock of the attachment whose hash (hex) is
    ``digest``. True if locked; False if the lock file could not be had (the call goes on unlocked)."""
    try:
        fd = _lock_fd()
        if fd is None:
            return False
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, int(digest[:15], 16))
        return True
    except OSError:
        return False
