"""The child's side of a warm call: take the call on, prove it, wait for the go-ahead, begin.

A child is a spare forked by the server ahead of its call (children.py). Handed a call, it takes on
everything an exec'd plugin would inherit from the launcher (its fds at their numbers, cwd, process
group, umask, rlimits, signals, scheduling, memory policy, environment, arguments, stdio), then builds its
own snapshot (snapshot.py) and begins only if it equals the launcher's: any difference is a refusal, and
the launcher goes by exec. docs/WARM.md has the table of every row.
"""
import _signal  # signal's functions without its enum wrapping (adoption runs on every call)
import fcntl
import io
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from skb.linux import guard
from skb.plugin.warm import admission, pages, snapshot, syscalls, wire

CHILD_REFUSED = 250     # exit status of a child that ended before beginning its call
GO_WAIT_MS = 2000       # the launcher answers ACCEPTED at once: GO within this, or the call is not ours
DRAIN_MAX = 1024        # messages read after GO at most: more than a connection's send buffer holds
INTERNAL_FDS = 1000     # the child's own fds (connection, channel) sit at or above this, close-on-exec
BOOTLOADER_VARS = (b"_PYI_ARCHIVE_FILE", b"_PYI_PARENT_PROCESS_LEVEL", b"_PYI_LINUX_PROCESS_NAME")
HANDOFF = struct.Struct("<I")  # the server's header of a hand-off: the launcher's pid (SO_PEERCRED)
# child -> server, over the spare's channel
CHAN_BEGAN = b"B"      # the call has begun
CHAN_GOT = b"G"        # it has GO and the caller's fds, and the connection takes no fd any more
CHAN_REFUSED = b"R"    # + "K" (a key-part difference: the server has drifted) or "A", + the reason
CHAN_PAGES = b"P"      # + the packed page numbers the call wrote (learning spares)
CHAN_READY = b"Y"      # the spare waits for calls (it prepares itself meanwhile)
CHAN_PREPARED = b"D"   # the spare has prepared itself
CHAN_TAKEN = b"T"      # + u32 launcher pid, f64 accept time, the request; with the connection's fd: the spare
                       # accepted a call itself
CHAN_FORWARD = b"F"    # + the request's kind, with the connection's fd: a status or stop request; or "?" + f64
                       # accept time: a call whose request is late, for the server to wait for
CHAN_COUNT = b"C"      # + a refusal's reason: the spare refused a request (and waits on)


class Refused(Exception):
    """The call cannot be taken on exactly: its reason goes to the launcher (exec) and the server.
    ``key``: the difference is in the snapshot's key part, which the server's own context should have
    matched (it has drifted: the server stops, and the next call starts a new one)."""

    def __init__(self, reason, key=False):
        super().__init__(reason)
        self.key = key


def _place(inherited, internal):
    """Put each (target number, fd) of ``inherited`` at its number, without close-on-exec, and each fd of
    ``internal`` above all of them, close-on-exec; close every other fd. Returns internal's new numbers."""
    return snapshot.place(inherited, internal, max([INTERNAL_FDS] + [t + 1 for t, _ in inherited]))


def close_all_but(fds):
    keep = sorted(fds)
    for lo, hi in zip([-1] + keep, keep + [1 << 30]):
        if hi > lo + 1:
            os.closerange(lo + 1, hi)


def _cpus(text):
    out = set()
    for part in text.split(b","):
        lo, _, hi = part.partition(b"-")
        if lo.strip():
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def signals(ignored):
    """Dispositions as an exec'd plugin has them once Python has started: ignored signals stay ignored,
    SIGPIPE and SIGXFSZ are ignored, SIGINT raises KeyboardInterrupt unless ignored, all else default."""
    for sig in range(1, signal.NSIG):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        want = _signal.SIG_IGN if ignored >> (sig - 1) & 1 else _signal.SIG_DFL
        if sig in (signal.SIGPIPE, signal.SIGXFSZ):
            want = _signal.SIG_IGN
        elif sig == signal.SIGINT and want == _signal.SIG_DFL:
            want = _signal.default_int_handler
        try:
            if _signal.getsignal(sig) != want:  # Python's record of the disposition: no system call
                _signal.signal(sig, want)
        except (OSError, ValueError):  # the C library's own signals (32, 33)
            pass


