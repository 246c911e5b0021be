"""A spare's life before its call: accept a call itself, preparing meanwhile.

A spare waits on the server's listening socket (EPOLLEXCLUSIVE: the kernel wakes one waiter per
connection) and on its channel to the server (which closes it when it stops); between two looks at them,
while nothing is there, it prepares itself, a step at a time (preparation). It accepts a launcher's
connection, reads and admits the request as the server would, answers ACCEPTED and tells the server it
has a call (CHAN_TAKEN, with the connection, its accept time and the request: the server reports the
child's end if it is killed, and forks the next spare); then adopt.Child takes the call on. The server's
own Python work is thus not on a call's path. A status or stop request goes to the server (CHAN_FORWARD),
as does a connection whose request is late (Early: a spare never waits on one connection, so silent
clients never hold it); a refused request is counted by the server (CHAN_COUNT); the spare, which has
taken nothing on, goes back to waiting. A child forked for one call the server accepted itself (no spare
was ready) only waits for that call on its channel (serve without a listening socket).
"""
import fcntl
import mmap
import os
import select
import socket
import struct
import time

from skb.plugin.warm import adopt, admission, pages, syscalls, wire

# Where a spare receives a request: anonymous memory, made by the server, untouched (not resident) until a
# spare writes a request into it, and then only the pages the request covers. Private: each spare writes
# its own copy (mmap's default for anonymous memory is MAP_SHARED, and then two spares receiving at once
# would tear each other's requests).
_REQUEST = mmap.mmap(-1, wire.MAX_REQUEST, flags=mmap.MAP_PRIVATE)
PREPARE_NICE = 19      # a spare prepares itself at this priority
LATE_REQUEST_MS = 2     # a launcher sends its request right after connecting: a request later than this is
                        # the server's to wait for (its deadlines), never a spare's


