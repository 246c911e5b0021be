"""What the server checks of a call before handing it to a child: only what the kernel attests or what
the server alone knows (its load, whether it is stopping, its applets, its bundle). Everything about the
caller's process is the child's to prove (adopt.py: the snapshot), per call."""
import errno
import os
import socket
import struct

from skb.plugin.warm import syscalls, wire


class Peer:
    """What SO_PEERCRED says of a connection (fixed at connect time, by the kernel)."""
    __slots__ = ("pid", "uid", "gid")

    def __init__(self, sock):
        self.pid, self.uid, self.gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))


def peer_label(sock):
    """The peer's LSM label (SO_PEERSEC), None without an LSM."""
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERSEC, 1024).rstrip(b"\0\n") or None
    except OSError as e:
        if e.errno in (errno.ENOPROTOOPT, errno.EOPNOTSUPP, errno.ENOTSUP):
            return None
        raise


def label_line(snapshot):
    """The label the launcher reported in its snapshot (None for "none")."""
    at = snapshot.find(b"\nlabel ")
    if at < 0:
        return b"?"
    v = snapshot[at + 7:snapshot.find(b"\n", at + 7)]
    return None if v == b"none" else v


def admit(server, sock, peer, data, fds, truncated, in_spare=False):
    """(refusal reason or None, Request). ``in_spare``: a spare admits the call it accepted (the server's
    load and stopping state are the server's: a spare exists only while the server has room for it)."""
    if peer.uid != 0:
        return "uid", None
    if not syscalls.may_read(peer.pid):  # (and the launcher may read us: one Landlock domain)
        return "landlock", None
    if truncated:
        return "message", None
    try:
        req = wire.parse(data)
    except ValueError:
        return "message", None
    if len(fds) != len(wire.FIXED_FDS) + len(req.fd_numbers):
        return "message", None
    if peer.gid != os.getgid():
        return "gid", None
    if server.stopping and not in_spare:
        return "stopping", None
    if req.applet not in server.applets:
        return "applet", None
    if len(server.children.calls) >= server.max_children and not in_spare:
        return "busy", None
    # An environment that os.environ cannot represent exactly (an entry without "=", a name given twice)
    # would reach the plugin's own children differently: such a call goes by exec.
    names = [e.partition(b"=")[0] for e in req.env]
    if any(b"=" not in e or not n for e, n in zip(req.env, names)) or len(set(names)) != len(names):
        return "environment", None
    # The label the launcher put in its snapshot is the kernel's (the child compares its own with it).
    try:
        if peer_label(sock) != label_line(req.snapshot):
            return "lsm-label", None
    except OSError:
        return "lsm-label", None
    if not server.current_bundle():
        server.stop("the bundle was replaced (upgrade)")
        return "bundle", None
    req.fds = fds
    req.peer_pid = peer.pid
    return None, req
