"""Running another program (an IPAM plugin, iptables, nft) cheaply: posix_spawn with three pipes.

``import subprocess`` costs ~11 ms (selectors, signal, threading ...), more than Go's whole host-local
call. A plugin starts at most a handful of programs, so this module does the part it needs with ``os``
and ``select`` (both C modules): spawn (glibc uses a vfork-style clone, no page-table copy), feed stdin,
collect stdout and stderr with poll() so that no pipe can fill up and deadlock, then reap.
"""
import os
import select

_SIGDEF = (13, 25)  # SIGPIPE, SIGXFSZ on Linux (the signal module costs an import for two numbers)

__all__ = ["run", "which", "SpawnError"]

_SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class SpawnError(OSError):
    """The program could not be started at all (missing, not executable, not a program)."""


def which(name, environ=None):
    """The first executable ``name`` on $PATH, then in the usual system dirs (a runtime may start plugins
    with a PATH lacking /usr/sbin, where iptables and nft live); None when there is none."""
    path = (environ if environ is not None else os.environ).get("PATH", "")
    seen = set()
    for d in path.split(":") + list(_SYSTEM_DIRS):
        if not d or d in seen:
            continue
        seen.add(d)
        candidate = f"{d}/{name}"
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _pipe():
    """A pipe whose ends are both >= 3, so that dup2() onto 0-2 in the child cannot clobber another end
    (it would happen if the caller runs with stdin or stdout closed)."""
    r, w = os.pipe()
    fds = []
    for fd in (r, w):
        if fd < 3:
            import fcntl    # only when the caller runs with a standard descriptor closed: rare
            new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = new
        fds.append(fd)
    return fds[0], fds[1]


def run(path, argv, env, stdin=b"", busy_retries=5):
    """Run ``path`` with ``argv`` and the environment ``env`` (a mapping), write ``stdin`` to it, and return
    ``(exit code, stdout bytes, stderr bytes)``. The exit code is negative for a signal. Raises SpawnError
    when the program cannot be started. "Text file busy" (the binary is being replaced) is retried once a
    second, ``busy_retries`` times, as libcni does."""
    for attempt in range(busy_retries + 1):
        try:
            return _run_once(path, argv, env, stdin)
        except SpawnError as e:
            if e.errno != 26 or attempt == busy_retries:  # 26: ETXTBSY
                raise
            import time     # only to wait out a "text file busy"
            time.sleep(1)


def _run_once(path, argv, env, stdin):
    in_r, in_w = _pipe()
    out_r, out_w = _pipe()
    err_r, err_w = _pipe()
    try:
        # Python ignores SIGPIPE (and SIGXFSZ); a child must get the defaults back, as subprocess does,
        # or an iptables writing into a closed pipe would loop on EPIPE instead of dying.
        pid = os.posix_spawn(path, argv, env, setsigdef=_SIGDEF, file_actions=[
            (os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)])
    except OSError as e:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise SpawnError(e.errno, e.strerror, path) from None
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    chunks = {out_r: [], err_r: []}
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    poller.register(err_r, select.POLLIN)
    pending = memoryview(stdin)
    if pending:
        os.set_blocking(in_w, False)
        poller.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)
        in_w = -1
    open_fds = 2 + (in_w >= 0)
    try:
        while open_fds:
            for fd, events in poller.poll():
                if fd == in_w:
                    try:
                        n = os.write(in_w, pending[:65536])
                        pending = pending[n:]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:     # the program exited without reading all of stdin
                        pending = pending[:0]
                    if not pending:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                        open_fds -= 1
                    continue
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    open_fds -= 1
    finally:
        for fd in (in_w, out_r, err_r):
            if fd >= 0:
                os.close(fd)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks[out_r]), b"".join(chunks[err_r])
