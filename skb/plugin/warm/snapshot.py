"""The snapshot: a process's inherited state as text, built byte for byte as build/warm_snapshot.c builds it.

Its key part (up to the line ``adopt``) is what a forked child can never take on (namespaces, root,
credentials, cgroup, session, ...): its hash names the server's socket, so callers of different contexts
never meet. Its adopted part is what the child sets to the caller's values (docs/WARM.md has the table of
every row, and why). The launcher sends its own snapshot with each call; the child, once it has adopted
the call, builds its own and begins only if the two are equal (``expected`` accounts for what Python's
start-up changes in an exec'd plugin).
"""
import fcntl
import os
import resource
import signal

from skb.plugin.warm import syscalls
from skb.plugin.warm.wire import NS

VERSION_LINE = b"skb-warm 2\n"
ADOPT_LINE = b"adopt\n"
KEY_STATUS = (b"Uid:", b"Gid:", b"Groups:", b"CapInh:", b"CapPrm:", b"CapEff:", b"CapBnd:", b"CapAmb:", b"NoNewPrivs:",
              b"Seccomp:", b"Seccomp_filters:", b"Mems_allowed_list:")
ADOPTED_STATUS = (b"Umask:", b"TracerPid:", b"SigPnd:", b"ShdPnd:", b"SigBlk:", b"SigIgn:", b"Cpus_allowed_list:")
LOCALE = (b"LC_ALL", b"LC_CTYPE", b"LANG")
NLIMITS = 16
INFINITY = 0xFFFFFFFFFFFFFFFF
# what Python's start-up does to an exec'd plugin's signals: SIGPIPE and SIGXFSZ ignored
PYTHON_IGNORES = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))


def _di(st):
    return b"%d:%d" % (st.st_dev, st.st_ino)


def _value(path):
    v = syscalls.read_small(path)
    if v is None:
        return b"none"
    v = v.rstrip(b"\n\0")
    return v or b"none"


def _ksm():
    """KSM's merge-any flag (systemd's MemoryKSM=), from /proc/self/ksm_stat; "none" without KSM."""
    text = syscalls.read_small("/proc/self/ksm_stat")
    at = text.find(b"ksm_merge_any ") if text else -1
    return b"none" if at < 0 else text[at + 14:].split(b"\n")[0]


def _status_lines(status, keys):
    return b"".join(line + b"\n" for line in status.split(b"\n") if line.startswith(keys))


def _head(bundle):
    out = [VERSION_LINE, b"bundle ", os.fsencode(bundle), b"\n"]
    for ns in NS:
        out += [b"ns ", ns.encode(), b" ", _di(os.stat(f"/proc/self/ns/{ns}")), b"\n"]
    out += [b"root ", _di(os.stat("/")), b"\n"]
    return b"".join(out)


def _tail1():
    return (b"sid %d\nloginuid %s\nsessionid %s\npersonality %d\nsecurebits %d\ndumpable %d\nkeyring %d\n"
            b"reqkey %d\nsecure %d\nsubreaper %d\nkeepcaps %d\nmdwe %d\n"
            % (os.getsid(0), _value("/proc/self/loginuid"), _value("/proc/self/sessionid"),
               syscalls.personality(), syscalls.prctl(syscalls.PR_GET_SECUREBITS),
               syscalls.prctl(syscalls.PR_GET_DUMPABLE), syscalls.session_keyring(), syscalls.reqkey_keyring(),
               syscalls.at_secure(), syscalls.prctl_int(syscalls.PR_GET_CHILD_SUBREAPER),
               syscalls.prctl(syscalls.PR_GET_KEEPCAPS), syscalls.prctl(syscalls.PR_GET_MDWE)))


def _tail2(locale_lines):
    return (b"autogroup %s\nlabel %s\n" % (_value("/proc/self/autogroup").split(b" ")[0],
                                             _value("/proc/self/attr/current"))
            + locale_lines + ADOPT_LINE)


def _core_sched():
    cookie = syscalls.core_sched_cookie()  # (another process may set it: PR_SCHED_CORE_SHARE_TO)
    return b"core_sched %s\n" % (b"none" if cookie is None else b"%d" % cookie)


