"""The warm-start server: its life (start, serve, end) and its event loop.

Started by a launcher as ``skb-cni --warm-serve KEY BINDIR``. Every socket is non-blocking and every wait
has a deadline: a client that connects and says nothing, or never reads, costs a legitimate call nothing
but a slot among MAX_PENDING. No failure of one call (fork, socketpair, a send) ends the loop: the call is
refused and goes by exec. docs/WARM.md, "Lifecycle", says when a server ends.
"""
import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import stat
import sys
import time

from skb.plugin.warm import admission, children, company, snapshot, spare, wire

RUN_DIR = "/run/skb-cni"
WARM_DIR = RUN_DIR + "/warm"
IDLE = 600.0            # seconds without a call before a server exits
TICK = 2.0              # seconds between lifecycle checks
STOP_POLL = 0.005       # seconds between two looks at the launchers of calls in flight (stopped?)
STOP_POLL_LONG = 0.05   # the same once every call in flight is older than LONG_CALL (a hung call, review 16)
LONG_CALL = 1.0
MAX_CHILDREN = 32       # calls in flight at once; beyond, refused (-> exec)
MAX_PENDING = 64        # connections accepted whose request has not arrived; beyond, the oldest is dropped
REQUEST_WAIT = 0.5      # seconds a connected client has to send its request
LOG_MAX = 256 * 1024
# The server's own limits, whatever its first caller's were (a child takes on each call's): enough fds
# for MAX_CHILDREN calls of MAX_FDS each and the pending connections. A server that cannot have at least
# MIN_NOFILE (its first caller's hard limit was lower, and it may not raise it: no CAP_SYS_RESOURCE) does
# not start: calls go by exec until a caller with a usual limit starts one.
OWN_NOFILE = 65536
MIN_NOFILE = 4096


class Pending:
    """An accepted connection whose request has not arrived yet."""
    __slots__ = ("sock", "peer", "accepted", "deadline")

    def __init__(self, sock, peer, accepted):
        self.sock, self.peer, self.accepted, self.deadline = sock, peer, accepted, accepted + REQUEST_WAIT


