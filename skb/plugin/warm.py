"""The warm-start server: a resident zygote of the frozen bundle that serves plugin calls by fork.

Started by a launcher (build/launcher.c) as ``skb-cni --warm-serve KEY BINDIR`` the first time a plugin is
called in a context with no server, detached from the caller. It has the plugin modules imported; per
call it checks that the caller's context is its own, forks, and the child adopts the call (stdin, stdout,
stderr, cwd, environment, arguments, umask, rlimits, signal mask and ignored signals) and runs it through
the same code an exec'd bundle runs (build/entry.py: ``skb.applets.main`` -> the plugin -> ``skel``). The
exact rules, what is compared and what is adopted, are in docs/WARM.md; every refusal sends the caller
back to exec.

Protocol (SOCK_SEQPACKET, one message per packet), launcher L, server S, child C:
  L->S  "W" + records (tag, u32 length, bytes) + SCM_RIGHTS fds: stdin, stdout, stderr, cwd, root, and
        /proc/self/ns/{net,mnt,pid,user,uts,ipc,cgroup,time}
  S->L  "R<reason>" (refused: L execs) ...or S forks C, which adopts the call, then:
  C->L  "A"  ->  L->C "G" (L is committed; C runs nothing before it: a timed-out L that went by exec is
        never served too)  ->  S->L "X" + wait status (i32) when C has ended.
Other requests (uid 0 only, like calls): "S" status (JSON answer), "Q" stop (answer "ok").

Lifecycle: the server exits when idle for IDLE seconds, when ``BINDIR/.skb`` no longer resolves to its
bundle (an upgrade), when its socket path no longer leads to it (``skb warm stop``, a removed /run), and
when no other process shares its network namespace any more (its context is gone). It never exits with a
call in flight except by being killed, and then its children die with it (PR_SET_PDEATHSIG) and their
launchers report it.

Not on any plugin's hot path: imported only by the server process.
"""
import _signal  # signal's functions without its enum wrapping (adopt runs on every call)
import errno
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

RUN_DIR = "/run/skb-cni"
WARM_DIR = RUN_DIR + "/warm"
IDLE = 600.0            # seconds without a call before a server exits
TICK = 2.0              # seconds between lifecycle checks
MAX_CHILDREN = 32       # calls served at once; beyond, refused (-> exec)
PREFORK = True          # keep one child forked ahead of the next call (see make_spare)
ACCEPT_WAIT = 0.5       # seconds a connected client has to send its request
NS = ("net", "mnt", "pid", "user", "uts", "ipc", "cgroup", "time")  # (time: Linux 5.6+)
STATUS_KEYS = ("Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:",
               "Seccomp:", "Cpus_allowed_list:", "Mems_allowed_list:")
LOCALE = ("LC_ALL", "LC_CTYPE", "LANG")
NFDS = 3 + 2 + len(NS)
PAGE_SHIFT = 12         # x86_64 pages (4 KiB)
CHILD_REFUSED = 250     # a child that could not adopt the call exits with this before running anything
LOG_MAX = 256 * 1024
PR_SET_PDEATHSIG, PR_SET_NAME, PR_GET_SECUREBITS, PR_GET_TIMERSLACK = 1, 15, 27, 30
F_SETSIG = getattr(fcntl, "F_SETSIG", 10)
MADV_POPULATE_WRITE = 23  # Linux 5.14+: fault a range in writable now (copy-on-write broken ahead of use)
PREFAULT_STEP = 32      # pages a spare faults in between two looks for a waiting call (~50 us)
PREPARE_AFTER_MS = 3    # a spare prepares itself after this long without a call
HOT_MAX = 2048          # pages a spare faults in ahead of its call, at most (8 MB: 2x a Go plugin's RSS)
LEARN_FIRST, LEARN_EVERY = 8, 64  # which calls report the pages they wrote: the first ones, then every 64th
PM_PRESENT, PM_EXCLUSIVE = 1 << 63, 1 << 56  # /proc/self/pagemap: the page is there and mapped only here
SYS_IOPRIO_GET = 252    # x86_64, the only architecture the bundle is built for


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class _Libc:
    def __init__(self):
        import ctypes
        self.c = ctypes.CDLL(None, use_errno=True)
        self.ctypes = ctypes

    def prctl(self, op, arg=0):
        return self.c.prctl(op, self.ctypes.c_ulong(arg), 0, 0, 0)

    def personality(self):
        return self.c.personality(self.ctypes.c_ulong(0xFFFFFFFF))

    def ioprio(self):
        return self.c.syscall(SYS_IOPRIO_GET, 1, 0)

    def populate_write(self, start, length):
        return self.c.madvise(self.ctypes.c_void_p(start), self.ctypes.c_size_t(length), MADV_POPULATE_WRITE)


def _dev_ino(st):
    return f"{st.st_dev}:{st.st_ino}"


