"""``skb warm status`` and ``skb warm stop`` as a client of the servers: their sockets in WARM_DIR."""
import collections
import errno
import json
import os
import resource
import select
import socket
import struct
import time

from skb.plugin.warm import wire

WARM_DIR = "/run/skb-cni/warm"


class Unreadable(Exception):
    """The socket dir cannot be read (not root): its text says so, and what to do."""


def servers():
    """(key, socket path) of every server socket in the warm dir (none when there is no dir, or something
    else at its name: no launcher uses that, so no server listens there). Unreadable when it cannot be read."""
    try:
        names = sorted(os.listdir(WARM_DIR))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise Unreadable(f"cannot read the socket dir {WARM_DIR}: {e.strerror}"
                         + ("; the warm-start servers are root's: run skb warm as root" if e.errno == errno.EACCES
                            else "")) from None
    return [(n[:-5], os.path.join(WARM_DIR, n)) for n in names if n.endswith(".sock")]


def _ask_all(found, what, timeout):
    """Send ``what`` to every socket of ``found`` at once, from this one thread, within one ``timeout`` for
    all (a stopped, blocked or silent listener costs the command that timeout once, however many there
    are; no thread that a low limit could refuse): per socket (answer bytes, the listener's pid), or the
    OSError (socket.timeout: none in time). As many sockets are open at a time as the fd limit leaves
    room for; those not yet asked when the time is up are still sent ``what`` (a stop request waits on its
    socket), without waiting for an answer."""
    _more_fds()
    deadline = time.monotonic() + timeout
    out, waiting, poll = {}, {}, select.poll()
    todo = collections.deque(path for _, path in found)
    try:
        while todo or waiting:
            late, free = time.monotonic() >= deadline, _room()
            while todo and (late or not waiting or free > 0):
                path, free = todo.popleft(), free - 1
                try:
                    s, pid = _send(path, what)
                except OSError as e:
                    out[path] = e
                    continue
                if late:
                    out[path] = socket.timeout("timed out")
                    s.close()
                    continue
                waiting[s.fileno()] = (s, path, pid)
                poll.register(s, select.POLLIN)
            if not waiting:
                continue
            if late:
                break
            for fd, _ in poll.poll(max(0.0, deadline - time.monotonic()) * 1000):
                s, path, pid = waiting.pop(fd)
                poll.unregister(fd)
                try:
                    out[path] = (s.recv(1 << 16), pid)
                except OSError as e:
                    out[path] = e
                s.close()
    finally:
        for s, path, _ in waiting.values():
            out[path] = socket.timeout("timed out")
            s.close()
    return [out[path] for _, path in found]


def _send(path, what):
    """A connected socket (non-blocking: a full backlog is EAGAIN at once, not a wait) to a root listener,
    ``what`` sent on it, and the listener's pid."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
    try:
        s.connect(path)
        pid, uid, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != 0:
            raise PermissionError(f"{path}: server is not root (uid {uid})")
        s.send(what)
        return s, pid
    except BaseException:
        s.close()
        raise


def _more_fds():
    """The soft fd limit raised to the hard one (this command's own: many sockets may be asked at once)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            pass


def _room():
    """How many sockets may be open at once: the fds the limit leaves free, less a margin."""
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 64
    return max(1, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - used - 16)


def _answer(key, got):
    """A server's status: a JSON object with a pid, the listener's own (SO_PEERCRED); anything else, an
    error entry (a listener that is no server of ours, or none in time). (A root listener may still say
    what it likes of itself: servers of callers with fewer privileges, a rootless runtime's, are servers
    too, so privileges tell nothing here.) A listener in a pid namespace this command cannot see (pid 0):
    its status is shown as it says, and its "pid" is not one of ours (no wait on it)."""
    try:
        if isinstance(got, OSError):
            raise got
        data, pid = got
        if not data.startswith(b"{"):
            raise ValueError("not a warm-start server's answer")
        status = json.loads(data)
        own = status.get("pid") if isinstance(status, dict) else None
        if type(own) is not int or own <= 0 or (pid and own != pid):
            raise ValueError("not a warm-start server's answer")
        if not pid:
            status["pid"] = None
        return status
    except (OSError, ValueError, RecursionError) as e:  # (RecursionError: nesting too deep to decode)
        return {"key": key, "error": str(e) or type(e).__name__}


def status_all():
    found = servers()
    return [_answer(key, got) for (key, _), got in zip(found, _ask_all(found, wire.STATUS, 5.0))]


def stop_all(wait=10.0):
    """Ask every server to stop; wait until each has ended (its in-flight calls finish first), up to
    ``wait`` in all. (key, pid, whether it has ended: None when it cannot be told) of each server."""
    found = servers()
    said = [_answer(key, got) for (key, _), got in zip(found, _ask_all(found, wire.STATUS, 5.0))]
    # Every server is asked to stop, one that did not say its pid too (stopped, blocked: the request waits on
    # its socket, and it stops once it runs again); only one that is not there (no listener) is left out.
    asked = _ask_all(found, wire.STOP, 0.5)
    stopped = [(key, s.get("pid"), "error" not in s) for (key, _), s, a in zip(found, said, asked)
               if not isinstance(a, OSError) or isinstance(a, socket.timeout)]
    deadline = time.monotonic() + wait
    ended, seen = [], set()
    for key, pid, answered in stopped:
        if pid and pid in seen:
            continue  # (one server under two names: a link at another context's name)
        seen.add(pid)
        while pid and not _ended(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        # (None: it answered from a pid namespace we cannot see, so its end cannot be watched from here)
        ended.append((key, pid, _ended(pid) if pid else None if answered else False))
    return ended


def _ended(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
