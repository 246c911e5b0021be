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


def status_all():
    out = []
    for key, path in servers():
        try:
            out.append(json.loads(_ask(path, wire.STATUS)))
        except (OSError, ValueError) as e:
            out.append({"key": key, "error": str(e)})
    return out


def stop_all(wait=10.0):
    """Ask every server to stop; wait until each has ended (its in-flight calls finish first)."""
    stopped = []
    for key, path in servers():
        try:
            st = json.loads(_ask(path, wire.STATUS))
            _ask(path, wire.STOP)
            stopped.append((key, st.get("pid")))
        except (OSError, ValueError):
            continue
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
