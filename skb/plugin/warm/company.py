"""Whether a warm server is alone where its context lives (docs/WARM.md, Lifecycle): no process but its own
and other servers' in its cgroup, session, or network, mount, IPC, UTS, time or user namespace. A server started by a
call alone there with it does not serve (a context made per call), and one that finds itself alone at a
lifecycle check ends (reviews 15, 16)."""
import os


def cgroup_alone(ours, cgroup_file="/proc/self/cgroup", root="/sys/fs/cgroup"):
    """True when, in some hierarchy, this process's cgroup holds no process but ``ours`` (pids as text) and
    warm servers' (comm "skb-warm"): a caller that runs each call in a cgroup of its own and removes it
    after could not, while a server lived there (EBUSY). False when nothing can be read."""
    try:
        with open(cgroup_file, "rb") as f:
            lines = f.read().decode("ascii", "replace").splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        # (v2 at the root, or beside v1 at unified/ on a hybrid host, review 15)
        tops = [root, os.path.join(root, "unified")] if controllers == "" else \
            [os.path.join(root, controllers.split(",")[0].replace("name=", ""))]
        for top in tops:
            try:
                with open(os.path.join(top, path.lstrip("/"), "cgroup.procs"), "rb") as f:
                    pids = f.read().decode("ascii", "replace").split()
            except OSError:
                continue
            if pids and all(p in ours or _comm(p) == "skb-warm\n" for p in pids):
                return True
            break
    return False


_NAMESPACES = {"net": "network namespace", "mnt": "mount namespace", "ipc": "IPC namespace", "uts": "UTS namespace",
               "time": "time namespace", "user": "user namespace"}   # (time: Linux 5.6; absent before, not asked)


def alone(mine):
    """Where no process but ``mine`` (pids as text) is with us, else None: a finished sandbox; a caller
    that makes a mount namespace, a cgroup, a session, an IPC, UTS or time namespace per call (`ip netns
    exec`, Go's Setsid, `unshare`; one that removes its cgroup after: reviews 15, 16). Warm servers and their
    spares (comm "skb-warm") do not count: two servers must not keep each other. The process found with
    us last time is asked first: a server's checks scan /proc only when that one has gone (review 16: a
    scan of 3,000 processes every 2 s was 2% of a CPU)."""
    if cgroup_alone(mine):
        return "cgroup"
    want = {kind: ident for kind in _NAMESPACES if (ident := _ns("self", kind)) is not None}
    sid = os.getsid(0)
    if not (str(sid) not in mine and _session_of(sid) == sid and _comm(sid) not in ("skb-warm\n", "")):
        want["session"] = sid       # (its leader gone: does anyone else hold it?)
    for pid in [_WITNESS[0]] if _WITNESS else []:
        _found(pid, mine, want, sid)
    for pid in os.listdir("/proc") if want else ():
        if _found(pid, mine, want, sid):
            _WITNESS[:] = [pid]
            if not want:
                return None
    return next((_NAMESPACES.get(k, k) for k in (*_NAMESPACES, "session") if k in want), None)


_WITNESS = []     # a process that was with us at the last check (pid as text)


def _found(pid, mine, want, sid):
    """Strike from ``want`` what process ``pid`` (not ours, not a server) shares with us; True if any."""
    if not pid.isdigit() or pid in mine:
        return False
    hits = [kind for kind in want if (_session_of(pid) == sid if kind == "session" else
                                      _ns(pid, kind) == want[kind])]
    if hits and _comm(pid) not in ("skb-warm\n", ""):
        for kind in hits:
            del want[kind]
        return True
    return False


def _ns(pid, kind):
    """(dev, ino) of a process's namespace of ``kind``, or None. A process whose main thread has ended (a
    zombie leader) shows none under /proc/PID/ns: one of its threads does (review 16)."""
    try:
        st = os.stat(f"/proc/{pid}/ns/{kind}")
    except OSError:
        try:
            task = next(t for t in os.listdir(f"/proc/{pid}/task") if t != pid)
            st = os.stat(f"/proc/{pid}/task/{task}/ns/{kind}")
        except (OSError, StopIteration):
            return None
    return st.st_dev, st.st_ino


def _session_of(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read()
    except OSError:
        return ""