def _mempolicy():
    mp = syscalls.mempolicy()
    return b"mempolicy %s\n" % (b"%d %s" % (mp[0], b",".join(b"%x" % w for w in mp[1])) if mp else b"none")


def _itimers():
    return b"itimers %d %d %d\n" % tuple(int(signal.getitimer(w)[0] > 0)
                                         for w in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF))


# The adopted lines only this process can change (prctl on itself, setitimer, KSM): a prepared
# spare reads them once, and again only those its adoption changed.
SELF_ONLY = {
    b"thp_disable": lambda: b"thp_disable %d\n" % syscalls.prctl(syscalls.PR_GET_THP_DISABLE),
    b"spec": lambda: b"spec %d %d %d\n" % syscalls.speculation(),
    b"tsc": lambda: b"tsc %d\n" % syscalls.prctl_int(syscalls.PR_GET_TSC),
    b"mce_kill": lambda: b"mce_kill %d\n" % syscalls.prctl(syscalls.PR_MCE_KILL_GET),
    b"io_flusher": lambda: b"io_flusher %d\n" % syscalls.prctl(syscalls.PR_GET_IO_FLUSHER),
    b"ksm": lambda: b"ksm %s\n" % _ksm(),
    b"itimers": _itimers,
}


class Snapshot:
    """This process's snapshot text. Everything is read when asked, except, once ``keep()`` has run (a
    spare, in its preparation), what only this process itself could change since: its namespaces and
    root (setns, unshare, chroot act on the caller only), credentials and capabilities, personality,
    securebits, keyrings, session, audit login, LSM label, and the SELF_ONLY adopted lines. What another
    process can change (cgroup, cpuset, scheduling, nice, ioprio, timer slack, oom_score_adj, coredump
    filter, limits, affinity, pending signals, tracer, core-scheduling cookie) is read every time."""

    def __init__(self, bundle, locale_lines):
        self.bundle, self.locale = bundle, locale_lines
        self.kept = None

    def keep(self):
        self.kept = {b"head": _head(self.bundle), b"tail1": _tail1(), b"tail2": _tail2(self.locale)}
        self.kept.update((k, f()) for k, f in SELF_ONLY.items())

    def _kept(self, name, make, fresh=()):
        if self.kept is None or name in fresh:
            return make()
        return self.kept[name]

    def key_part(self, status=None):
        """The key part (with the final ``adopt`` line). ``status``: /proc/self/status, if just read."""
        status = status if status is not None else syscalls.read_small("/proc/self/status") or b""
        return b"".join((self._kept(b"head", lambda: _head(self.bundle)), _status_lines(status, KEY_STATUS),
                         b"/proc/self/cgroup\n", syscalls.read_small("/proc/self/cgroup") or b"",
                         self._kept(b"tail1", _tail1), _core_sched(),
                         self._kept(b"tail2", lambda: _tail2(self.locale))))

    def adopted_part(self, fd_numbers=(), status=None, fresh=()):
        """The adopted part, now. ``fresh``: SELF_ONLY names to read again (the adoption changed them)."""
        status = status if status is not None else syscalls.read_small("/proc/self/status") or b""
        stat = (syscalls.read_small("/proc/self/stat") or b")").rsplit(b")", 1)[1].split()
        attr = syscalls.sched_attr()
        out = [b"pgid %d\nnice %d\n" % (os.getpgrp(), os.getpriority(os.PRIO_PROCESS, 0)),
               b"sched %s\n" % (b" ".join(b"%d" % v for v in attr) if attr else b"none"),
               b"ioprio %d\ntimerslack %d\noom_score_adj %s\n"
               % (syscalls.ioprio(), syscalls.prctl(syscalls.PR_GET_TIMERSLACK), _value("/proc/self/oom_score_adj"))]
        for name in (b"thp_disable", b"spec", b"tsc", b"mce_kill", b"io_flusher"):
            out.append(self._kept(name, SELF_ONLY[name], fresh))
        out += [b"coredump_filter %s\n" % _value("/proc/self/coredump_filter"),
                self._kept(b"ksm", SELF_ONLY[b"ksm"], fresh), _mempolicy(),  # (a cpuset change remaps a policy)
                _status_lines(status, ADOPTED_STATUS),
                b"rlimits %s\n" % b" ".join(b"%d:%d" % (_lim(s), _lim(h)) for s, h in rlimits()),
                self._kept(b"itimers", _itimers, fresh),
                b"tty %s %s\n" % (stat[4] if len(stat) > 5 else b"?", stat[5] if len(stat) > 5 else b"?"),
                b"cwd %s\n" % _di(os.stat("."))]
        for fd in open_fds():
            out.append(b"fd %d %s %o\n" % (fd, _di(os.fstat(fd)), _getfl(fd)))
        return b"".join(out)


