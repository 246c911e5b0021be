"""What the server checks of a call before handing it to a child: only what the kernel attests or what
the server alone knows (its load, whether it is stopping, its applets, its bundle). Everything about the
caller's process is the child's to prove (adopt.py: the snapshot), per call; what the snapshot says of
the caller's privilege, the kernel confirms here (attest)."""
import errno
import os
import select
import socket
import struct
from _operator import _compare_digest  # (hmac.compare_digest, without hashlib)

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


# The lines of the snapshot's key part that say what privilege a process has. The child proves that it
# has the snapshot's context; attest() proves that the snapshot is the connecting process's own, so that no
# root process can have a call run with more privilege than it has (fewer capabilities, a seccomp filter,
# other groups, another cgroup) by sending a snapshot that is not its own.
ATTESTED = (b"Uid:", b"Gid:", b"Groups:", b"CapInh:", b"CapPrm:", b"CapEff:", b"CapBnd:", b"CapAmb:", b"NoNewPrivs:",
            b"Seccomp:", b"Seccomp_filters:")
PROOF_FD = 255      # where the server holds its proof file (build/launcher.h PROOF_FD)
PROOF_LEN = 32      # bytes of the secret in it (build/launcher.h PROOF_LEN)
PROOF_NAME = "skb-warm-proof-"  # its name, before the server's key: a launcher checks it (launcher.h PROOF_NAME)
SO_PASSRIGHTS = 83  # Linux 6.16: whether a socket may be sent fds (SCM_RIGHTS) at all
SO_PEERPIDFD = 77   # Linux 6.5: a pidfd of the process that connected (its pid cannot be another's meanwhile)


def make_proof(key):
    """The server's proof file, a memfd of its own at PROOF_FD holding a random secret: the secret, or None
    when the fd is taken. A launcher reads it through /proc/<server pid>/fd, which needs leave to read the
    server's process (row 31), and sends it with its request. The file is named after the server's ``key``:
    a launcher whose socket's name leads to another context's server (a hard link) goes by exec, and starts
    its own."""
    try:
        os.fstat(PROOF_FD)
        return None
    except OSError:
        pass
    secret = os.urandom(PROOF_LEN)
    fd = os.memfd_create(PROOF_NAME + key, os.MFD_CLOEXEC)
    os.write(fd, secret)
    os.dup2(fd, PROOF_FD, inheritable=False)
    os.close(fd)
    return secret


def pass_rights(sock, allowed):
    """Let ``sock`` be sent fds, or not (where the kernel has SO_PASSRIGHTS: then sending one fails in the
    sender). The listening socket refuses them, and so every connection it makes: a request carries none,
    and an fd a client passed could block the process that drops its last reference (a TCP socket that
    lingers, a file on a hung FUSE mount: the kernel closes it in the receiver). A connection whose call a
    child has taken lets them in again, for GO (the caller's fds, to that child)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_PASSRIGHTS, int(allowed))
    except OSError as e:
        if e.errno not in (errno.ENOPROTOOPT, errno.EINVAL):
            raise


def attest(sock, pid, snapshot):
    """None when the connecting process's ATTESTED status lines and its cgroups, as the kernel gives them
    now, are those of the snapshot's key part, and it is in our Landlock domain (we may read it: row 31);
    else the refusal (``peer: gone``: it could not be read, or it ended meanwhile)."""
    try:
        pidfd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError as e:
        if e.errno != errno.ENOPROTOOPT:  # (EINVAL: the process has ended and been reaped)
            return "peer: gone"
        try:  # (a kernel older than 6.5: the pid SO_PEERCRED gave, which a process that ended leaves free)
            pidfd = os.pidfd_open(pid)
        except OSError:
            return "peer: gone"
    try:
        status, cgroup = _read(f"/proc/{pid}/status"), _read(f"/proc/{pid}/cgroup")
        unreadable = syscalls.may_read(pid)
        poll = select.poll()
        poll.register(pidfd, select.POLLIN)
        if poll.poll(0):  # it has ended: what was read, and kcmp's answer, may be another process's
            return "peer: gone"
    except OSError:
        return "peer: gone"
    finally:
        os.close(pidfd)
    key = snapshot[:snapshot.find(b"\nadopt\n") + 1]
    lines = set(key.split(b"\n"))
    for line in status.split(b"\n"):
        if line.startswith(ATTESTED) and line not in lines:
            return "peer: " + line.partition(b":")[0].decode("ascii", "replace")
    if b"\n/proc/self/cgroup\n" + cgroup + b"sid " not in key:
        return "peer: cgroup"
    if unreadable:
        return "landlock" if unreadable == errno.EPERM else "peer: gone"
    return None


def _read(path):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def admit(server, sock, peer, data, fds, truncated, in_spare=False):
    """(refusal reason or None, Request). ``in_spare``: a spare admits the call it accepted (the server's
    load and stopping state are the server's: a spare exists only while the server has room for it)."""
    if peer.uid != 0:
        return "uid", None
    if truncated:
        return "message", None
    try:
        req = wire.parse(data)
    except ValueError:
        return "message", None
    # One Landlock domain (row 31): the sender could read us (the proof: the secret of our file at PROOF_FD,
    # which only a process that may read us can open through /proc/<pid>/fd), and we can read it
    if fds:  # (a request carries no fd: the caller's come with GO, wire.py)
        return "message", None
    if not _compare_digest(req.proof, server.proof_id):
        return "proof", None
    why = attest(sock, peer.pid, req.snapshot)
    if why:
        return why, None
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
