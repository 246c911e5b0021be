"""The server's children: a small pool of spares forked ahead of calls, and the calls in flight.

A spare is forked while no connection waits for the server, and accepts a call itself at once, preparing
itself while none comes (spare.py); the server keeps the pool full, so every call of a burst finds a spare
already forked and waiting, and most find one prepared (the server's forks never hold a call up: a waiting
spare accepts it meanwhile). A call the server accepts itself (no spare was waiting) gets a child forked
for it.

Each child has a parent of its own, its holder: the holder forks the child, then leaves the caller's
session (setsid), waits for the child and reports its pid and its end to the server. The child joins the
caller's process group; with its parent outside the caller's session, it never keeps that group from
being orphaned (kernel: a process counts only if its parent is in the same session, another group), as an
exec'd plugin, whose parent is the caller, does not either: job-control stops in an orphaned group are
discarded, and no SIGHUP and SIGCONT reach the caller's group when the child ends (docs/WARM.md).
"""
import _signal
import os
import select
import signal
import socket
import struct
import time

from skb.plugin.warm import adopt, pages, spare, syscalls, wire

POOL = 3                # spares kept forked ahead of calls
LOST_BACKOFF = 2.0      # seconds without new spares after one ended without a call


MIN_ROOM = 64 << 20     # bytes the caller's memory cgroup must have left for a server to start there


def memory_refusal(cgroup_file="/proc/self/cgroup", root="/sys/fs/cgroup", pid=None):
    """Why a server may not start in this process's memory cgroup, or None: less than MIN_ROOM left under
    the tightest memory limit of the cgroup and its ancestors, or a cgroup it cannot find (a cgroup
    namespace over a /sys/fs/cgroup mounted outside it: the limits it would read are not its own)."""
    room, where = memory_room(cgroup_file, root, os.getpid() if pid is None else pid)
    if room is not None and room < MIN_ROOM:
        return (f"its memory cgroup has {max(room, 0) >> 20} MiB left (reclaimable page cache aside), below "
                f"{MIN_ROOM >> 20} MiB" if where is None else f"its memory cgroup is not where {where} says")
    return None


def memory_room(cgroup_file, root, pid):
    """(bytes left under the tightest memory limit of this process's cgroup and its ancestors, None); the
    use is v2's memory.current or v1's usage_in_bytes less the inactive page cache, which the kernel
    reclaims before it kills (kubelet's working set). (None, None): no limit or nothing to read there.
    (0, file): the cgroup dir the process names is not one that lists it."""
    try:
        with open(cgroup_file, "rb") as f:
            lines = f.read().decode("ascii", "replace").splitlines()
    except OSError:
        return None, None
    dirs = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "" and os.path.exists(os.path.join(root, "cgroup.controllers")):
            dirs.append((os.path.join(root, path.lstrip("/")), "memory.max", "memory.current", "inactive_file"))
        elif "memory" in controllers.split(","):
            dirs.append((os.path.join(root, "memory", path.lstrip("/")), "memory.limit_in_bytes",
                         "memory.usage_in_bytes", "total_inactive_file"))
    room = None
    for d, limit, usage, cache in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs"), "rb") as f:
                if str(pid).encode() not in f.read().split():
                    return 0, cgroup_file
        except OSError:
            return 0, cgroup_file
        while d.startswith(root):
            try:
                with open(os.path.join(d, limit), "rb") as f:
                    cap = f.read().strip()
                with open(os.path.join(d, usage), "rb") as f:
                    used = int(f.read())
                if cap.isdigit() and int(cap) < 1 << 60:   # ("max", or v1's huge "unlimited")
                    used -= _stat_field(os.path.join(d, "memory.stat"), cache)
                    room = min(room if room is not None else 1 << 62, int(cap) - used)
            except (OSError, ValueError):
                pass
            d = os.path.dirname(d)
    return room, None


def _stat_field(path, name):
    try:
        with open(path, "rb") as f:
            for line in f.read().splitlines():
                key, _, value = line.partition(b" ")
                if key == name.encode():
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


class Ended:
    """A child's end, as its holder saw it (wait4)."""
    __slots__ = ("status", "ru_maxrss", "ru_minflt")
    FORMAT = struct.Struct("<iqq")

    def __init__(self, status, maxrss=0, minflt=0):
        self.status, self.ru_maxrss, self.ru_minflt = status, maxrss, minflt