def environment(entries, zone=True):
    """os.environ and the C environ exactly as passed (minus the bootloader's three variables, which an
    exec'd bundle removes too); then, with ``zone``, the time zone read as an exec'd plugin reads it. A
    spare's rehearsal leaves the zone alone: tzset() opens the file TZ names, which may block (a FIFO, a
    hung mount), and a spare must never block before its call (it has said it is ready)."""
    for k in list(os.environ):
        os.unsetenv(k)
    data = os.environ._data  # bytes -> bytes, exactly what os.environ holds at start-up on POSIX
    data.clear()
    for item in entries:
        k, _, v = item.partition(b"=")
        if k not in BOOTLOADER_VARS:
            os.putenv(k, v)
            data[k] = v
    if not zone:
        return
    if b"TZ" in data:
        # glibc's tzset() does nothing when TZ (less one leading ':') is what it read last (this process's,
        # or the rehearsed last call's): the zone is read again, as an exec'd plugin's first tzset() does
        # (another TZDIR, a zone file updated since). Without TZ, tzset() looks at /etc/localtime anyway.
        other = b"UTC1" if data[b"TZ"].removeprefix(b":") == b"UTC0" else b"UTC0"
        os.putenv(b"TZ", other)
        time.tzset()
        os.putenv(b"TZ", data[b"TZ"])
    time.tzset()


def fresh_stdio():
    """New sys.std* objects on fds 0, 1, 2 configured as the interpreter configured the server's (which
    were made for /dev/null: not a terminal, like every caller's that warm start serves)."""
    new = []
    for fd, old, mode, name in ((0, sys.__stdin__, "rb", "<stdin>"), (1, sys.__stdout__, "wb", "<stdout>"),
                                (2, sys.__stderr__, "wb", "<stderr>")):
        buf = io.open(fd, mode, buffering=-1, closefd=False)
        buf.raw.name = name
        new.append(io.TextIOWrapper(buf, encoding=old.encoding, errors=old.errors, newline="\n",
                                    line_buffering=old.line_buffering, write_through=old.write_through))
    return new


class Adopter:
    """Sets fields of this process's adoptable state to the launcher's values (``want``: the fields of its
    adopted part); ``have``: this process's own fields, so that a multi-valued field (limits,
    speculation controls) changes only what differs."""

    def __init__(self, want, have):
        self.want, self.have = want, have
        self.nice_later = None  # a priority refused before the limits were set: tried once more after them

    def run(self, names):
        for name, setter in _SETTERS:
            if name in names and name in self.want:
                setter(self, self.want[name])
        self._nice_again()

    def umask(self, v):
        os.umask(int(v, 8))

    def rlimits(self, v):
        old = self.have.get(b"rlimits", b"").split()
        for r, pair in enumerate(v.split()):
            if r >= len(old) or old[r] != pair:
                soft, hard = (_rlim(int(x)) for x in pair.split(b":"))
                _set(lambda: resource.setrlimit(r, (soft, hard)), "rlimits")
        self._nice_again()

    def nice(self, v):
        """Before the limits: without CAP_SYS_NICE, this process's own RLIMIT_NICE may be what lets it raise
        its priority, and the caller's may allow less. If refused, once more after them (``rlimits``): the
        caller's may allow more. Either way the result is the caller's priority and the caller's limits."""
        try:
            os.setpriority(os.PRIO_PROCESS, 0, int(v))
        except (OSError, ValueError):
            self.nice_later = v

    def _nice_again(self):
        if self.nice_later is not None:
            v, self.nice_later = self.nice_later, None
            _set(lambda: os.setpriority(os.PRIO_PROCESS, 0, int(v)), "nice")

    def sched(self, v):
        if v != b"none":
            policy, flags, prio = (int(x) for x in v.split()[:3])
            _set(lambda: os.sched_setscheduler(0, policy | (os.SCHED_RESET_ON_FORK if flags & 1 else 0),
                                               os.sched_param(prio)), "sched")

    def ioprio(self, v):
        _check(syscalls.set_ioprio(int(v)), "ioprio")

    def timerslack(self, v):
        _check(syscalls.prctl_ok(syscalls.PR_SET_TIMERSLACK, int(v)), "timerslack")

    def oom_score_adj(self, v):
        _set(lambda: _write("/proc/self/oom_score_adj", v), "oom_score_adj")

    def thp_disable(self, v):
        _check(syscalls.prctl_ok(syscalls.PR_SET_THP_DISABLE, int(v)), "thp_disable")

    def spec(self, v):
        have = self.have.get(b"spec", b"").split()
        for i, x in enumerate(int(y) for y in v.split()):
            if (i >= len(have) or int(have[i]) != x) and x >= 0 and x & syscalls.PR_SPEC_PRCTL:
                value = x & (syscalls.PR_SPEC_ENABLE | syscalls.PR_SPEC_DISABLE | syscalls.PR_SPEC_FORCE_DISABLE)
                syscalls.prctl_ok(syscalls.PR_SET_SPECULATION_CTRL, syscalls.SPEC_MISFEATURES[i], value)

    def tsc(self, v):
        if int(v) > 0:
            _check(syscalls.prctl_ok(syscalls.PR_SET_TSC, int(v)), "tsc")

    def mce_kill(self, v):
        policy = int(v)  # 2: the system's default (cleared), else late (0) or early (1)
        if policy >= 0:
            _check(syscalls.prctl_ok(syscalls.PR_MCE_KILL, 0 if policy == 2 else 1, 0 if policy == 2 else policy),
                   "mce_kill")

    def coredump_filter(self, v):
        if v != b"none":  # (the file shows hex digits; it reads a number in C's notation)
            _set(lambda: _write("/proc/self/coredump_filter", b"0x" + v), "coredump_filter")

    def mempolicy(self, v):
        if v != b"none":
            mode, words = v.split()
            _check(syscalls.set_mempolicy(int(mode), [int(x, 16) for x in words.split(b",")]), "mempolicy")

    def affinity(self, v):
        _set(lambda: os.sched_setaffinity(0, _cpus(v)), "cpus_allowed_list")

    def ignored(self, v):
        signals(int(v, 16))

    def blocked(self, v):
        mask = int(v, 16)
        signal.pthread_sigmask(signal.SIG_SETMASK, [s for s in range(1, 65) if mask >> (s - 1) & 1
                                                    and s not in (signal.SIGKILL, signal.SIGSTOP)])