def check_dir(path, forbidden):
    """fd of a root-owned dir nobody else may write (or, forbidden=0o077, enter); never via a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & forbidden:
        os.close(fd)
        raise PermissionError(f"{path} is not a root-only directory (uid {st.st_uid}, mode {st.st_mode & 0o7777:o})")
    return fd


def own_limits():
    """Limits of the server's own, independent of the caller that started it: a caller with ``ulimit -n 40``
    must not leave the server unable to serve a burst. Failures (a limit the kernel caps) are ignored."""
    inf, unbounded = resource.RLIM_INFINITY, ("NPROC", "SIGPENDING", "CPU", "AS", "DATA", "FSIZE")
    for r, soft, hard in [(resource.RLIMIT_NOFILE, OWN_NOFILE, OWN_NOFILE)] + [
            (getattr(resource, f"RLIMIT_{n}"), inf, inf) for n in unbounded]:
        try:
            resource.setrlimit(r, (soft, hard))
        except (OSError, ValueError):  # no CAP_SYS_RESOURCE: the soft limit as far as the hard one allows
            try:
                hard = resource.getrlimit(r)[1]
                if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
                    soft = hard
                resource.setrlimit(r, (soft, hard))
            except (OSError, ValueError):
                pass


def _ident(st):
    return st.st_dev, st.st_ino


class Server:
    def __init__(self, key, bindir, run, applets):
        self.key, self.bindir, self.run = key, bindir, run
        self.bundle = os.path.dirname(sys._MEIPASS)
        self.program = os.path.join(self.bundle, "skb-cni")
        self.applets = {a: m for a, m in applets.items() if a != "skb"}  # the plugin applets only
        self.pid = os.getpid()
        self.started = time.time()
        self.last = time.monotonic()
        self.max_children = MAX_CHILDREN
        self.children = children.Children(self)
        self.pending, self.served, self.refused = {}, 0, {}    # (pending: fd -> Pending)
        self.peak_children = 0
        self.stopped_launchers = 0  # calls the server stopped because their launcher was stopped
        self.gone = set()           # fds closed while handling the current batch of events
        self.figures = []           # (ru_maxrss KB, faulted-in KB, hand-off ms, accept-to-exit ms), last 64
        self.stopping = None
        self.log_fd = -1
        self.proof_id = None
        self.sel = None
        # The locale the interpreter configured its stdio with at start-up (fixed for its life).
        self.locale = snapshot.locale_of(os.environ._data)

    # ------------------------------------------------------------------ setup
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

    def own_key(self):
        return snapshot.fnv1a(snapshot.key_part(self.bundle, self.locale))

    def setup(self):
        run = check_dir(RUN_DIR, 0o022)
        try:
            self.dir = os.open("warm", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run)
        finally:
            os.close(run)
        st = os.fstat(self.dir)
        if st.st_uid != 0 or st.st_mode & 0o077:
            return "socket dir not root-only"
        # (O_NONBLOCK: a FIFO planted at the name would block the open, and this server for ever)
        self.log_fd = os.open(f"{self.key}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
                              | os.O_NONBLOCK, 0o600, dir_fd=self.dir)
        if not stat.S_ISREG(os.fstat(self.log_fd).st_mode):
            self.log_fd = -1    # (never written to: not ours)
            return "its log's name holds something other than a regular file"
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile < MIN_NOFILE:
            return f"its fd limit is {nofile} (its first caller's), below {MIN_NOFILE}, and cannot be raised"
        if resource.getrlimit(resource.RLIMIT_STACK)[0] == resource.RLIM_INFINITY:
            return ("an infinite stack limit (its first caller's) gave it the legacy memory layout, which its "
                    "children would keep")
        text = snapshot.key_part(self.bundle, self.locale)
        if snapshot.fnv1a(text) != self.key:
            return f"context key {snapshot.fnv1a(text)} is not the requested {self.key}; context:\n{text.decode()}"
        if b"\nSeccomp:\t0\n" not in text:
            return "under a seccomp filter"
        if (why := children.memory_refusal()) is not None:   # (it and its spares count there)
            return why
        # A caller that makes a cgroup, a session or a namespace per call (the one that started us being
        # alone there with us) would find us there after it, for nothing: its next call is another context
        # (review 16: a cgroup could not be removed at once; servers that never served kept others out)
        caller = os.environ.pop("SKB_WARM_CALLER", "")
        if caller.isdigit() and (alone := self.alone_in(also={caller})) is not None:
            return f"its first caller was alone in its {alone} (one made for the call)"
        if os.path.realpath(os.path.join(self.bindir, ".skb")) != self.bundle:
            return "the bin dir no longer runs this bundle"
        self.lock = os.open(f"{self.key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600,
                            dir_fd=self.dir)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "another server holds this context"
        self.bundle_id = _ident(os.stat(self.bundle))
        self.proof_id = admission.make_proof(self.key)
        if self.proof_id is None:
            return f"fd {admission.PROOF_FD} is taken"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        admission.pass_rights(self.sock, False)  # (its connections too: no fd reaches a request's reader)
        tmp, path = f"{self.key}.sock.{os.getpid()}", f"{self.key}.sock"
        self.sock.bind(f"/proc/self/fd/{self.dir}/" + tmp)
        try:
            os.rename(tmp, path, src_dir_fd=self.dir, dst_dir_fd=self.dir)
        except OSError as e:  # (a directory there, say: the name bound is ours to remove, one per start)
            os.unlink(tmp, dir_fd=self.dir)
            return f"its socket's name cannot be had: {e}"
        self.sock_id = _ident(os.stat(path, dir_fd=self.dir, follow_symlinks=False))
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.children.lowers = spare.priority_comes_back()    # (then None: nothing keeps it from serving)

    def failpoint(self):
        """A test's failpoint for this server's next spares: the name in ``<key>.failpoint`` in the
        root-only socket dir (tests/warm: "stop-before-begin", "never-prepared"), or None. Read once per spare."""
        try:
            fd = os.open(f"{self.key}.failpoint", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=self.dir)
        except OSError:
            return None
        try:
            return os.read(fd, 64).strip().decode("ascii", "replace") or None
        except OSError:
            return None
        finally:
            os.close(fd)

    def forget_in_child(self):
        """In a freshly forked spare: the server's sockets are not its own (it closes their numbers, but
        the listening socket's, which it returns: a prepared spare accepts calls itself)."""
        self.pending = {}
        return self.sock.detach()

    # ------------------------------------------------------------------ loop
    def watch(self, fd):
        self.sel.register(fd, select.EPOLLIN)

    def listen_when_needed(self):
        """Accept calls here only while no spare is ready to accept them itself (the kernel would wake us
        too, and the server's hop is the slower path)."""
        want = not self.stopping and not self.children.ready_spares()
        if want != self.listening:
            if want:
                self.watch(self.sock.fileno())
            else:
                self.unwatch(self.sock.fileno())
            self.listening = want

    def took(self, call):
        """A spare accepted a call itself."""
        self.last = call.accepted
        self.peak_children = max(self.peak_children, len(self.children.calls))

    def forwarded(self, conn, kind, accepted):
        """A connection a spare passed on: a control request, or ("?") a call whose request had not come
        yet: it waits here, with its deadline from when the spare accepted it, as one the server accepted."""
        if kind == b"?":
            try:
                conn.setblocking(False)
                peer = admission.Peer(conn)
            except OSError:
                return conn.close()
            if not self.request(conn, peer, accepted, first=True):
                self.pend(conn, peer, accepted)
            return None
        return self.control(conn, kind)

    def control(self, conn, kind):
        """A status or stop request (accepted here, or by a spare that passed it on)."""
        conn.setblocking(False)
        if kind == wire.STATUS:
            self.answer(conn, json.dumps(self.status()).encode())
        else:
            self.stop("skb warm stop")
            self.answer(conn, b"ok")

    def unwatch(self, fd):
        self.gone.add(fd)
        try:
            self.sel.unregister(fd)
        except (OSError, ValueError, KeyError):
            pass

    def serve(self):
        self.sel = select.epoll()
        self.listening = False
        signal.signal(signal.SIGTERM, lambda *_: self.stop("SIGTERM"))
        signal.signal(signal.SIGINT, lambda *_: self.stop("SIGINT"))
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.log(f"serving bundle {self.bundle} for {self.bindir}, key {self.key}")
        next_tick = time.monotonic() + TICK
        more = self.children.fill()
        self.listen_when_needed()
        while not (self.stopping and not self.children.calls and not self.children.spares):
            now = time.monotonic()
            wake = next_tick
            if self.pending:
                wake = min(wake, min(p.deadline for p in self.pending.values()))
            if self.children.calls:
                young = now - max(c.accepted for c in self.children.calls.values()) < LONG_CALL
                wake = min(wake, now + (STOP_POLL if young else STOP_POLL_LONG))
            try:
                events = self.sel.poll(0 if more else max(0.0, wake - now))
            except InterruptedError:
                events = []
            self.gone = set()
            for fd, _ in events:
                if fd in self.gone:  # closed (and its number maybe reused) by an earlier event's handling
                    continue
                try:
                    self.dispatch(fd)
                except Exception as e:  # one call's trouble never ends the server
                    self.log(f"error handling fd {fd}: {type(e).__name__}: {e}")
            now = time.monotonic()
            for fd, p in list(self.pending.items()):
                if now >= p.deadline:
                    self.drop_pending(fd)
                    self.refuse(p.sock, "no-request")
            if self.children.calls:
                self.children.follow_launchers()
            if now >= next_tick:
                next_tick = now + TICK
                try:
                    self.tick()
                except Exception as e:
                    self.log(f"error in lifecycle check: {type(e).__name__}: {e}")
            # Spares are forked when no connection waits to be accepted (a fork delays the next accept).
            more = not self.pending and not self.waiting() and self.children.fill()
            self.listen_when_needed()
        self.log(f"stopped: {self.stopping}; served {self.served}, refused {self.refused}")

    def waiting(self):
        """True when a connection waits in the listening socket's queue (and no spare will take it)."""
        if self.stopping or not self.listening:
            return False
        return bool(select.select([self.sock], [], [], 0)[0])

    def dispatch(self, fd):
        if not self.stopping and fd == self.sock.fileno():
            return self.accept()
        if fd in self.pending:
            p = self.drop_pending(fd)
            return self.request(p.sock, p.peer, p.accepted)
        if self.children.owns(fd):
            return self.reap(fd)
        if self.children.spare_said(fd) or self.children.child_pid(fd):
            return
        self.unwatch(fd)  # (nothing of ours: never spin on it)

    def drop_pending(self, fd):
        p = self.pending.pop(fd)
        self.unwatch(fd)
        return p

    def accept(self):
        for _ in range(MAX_PENDING):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE, ENFILE, ENOBUFS: the queue stays (after a stop: the socket is closed)
                return None if self.stopping else self.log(f"accept failed: {e}")
            accepted = time.monotonic()
            try:
                conn.setblocking(False)
                peer = admission.Peer(conn)
            except OSError:
                conn.close()
                continue
            if not self.request(conn, peer, accepted, first=True):
                self.pend(conn, peer, accepted)

    def pend(self, conn, peer, accepted):
        """Wait here, with its deadline, for a connection's request."""
        if len(self.pending) >= MAX_PENDING:  # the oldest silent client makes room
            oldest = min(self.pending, key=lambda f: self.pending[f].accepted)
            self.refuse(self.drop_pending(oldest).sock, "no-request")
        self.pending[conn.fileno()] = Pending(conn, peer, accepted)
        self.watch(conn.fileno())

    def request(self, conn, peer, accepted, first=False):
        """Read and act on a connection's request. False when it has not arrived yet (first look only)."""
        try:
            data, fds, truncated = wire.recv_with_fds(conn, wire.MAX_REQUEST, wire.MAX_FDS)
        except BlockingIOError:
            if first:
                return False
            conn.close()
            return True
        except OSError:
            conn.close()
            return True
        if not data:
            self.close_fds(fds)
            conn.close()
            return True
        kind = data[:1]
        if kind in (wire.STATUS, wire.STOP) and not fds:
            if peer.uid != 0:
                self.refuse(conn, "uid")
            else:
                self.control(conn, kind)
            return True
        if kind != wire.CALL:
            self.close_fds(fds)
            self.refuse(conn, "message")
            return True
        self.last = accepted  # a call, served or not, is activity; `skb warm status` is not
        if len(self.children.calls) >= self.max_children:
            self.reap_ended()
        reason, req = admission.admit(self, conn, peer, data, fds, truncated)
        if reason:
            self.close_fds(fds)
            self.refuse(conn, reason)
            return True
        call = self.children.hand(data, conn, peer.pid, accepted)
        if call is None:
            self.refuse(conn, "fork")
            return True
        self.children.rehearsal = data  # (its child answers ACCEPTED: adopt._go)
        self.peak_children = max(self.peak_children, len(self.children.calls))
        return True

    def reap_ended(self):
        """Reap, now, every call whose holder has ended (its pidfd is readable) but whose event this loop has
        not handled yet: in a burst the loop lags behind, and a call that has ended must not count as in
        flight against the cap (it would refuse a call as `busy` with far fewer running)."""
        poll = select.poll()
        for fd in self.children.calls:
            poll.register(fd, select.POLLIN)
        for fd, _ in poll.poll(0):
            self.reap(fd)

    def reap(self, pidfd):
        got = self.children.reap(pidfd)
        if got is None:
            return
        call, began, refusal, status, ru = got
        self.last = time.monotonic()
        if began:
            self.served += 1
            if ru is not None:
                self.figures = (self.figures + [(ru.ru_maxrss, ru.ru_minflt * (os.sysconf("SC_PAGE_SIZE") // 1024),
                                                 call.handoff_ms, (time.monotonic() - call.accepted) * 1000)])[-64:]
            if call.stopped:
                self.stopped_launchers += 1
        else:  # it ended before beginning the call: the launcher goes by exec (whatever we send)
            key, reason = refusal or (False, "launcher-gone" if call.killed else "adopt")
            self.count(reason)
            reason = reason.split(":")[0]
            # A difference in the key part: a caller of another context (a socket reached by another
            # name), or this server's own context has moved (another cgroup, say). Only the latter ends it.
            if key and self.own_key() != self.key:
                self.stop(f"its context has drifted ({reason}): a new server will start")
        self.send(call.conn, wire.exited(status))
        call.conn.close()

    def send(self, conn, msg):
        try:
            conn.send(msg, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except OSError:
            pass

    def answer(self, conn, msg):
        self.send(conn, msg)
        conn.close()

    # Refusals that say no call of that caller will ever be served here: the server ends, and the caller's
    # next call starts one of its own (the launcher starts at most one per 10 s per context).
    ENDS_IT = {"nice": "a caller at a higher priority than its children can take",  # (no CAP_SYS_NICE)
               "landlock": "a caller outside its Landlock domain"}  # (it was started by a confined caller)

    def count(self, reason):
        """Count a refusal by its kind ("kind: details" is logged whole)."""
        kind = reason.split(":")[0]
        self.refused[kind] = self.refused.get(kind, 0) + 1
        self.log(f"refused: {reason}")
        if kind in self.ENDS_IT:
            self.stop(f"{self.ENDS_IT[kind]}: a new server will start")

    def refuse(self, conn, reason):
        self.count(reason)
        self.answer(conn, wire.REFUSED + reason.encode())

    @staticmethod
    def close_fds(fds):
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    # ------------------------------------------------------------------ lifecycle
    def stop(self, why):
        if self.stopping or os.getpid() != self.pid:  # (never in a child: the server's state is not its own)
            return
        self.stopping = why
        self.children.release_spares()
        self.unwatch(self.sock.fileno())
        try:  # spares waiting on it see it hang up, and end
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:  # our name only: a newer server may have taken it
            st = os.stat(f"{self.key}.sock", dir_fd=self.dir, follow_symlinks=False)
            if _ident(st) == self.sock_id:
                os.unlink(f"{self.key}.sock", dir_fd=self.dir)
        except OSError:
            pass
        self.sock.close()
        for fd in list(self.pending):
            self.refuse(self.drop_pending(fd).sock, "stopping")

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
            if _ident(st) != self.sock_id:
                return self.stop("the socket was replaced")
            if _ident(os.stat(WARM_DIR, follow_symlinks=False)) != _ident(os.fstat(self.dir)):
                return self.stop("the socket dir was replaced")
        except OSError:
            return self.stop("the socket was removed")
        if self.own_key() != self.key:  # moved to another cgroup, say: callers of this key are elsewhere
            return self.stop("its context has drifted from its key")
        if not self.children.calls and time.monotonic() - self.last > IDLE:
            return self.stop(f"idle for {IDLE:.0f} s")
        if not self.children.calls:
            alone = self.alone_in()
            if alone:
                return self.stop(f"no other process in its {alone} (its context is gone)")

    def alone_in(self, also=()):
        """Where no process but ours (and ``also``: pids) is with us, else None (company.alone)."""
        return company.alone({str(self.pid)} | {str(c.pid) for c in self.children.calls.values()} |
                              {str(s.pid) for s in self.children.spares} | {str(p) for p in also})

    def status(self):
        def median(i, q=0.5):
            v = sorted(x[i] for x in self.figures)
            return round(v[int(len(v) * q)], 3) if v else None
        ch = self.children
        spares = [{"pid": s.pid, "learns": s.learns, "ready": s.ready, "prepared": s.prepared,
                   "ownKB": _own_kb(s.pid)} for s in ch.spares]
        return {"key": self.key, "pid": os.getpid(), "bundle": self.bundle, "binDir": self.bindir,
                "startedAt": self.started, "idleSeconds": round(time.monotonic() - self.last, 1),
                "served": self.served, "refused": self.refused, "children": len(ch.calls),
                "childPids": sorted(c.pid for c in ch.calls.values() if c.pid), "pending": len(self.pending),
                "peakChildren": self.peak_children, "pool": children.POOL, "spares": spares,
                "sparesLost": ch.lost, "sparesMade": ch.made, "sparesLowerPriority": ch.lowers,
                "dedicatedMade": ch.dedicated, "stoppedWithLauncher": self.stopped_launchers,
                "sparePid": spares[0]["pid"] if spares else None, "spareLearns": bool(spares and spares[0]["learns"]),
                "prefaultPages": len(ch.learnt.pages), "maxChildren": self.max_children, "rssKB": _rss_kb(),
                "fds": len(os.listdir("/proc/self/fd")) - 1,
                "childMaxRssKB": median(0), "childFaultedKB": median(1), "acceptToForkMs": median(2),
                "acceptToExitMs": median(3), "acceptToExitP90Ms": median(3, 0.9),
                "acceptToForkP90Ms": median(2, 0.9), "stopping": self.stopping,
                # CPU time (user + system) of the server and of all its reaped children (calls, spares)
                "cpuSelfMs": _cpu_ms(resource.RUSAGE_SELF), "cpuChildrenMs": _cpu_ms(resource.RUSAGE_CHILDREN)}


def _cpu_ms(who):
    ru = resource.getrusage(who)
    return round((ru.ru_utime + ru.ru_stime) * 1000, 3)


def _rss_kb(pid="self"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _own_kb(pid):
    """A spare's own memory: its private (not shared with the server) resident pages, from smaps_rollup."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except (OSError, ValueError, IndexError):
        return 0


def serve(argv, run, applets):
    """``skb-cni --warm-serve KEY BINDIR`` (started by a launcher, detached): serve until told or idle.
    ``run`` and ``applets`` are the entry's own (build/entry.py): the function that runs a call and the
    applet table (name -> module), whose plugin modules are imported here, before any call."""
    if len(argv) != 4 or os.getuid() != 0 or len(argv[2]) != 16 or argv[2].strip("0123456789abcdef"):
        os._exit(2)
    own_limits()
    server = Server(argv[2], argv[3], run, applets)
    try:
        why = server.setup()
    except OSError as e:
        why = f"setup failed: {e}"
    if why:
        server.log(f"not serving: {why}")
        os._exit(1)
    # Everything a call can import, imported once here: the children start with it, its pages shared until
    # written. Plugin modules read their environment only when called, and name their late imports.
    for module in server.applets.values():
        for name in getattr(__import__(module, fromlist=["main"]), "LATE_IMPORTS", ()):
            __import__(name)
    gc.freeze()
    try:
        server.serve()
    except Exception as e:  # log, and let launchers go by exec (the socket is gone with us)
        server.log(f"crashed: {type(e).__name__}: {e}")
        server.stop("crashed")
    os._exit(0)

