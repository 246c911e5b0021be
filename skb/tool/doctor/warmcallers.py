"""Which runtimes on this node never get warm start. A plugin inherits its runtime's environment (libcni
passes it on, with the CNI_ variables added), user and seccomp filter; the launcher looks at those first
and, where one of them turns warm start off, goes by exec without asking a server, so no server counts
the call and `skb warm status` cannot tell (docs/WARM.md, "Where a call goes"). This reads the same
things of each runtime process from /proc. The lists are build/warm_client.c's, kept equal by
tests/warm/test_doctor_warm.py against the launcher itself."""
import os

from skb.tool.doctor.findings import Finding
from skb.tool.doctor.files import BadFile, read_regular

RUNTIMES = ("containerd", "crio", "cri-dockerd", "podman")   # comm of the processes that run CNI plugins
ON = ("", "1", "true", "yes", "on")                           # SKB_WARM spellings that leave it on (any case)
NOT_AT_START = (b"LD_LIBRARY_PATH=", b"_PYI_ARCHIVE_FILE=", b"_PYI_PARENT_PROCESS_LEVEL=", b"_PYI_LINUX_PROCESS_NAME=")
AT_START = (b"LD_", b"GLIBC_TUNABLES=", b"MALLOC_", b"LOCPATH=", b"GCONV_PATH=", b"_PYI_", b"_MEIPASS", b"PYINSTALLER_")
ENVIRON_LIMIT = 4 << 20
WARM_OFF = ".skb-warm-off"   # next to a launcher: its calls go by exec (build/warm_client.c WARM_OFF)


def _shown(entry, width=60):
    """An environment entry as a line of the report: any process may set its own, so nothing in it reaches
    the terminal but printable characters (the rest as escapes)."""
    s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in entry.decode(errors="replace")[:width])
    return s + ("..." if len(entry) > width else "")


def why_not(environ, status):
    """What turns warm start off for the plugins a process runs: a list of reasons (empty: none seen).
    ``environ``: /proc/PID/environ (bytes); ``status``: /proc/PID/status (bytes)."""
    reasons = []
    entries = [e for e in environ.split(b"\0") if e]
    warm = next((e[len(b"SKB_WARM="):] for e in entries if e.startswith(b"SKB_WARM=")), None)
    if warm is not None and warm.decode(errors="replace").lower() not in ON:
        reasons.append(f"SKB_WARM={_shown(warm)}")
    started = [e for e in entries if e.startswith(AT_START) and not e.startswith(NOT_AT_START)]
    if started:
        more = f" (and {len(started) - 3} more)" if len(started) > 3 else ""
        reasons.append(f"{', '.join(_shown(e) for e in started[:3])}{more}: acted on when a process starts")
    fields = dict(line.partition(b":")[::2] for line in status.splitlines())
    uids = fields.get(b"Uid", b"").split()
    if uids[:1] != [b"0"]:
        reasons.append(f"its real uid is {_shown(uids[0]) if uids else '?'}, not root")
    seccomp = fields.get(b"Seccomp", b"0").strip()
    if seccomp != b"0":
        reasons.append(f"it runs under a seccomp filter (Seccomp: {seccomp.decode(errors='replace')})")
    return reasons


def check_warm_callers(findings, proc="/proc"):
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return
    for pid in sorted(pids, key=int):
        try:
            comm = read_regular(f"{proc}/{pid}/comm", 64).decode(errors="replace").strip()
            if comm not in RUNTIMES:
                continue
            environ = read_regular(f"{proc}/{pid}/environ", ENVIRON_LIMIT)
            status = read_regular(f"{proc}/{pid}/status", 1 << 16)
        except BadFile:  # gone meanwhile, or not ours to read (not root): nothing to say
            continue
        if (status.split(b"\nUid:", 1)[1:] or [b""])[0].split()[1:2] != [b"0"]:
            continue  # (not running as root: not a runtime of this node, a rootless one, or one named so)
        reasons = why_not(environ, status)
        if reasons:
            findings.append(Finding(
                "note", "warm-start-off", f"the plugins {comm} (pid {pid}) runs never start warm",
                "; ".join(reasons) + ". Its calls go by exec (correct, and slower); no warm server counts them",
                "if that is not meant, remove it from the runtime's environment (its systemd unit's Environment= "
                "or drop-in) or filter; SKB_WARM=0 is the way to mean it (docs/WARM.md)"))


def check_warm_off_files(bin_dirs, findings):
    """A plugin dir with the opt-out file: none of its plugins starts warm, whatever its runtime (the
    launcher looks for the file next to itself)."""
    for d in dict.fromkeys(bin_dirs):
        off = os.path.join(d, WARM_OFF)
        if os.path.lexists(off) and os.path.lexists(os.path.join(d, ".skb")):
            findings.append(Finding(
                "note", "warm-start-off", f"the skb-cni plugins in {_shown(d.encode(), 4096)} never start warm",
                f"{_shown(off.encode(), 4096)} exists. Their calls go by exec (correct, and slower); no warm server counts them",
                f"if that is not meant, remove {_shown(off.encode(), 4096)}; SKB_WARM=0 in a runtime's environment turns "
                "warm start off for that runtime alone (docs/WARM.md)"))

