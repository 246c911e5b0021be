"""The snapshot: a process's inherited state as text (docs/WARM.md, "What a call inherits").

Its key part (up to the line ``adopt``) is what a forked child can never take on (namespaces, root,
credentials, cgroup, session, ...): its hash names the server's socket, so callers of different contexts
never meet. Its adopted part is what the child sets to the caller's values. The text is built by one
implementation, build/warm_snapshot.c: the launcher links it, and this module calls it (libskbwarm.so,
the same source built as a shared library, in the bundle beside this module) for the server's own key
and, per call, for the child once it has taken the call on. The child begins only if its text equals the
launcher's (``expected`` accounts for what Python's start-up changes in an exec'd plugin).
"""
import ctypes
import os
import signal

ADOPT_LINE = b"adopt\n"
NLIMITS = 16
INFINITY = 0xFFFFFFFFFFFFFFFF
LOCALE = (b"LC_ALL", b"LC_CTYPE", b"LANG")
STATUS_FIELDS = (b"Umask:", b"TracerPid:", b"SigPnd:", b"ShdPnd:", b"SigBlk:", b"SigIgn:", b"Cpus_allowed_list:")
# what Python's start-up does to an exec'd plugin's signals: SIGPIPE and SIGXFSZ ignored
PYTHON_IGNORES = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libskbwarm.so")

_lib = None
_out = ctypes.create_string_buffer(1 << 16)


FIXED_NAMES = ("cwd", "root") + tuple("ns-" + n for n in
                                      ("net", "mnt", "pid", "pid_for_children", "user", "uts", "ipc", "cgroup",
                                       "time", "time_for_children"))


class Unlike(Exception):
    """A passed fd is not what this process's own path names (its reason: "root", "ns-net", ...)."""


def library():
    global _lib
    if _lib is None:  # (the server loads it before it forks: its children share it)
        _lib = ctypes.CDLL(LIBRARY, use_errno=True)
        _lib.skb_warm_snapshot.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                           ctypes.c_char_p, ctypes.c_long)
        _lib.skb_warm_snapshot.restype = ctypes.c_long
        _lib.skb_warm_place.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
        _lib.skb_warm_prefault.argtypes = (ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long)
        _lib.skb_warm_prefault.restype = ctypes.c_long
    return _lib


def _part(which, bundle=b"", locale=b"", fixed=None):
    fds = (ctypes.c_int * len(fixed))(*fixed) if fixed else None
    n = library().skb_warm_snapshot(which, bundle, locale, fds, _out, len(_out))
    if n <= -100:
        raise Unlike(FIXED_NAMES[-n - 100])
    if n < 0:
        raise OSError(ctypes.get_errno(), "this process's snapshot cannot be taken (no /proc? a seccomp filter?)")
    return _out.raw[:n]


def key_part(bundle, locale_lines, fixed=None):
    """This process's key part, now (with the final ``adopt`` line). ``locale_lines``: the server's locale
    as its interpreter saw it at start-up (locale_of), not the environment's of the moment. ``fixed``: the
    fds a launcher passed (cwd, root, the namespaces), each but cwd checked to be this process's own
    (Unlike when one is not)."""
    return _part(0, os.fsencode(bundle), locale_lines, fixed)


def place(inherited, internal, base):
    """Put each (target number, fd) of ``inherited`` at its number, without close-on-exec, and each fd of
    ``internal`` at or above ``base``, close-on-exec; close every other fd. Returns internal's new numbers;
    OSError (EINVAL: a number at or past this process's fd limit)."""
    n, m = len(inherited), len(internal)
    targets = (ctypes.c_int * max(n, 1))(*(t for t, _ in inherited))
    fds = (ctypes.c_int * max(n, 1))(*(f for _, f in inherited))
    inner = (ctypes.c_int * max(m, 1))(*internal)
    out = (ctypes.c_int * max(m, 1))()
    rc = library().skb_warm_place(targets, fds, n, inner, m, base, out)
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    return list(out[:m])


def adopted_part():
    """This process's adopted part, now: what it holds of what a call adopts (its fds included)."""
    return _part(1)


def load():
    """Load the library now (the server, before it forks)."""
    library()


def locale_of(environ):
    """The locale lines of an environment (bytes -> bytes), as the launcher writes its own."""
    return b"".join(k + b"=" + environ[k] + b"\n" if k in environ else k + b" unset\n" for k in LOCALE)


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
        word, _, rest = line.partition(b" " if not line.startswith(STATUS_FIELDS) else b"\t")
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
            return f"{reason(x if x not in (b'(end)', b'') else y)}: launcher {shown[0]!r}, child {shown[1]!r}"
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