def priority_comes_back():
    """Whether a child of this process, once at PREPARE_NICE, may set its priority back. Not without
    CAP_SYS_NICE in the first user namespace (a rootless runtime's namespace, a bounding set without it),
    unless RLIMIT_NICE allows it: then spares never lower their priority, for a spare left at 19 would
    refuse every call (`nice`). The kernel's own answer, asked once of a child the server forks."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        pid, _ = syscalls.fork_blocked()  # (the child only ends: it never takes a signal on)
    except OSError:
        return False
    if pid == 0:
        code = 1
        try:
            os.setpriority(os.PRIO_PROCESS, 0, PREPARE_NICE)
            os.setpriority(os.PRIO_PROCESS, 0, own)
            code = 0
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1] == 0


def preparation(child):
    """The spare's preparation, one step per ``next``: rehearse the last call's values, grow the fd
    table, then fault in the learnt pages a few at a time. A call that comes meanwhile is taken at once,
    prepared or not: preparation only ever uses time no call is waiting for."""
    while child.failpoint == "never-prepared":  # (tests: a spare whose preparation never ends)
        time.sleep(0.01)
        yield
    child.rehearse()
    yield
    # the fd table grown now to hold the call's own fds above INTERNAL_FDS (the kernel never shrinks it)
    os.close(fcntl.fcntl(child.chan.fileno(), fcntl.F_DUPFD_CLOEXEC, adopt.INTERNAL_FDS + 64))
    if not child.learns:
        yield from pages.prefault(child.hot_runs)


def serve(child, server, listen_fd):
    """Until a call is taken (then never returns) or the server is done with us (returns). Without a
    ``listen_fd``: a child forked for one call the server hands it."""
    if listen_fd is None:
        got = child.wait()
        if got:
            child.take(*got, announce=True)
        return
    ep = select.epoll()
    ep.register(child.chan, select.EPOLLIN)
    ep.register(listen_fd, select.EPOLLIN | select.EPOLLEXCLUSIVE)
    if child.nice is not None:  # made at PREPARE_NICE (children.py): it waits for calls at the server's
        try:
            os.setpriority(os.PRIO_PROCESS, 0, child.nice)
        except OSError:
            pass  # (no right to raise it again: a call's adoption sets, and verifies, its caller's)
    _say(child, adopt.CHAN_READY)
    steps = preparation(child)
    early = Early(child, ep)
    while True:
        try:
            events = ep.poll(early.timeout(0 if steps else -1))
        except InterruptedError:
            continue
        early.pass_late()
        if not events and steps:
            if not _step(steps, child.nice is not None):
                steps = None
                _say(child, adopt.CHAN_PREPARED)
            continue
        for fd, ev in events:
            if fd == child.chan.fileno():  # (the server has nothing for a pool spare but its end)
                return
            if fd == listen_fd:
                if ev & (select.EPOLLHUP | select.EPOLLERR):  # the server shut its socket down: it is stopping
                    return
                took = accept(child, server, listen_fd, early)
            else:
                took = early.arrived(fd, server)
            if took:
                ep.close()
                child.take(*took)
                return


class Early:
    """Connections this spare accepted before their request came. It waits for each at most
    LATE_REQUEST_MS while it goes on accepting (a silent client never holds a spare, nor keeps it from the
    next connection: many silent ones cost each a few system calls), then passes it to the server, which
    waits the rest of the request's time; at most MAX_EARLY at a time (the oldest is passed on early)."""
    MAX_EARLY = 16

    def __init__(self, child, ep):
        self.child, self.ep, self.conns = child, ep, {}  # fd -> (socket, Peer, accepted)

    def timeout(self, otherwise):
        """epoll's timeout in seconds: until the first deadline, if sooner than ``otherwise``."""
        if not self.conns:
            return otherwise
        due = max(0.0, min(a for _, _, a in self.conns.values()) + LATE_REQUEST_MS / 1000 - time.monotonic())
        return due if otherwise < 0 else min(due, otherwise)

    def add(self, conn, peer, accepted):
        if len(self.conns) >= self.MAX_EARLY:
            self._pass(min(self.conns, key=lambda f: self.conns[f][2]))
        self.conns[conn.fileno()] = (conn, peer, accepted)
        self.ep.register(conn.fileno(), select.EPOLLIN)

    def arrived(self, fd, server):
        """Its request came (or the client left): act on it as on one there when it was accepted."""
        if fd not in self.conns:
            return None
        conn, peer, accepted = self._drop(fd)
        return _request(self.child, server, conn, peer, accepted, self, wait=False)

    def pass_late(self):
        now = time.monotonic()
        for fd in [f for f, (_, _, a) in self.conns.items() if now - a >= LATE_REQUEST_MS / 1000]:
            self._pass(fd)

    def pass_all(self):
        for fd in list(self.conns):
            self._pass(fd)

    def _drop(self, fd):
        try:
            self.ep.unregister(fd)
        except (OSError, ValueError):
            pass
        return self.conns.pop(fd)

    def _pass(self, fd):
        conn, _, accepted = self._drop(fd)
        _forward(self.child, conn, accepted)


