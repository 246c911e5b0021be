"""``skb warm status`` and ``skb warm stop`` as a client of the servers: their sockets in WARM_DIR."""
import json
import os
import resource
import select
import socket
import struct
import time

from skb.plugin.warm import wire

WARM_DIR = "/run/skb-cni/warm"


def servers():
    """(key, socket path) of every server socket in the warm dir."""
    try:
        names = sorted(os.listdir(WARM_DIR))
    except FileNotFoundError:
        return []
    return [(n[:-5], os.path.join(WARM_DIR, n)) for n in names if n.endswith(".sock")]


def _ask_all(found, what, timeout):
    """Send ``what`` to every socket of ``found`` at once, from this one thread (a stopped, blocked or
    silent listener costs the command one ``timeout`` in all, however many there are; no thread that a low
    limit could refuse): per socket its answer (bytes), or the OSError (socket.timeout: none in time)."""
    room = max(16, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 64)  # sockets open at a time
    out = {}
    for at in range(0, len(found), room):
        out.update(_ask_some([path for _, path in found[at:at + room]], what, timeout))
    return [out[path] for _, path in found]


def _ask_some(paths, what, timeout):
    out, waiting, poll = {}, {}, select.poll()
    try:
        for path in paths:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
            try:
                s.connect(path)  # (a full backlog: EAGAIN at once, not a wait)
                _, uid, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
                if uid != 0:
                    raise PermissionError(f"{path}: server is not root (uid {uid})")
                s.send(what)
            except OSError as e:
                s.close()
                out[path] = e
                continue
            waiting[s.fileno()] = (s, path)
            poll.register(s, select.POLLIN)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for fd, _ in poll.poll(max(0.0, deadline - time.monotonic()) * 1000):
                s, path = waiting.pop(fd)
                poll.unregister(fd)
                try:
                    out[path] = s.recv(1 << 16)
                except OSError as e:
                    out[path] = e
                s.close()
    finally:
        for s, path in waiting.values():
            out[path] = socket.timeout("timed out")
            s.close()
    return out


def _status(key, answer):
    try:
        if isinstance(answer, OSError):
            raise answer
        return json.loads(answer)
    except (OSError, ValueError) as e:
        return {"key": key, "error": str(e)}


def status_all():
    found = servers()
    return [_status(key, a) for (key, _), a in zip(found, _ask_all(found, wire.STATUS, 5.0))]


def _pid(answer):
    try:
        return json.loads(answer).get("pid") if isinstance(answer, bytes) else None
    except (ValueError, AttributeError):
        return None


def stop_all(wait=10.0):
    """Ask every server to stop; wait until each has ended (its in-flight calls finish first), up to
    ``wait`` in all."""
    found = servers()
    pids = [_pid(a) for a in _ask_all(found, wire.STATUS, 5.0)]
    # Every server is asked to stop, one that did not say its pid too (stopped, blocked: the request waits on
    # its socket, and it stops once it runs again); only one that is not there (no listener) is left out.
    stopped = [(key, pid) for (key, _), pid, a in zip(found, pids, _ask_all(found, wire.STOP, 0.5))
               if not isinstance(a, OSError) or isinstance(a, socket.timeout)]
    deadline = time.monotonic() + wait
    for key, pid in stopped:
        while pid and time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.02)
    return stopped
