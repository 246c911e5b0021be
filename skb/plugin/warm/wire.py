"""The warm-start wire protocol, as build/warm_client.c speaks it (docs/WARM.md, "Handshake").

One SOCK_SEQPACKET connection per call, one message per packet. A call request is the kind byte
followed by records (tag byte, u32 little-endian length, bytes) and carries no fd; its last record is the
proof (the secret in the server's file at PROOF_FD, read by the launcher through /proc/<pid>/fd;
admission.py checks it). The caller's own fds come with GO (SCM_RIGHTS), once a child has the call
(ACCEPTED): first FIXED_FDS (cwd, root, the namespaces), then the caller's inherited fds, whose numbers are
in the FDS record. A request that nobody accepts, left queued on the socket after its launcher gave up, so
holds nothing of the caller's; and the server's socket takes no fd but GO's (admission.pass_rights).
"""
import socket
import struct

# launcher -> server
CALL = b"W"           # a plugin call: records, no fd
STATUS = b"S"         # status request (JSON answer)
STOP = b"Q"           # stop request (answer b"ok")
# launcher -> child
GO = b"G"             # + the caller's fds: the launcher is committed, the child may begin
# server -> launcher
ACCEPTED = b"A"       # a child has the call (it may still refuse it, until it begins)
REFUSED = b"R"        # + reason: go by exec (never after BEGAN)
EXITED = b"X"         # + i32 wait status of the child (from the child itself, or from the server)
# child -> launcher
BEGAN = b"B"          # + u32 pid of the child: the call has begun (from now on it never goes by exec)

# records of a CALL
REC_SNAPSHOT = 0x43   # "C": the snapshot text (snapshot.py): its key part, then its adopted part
REC_APPLET = 0x50     # "P": the applet name (launcher's basename)
REC_ARG = 0x41        # "A": one argument after argv[0], repeated
REC_ENV = 0x45        # "E": one environment entry, repeated, in order
REC_FDS = 0x44        # "D": u32 fd numbers of the inherited fds, in the order they are passed
REC_PROOF = 0x4b      # "K": the secret of the server's proof file (admission.py)

# the fds GO brings first, in this order (then the inherited ones)
NS = ("net", "mnt", "pid", "pid_for_children", "user", "uts", "ipc", "cgroup", "time", "time_for_children")
FIXED_FDS = ("cwd", "root") + tuple("ns " + n for n in NS)
MAX_FDS = 253         # the kernel's SCM_MAX_FD: the launcher passes at most this many in all
MAX_REQUEST = 160 << 10  # bytes (build/warm_client.c MAX_REQUEST). A request travels again, whole, from the
                         # spare or the server to the call's child, on a channel whose buffer (the kernel's
                         # default, about 208 KiB) must still have room for the child's reply: a request
                         # of 195-208 KiB was once accepted and then dropped (a larger one never arrives)


class Request:
    """A parsed CALL, with what came with it."""
    __slots__ = ("snapshot", "applet", "args", "env", "fd_numbers", "proof", "fds", "peer_pid", "raw")

    def __init__(self, snapshot, applet, args, env, fd_numbers, proof, raw):
        self.snapshot, self.applet, self.args, self.env = snapshot, applet, args, env
        self.fd_numbers, self.proof, self.raw = fd_numbers, proof, raw
        self.fds = ()         # the fds GO brought: FIXED_FDS, then one per fd_numbers
        self.peer_pid = 0     # the launcher's pid, from SO_PEERCRED

    @property
    def fixed(self):
        return dict(zip(FIXED_FDS, self.fds[:len(FIXED_FDS)]))

    @property
    def inherited(self):
        """(target fd number, received fd) of the caller's inherited fds."""
        return list(zip(self.fd_numbers, self.fds[len(FIXED_FDS):]))


def parse(data):
    """A Request of a CALL message; ValueError when malformed."""
    if data[:1] != CALL:
        raise ValueError("not a call")
    recs = {REC_SNAPSHOT: [], REC_APPLET: [], REC_ARG: [], REC_ENV: [], REC_FDS: [], REC_PROOF: []}
    i, n = 1, len(data)
    while i < n:
        if i + 5 > n:
            raise ValueError("truncated record header")
        tag, size = data[i], struct.unpack_from("<I", data, i + 1)[0]
        i += 5
        if i + size > n:
            raise ValueError("truncated record")
        if tag not in recs:
            raise ValueError(f"unknown record {tag:#x}")
        recs[tag].append(data[i:i + size])
        i += size
    for tag in (REC_SNAPSHOT, REC_APPLET, REC_FDS, REC_PROOF):
        if len(recs[tag]) != 1:
            raise ValueError(f"record {chr(tag)} missing or repeated")
    fds = recs[REC_FDS][0]
    if len(fds) % 4:
        raise ValueError("bad fd list")
    numbers = struct.unpack(f"<{len(fds) // 4}I", fds)
    if len(set(numbers)) != len(numbers) or len(numbers) + len(FIXED_FDS) > MAX_FDS:
        raise ValueError("bad fd list")
    return Request(recs[REC_SNAPSHOT][0], recs[REC_APPLET][0].decode("utf-8", "surrogateescape"),
                   recs[REC_ARG], recs[REC_ENV], numbers, recs[REC_PROOF][0], data)


def record(tag, data):
    return bytes([tag]) + struct.pack("<I", len(data)) + data


def recv_with_fds(sock, size, maxfds, flags=0, into=None):
    """(data, fds, truncated) of one message, received with MSG_CMSG_CLOEXEC and ``flags`` (socket.recv_fds
    would drop both: it calls recvmsg without flags). Raises BlockingIOError as recvmsg does. ``into``: a
    buffer of at least ``size`` to receive into (no buffer of that size made per message)."""
    if into is None:
        data, anc, mflags, _ = sock.recvmsg(size, socket.CMSG_SPACE(maxfds * 4), flags | socket.MSG_CMSG_CLOEXEC)
    else:
        n, anc, mflags, _ = sock.recvmsg_into([memoryview(into)[:size]], socket.CMSG_SPACE(maxfds * 4),
                                               flags | socket.MSG_CMSG_CLOEXEC)
        data = bytes(into[:n])
    fds = []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(payload) // 4}i", payload[:len(payload) - len(payload) % 4])
    return data, fds, bool(mflags & (socket.MSG_TRUNC | socket.MSG_CTRUNC))


def send_with_fds(sock, data, fds, flags=0):
    return sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds
                        else [], flags)


def exited(status):
    return EXITED + struct.pack("<i", status)