def context(bundle, libc, environ):
    """This process's context text, byte for byte what build/launcher.c's context() sends."""
    out = [f"skb-warm 1\nbundle {bundle}"]
    for ns in NS:
        out.append(f"\nns {ns} {_dev_ino(os.stat(f'/proc/self/ns/{ns}'))}")
    out.append(f"\nroot {_dev_ino(os.stat('/'))}\n")
    with open("/proc/self/status") as f:
        out += [line for line in f if line.startswith(STATUS_KEYS)]
    for path in ("/proc/self/cgroup", "/proc/self/oom_score_adj"):
        with open(path) as f:
            out.append(f"{path}\n{f.read()}")
    out.append(f"nice {os.getpriority(os.PRIO_PROCESS, 0)}\nsched {os.sched_getscheduler(0)}\n"
               f"personality {libc.personality()}\nsecurebits {libc.prctl(PR_GET_SECUREBITS)}\n"
               f"timerslack {libc.prctl(PR_GET_TIMERSLACK)}\nioprio {libc.ioprio()}\n"
               f"sid {os.getsid(0)}\n"
               f"loginuid {_proc_value('/proc/self/loginuid')}\nsessionid {_proc_value('/proc/self/sessionid')}\n")
    for k in LOCALE:
        out.append(f"{k}={environ[k]}\n" if k in environ else f"{k} unset\n")
    return "".join(out).encode("utf-8", "surrogateescape")


def _proc_value(path):
    """A one-value /proc file's value (the audit login uid, session id), or "none" without one: as the
    launcher's add_value() writes it."""
    try:
        with open(path, "rb") as f:
            v = f.read(63)
    except OSError:
        return "none"
    v = v.rstrip(b"\n\0")
    return v.decode("ascii", "replace") if v else "none"