class Spare:
    __slots__ = ("pid", "child", "holder", "pidfd", "report", "chan", "learns", "made", "ready", "prepared")

    def __init__(self, pid, child, holder, pidfd, report, chan, learns):
        self.pid, self.holder, self.pidfd, self.report, self.chan = pid, holder, pidfd, report, chan
        self.child = child      # a pidfd of the child (not ours to reap: its holder's), for signals; pid and
                                # child are None until its holder has reported it (child_pid)
        self.learns = learns
        self.made = time.monotonic()
        self.ready = False      # it said it waits for calls (it accepts them itself)
        self.prepared = False   # it said it has prepared itself


class Call:
    """A call handed to a child, until the child's holder is reaped."""
    __slots__ = ("pid", "child", "holder", "pidfd", "report", "conn", "chan", "launcher", "accepted", "handoff_ms",
                 "stopped", "learns", "got", "killed")

    def __init__(self, one, conn, launcher, accepted):
        self.pid, self.holder, self.pidfd, self.report = one.pid, one.holder, one.pidfd, one.report
        self.child = one.child
        self.chan, self.learns = one.chan, one.learns
        self.conn, self.launcher, self.accepted = conn, launcher, accepted
        self.handoff_ms = (time.monotonic() - accepted) * 1000
        self.stopped = False    # the server stopped the child because its launcher was stopped
        self.got = self.killed = False  # the child said it has GO; the server killed it (its launcher left)


def _holder(child_main, report):
    """In the holder, a fork of the server: fork the child, leave the session, report, wait, report.

    The child starts only once its holder has left the session (a pipe says so): a child that joined the
    caller's process group while its parent was still in the session, in another group, kept that group
    from being orphaned, and its end then had the kernel hang up the whole group when it had a stopped
    member (the runtime too, review 15; WARM.md row 10). A pool spare's holder runs at nice 19, so that
    moment could be long."""
    me = os.getpid()
    left_r, left_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(left_w)
        left = os.read(left_r, 1)
        os.close(left_r)
        if not left:          # the holder ended without leaving the session: never take a call
            os._exit(1)
        child_main(me)  # never returns
    os.close(left_r)
    os.setsid()   # (after the fork: the child stays in the caller's session, its parent does not)
    os.write(left_w, b"L")
    os.close(left_w)
    adopt.close_all_but([report])
    os.write(report, struct.pack("<I", pid))
    while True:
        try:
            _, status, ru = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    os.write(report, Ended.FORMAT.pack(status, ru.ru_maxrss, ru.ru_minflt))