def key_part(bundle, locale_lines):
    """This process's key part, every line read now (the server's own, at start and every tick)."""
    return Snapshot(bundle, locale_lines).key_part()


def locale_of(environ):
    """The locale lines of an environment (bytes -> bytes), as the launcher writes its own."""
    return b"".join(k + b"=" + environ[k] + b"\n" if k in environ else k + b" unset\n" for k in LOCALE)


def rlimits():
    return tuple(resource.getrlimit(r) for r in range(NLIMITS))


def _lim(v):
    return INFINITY if v == resource.RLIM_INFINITY else v


def _getfl(fd):
    return fcntl.fcntl(fd, fcntl.F_GETFL)


def open_fds():
    """This process's open fds that an exec would keep (no close-on-exec), ascending."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                out.append(fd)
        except OSError:  # the listing's own fd, closed by now
            continue
    return sorted(out)


def split(text):
    """(key part with its ``adopt`` line, adopted part) of a snapshot text."""
    at = text.find(b"\n" + ADOPT_LINE)
    if at < 0 and not text.startswith(ADOPT_LINE):
        raise ValueError("no adopt line")
    cut = at + 1 + len(ADOPT_LINE) if at >= 0 else len(ADOPT_LINE)
    return text[:cut], text[cut:]


def fields(adopted):
    """{first word: rest of the line} of an adopted part (``fd`` lines under their ``fd N`` prefix)."""
    out = {}
    for line in adopted.split(b"\n"):
        if not line:
            continue
        word, _, rest = line.partition(b" " if not line.startswith(tuple(ADOPTED_STATUS)) else b"\t")
        if word == b"fd":
            n, _, rest = rest.partition(b" ")
            word = b"fd " + n
        out[word] = rest
    return out


def expected(launcher_adopted):
    """What the child's adopted part must read when it has taken the call on: the launcher's, but for
    what Python's start-up changes in every exec'd plugin (SIGPIPE and SIGXFSZ ignored)."""
    out = []
    for line in launcher_adopted.split(b"\n"):
        if line.startswith(b"SigIgn:"):
            line = b"SigIgn:\t%016x" % (int(line.split(b"\t")[1], 16) | PYTHON_IGNORES)
        out.append(line)
    return b"\n".join(out)


def first_difference(a, b):
    """"<reason>: <line of a> / <line of b>" for the first line where snapshot texts a (the launcher's) and
    b (the child's) differ: the refusal's reason (counted by the server) and what differed (logged)."""
    la, lb = a.split(b"\n"), b.split(b"\n")
    for x, y in zip(la + [b"(end)"] * (len(lb) - len(la)), lb + [b"(end)"] * (len(la) - len(lb))):
        if x != y:
            shown = (x[:120].decode("utf-8", "replace"), y[:120].decode("utf-8", "replace"))
            return f"{reason(x if x != b'(end)' else y)}: launcher {shown[0]!r}, child {shown[1]!r}"
    return "snapshot"


def reason(line):
    if line[:1].isdigit() and line.count(b":") >= 2:  # a line of /proc/self/cgroup ("0::/system.slice/...")
        return "cgroup"
    word = line.split(b" ")[0].split(b"\t")[0].rstrip(b":").decode("ascii", "replace")
    if word == "ns":
        return "ns-" + line.split(b" ")[1].decode("ascii", "replace")
    if word.startswith("/proc/self/"):
        return word[len("/proc/self/"):]
    if word.startswith("LC_") or word.startswith("LANG"):
        return "locale"
    if word.startswith("Cap"):
        return "capabilities"
    if word in ("SigBlk", "SigIgn"):
        return "signals"
    if word in ("SigPnd", "ShdPnd"):
        return "pending-signals"
    return word.lower() or "snapshot"


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"