def check_dir(path, forbidden):
    """fd of a root-owned dir nobody else may write (or, forbidden=0o077, enter); never via a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & forbidden:
        os.close(fd)
        raise PermissionError(f"{path} is not a root-only directory (uid {st.st_uid}, mode {st.st_mode & 0o7777:o})")
    return fd


def parse_request(data):
    """{tag: [bytes, ...]} of a "W" request."""
    recs, i = {}, 1
    while i < len(data):
        if i + 5 > len(data):
            raise ValueError("truncated record header")
        tag, n = chr(data[i]), struct.unpack_from("<I", data, i + 1)[0]
        i += 5
        if i + n > len(data):
            raise ValueError("truncated record")
        recs.setdefault(tag, []).append(data[i:i + n])
        i += n
    for tag in "CPURMI":
        if len(recs.get(tag, ())) != 1:
            raise ValueError(f"record {tag} missing or repeated")
    return recs


def _first_difference(a, b):
    """The name of the first line of the context texts a and b that differs (the refusal's reason)."""
    for x, y in zip(a.split(b"\n"), b.split(b"\n")):
        if x != y:
            word = x.split(b" ")[0].split(b"\t")[0].rstrip(b":").decode("ascii", "replace")
            if word == "ns":
                return "ns-" + x.split(b" ")[1].decode("ascii", "replace")
            if word.startswith("/proc/self/"):
                return word[len("/proc/self/"):]
            if word.startswith("LC_") or word.startswith("LANG"):
                return "locale"
            if word.startswith("Cap"):
                return "capabilities"
            return {"0::/": "cgroup"}.get(word, word.lower() or "context")
    return "context"


class Server:
    def __init__(self, key, bindir, run, applets):
        self.key, self.bindir, self.run = key, bindir, run
        self.bundle = os.path.dirname(sys._MEIPASS)
        self.program = os.path.join(self.bundle, "skb-cni")
        self.libc = _Libc()
        self.started = time.time()
        self.last = time.monotonic()
        self.children = {}      # pidfd -> (pid, connection, accepted at, hand-off ms, started pipe)
        self.served = 0
        self.refused = {}
        self.peak_children = 0
        self.spare = None       # (pid, pidfd, channel, started pipe, learns) of the pre-forked child
                                # (learns: it reports its call's pages, and so does not prefault)
        self.applied = None     # in a spare: the request whose umask, rlimits and signals it already has
        self.hot = set()        # page numbers that calls' children wrote (see make_spare)
        self.hot_runs = ()      # the same as (first page, count) runs
        self.spares_lost = 0
        self.spares_made = 0
        self.gone = set()       # pidfds closed while handling the current batch of events (see serve)
        self.child_rss = []     # (ru_maxrss KB, faulted-in KB, hand-off ms, accept-to-exit ms), last 64
        self.stopping = None
        self.log_fd = -1
        self.applets = {a: m for a, m in applets.items() if a != "skb"}  # the plugin applets only

    # ------------------------------------------------------------------------------------ setup
    def log(self, msg):
        if self.log_fd < 0:
            sys.stderr.write(f"skb-cni warm server: {msg}\n")
            return
        try:
            if os.fstat(self.log_fd).st_size > LOG_MAX:
                os.ftruncate(self.log_fd, 0)
            os.write(self.log_fd, f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {msg}\n".encode())
        except OSError:
            pass

    def setup(self):
        run = check_dir(RUN_DIR, 0o022)
        try:
            self.dir = os.open("warm", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run)
        finally:
            os.close(run)
        st = os.fstat(self.dir)
        if st.st_uid != 0 or st.st_mode & 0o077:
            return "socket dir not root-only"
        self.log_fd = os.open(f"{self.key}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW,
                              0o600, dir_fd=self.dir)
        self.ctx = context(self.bundle, self.libc, os.environ)
        if fnv1a(self.ctx) != self.key:
            return f"context key {fnv1a(self.ctx)} is not the requested {self.key}; context:\n{self.ctx.decode()}"
        if b"\nSeccomp:\t0\n" not in self.ctx:
            return "under a seccomp filter"
        if os.path.realpath(os.path.join(self.bindir, ".skb")) != self.bundle:
            return "the bin dir no longer runs this bundle"
        self.lock = os.open(f"{self.key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600,
                            dir_fd=self.dir)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "another server holds this context"
        self.bundle_id = _ident(os.stat(self.bundle))
        self.own_ns = {ns: os.stat(f"/proc/self/ns/{ns}") for ns in NS}
        self.own_root = os.stat("/")
        self.label = self._own_label()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        tmp, path = f"{self.key}.sock.{os.getpid()}", f"{self.key}.sock"
        dpath = f"/proc/self/fd/{self.dir}/"
        self.sock.bind(dpath + tmp)
        os.rename(tmp, path, src_dir_fd=self.dir, dst_dir_fd=self.dir)
        self.sock_id = os.stat(path, dir_fd=self.dir, follow_symlinks=False)
        self.sock.listen(128)
        self.sock.setblocking(False)
        return None

    @staticmethod
    def _own_label():
        try:
            with open("/proc/self/attr/current", "rb") as f:
                return f.read().rstrip(b"\0\n") or None
        except OSError:
            return None

    @staticmethod
    def _peer_label(conn):
        try:
            return conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERSEC, 1024).rstrip(b"\0\n") or None
        except OSError as e:
            if e.errno in (errno.ENOPROTOOPT, errno.EOPNOTSUPP):
                return None
            raise

    # ------------------------------------------------------------------------------------ loop
    def serve(self):
        sel = select.epoll()
        self.sel = sel
        sel.register(self.sock.fileno(), select.EPOLLIN)
        signal.signal(signal.SIGTERM, lambda *_: self.stop("SIGTERM"))
        signal.signal(signal.SIGINT, lambda *_: self.stop("SIGINT"))
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.log(f"serving bundle {self.bundle} for {self.bindir}, key {self.key}")
        self.rehearsal = self.own_request()
        self.make_spare()
        next_tick = time.monotonic() + TICK
        while not (self.stopping and not self.children and not self.spare):
            timeout = max(0.0, next_tick - time.monotonic())
            try:
                events = sel.poll(timeout)
            except InterruptedError:
                events = []
            self.gone = set()
            for fd, _ in events:
                if fd in self.gone:  # closed (and its number maybe reused) by an earlier event's handling
                    continue
                if fd == self.sock.fileno():
                    self.accept()
                else:
                    self.reap(fd)
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + TICK
                self.tick()
        self.log(f"stopped: {self.stopping}; served {self.served}, refused {self.refused}")

    def stop(self, why):
        if self.stopping or os.getpid() != self.pid:  # (never in a child: the server's state is not its own)
            return
        self.stopping = why
        if self.spare:  # it sees its channel close and ends
            self.spare[2].close()
        self.gone.add(self.sock.fileno())  # (its number may be reused before this batch of events ends)
        try:
            self.sel.unregister(self.sock.fileno())
        except (OSError, ValueError):
            pass
        try:  # our name only: a newer server may have taken it
            st = os.stat(f"{self.key}.sock", dir_fd=self.dir, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (self.sock_id.st_dev, self.sock_id.st_ino):
                os.unlink(f"{self.key}.sock", dir_fd=self.dir)
        except OSError:
            pass
        self.sock.close()

    def current_bundle(self):
        """True while BINDIR/.skb still leads to our bundle dir (one stat: the same inode)."""
        try:
            return _ident(os.stat(os.path.join(self.bindir, ".skb"))) == self.bundle_id
        except OSError:
            return False

    def tick(self):
        if self.stopping:
            return
        if not self.current_bundle():
            return self.stop("the bundle was replaced (upgrade)")
        try:
            st = os.stat(f"/proc/self/fd/{self.dir}/{self.key}.sock", follow_symlinks=False)
            if (st.st_dev, st.st_ino) != (self.sock_id.st_dev, self.sock_id.st_ino):
                return self.stop("the socket was replaced")
            st = os.stat(WARM_DIR, follow_symlinks=False)
            here = os.fstat(self.dir)
            if (st.st_dev, st.st_ino) != (here.st_dev, here.st_ino):
                return self.stop("the socket dir was replaced")
        except OSError:
            return self.stop("the socket was removed")
        if not self.children and time.monotonic() - self.last > IDLE:
            return self.stop(f"idle for {IDLE:.0f} s")
        if not self.children:
            alone = self._alone_in()
            if alone:
                return self.stop(f"no other process in its {alone} namespace (its context is gone)")

    def _alone_in(self):
        """'net' or 'mount' when no process but ours shares that namespace with us (a finished sandbox;
        a caller such as `ip netns exec` that makes a mount namespace per call), else None. Other warm
        servers and their spares (comm "skb-warm") do not count: two servers must not keep each other."""
        mine = {str(os.getpid())} | {str(c[0]) for c in self.children.values()}
        if self.spare:
            mine.add(str(self.spare[0]))
        want = {"net": _ident(self.own_ns["net"]), "mnt": _ident(self.own_ns["mnt"])}
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid in mine:
                continue
            for kind in list(want):
                try:
                    if _ident(os.stat(f"/proc/{pid}/ns/{kind}")) == want[kind]:
                        with open(f"/proc/{pid}/comm") as f:
                            if f.read() != "skb-warm\n":
                                del want[kind]
                except OSError:
                    continue
            if not want:
                return None
        return "network" if "net" in want else "mount"

    def refuse(self, conn, reason, fds=()):
        self.refused[reason] = self.refused.get(reason, 0) + 1
        self.log(f"refused: {reason}")
        try:
            conn.send(b"R" + reason.encode())
        except OSError:
            pass
        conn.close()
        for fd in fds:
            os.close(fd)

    def accept(self):
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        t0 = time.monotonic()
        fds = []
        try:
            pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            for attempt in (0, 1):  # the request is usually there already: wait only if it is not
                try:
                    data, fds, flags, _ = socket.recv_fds(conn, 1 << 20, NFDS + 1,
                                                          socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC)
                    break
                except BlockingIOError:
                    if attempt or not select.select([conn], [], [], ACCEPT_WAIT)[0]:
                        return self.refuse(conn, "no-request")
        except OSError:
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        if uid != 0:
            return self.refuse(conn, "uid", fds)
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or not data:
            return self.refuse(conn, "message", fds)
        if data[:1] == b"S" and not fds:
            try:
                conn.send(json.dumps(self.status()).encode())
            except OSError:
                pass
            return conn.close()
        if data[:1] == b"Q" and not fds:
            self.stop("skb warm stop")
            try:
                conn.send(b"ok")
            except OSError:
                pass
            return conn.close()
        if data[:1] != b"W":
            return self.refuse(conn, "message", fds)
        self.last = t0  # a call, served or not, is activity; `skb warm status` is not (it must not keep us)
        reason, req = self.check(conn, data, fds, gid)
        if reason:
            return self.refuse(conn, reason, fds)
        self.fork(conn, req, fds, t0, data)

    def check(self, conn, data, fds, gid):
        """(refusal reason or None, parsed request)."""
        if self.stopping:
            return "stopping", None
        if len(fds) != NFDS:
            return "message", None
        try:
            req = parse_request(data)
        except ValueError:
            return "message", None
        if gid != os.getgid():
            return "gid", None
        sts = [os.fstat(fd) for fd in fds]
        for i, ns in enumerate(NS):
            own = self.own_ns[ns]
            if (sts[5 + i].st_dev, sts[5 + i].st_ino) != (own.st_dev, own.st_ino):
                return f"ns-{ns}", None
        if (sts[4].st_dev, sts[4].st_ino) != (self.own_root.st_dev, self.own_root.st_ino):
            return "root", None
        if req["C"][0] != self.ctx:
            return _first_difference(req["C"][0], self.ctx), None
        try:
            if self._peer_label(conn) != self.label:
                return "lsm-label", None
        except OSError:
            return "lsm-label", None
        if not self.current_bundle():
            self.stop("the bundle was replaced (upgrade)")
            return "bundle", None
        if req["P"][0].decode("utf-8", "replace") not in self.applets:
            return "applet", None
        if len(self.children) >= MAX_CHILDREN:
            return "busy", None
        for tag, size in (("U", 4), ("R", 16 * 16), ("M", 8), ("I", 8)):
            if len(req[tag][0]) != size:
                return "message", None
        # An environment that os.environ cannot represent exactly (an entry without "=", a name given
        # twice) would reach the plugin's own children differently: such a call goes by exec.
        names = [e.partition(b"=")[0] for e in req.get("E", ())]
        if any(b"=" not in e or not e.startswith(n) or not n for e, n in zip(req.get("E", ()), names)):
            return "environment", None
        if len(set(names)) != len(names):
            return "environment", None
        return None, req

    def _spawn(self, body):
        """Fork a child that runs body() and never returns; (pid, pidfd) watched, or None."""
        try:
            pid = os.fork()
        except OSError as e:  # EAGAIN, ENOMEM: no child, and the call goes by exec
            self.log(f"fork failed: {e}")
            return None
        if pid == 0:
            try:
                # The server's own handlers (they would stop the server from the child) go first; adopt()
                # then sets every disposition the call asks for.
                _signal.signal(signal.SIGTERM, _signal.SIG_DFL)
                _signal.signal(signal.SIGINT, _signal.default_int_handler)
                _signal.signal(signal.SIGHUP, _signal.SIG_DFL)
                if self.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0 and os.getppid() == self.pid:
                    body()
            finally:
                os._exit(CHILD_REFUSED)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # cannot happen for our own unreaped child; never leave one unwatched
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        self.sel.register(pidfd, select.EPOLLIN)
        return pid, pidfd

    def make_spare(self):
        """Fork the next child ahead of its call (PREFORK): it rehearses the adoption (so that the pages
        an adoption writes are already its own), then waits on a private socket for a call the server has
        checked, and does exactly what a child forked for that call would."""
        if not PREFORK or self.spare or self.stopping:
            return
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError as e:  # EMFILE, ENFILE: no spare; calls get a child forked for them
            self.log(f"no spare: {e}")
            return
        try:
            started_r, started_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            self.log(f"no spare: {e}")
            ours.close()
            theirs.close()
            return
        # Some spares report the pages their call wrote (see prefault): those do not prefault, so that
        # what they report is what a call writes, not what an earlier report told them to fault in.
        self.spares_made += 1
        learn = self.spares_made <= LEARN_FIRST or self.spares_made % LEARN_EVERY == 0

        def body():
            ours.close()
            os.close(started_r)
            # Its preparation waits until calls have been quiet for a moment: right after one, another
            # often follows (a DEL after an ADD, a burst), and this work would compete with it (on 2 CPUs,
            # and through the kernel's grace periods that deleting a link waits for). A call that comes
            # first is taken at once, unprepared.
            p = select.poll()
            p.register(theirs, select.POLLIN)
            if not p.poll(PREPARE_AFTER_MS):
                self.adopt(self.rehearsal, rehearse=True)
                self.applied = self.rehearsal
                if not learn:
                    self.prefault(theirs)
            data, fds, flags, _ = socket.recv_fds(theirs, 1 << 20, NFDS + 1, socket.MSG_CMSG_CLOEXEC)
            if not data or len(fds) != NFDS + 1 or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                return
            conn = socket.socket(fileno=fds[-1])
            self.child(conn, parse_request(data), fds[:-1], started_w, theirs if learn else None)

        made = self._spawn(body)
        theirs.close()
        os.close(started_w)
        if made:
            self.spare = (made[0], made[1], ours, started_r, learn)
        else:
            ours.close()
            os.close(started_r)

    def prefault(self, chan):
        """Fault in, writable, the pages that calls' children wrote (reported by them: _report_exit_early),
        so that this spare's call finds them already its own: a copy-on-write fault costs ~1.5 us a page,
        ~300 of them in a call otherwise. The total work is the same (the child would copy those pages
        anyway), but it is done before the call. Pages no longer mapped writable are skipped by the kernel
        (madvise fails for them), and without MADV_POPULATE_WRITE (Linux < 5.14) nothing is done. A call
        that arrives meanwhile is not kept waiting: the spare stops and takes it. Only pages inside this
        process's own private writable mappings (as /proc/self/maps lists them now) are touched: what the
        server has since unmapped, or mapped again shared or read-only, is left alone."""
        p = select.poll()
        p.register(chan, select.POLLIN)
        for first, count in _within(self.hot_runs, _private_writable()):
            for at in range(first, first + count, PREFAULT_STEP):
                self.libc.populate_write(at << PAGE_SHIFT, min(PREFAULT_STEP, first + count - at) << PAGE_SHIFT)
                if p.poll(0):
                    return

    def learn(self, data):
        """Add the pages a child reported (packed page numbers) to those the next spares fault in. Past
        HOT_MAX (the server's memory moved on, or calls differ widely), start again from this report."""
        if len(data) % 8 or len(data) // 8 > HOT_MAX:
            return
        before = len(self.hot)
        pages = struct.unpack(f"<{len(data) // 8}Q", data)
        self.hot.update(pages)
        if len(self.hot) > HOT_MAX:
            self.hot = set(pages)
        elif len(self.hot) == before:
            return
        runs = []
        for p in sorted(self.hot):
            if runs and runs[-1][0] + runs[-1][1] == p:
                runs[-1][1] += 1
            else:
                runs.append([p, 1])
        self.hot_runs = tuple((a, n) for a, n in runs)

    def fork(self, conn, req, fds, t0, data):
        """Hand the checked call to the spare (or a child forked now). "A" goes to the launcher first,
        so that its "G" travels while the child adopts the call."""
        try:
            conn.send(b"A")
        except OSError:
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        made = None
        if self.spare:
            pid, pidfd, chan, started, _ = self.spare
            self.spare = None
            try:
                socket.send_fds(chan, [data], fds + [conn.fileno()])
                made = pid, pidfd, started, chan  # the channel stays: the child may report its pages
            except OSError:  # it cannot take this call: end it now; the call gets a fresh child
                self.spares_lost += 1
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self.sel.unregister(pidfd)
                self.gone.add(pidfd)
                os.close(pidfd)
                os.close(started)
                chan.close()
        if made is None:
            started_r, started_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            made = self._spawn(lambda: self.child(conn, req, fds, started_w))
            os.close(started_w)
            if made:
                made = made + (started_r, None)
            else:
                os.close(started_r)
        for fd in fds:
            os.close(fd)
        if made is None:  # the call never started: the launcher goes by exec
            return self.refuse(conn, "fork")
        self.children[made[1]] = (made[0], conn, t0, time.monotonic() - t0, made[2], made[3])
        self.peak_children = max(self.peak_children, len(self.children))
        # The next spare is made once no call runs (reap): its work would delay this call's wake-ups
        # (a waking task can wait for the next timer tick before it preempts a running one).

    def reap(self, pidfd):
        self.sel.unregister(pidfd)
        self.gone.add(pidfd)
        if self.spare and self.spare[1] == pidfd:  # a spare that ended before getting a call
            os.waitpid(self.spare[0], 0)
            self.spare[2].close()
            os.close(self.spare[3])
            self.spare = None
            os.close(pidfd)
            self.spares_lost += 1
            return
        pid, conn, t0, tfork, started, chan = self.children.pop(pidfd)
        os.close(pidfd)
        try:
            self._reap(pid, conn, t0, tfork, started, chan)
        finally:
            self.last = time.monotonic()
            if not self.children:
                self.make_spare()

    def _reap(self, pid, conn, t0, tfork, started, chan):
        _, status, ru = os.wait4(pid, 0)
        if chan:
            try:
                self.learn(chan.recv(1 << 20, socket.MSG_DONTWAIT))
            except OSError:
                pass
            chan.close()
        try:
            ran = os.read(started, 1) == b"S"
        except BlockingIOError:
            ran = False
        os.close(started)
        if not ran:  # it ended before running the call (no "G", or adoption failed): exec is safe
            return self.refuse(conn, "adopt")
        self.served += 1
        # Pages the child faulted in (copied on write, or new): an upper bound of its own memory.
        self.child_rss = (self.child_rss + [(ru.ru_maxrss, ru.ru_minflt * (os.sysconf("SC_PAGE_SIZE") // 1024),
                                             tfork * 1000, (time.monotonic() - t0) * 1000)])[-64:]
        try:
            conn.send(b"X" + struct.pack("<i", status))
        except OSError:
            pass
        conn.close()

    def status(self):
        def median(i, q=0.5):
            v = sorted(x[i] for x in self.child_rss)
            return round(v[int(len(v) * q)], 3) if v else None
        return {"key": self.key, "pid": os.getpid(), "bundle": self.bundle, "binDir": self.bindir,
                "startedAt": self.started, "idleSeconds": round(time.monotonic() - self.last, 1),
                "served": self.served, "refused": self.refused, "children": len(self.children),
                "childPids": sorted(c[0] for c in self.children.values()),
                "peakChildren": self.peak_children, "prefork": PREFORK, "sparesLost": self.spares_lost,
                "sparePid": self.spare[0] if self.spare else None, "spareLearns": bool(self.spare and self.spare[4]),
                "sparesMade": self.spares_made, "prefaultPages": len(self.hot),
                "maxChildren": MAX_CHILDREN, "rssKB": _rss_kb(),
                "childMaxRssKB": median(0), "childFaultedKB": median(1), "acceptToForkMs": median(2),
                "acceptToExitMs": median(3), "acceptToExitP90Ms": median(3, 0.9),
                "acceptToForkP90Ms": median(2, 0.9), "stopping": self.stopping,
                # CPU time (user + system) of the server and of all its reaped children (calls, spares)
                "cpuSelfMs": _cpu_ms(resource.RUSAGE_SELF), "cpuChildrenMs": _cpu_ms(resource.RUSAGE_CHILDREN)}

    # ------------------------------------------------------------------------------------ the child
    def child(self, conn, req, fds, started, chan=None):
        """Become the call: adopt its fds and context, wait for the launcher's "G", say so to the server
        (the started pipe), run it as entry.py would. ``chan``: where to report the pages it wrote."""
        c = conn.fileno()
        # stdin, stdout, stderr and cwd of the caller; nothing else of the server stays open but the
        # connection (close-on-exec), which tells us when the launcher is gone, and the started pipe.
        for i in range(3):
            os.dup2(fds[i], i, inheritable=True)
        os.fchdir(fds[3])
        keep = sorted({0, 1, 2, c, started} | ({chan.fileno()} if chan else set()))
        for lo, hi in zip(keep, keep[1:] + [1 << 20]):
            if hi > lo + 1:
                os.closerange(lo + 1, hi)
        self.adopt(req)
        conn.setblocking(True)
        if conn.recv(8) != b"G":
            return
        os.write(started, b"S")
        os.close(started)
        # The call is ours now. If the launcher dies, the kernel kills us (SIGIO on hang-up, as SIGKILL).
        fcntl.fcntl(c, F_SETSIG, signal.SIGKILL)
        fcntl.fcntl(c, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(c, fcntl.F_SETFL, fcntl.fcntl(c, fcntl.F_GETFL) | os.O_ASYNC)
        p = select.poll()
        p.register(c, select.POLLIN | select.POLLHUP | select.POLLRDHUP)
        if p.poll(0):
            os._exit(1)  # the launcher went away between "G" and here
        _report_exit_early(conn, chan)
        self.run(sys.argv)  # never returns: ends with os._exit

    def adopt(self, req, rehearse=False):
        """Take on the call's umask, rlimits, signal dispositions and mask, environment, arguments and
        stdio objects. A spare first rehearses it with the server's own values (no change, but the
        memory it writes is then its own: fewer page faults once a call is waiting)."""
        signal.set_wakeup_fd(-1)
        # A spare has already taken on its rehearsal's values (self.applied): a value the call shares with
        # them needs no system call (the common case: one runtime, one set of limits).
        have = self.applied or {}
        if req["U"] != have.get("U"):
            os.umask(struct.unpack("<I", req["U"][0])[0])
        if req["R"] != have.get("R"):
            lims = struct.unpack("<32Q", req["R"][0])
            old = struct.unpack("<32Q", have["R"][0]) if "R" in have else ()
            for r in range(16):
                if lims[2 * r:2 * r + 2] == old[2 * r:2 * r + 2]:
                    continue
                soft, hard = (resource.RLIM_INFINITY if v == 0xFFFFFFFFFFFFFFFF else v for v in lims[2 * r:2 * r + 2])
                resource.setrlimit(r, (soft, hard))
        blocked = struct.unpack("<Q", req["M"][0])[0]
        ignored = struct.unpack("<Q", req["I"][0])[0]
        for sig in range(1, signal.NSIG) if req["I"] != have.get("I") else ():
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            want = _signal.SIG_IGN if ignored >> (sig - 1) & 1 else _signal.SIG_DFL
            # as Python's start-up does in every exec'd bundle process
            if sig in (signal.SIGPIPE, signal.SIGXFSZ):
                want = _signal.SIG_IGN
            elif sig == signal.SIGINT and want == _signal.SIG_DFL:
                want = _signal.default_int_handler
            try:
                if _signal.getsignal(sig) != want:  # Python's record of the disposition: no syscall
                    _signal.signal(sig, want)
            except (OSError, ValueError):
                pass
        # environment, as the interpreter builds os.environ at start-up (checked: every entry has a name
        # and "=", no name twice). The C environment gets the same.
        for k in list(os.environ):
            os.unsetenv(k)
        data = os.environ._data  # bytes -> bytes, exactly what os.environ holds at start-up on POSIX
        data.clear()
        for item in req.get("E", ()):
            k, _, v = item.partition(b"=")
            if k not in (b"_PYI_ARCHIVE_FILE", b"_PYI_PARENT_PROCESS_LEVEL", b"_PYI_LINUX_PROCESS_NAME"):
                os.putenv(k, v)  # (entry.py removes those three in an exec'd process)
                data[k] = v
        time.tzset()
        applet = req["P"][0].decode("utf-8", "surrogateescape")
        argv = [self.program, applet] + [os.fsdecode(a) for a in req.get("A", ())]
        stdio = _fresh_stdio()
        if rehearse:
            return
        sys.argv = argv
        sys.stdin, sys.stdout, sys.stderr = stdio
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = stdio
        self.libc.c.prctl(PR_SET_NAME, self.libc.ctypes.c_char_p(applet.encode()[:15]), 0, 0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, [s for s in range(1, 65) if blocked >> (s - 1) & 1
                                                    and s not in (signal.SIGKILL, signal.SIGSTOP)])

    def own_request(self):
        """A request made of this server's own state: what a spare rehearses with."""
        def rec(tag, b):
            return bytes([ord(tag)]) + struct.pack("<I", len(b)) + b
        mask = os.umask(0)
        os.umask(mask)
        lims = b"".join(struct.pack("<QQ", *(0xFFFFFFFFFFFFFFFF if v == resource.RLIM_INFINITY else v
                                             for v in resource.getrlimit(r))) for r in range(16))
        env = [k + b"=" + v for k, v in os.environ._data.items()]
        return parse_request(b"W" + rec("C", self.ctx) + rec("P", b"loopback") + rec("U", struct.pack("<I", mask))
                             + rec("R", lims) + rec("M", struct.pack("<Q", 0)) + rec("I", struct.pack("<Q", 0))
                             + b"".join(rec("E", e) for e in env))


def _report_exit_early(conn, chan=None):
    """The call ends in os._exit(code) once its output is flushed (entry.run, skel.main): send the
    launcher "X" with that status right there, so that it need not wait for this process's teardown and
    the server's wake-up. (A killed child is still reported by the server; a process forked by the plugin
    that calls os._exit does not send.) Then, the launcher gone, report to the server over ``chan`` the
    pages this process wrote (its spare's rehearsal, adoption and the call), for the next spares."""
    real_exit, me, c = os._exit, os.getpid(), conn.fileno()

    def _exit(code):
        try:
            if os.getpid() == me:
                # The caller's stdio goes first (its output is flushed: nothing is buffered past os._exit):
                # a runtime reading pipes waits for their last writer, and this process's teardown (and its
                # page report) comes after the launcher is gone, as an exec'd plugin's would be done by then.
                os.closerange(0, 3)
                try:  # disarm the launcher-death SIGKILL first: the launcher ends as soon as it has read this
                    fcntl.fcntl(c, fcntl.F_SETFL, fcntl.fcntl(c, fcntl.F_GETFL) & ~os.O_ASYNC)
                    conn.send(b"X" + struct.pack("<i", (code & 0xFF) << 8))
                except (OSError, TypeError):
                    pass
                if chan:
                    chan.send(_written_pages())
        except BaseException:  # (a report is never worth more than the exit itself)
            pass
        finally:
            real_exit(code)
    os._exit = _exit


def _private_writable():
    """(first page, end page) of this process's private writable mappings, but the kernel's own ([vsyscall],
    [vvar], [vdso]), in address order, from /proc/self/maps."""
    out = []
    with open("/proc/self/maps", "rb") as f:
        lines = f.read().splitlines()
    for line in lines:
        m = line.split()
        if len(m) < 5 or m[1][1:2] != b"w" or m[1][3:4] != b"p" or (len(m) > 5 and m[5].startswith(b"[v")):
            continue
        out.append(tuple(int(x, 16) >> PAGE_SHIFT for x in m[0].split(b"-")))
    return out


def _within(runs, ranges):
    """The parts of the (first, count) page runs that lie inside the (first, end) ranges; both sorted."""
    out, i = [], 0
    for first, count in runs:
        end = first + count
        while i < len(ranges) and ranges[i][1] <= first:
            i += 1
        j = i
        while j < len(ranges) and ranges[j][0] < end:
            lo, hi = max(first, ranges[j][0]), min(end, ranges[j][1])
            if lo < hi:
                out.append((lo, hi - lo))
            j += 1
    return out


def _written_pages():
    """Page numbers of this process's private writable memory that only it maps (written since the fork,
    or new), packed: what /proc/self/pagemap says (present and exclusively mapped). Nothing when there are
    more than HOT_MAX of them: such a call is not one to prepare the next ones for."""
    out = []
    fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    try:
        want = PM_PRESENT | PM_EXCLUSIVE
        for lo, hi in _private_writable():
            data = os.pread(fd, (hi - lo) * 8, lo * 8)
            out += [lo + i for i, v in enumerate(memoryview(data).cast("Q")) if v & want == want]
            if len(out) > HOT_MAX:
                return b""
    finally:
        os.close(fd)
    return struct.pack(f"<{len(out)}Q", *out)


def _fresh_stdio():
    """New sys.std* objects on fds 0, 1, 2 configured as the interpreter configured the server's (which
    were made for /dev/null: not a terminal, like every caller's that warm start serves)."""
    import io
    new = []
    for fd, old, mode, name in ((0, sys.__stdin__, "rb", "<stdin>"), (1, sys.__stdout__, "wb", "<stdout>"),
                                (2, sys.__stderr__, "wb", "<stderr>")):
        buf = io.open(fd, mode, buffering=-1, closefd=False)
        buf.raw.name = name
        new.append(io.TextIOWrapper(buf, encoding=old.encoding, errors=old.errors, newline="\n",
                                    line_buffering=old.line_buffering, write_through=old.write_through))
    return new


def _ident(st):
    return st.st_dev, st.st_ino


def _cpu_ms(who):
    ru = resource.getrusage(who)
    return round((ru.ru_utime + ru.ru_stime) * 1000, 3)


def _rss_kb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def serve(argv, run, applets):
    """``skb-cni --warm-serve KEY BINDIR`` (started by a launcher, detached): serve until told or idle.
    ``run`` and ``applets`` are the entry's own (build/entry.py): the function that runs a call and the
    applet table (name -> module), whose plugin modules are imported here, before any call."""
    if len(argv) != 4 or os.getuid() != 0 or len(argv[2]) != 16 or argv[2].strip("0123456789abcdef"):
        os._exit(2)
    server = Server(argv[2], argv[3], run, applets)
    server.pid = os.getpid()
    try:
        why = server.setup()
    except OSError as e:
        why = f"setup failed: {e}"
    if why:
        server.log(f"not serving: {why}")
        os._exit(1)
    # Everything a call can import, imported once here: the children start with it (and the pages are
    # shared until written). Plugin modules only read their environment when called.
    for module in server.applets.values():
        __import__(module, fromlist=["main"])
    import gc
    gc.freeze()
    try:
        server.serve()
    except Exception as e:  # log, and let launchers go by exec (the socket is gone with us)
        server.log(f"crashed: {type(e).__name__}: {e}")
        server.stop("crashed")
    os._exit(0)


# ---------------------------------------------------------------------------------------- clients

def _ask(path, what, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    try:
        s.connect(path)
        pid, uid, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
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
            out.append(json.loads(_ask(path, b"S")))
        except (OSError, ValueError) as e:
            out.append({"key": key, "error": str(e)})
    return out


def stop_all(wait=10.0):
    """Ask every server to stop; wait until each has ended (its in-flight calls finish first)."""
    stopped = []
    for key, path in servers():
        try:
            st = json.loads(_ask(path, b"S"))
            _ask(path, b"Q")
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