class Children:
    """The pool of spares and the calls in flight, with their pidfds watched by the server's epoll."""

    def __init__(self, server):
        self.server = server
        self.spares = []        # oldest first: the oldest has had the most time to prepare
        self.calls = {}         # pidfd -> Call
        self.made = 0           # pool spares forked
        self.dedicated = 0      # children forked for a call the server accepted
        self.lost = 0
        self.learnt = pages.Learnt()
        self.rehearsal = None   # the last admitted request: what the next spares rehearse with
        self.quiet_until = 0.0  # no spare is forked before this (monotonic): one was just lost
        self.lowers = False     # pool spares may go to PREPARE_NICE and back (the server's setup asks the kernel)

    def owns(self, fd):
        return fd in self.calls or any(s.pidfd == fd for s in self.spares)

    def ready_spares(self):
        return any(s.ready for s in self.spares)

    def spare_said(self, fd):
        """A spare's channel is readable before its call: READY, PREPARED, a request it passes on (FORWARD), a
        refusal to count (COUNT), or a call it accepted itself (TAKEN: it becomes a call in flight). False
        when ``fd`` is no spare's channel."""
        one = next((s for s in self.spares if s.chan.fileno() == fd), None)
        if one is None:
            return False
        for _ in range(16):  # (what is there now; the rest on the next wake-up)
            try:
                msg, fds, _ = wire.recv_with_fds(one.chan, wire.MAX_REQUEST + 16, 1, socket.MSG_DONTWAIT)
            except OSError:
                return True
            if not msg:  # it ended: its pidfd says so too
                self.server.unwatch(fd)
                return True
            kind = msg[:1]
            if kind == adopt.CHAN_READY:
                one.ready = True
            elif kind == adopt.CHAN_PREPARED:
                one.prepared = True
            elif kind == adopt.CHAN_COUNT:
                self.server.count(msg[1:].decode("ascii", "replace"))
            elif kind == adopt.CHAN_FORWARD and fds:  # a control request, or a call whose request is late
                accepted = struct.unpack_from("<d", msg, 2)[0] if len(msg) == 10 else time.monotonic()
                self.server.forwarded(socket.socket(fileno=fds.pop()), msg[1:2], accepted)
            elif kind == adopt.CHAN_TAKEN and fds and len(msg) > 13:
                self.spares.remove(one)
                self.server.unwatch(fd)  # (from now on its channel is read when it is reaped)
                launcher, accepted = struct.unpack_from("<Id", msg, 1)
                call = Call(one, socket.socket(fileno=fds.pop()), launcher, accepted)
                self.rehearsal = msg[13:]  # what the next spares rehearse with (parsed by them)
                self.calls[one.pidfd] = call
                self.server.took(call)
                return True
            for extra in fds:
                os.close(extra)
        return True

    # ------------------------------------------------------------------ making spares
    def fill(self):
        """Fork one spare if the pool is short; True if more are wanted. Not while a call runs and a spare is
        ready for the next: forking the server, and the new spare's start, would compete with that call for
        the CPU (docs/WARM.md, "The pool", has the figures). A burst that has taken every ready spare gets new
        ones at once."""
        s = self.server
        if s.stopping or len(self.spares) >= POOL or len(self.calls) + len(self.spares) >= s.max_children + POOL:
            return False
        if time.monotonic() < self.quiet_until:
            return False
        if self.calls and any(x.ready for x in self.spares):
            return False
        made = self.fork()
        if made:
            self.spares.append(made)
        return made is not None and len(self.spares) < POOL

    def fork(self, dedicated=False):
        """A new spare (through its holder), or None (fork, socketpair, pipe failures: logged; calls then
        find none and go by exec). ``dedicated``: a child for one call the server hands it (it neither
        prepares nor accepts)."""
        s = self.server
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        except OSError as e:
            s.log(f"no spare: {e}")
            return None
        try:
            report, report_w = os.pipe2(os.O_CLOEXEC)
        except OSError as e:
            s.log(f"no spare: {e}")
            ours.close()
            theirs.close()
            return None
        if not dedicated:  # (the first spares, and every 64th, learn: dedicated children never do)
            self.made += 1
        else:
            self.dedicated += 1
        learns = not dedicated and pages.learns(self.made)
        child = adopt.Child(s.program, s.run, theirs, learns, self.rehearsal, s.locale, s.bundle, self.learnt.runs)
        child.failpoint = s.failpoint()
        server_pid = s.pid
        # (the server's, now; None: the child keeps the server's throughout)
        child.nice = None if dedicated or not self.lowers else os.getpriority(os.PRIO_PROCESS, 0)

        def child_main(holder):
            try:
                if syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL) == 0 and os.getppid() == holder:
                    os.close(report_w)
                    adopt.close_all_but([0, 1, 2, theirs.fileno()] + ([] if dedicated else [listen]))
                    self.spare_main(child, s, None if dedicated else listen)  # (0-2: the server's /dev/null)
            finally:
                os._exit(adopt.CHILD_REFUSED)
        try:
            holder, mask = syscalls.fork_blocked()
        except OSError as e:
            s.log(f"no spare: fork failed: {e}")
            for x in (ours, theirs):
                x.close()
            os.close(report)
            os.close(report_w)
            return None
        if holder == 0:
            try:
                # A pool spare is made off any call's path: its holder, and the spare until it waits for
                # calls, run at the preparation's priority (a call's end, and the next call, come first).
                if child.nice is not None:
                    os.setpriority(os.PRIO_PROCESS, 0, spare.PREPARE_NICE)
                # The server's own handlers (they would stop the server from the child) go first.
                _signal.signal(signal.SIGTERM, _signal.SIG_DFL)
                _signal.signal(signal.SIGINT, _signal.default_int_handler)
                _signal.signal(signal.SIGHUP, _signal.SIG_DFL)
                signal.set_wakeup_fd(-1)
                _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
                if syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL) == 0 and os.getppid() == server_pid:
                    listen = s.forget_in_child()
                    ours.detach()
                    os.close(report)
                    _holder(child_main, report_w)
            finally:
                os._exit(0)
        theirs.close()
        os.close(report_w)
        try:
            pidfd = os.pidfd_open(holder)
        except OSError:  # cannot happen for our own unreaped child: never leave one unwatched
            os.kill(holder, signal.SIGKILL)
            os.waitpid(holder, 0)
            os.close(report)
            ours.close()
            return None
        s.watch(pidfd)
        s.watch(ours.fileno())
        s.watch(report)  # the child's pid comes on it as soon as the holder has forked it (child_pid)
        return Spare(None, None, holder, pidfd, report, ours, learns)

    def child_pid(self, fd):
        """A holder reported its child's pid (the first 4 bytes of its report); False when ``fd`` is no
        holder's report. A holder that ended before reporting is reaped as usual (its pidfd)."""
        one = next((x for x in self.spares + list(self.calls.values()) if x.report == fd and x.pid is None), None)
        if one is None:
            return False
        self.server.unwatch(fd)
        try:
            data = os.read(fd, 4)
            if len(data) == 4:
                pid = struct.unpack("<I", data)[0]
                child = os.pidfd_open(pid)  # (alive: its holder waits for it before it writes anything else)
                one.pid, one.child = pid, child
        except OSError:
            pass
        return True

    @staticmethod
    def spare_main(child, server, listen):
        try:
            spare.serve(child, server, listen)
        except Exception as e:  # a defect: say so (the server logs it); the call, not begun, goes by exec
            import traceback  # (only on this path: a spare that is about to end)
            where = traceback.extract_tb(e.__traceback__)[-1]
            detail = f"crash: {type(e).__name__}: {e} at {os.path.basename(where.filename)}:{where.lineno}"
            try:
                child.chan.send(adopt.CHAN_REFUSED + b"A" + detail.encode("utf-8", "replace")[:4000],
                                socket.MSG_DONTWAIT)
            except OSError:
                pass

    # ------------------------------------------------------------------ handing calls over
    def hand(self, req_data, conn, launcher, accepted):
        """Give a call the server accepted itself (no spare was ready to) to a child forked for it. Never
        to a pool spare: one that is ready may be accepting a call of its own at this very moment. The
        Call, or None when no child could be had (the call then goes by exec)."""
        one = self.fork(dedicated=True)
        if one is None:
            return None
        try:
            wire.send_with_fds(one.chan, adopt.HANDOFF.pack(launcher) + req_data, [conn.fileno()], socket.MSG_DONTWAIT)
        except OSError:
            self.kill(one)
            return None
        self.server.unwatch(one.chan.fileno())
        call = Call(one, conn, launcher, accepted)
        self.calls[one.pidfd] = call
        return call

    def kill(self, spare):
        """End a spare that could not be used (its holder: the child dies with it)."""
        self.lost += 1
        self.server.unwatch(spare.chan.fileno())
        try:
            os.kill(spare.holder, signal.SIGKILL)
            os.waitpid(spare.holder, 0)
        except OSError:
            pass
        self.server.unwatch(spare.pidfd)
        self.server.unwatch(spare.report)
        for fd in (spare.pidfd, spare.report, spare.child):
            if fd is not None:
                os.close(fd)
        spare.chan.close()

    @staticmethod
    def _ended(one):
        """Reap a holder (its pidfd said it ended) and read its child's end from its report."""
        try:
            os.waitpid(one.holder, 0)
        except ChildProcessError:
            pass
        try:
            data = os.read(one.report, 64)
        except OSError:
            data = b""
        finally:
            for fd in (one.report, one.pidfd, one.child):
                if fd is not None:
                    os.close(fd)
        if len(data) >= Ended.FORMAT.size:
            return Ended(*Ended.FORMAT.unpack_from(data))
        return Ended(signal.SIGKILL)  # (its holder was killed: so was the child, by its death signal)

    # ------------------------------------------------------------------ reaping
    def reap(self, pidfd):
        """A child ended: a spare that never got a call, or a call's child. Returns the Call, if any, with
        (began, refusal) from what the child said on its channel, and its wait status and rusage."""
        self.server.unwatch(pidfd)
        for i, one in enumerate(self.spares):
            if one.pidfd == pidfd:  # a spare that ended without a call: a defect, or the server stopping
                del self.spares[i]
                self.server.unwatch(one.chan.fileno())
                self._ended(one)
                said = b""
                while True:  # its last word (a crash report), past READY and the like
                    try:
                        msg = one.chan.recv(4096, socket.MSG_DONTWAIT)
                    except OSError:
                        break
                    if not msg:
                        break
                    said = msg if msg[:1] == adopt.CHAN_REFUSED else said
                one.chan.close()
                if not self.server.stopping:
                    self.lost += 1
                    self.server.log(f"spare {one.pid} ended without a call: {said[2:].decode('utf-8', 'replace')}")
                    # no new spare for a while: a spare that cannot live must not make the server spin
                    self.quiet_until = time.monotonic() + LOST_BACKOFF
                return None
        call = self.calls.pop(pidfd)
        ru = self._ended(call)
        status = ru.status
        began, refusal = False, None
        while True:
            try:
                msg = call.chan.recv(wire.MAX_REQUEST, socket.MSG_DONTWAIT)
            except OSError:
                break
            if not msg:
                break
            if msg[:1] == adopt.CHAN_BEGAN:
                began = True
            elif msg[:1] == adopt.CHAN_REFUSED:
                refusal = (msg[1:2] == b"K", msg[2:].decode("ascii", "replace") or "adopt")
            elif msg[:1] == adopt.CHAN_PAGES and call.learns:
                self.learnt.add(msg[1:])
        call.chan.close()
        return call, began, refusal, status, ru

    def follow_launchers(self):
        """Stop a child whose launcher is stopped (SIGSTOP to the launcher alone reaches nobody else: the
        kernel tells no process but the launcher's parent), continue it when the launcher runs again. Kill
        a child whose launcher has hung up after the child said it has GO and before it said more (began or
        refused): killed, or given up, the launcher is gone, and the child, which holds the caller's fds
        (its stdout's pipe), may be blocked in its adoption (a zone file that is a FIFO, a hung mount).
        Before GO it ends by itself (adopt._go; one stopped for its launcher runs again once the
        launcher is gone), and is left to: what a client queued on the connection before GO it drops as
        it exits, where the server, were it the last holder, would drop it in
        close(), which may wait (a lingering socket). From BEGAN on, the kernel kills it on hang-up itself."""
        hung = select.poll()
        for call in self.calls.values():
            hung.register(call.conn, select.POLLRDHUP | select.POLLHUP)
        for fd, _ in hung.poll(0):
            call = next((c for c in self.calls.values() if c.conn.fileno() == fd), None)
            if call is None or call.child is None or call.killed:
                continue
            try:
                if not call.got:
                    if call.chan.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != adopt.CHAN_GOT:
                        continue  # (it refused, having no GO: it ends)
                    call.chan.recv(16, socket.MSG_DONTWAIT)
                    call.got = True
                if call.chan.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    continue  # it has said BEGAN or REFUSED (sent before its R)
            except BlockingIOError:
                if not call.got:
                    continue  # no GO yet: it ends by itself
            except OSError:
                continue
            try:
                signal.pidfd_send_signal(call.child, signal.SIGKILL)
                call.killed = True
            except OSError:
                pass
        for call in self.calls.values():
            try:
                with open(f"/proc/{call.launcher}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1][1:2]
            except (OSError, IndexError):
                state = b""  # (gone, reaped: a child stopped for it runs again, to end by itself)
            stopped = state == b"T"
            if stopped != call.stopped and call.child is not None:
                try:  # (through its pidfd: its pid may be free, and taken again, before we learn it ended)
                    signal.pidfd_send_signal(call.child, signal.SIGSTOP if stopped else signal.SIGCONT)
                    call.stopped = stopped
                except OSError:
                    pass

    def release_spares(self):
        """Stopping: every spare sees its channel close and ends (then it is reaped as usual)."""
        for one in self.spares:
            self.server.unwatch(one.chan.fileno())
            one.chan.close()