_SETTERS = ((b"Umask:", Adopter.umask), (b"nice", Adopter.nice), (b"rlimits", Adopter.rlimits),
            (b"sched", Adopter.sched), (b"ioprio", Adopter.ioprio), (b"timerslack", Adopter.timerslack),
            (b"oom_score_adj", Adopter.oom_score_adj), (b"thp_disable", Adopter.thp_disable),
            (b"spec", Adopter.spec), (b"tsc", Adopter.tsc), (b"mce_kill", Adopter.mce_kill),
            (b"coredump_filter", Adopter.coredump_filter), (b"mempolicy", Adopter.mempolicy),
            (b"Cpus_allowed_list:", Adopter.affinity), (b"SigIgn:", Adopter.ignored), (b"SigBlk:", Adopter.blocked))
# What a spare rehearses with the last call's values (all reversible by a root process; a lower hard limit
# is not, nor a lower priority without CAP_SYS_NICE: both are checked apart): the next call, from the same
# runtime, most likely has the same.
REHEARSED = {b"Umask:", b"rlimits", b"nice", b"ioprio", b"timerslack", b"oom_score_adj", b"coredump_filter",
             b"Cpus_allowed_list:", b"SigIgn:"}


def _write(path, value):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value)
    finally:
        os.close(fd)


def limits_a_fork_cannot_honour(rlimits):
    """The reason, when the caller's limits would treat an exec'd plugin and a forked child differently:
    RLIMIT_AS and RLIMIT_DATA bound the whole address space, and a child of the server starts with the
    server's (an exec'd plugin with its own, smaller one); an infinite RLIMIT_STACK gives an exec'd
    plugin the legacy memory layout, which a fork keeps from the server."""
    pairs = [p.split(b":") for p in rlimits.split()]
    if len(pairs) != snapshot.NLIMITS:
        return "rlimits"
    for r, name in ((resource.RLIMIT_AS, "rlimit-as"), (resource.RLIMIT_DATA, "rlimit-data")):
        if int(pairs[r][0]) != snapshot.INFINITY:
            return name
    if int(pairs[resource.RLIMIT_STACK][0]) == snapshot.INFINITY:
        return "rlimit-stack"
    return None