def _step(steps, lower):
    """One step of preparation, at nice 19 when it may ``lower`` its priority (and set it back): it only
    takes CPU time no call wants (a call's child and its launcher run at their caller's priority). The
    spare waits for calls at its own priority again (or at the one the step adopted: rehearsing the last
    call's values may set it). False after the last step."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if lower:
        os.setpriority(os.PRIO_PROCESS, 0, PREPARE_NICE)
    try:
        next(steps)
        return True
    except StopIteration:
        return False
    finally:
        if lower and os.getpriority(os.PRIO_PROCESS, 0) == PREPARE_NICE:
            try:
                os.setpriority(os.PRIO_PROCESS, 0, own)
            except OSError:
                pass  # (no right to raise it again: a call's adoption sets, and verifies, its caller's)


def accept(child, server, listen_fd, early):
    """Accept one connection and act on its request, or wait for it (``early``, without blocking).
    (Request, connection fd) of an admitted call, else None (nothing to accept, a request for the server, a
    refusal, a request still to come): the spare goes on waiting."""
    try:
        conn_fd = _accept4(listen_fd)
    except BlockingIOError:
        return None   # another waiter had it
    except OSError as e:
        _say(child, adopt.CHAN_COUNT + f"accept: {e}".encode("ascii", "replace"))
        return None
    accepted = time.monotonic()  # (CLOCK_MONOTONIC: the server's clock too)
    conn = socket.socket(fileno=conn_fd)
    try:
        peer = admission.Peer(conn)
    except OSError:
        conn.close()
        return None
    return _request(child, server, conn, peer, accepted, early)


def _forward(child, conn, accepted):
    """A connection whose request is late goes to the server, which waits for it with its deadlines."""
    try:
        wire.send_with_fds(child.chan, adopt.CHAN_FORWARD + b"?" + struct.pack("<d", accepted), [conn.fileno()],
                           socket.MSG_DONTWAIT)
    except OSError:
        pass
    conn.close()


def _request(child, server, conn, peer, accepted, early, wait=True):
    """Read a connection's request, without waiting: one not there yet waits in ``early`` (or, when it
    has waited there, goes to the server)."""
    try:
        data, fds, truncated = wire.recv_with_fds(conn, wire.MAX_REQUEST, wire.MAX_FDS, socket.MSG_DONTWAIT,
                                                  into=_REQUEST)
    except BlockingIOError:
        if wait:
            early.add(conn, peer, accepted)
        else:  # (woken, yet nothing: the server waits for it)
            _forward(child, conn, accepted)
        return None
    except OSError:
        conn.close()
        return None
    if not data:
        _close(fds)
        conn.close()
        return None
    if data[:1] in (wire.STATUS, wire.STOP) and not fds:
        if peer.uid != 0:
            return _refuse(child, conn, "uid", fds)
        try:  # the server answers it
            wire.send_with_fds(child.chan, adopt.CHAN_FORWARD + data[:1], [conn.fileno()], socket.MSG_DONTWAIT)
        except OSError:
            pass
        conn.close()
        return None
    if data[:1] != wire.CALL:
        return _refuse(child, conn, "message", fds)
    reason, req = admission.admit(server, conn, peer, data, fds, truncated, in_spare=True)
    if reason:
        return _refuse(child, conn, reason, fds)
    # Ours: the launcher learns it first (its GO travels while we take the call on), then the server (it
    # reports this call's end if we are killed, and forks the next spare). Connections still waiting for
    # their request go to the server first: once it has our TAKEN, it reads our channel no more.
    early.pass_all()
    try:
        admission.pass_rights(conn, True)  # (GO brings the caller's fds: adopt._go)
        conn.send(wire.ACCEPTED, socket.MSG_DONTWAIT)  # (first: the launcher's GO travels meanwhile)
        wire.send_with_fds(child.chan, adopt.CHAN_TAKEN + struct.pack("<Id", peer.pid, accepted) + data,
                           [conn.fileno()], socket.MSG_DONTWAIT)
    except OSError:  # (not a spare any more: what the client may have queued since is dropped as we exit)
        os._exit(adopt.CHILD_REFUSED)
    req.peer_pid = peer.pid  # (its fds come with GO: adopt._go)
    return req, conn.detach()


def _accept4(listen_fd):
    """accept4(2) on a raw fd (the listening socket is the server's: no socket object of ours owns it)."""
    sock = socket.socket(fileno=listen_fd)
    try:
        conn, _ = sock._accept()
        return conn
    finally:
        sock.detach()


def _refuse(child, conn, reason, fds):
    _close(fds)
    try:
        conn.send(wire.REFUSED + reason.encode(), socket.MSG_DONTWAIT)
    except OSError:
        pass
    conn.close()
    _say(child, adopt.CHAN_COUNT + reason.encode())
    return None


def _say(child, msg):
    try:
        child.chan.send(msg, socket.MSG_DONTWAIT)
    except OSError:
        pass


def _close(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass

