"""``skb warm status`` and ``skb warm stop`` as a client of the servers: their sockets in WARM_DIR."""
import json
import os
import socket
import struct
import time

from skb.plugin.warm import wire

WARM_DIR = "/run/skb-cni/warm"


def _ask(path, what, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    try:
        s.connect(path)
        _, uid, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != 0:
            raise PermissionError(f"{path}: server is not root (uid {uid})")
        s.send(what)
        return s.recv(1 << 16)
    finally:
        s.close()


def servers():
    """(key, socket path) of every server socket in the warm dir."""
    try:
        names = sorted(os.listdir(WARM_DIR))
    except FileNotFoundError:
        return []
    return [(n[:-5], os.path.join(WARM_DIR, n)) for n in names if n.endswith(".sock")]


def _each(fn):
    """fn(key, path) for every server at once (threads: a stopped or blocked server costs the command its
    timeout once, not once per server), in the sockets' order."""
    import threading  # (the command's, never a plugin's call path)
    found = servers()
    out = [None] * len(found)

    def one(i, key, path):
        out[i] = fn(key, path)
    threads = [threading.Thread(target=one, args=(i, *kp), daemon=True) for i, kp in enumerate(found)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _status(key, path):
    try:
        return json.loads(_ask(path, wire.STATUS))
    except (OSError, ValueError) as e:
        return {"key": key, "error": str(e)}


def status_all():
    return _each(_status)


def _stop(key, path):
    """(key, pid) of a server that was asked to stop; pid None when it did not say its pid (stopped,
    blocked: it is asked all the same, and stops once it runs again); None when there is none there."""
    try:
        pid = json.loads(_ask(path, wire.STATUS)).get("pid")
    except (OSError, ValueError):
        pid = None
    try:
        _ask(path, wire.STOP, timeout=0.5)
    except socket.timeout:
        pass  # (queued: it answers once it runs)
    except OSError:
        return None
    return key, pid


def stop_all(wait=10.0):
    """Ask every server to stop; wait until each has ended (its in-flight calls finish first), up to
    ``wait`` in all."""
    stopped = [s for s in _each(_stop) if s]
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