def _rlim(v):
    return resource.RLIM_INFINITY if v == snapshot.INFINITY else v


def _no_lower_hard(want, have):
    w, h = want.split(), have.split()
    return len(w) == len(h) and all(int(a.split(b":")[1]) >= int(b.split(b":")[1]) for a, b in zip(w, h))


def _set(do, what):
    try:
        do()
    except (OSError, ValueError) as e:
        raise Refused(f"{what}: {e}") from e


def _check(ok, what):
    if not ok:
        raise Refused(what)


class Child:
    """A child, through its holder: a pool spare (prepared while no call needs the CPU, then one call it
    accepts), or a child forked for one call the server hands it."""

    def __init__(self, program, run, chan, learns, rehearsal, locale, bundle, hot_runs):
        self.program, self.run, self.chan, self.learns = program, run, chan, learns
        self.rehearsal = rehearsal      # the last call's request (its values to rehearse with), or None
        self.hot_runs = hot_runs
        self.bundle, self.locale = bundle, locale
        self.failpoint = None           # a test's failpoint (Server.failpoint)
        self.nice = None                # a pool spare's priority once it waits for calls (the server's); None:
                                        # a dedicated child, or one that could not raise its priority again,
                                        # which never changes it before a call (nor rehearses it)

    # ------------------------------------------------------------------ before the call
    def rehearse(self):
        """Take on the last call's values (the next call, from the same runtime, most likely has the same),
        and make the stdio objects once (the memory they write is then this process's own)."""
        if self.rehearsal is not None:
            try:
                want = snapshot.fields(snapshot.split(wire.parse(self.rehearsal).snapshot)[1])
                have = snapshot.fields(snapshot.adopted_part())
                names = {k for k in REHEARSED if want.get(k) != have.get(k)}
                if b"rlimits" in want and b"rlimits" in have:  # not the fd limit: the spare's own fds must
                    pairs, own = want[b"rlimits"].split(), have[b"rlimits"].split()  # sit above the call's;
                    pairs[resource.RLIMIT_NOFILE] = own[resource.RLIMIT_NOFILE]  # nor the nice limit: it may
                    pairs[resource.RLIMIT_NICE] = own[resource.RLIMIT_NICE]  # be what lets it raise its nice
                    want[b"rlimits"] = b" ".join(pairs)
                if not _no_lower_hard(want.get(b"rlimits", b""), have.get(b"rlimits", b"")):
                    names.discard(b"rlimits")
                if self.nice is None:  # a lower priority it could not leave again
                    names.discard(b"nice")
                Adopter(want, have).run(names)
                environment(wire.parse(self.rehearsal).env, zone=False)
            except (Refused, ValueError, OSError):
                pass
        fresh_stdio()

    def wait(self):
        """The hand-off: (request, connection), or None when the server is done with us (EOF). A malformed
        hand-off (a defect) raises ValueError."""
        try:
            data, fds, trunc = wire.recv_with_fds(self.chan, wire.MAX_REQUEST + HANDOFF.size, wire.MAX_FDS + 1)
        except ConnectionError:
            return None
        if not data:
            return None
        if trunc or len(data) < HANDOFF.size or len(fds) != 1:  # (the connection alone)
            raise ValueError(f"hand-off of {len(data)} bytes, {len(fds)} fds{', truncated' if trunc else ''}")
        req = wire.parse(data[HANDOFF.size:])
        req.peer_pid = HANDOFF.unpack_from(data)[0]
        return req, fds[0]

    # ------------------------------------------------------------------ the call
    def take(self, req, conn_fd, announce=False):
        """Wait for GO and the caller's fds, adopt, prove, begin (never returns once begun: the call ends in
        os._exit)."""
        if not _go(req, conn_fd, announce):
            return
        try:
            self.chan.send(CHAN_GOT, socket.MSG_DONTWAIT)
        except OSError:
            return
        if self.failpoint == "stop-before-begin":  # (tests: the launcher has its ACCEPTED, not our BEGAN)
            os.kill(os.getpid(), signal.SIGSTOP)
        fixed = req.fixed
        try:
            moved = _place(req.inherited, [conn_fd, self.chan.fileno()] + list(fixed.values()))
        except OSError as e:  # fd numbers at or past this process's limit: an exec'd plugin keeps them
            conn = socket.socket(fileno=conn_fd)
            return self.refuse(conn, f"fds: {e}")
        conn = socket.socket(fileno=moved[0])
        self.chan.detach()  # (its old number is closed: the object must never close it again)
        self.chan = socket.socket(fileno=moved[1])
        fixed = dict(zip(fixed, moved[2:]))
        try:
            self.adopt(req, fixed)
        except Refused as e:
            return self.refuse(conn, str(e), e.key)
        except (OSError, ValueError) as e:
            return self.refuse(conn, f"adopt-{type(e).__name__}")
        close_all_but(list(req.fd_numbers) + [conn.fileno(), self.chan.fileno()])
        try:
            conn.send(wire.BEGAN + struct.pack("<I", os.getpid()), socket.MSG_DONTWAIT)
        except OSError:
            return
        try:
            self.chan.send(CHAN_BEGAN, socket.MSG_DONTWAIT)
        except OSError:
            pass
        # The call is ours now. If the launcher dies, the kernel kills us (SIGIO on hang-up, as SIGKILL).
        c = conn.fileno()
        fcntl.fcntl(c, fcntl.F_SETSIG, signal.SIGKILL)
        fcntl.fcntl(c, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(c, fcntl.F_SETFL, fcntl.fcntl(c, fcntl.F_GETFL) | os.O_ASYNC)
        p = select.poll()
        p.register(c, select.POLLIN | select.POLLHUP | select.POLLRDHUP)
        if p.poll(0):
            os._exit(1)  # the launcher went away between GO and here
        guard.PLUGIN_PID = req.peer_pid
        _report_exit_early(conn, self.chan if self.learns else None)
        try:
            self.run(sys.argv)  # never returns: ends with os._exit
        except BaseException:  # what escapes an exec'd bundle's entry script (KeyboardInterrupt, say)
            _unhandled(req.peer_pid)

    def adopt(self, req, fixed):
        key, adopted = snapshot.split(req.snapshot)
        want = snapshot.fields(adopted)
        # First what can never be taken on: this process's key part, now, is the launcher's, and the
        # namespaces and root it named are the ones the kernel passed.
        try:  # (and the fds it passed are the very namespaces and root of this process)
            mine = snapshot.key_part(self.bundle, self.locale, list(fixed.values()))
        except snapshot.Unlike as e:
            raise Refused(str(e), key=True)
        if mine != key:
            raise Refused(snapshot.first_difference(key, mine), key=True)
        why = limits_a_fork_cannot_honour(want.get(b"rlimits", b""))
        if why:
            raise Refused(why)
        # What every call brings (its fds are in place already): cwd, environment, arguments, stdio, name.
        os.fchdir(fixed["cwd"])
        environment(req.env)
        sys.argv = [self.program, req.applet] + [os.fsdecode(a) for a in req.args]
        sys.stdin, sys.stdout, sys.stderr = stdio = fresh_stdio()
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = stdio
        syscalls.set_name(req.applet.encode()[:15])
        # The caller's process group (group signals reach us from here on): its session is ours.
        try:
            os.setpgid(0, int(want[b"pgid"]))
        except (OSError, KeyError, ValueError) as e:
            raise Refused(f"pgid: {e}")
        # Then the rest: this process's adopted part, read now, against the launcher's (what Python's
        # start-up changes in an exec'd plugin aside). What differs is set to the launcher's value and
        # read back; what still differs (or cannot be set) is a refusal.
        expect = snapshot.expected(adopted)
        mine = snapshot.adopted_part()
        if mine != expect:
            have, exp = snapshot.fields(mine), snapshot.fields(expect)
            adopter = Adopter(want, have)
            adopter.run({k for k in exp.keys() | have.keys() if exp.get(k) != have.get(k)})
            mine = snapshot.adopted_part()
            if mine != expect:
                raise Refused(snapshot.first_difference(expect, mine))

    def refuse(self, conn, reason, key=False):
        why = reason.encode("ascii", "replace")
        # (the server first: once the launcher has R it hangs up, and the server kills a child that has
        # said nothing when its launcher has gone: Children.follow_launchers)
        for sock, msg in ((self.chan, CHAN_REFUSED + (b"K" if key else b"A") + why), (conn, wire.REFUSED + why)):
            try:
                sock.send(msg, socket.MSG_DONTWAIT)
            except OSError:
                pass
        os._exit(CHILD_REFUSED)


def _go(req, conn_fd, announce):
    """GO, with the caller's fds (req.fds), within GO_WAIT_MS of ACCEPTED; False (the call is not ours:
    the child ends) when it does not come, comes without exactly the fds the request named, or anything
    else came. ``announce``: a child the server forked for this call lets the connection take fds and
    answers ACCEPTED itself (the server, which may yet hold the connection alone, never lets fds in).
    Once GO has come, or the wait is over, the connection refuses fds again, and everything queued on it
    is read: what it brought is left to this process's exit to drop, never to a close() that may wait on
    it (a lingering TCP socket) or to the server, the other holder of the connection."""
    conn = socket.socket(fileno=conn_fd)
    got = []
    try:
        if announce:
            admission.pass_rights(conn, True)
            conn.send(wire.ACCEPTED, socket.MSG_DONTWAIT)
        p = select.poll()
        p.register(conn_fd, select.POLLIN)
        p.poll(GO_WAIT_MS)
        admission.pass_rights(conn, False)
        while len(got) < DRAIN_MAX:  # (at its end the connection reads empty until then: the launcher left)
            got.append(wire.recv_with_fds(conn, 8, wire.MAX_FDS, socket.MSG_DONTWAIT))
    except BlockingIOError:
        pass
    except OSError:
        return False
    finally:
        conn.detach()
    if len(got) != 1:
        return False
    data, fds, truncated = got[0]
    if data != wire.GO or truncated or len(fds) != len(wire.FIXED_FDS) + len(req.fd_numbers):
        return False
    req.fds = fds
    return True


def _unhandled(pid):
    """End as an exec'd bundle ends when an exception escapes its entry script: the interpreter prints the
    traceback, PyInstaller's bootloader says it failed (naming the process, whose pid the caller knows),
    and the process exits 1. The traceback is the exec'd one's: the entry script's last line (the same
    line starts the server and runs an exec'd call), then the frames from its run() on; those of the
    server, the spare and this module in between are not the call's."""
    import traceback  # (only on this path: a process that is about to end)
    try:
        _, e, tb = sys.exc_info()
        shown = traceback.TracebackException(type(e), e, tb.tb_next)
        entry = traceback.extract_stack(sys._getframe())[:1]  # (the outermost frame: the entry script's)
        shown.stack = traceback.StackSummary.from_list(entry + list(shown.stack))
        sys.stderr.write("".join(shown.format()))
        sys.stderr.flush()
        os.write(2, f"[PYI-{pid}:ERROR] Failed to execute script 'entry' due to unhandled exception!\n".encode())
    finally:
        os._exit(1)


def _report_exit_early(conn, chan=None):
    """The call ends in os._exit(code) once its output is flushed (entry.run, skel.main): send the
    launcher EXITED with that status right there, so that it need not wait for this process's teardown
    and the server's wake-up. (A killed child is still reported by the server; a process forked by the
    plugin that calls os._exit does not send.) Then, the launcher gone, report to the server over
    ``chan`` the pages this process wrote, for the next spares."""
    real_exit, me, c = os._exit, os.getpid(), conn.fileno()

    def _exit(code):
        try:
            if os.getpid() == me:
                # Every fd goes first, but the launcher's connection and the channel (its output is flushed:
                # nothing is buffered past os._exit): a runtime reading pipes waits for their last writer,
                # and what the caller passed on (a lock, a pipe) is closed, as an exec'd plugin's whole exit
                # has closed it, by the time its wait() returns.
                close_all_but([c] + ([chan.fileno()] if chan else []))
                try:  # disarm the launcher-death SIGKILL first: the launcher ends as soon as it has read this
                    fcntl.fcntl(c, fcntl.F_SETFL, fcntl.fcntl(c, fcntl.F_GETFL) & ~os.O_ASYNC)
                    conn.send(wire.exited((code & 0xFF) << 8), socket.MSG_DONTWAIT)
                except (OSError, TypeError):
                    pass
                if chan:
                    chan.send(CHAN_PAGES + pages.written(), socket.MSG_DONTWAIT)
        except BaseException:  # (a report is never worth more than the exit itself)
            pass
        finally:
            real_exit(code)
    os._exit = _exit
