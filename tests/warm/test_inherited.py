"""What a plugin process inherits from its caller, warm as exec'd: one test per row of docs/WARM.md's
table that a caller can set. Each row sets some state in a caller (a wrapper that then execs the plugin),
runs the debug plugin with a hook that prints what it can see of the plugin process (/proc/$PPID) and
of itself (inherited), warm and with SKB_WARM=0, and compares the two. The row also says how the warm
call must have gone: served (the state adopted), refused for a reason (by exec), or sent elsewhere (a
different context: this install's server never saw it)."""
import json
import os
import select
import subprocess
import sys
import time

import pytest

from tests.helpers import cni_env
from tests.warm.support import COLD, WARM_DIR, ask, pid_gone, refused, served, servers, the_server, wait_for

pytestmark = [pytest.mark.frozen, pytest.mark.kernel]

# The caller: applies a setup, then execs the plugin (argv[1:]) with the environment given in CALL_ENV
# (Python's own start-up may have changed its own: PEP 538 sets LC_CTYPE) and its stdio.
WRAPPER = r"""
import ctypes, json, os, resource, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
def prctl(*a):
    a = [ctypes.c_ulong(x) for x in a] + [ctypes.c_ulong(0)] * (5 - len(a))
    if libc.prctl(*a) != 0:
        raise OSError(ctypes.get_errno(), "prctl")
def syscall(*a):
    if libc.syscall(*a) < 0:
        raise OSError(ctypes.get_errno(), "syscall")
try:
    exec(os.environ.pop("SETUP"))
except OSError as e:
    sys.stderr.write(f"setup not possible here: {e}\n")
    sys.stderr.flush()      # (os._exit flushes nothing: the skip said only "Skipped")
    os._exit(77)
os.execve(sys.argv[1], sys.argv[1:], json.loads(os.environ["CALL_ENV"]))
"""

# (an fd the plugin opens or closes meanwhile, for the hook's own pipes, has no flags or target by the
# time they are read: skipped; those are close-on-exec anyway)
NONCLOEXEC_FDS = ("for f in /proc/$PPID/fd/*; do n=${f##*/}; fl=$(awk '/^flags/{print $2}' /proc/$PPID/fdinfo/$n); "
                  "t=$(readlink $f | sed 's/:\\[.*//'); "
                  "[ -n \"$fl\" ] && [ -n \"$t\" ] && [ $((0$fl & 02000000)) = 0 ] && echo \"fd $n $t\"; done")
GETMEMPOLICY = ("python3 -c \"import ctypes; m=ctypes.c_int(); n=(ctypes.c_ulong*16)(); "
                "ctypes.CDLL(None).syscall(239, ctypes.byref(m), n, 1024, None, 0); print('mempolicy', m.value, n[0])\"")
MCE = "python3 -c \"import ctypes; print('mce', ctypes.CDLL(None).prctl(34, 0, 0, 0, 0))\""
STAT = "cut -d')' -f2 /proc/$PPID/stat | awk '{print \"nice\", $17, \"rtprio\", $38, \"policy\", $39}'"

# id: (setup in the caller, probe in the hook, outcome: "served", "refused:<reason>", "elsewhere")
ROWS = {
    "thp-disable": ("prctl(41, 1)", "grep -h THP_enabled /proc/$PPID/status /proc/self/status", "served"),
    "speculation": ("prctl(53, 0, 4)", "grep Speculation /proc/$PPID/status", "served"),
    "mempolicy": ("m = (ctypes.c_ulong * 16)(1); syscall(238, 1, m, 1024)", GETMEMPOLICY, "served"),
    "rt-priority": ("os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(7))", STAT, "served"),
    "nice": ("os.nice(7)", STAT, "served"),
    "oom-score-adj": ("open('/proc/self/oom_score_adj', 'w').write('345')", "cat /proc/$PPID/oom_score_adj",
                      "served"),
    "ioprio": ("syscall(251, 1, 0, 3 << 13)", "ionice -p $PPID; ionice", "served"),
    "timerslack": ("prctl(29, 123456)", "cat /proc/$PPID/timerslack_ns", "served"),
    "affinity": ("os.sched_setaffinity(0, {0})", "grep -h Cpus_allowed_list /proc/$PPID/status /proc/self/status",
                 "served"),
    "coredump-filter": ("open('/proc/self/coredump_filter', 'w').write('0x3f')", "cat /proc/$PPID/coredump_filter",
                        "served"),
    "mce-kill": ("prctl(33, 1, 1)", MCE, "served"),
    # (PR_SET_MEMORY_MERGE, Linux 6.4: systemd's MemoryKSM=; the line was once never read right, so both
    # sides said "none" and a caller with it was served by a child without it)
    "ksm-merge-any": ("prctl(67, 1)", "grep -h merge_any /proc/$PPID/ksm_stat /proc/self/ksm_stat", "refused:ksm"),
    "inherited-fds": ("os.dup2(os.open('/dev/null', os.O_RDONLY), 5); os.dup2(os.open('/etc/hostname', os.O_RDONLY), 7)",
                      NONCLOEXEC_FDS, "served"),
    "interval-timer": ("signal.setitimer(signal.ITIMER_REAL, 600)", "echo ran", "refused:itimers"),
    "pending-signal": ("signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1]); os.kill(os.getpid(), signal.SIGUSR1)",
                       # (the mask: the hook's own, which is the plugin's; the plugin's own blocks every signal
                       # for an instant while it starts the hook)
                       "grep -E '^(SigPnd|ShdPnd)' /proc/$PPID/status; grep SigBlk /proc/self/status",
                       "refused:pending-signals"),
    "rlimit-as": ("resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY))",
                  "grep 'Max address' /proc/$PPID/limits", "refused:rlimit-as"),
    "rlimit-stack": ("resource.setrlimit(resource.RLIMIT_STACK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))",
                     "grep 'Max stack' /proc/$PPID/limits", "refused:rlimit-stack"),
    # another context (the snapshot's key part): never reaches this install's server
    "pid-for-children": ("libc.unshare(0x20000000) == 0 or (_ for _ in ()).throw(OSError(ctypes.get_errno(), 'unshare'))",
                         "echo pid $$", "elsewhere"),
    "subreaper": ("prctl(36, 1)", "echo ran", "elsewhere"),
    "personality": ("libc.personality(0x0040000)", "cat /proc/$PPID/personality", "elsewhere"),
    "session-keyring": ("syscall(250, 1, None)", "echo ran", "elsewhere"),
}


def _call(wbin, tmp_path, netns, setup, probe, mode, name):
    out = tmp_path / f"{name}-{mode}.txt"
    conf = {"cniVersion": "1.0.0", "name": "warm-row", "type": "debug", "addHooks": [["sh", "-c", f"({probe}) > {out}"]]}
    env = cni_env("ADD", netns=f"/run/netns/{netns}", containerid=name, **(COLD if mode == "cold" else {}))
    p = subprocess.run([sys.executable, "-c", WRAPPER, os.path.join(wbin, "debug")], capture_output=True,
                       env={"SETUP": setup, "CALL_ENV": json.dumps(env), "PATH": env["PATH"]},
                       input=json.dumps(conf).encode(), timeout=60)
    if p.returncode == 77:
        pytest.skip(p.stderr.decode())
    seen = out.read_text() if out.exists() else "(the hook did not run)"
    return p.returncode, p.stdout, seen


@pytest.mark.parametrize("row", sorted(ROWS))
def test_row_warm_as_exec(wbin, tmp_path, make_netns, row):
    setup, probe, outcome = ROWS[row]
    ns = make_netns("warmrow")
    the_server(wbin)
    reason = outcome.split(":")[1] if outcome.startswith("refused") else None
    before, refusals = served(wbin), refused(wbin, reason) if reason else 0
    warm = _call(wbin, tmp_path, ns, setup, probe, "warm", row)
    if outcome == "served":
        assert served(wbin) == before + 1, f"{row}: the warm call was not served: {the_server(wbin)['refused']}"
    else:
        assert served(wbin) == before, f"{row}: a call this server must not serve was served"
        if reason:
            assert refused(wbin, reason) == refusals + 1, f"{row}: not refused for {reason}"
    cold = _call(wbin, tmp_path, ns, setup, probe, "cold", row)
    assert warm == cold
    assert warm[0] == 0 and "(the hook did not run)" not in warm[2]


def test_drift_renice_and_oom_of_the_server_and_its_spares(wbin, tmp_path, make_netns):
    """Someone renices the server and its spares and changes their oom_score_adj after they started: a
    call still runs with its caller's values (the child reads its own per call and takes the caller's)."""
    srv = the_server(wbin)
    spares = wait_for(lambda: [s["pid"] for s in the_server(wbin).get("spares", [])], "the spares")
    for pid in [srv["pid"]] + spares:
        os.setpriority(os.PRIO_PROCESS, pid, 12)
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("700")
    ns = make_netns("warmdrift")
    probe = STAT + "; cat /proc/$PPID/oom_score_adj"
    before = served(wbin)
    warm = _call(wbin, tmp_path, ns, "pass", probe, "warm", "drift")
    assert served(wbin) == before + 1
    assert warm == _call(wbin, tmp_path, ns, "pass", probe, "cold", "drift")
    assert "nice 0 " in warm[2] and warm[2].split()[-1] == "0"


def test_netns_passed_as_an_inherited_fd(wbin, make_netns):
    """CNI_NETNS=/proc/self/fd/3, the namespace open on the caller's fd 3: works exec'd, so warm too."""
    ns = make_netns("warmfd")
    exe = os.path.join(wbin, "loopback")
    conf = {"cniVersion": "1.0.0", "name": "warm-fd", "type": "loopback"}
    outs = {}
    for mode, extra in (("warm", {}), ("cold", COLD)):
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "down"], check=True)
        before = served(wbin)
        p = subprocess.run(["sh", "-c", f'exec 3</run/netns/{ns}; exec "$0"', exe],
                           env=cni_env("ADD", netns="/proc/self/fd/3", ifname="lo", **extra),
                           input=json.dumps(conf).encode(), capture_output=True)
        flags = json.loads(subprocess.run(["ip", "-j", "-n", ns, "link", "show", "lo"], capture_output=True,
                                          text=True).stdout)[0]["flags"]
        outs[mode] = (p.returncode, p.stdout, "UP" in flags)
        assert served(wbin) == before + (1 if mode == "warm" else 0)
    assert outs["warm"] == outs["cold"] and outs["warm"][0] == 0 and outs["warm"][2], outs


def test_what_the_caller_passed_on_is_closed_when_its_wait_returns(wbin):
    """A caller passes a pipe's write end on to the plugin, waits for it, and looks at once whether the read
    end is at its end: with an exec'd plugin it always is (its whole exit closed every fd), so with a warm
    one too, although the child may still be ending (it sent X first)."""
    exe = os.path.join(wbin, "loopback")
    for mode, extra in (("warm", {}), ("cold", COLD)):
        before, still_open = served(wbin), 0
        for _ in range(60):
            r, w = os.pipe()
            p = subprocess.Popen([exe], env=cni_env("VERSION", **extra), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(w,))
            os.close(w)
            assert p.wait(timeout=30) == 0
            if not select.select([r], [], [], 0)[0] or os.read(r, 1) != b"":
                still_open += 1
            os.close(r)
        assert served(wbin) == before + (60 if mode == "warm" else 0)
        assert still_open == 0, f"{mode}: the pipe was still open after {still_open} of 60 calls had returned"


def test_guard_knows_the_callers_pid(wbin):
    """DEL with CNI_NETNS=/proc/<the plugin's own pid>/ns/net: the same answer and note, warm or exec'd
    (the warm child's own pid is not the one the caller knows)."""
    exe = os.path.join(wbin, "loopback")
    conf = {"cniVersion": "1.0.0", "name": "warm-guard", "type": "loopback"}
    outs = {}
    for mode, extra in (("warm", {}), ("cold", COLD)):
        before = served(wbin)
        p = subprocess.Popen(["sh", "-c", 'CNI_NETNS=/proc/$$/ns/net exec "$0"', exe], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cni_env("DEL", ifname="lo", **extra))
        out, err = p.communicate(json.dumps(conf).encode(), timeout=30)
        outs[mode] = (p.returncode, out, err.decode().replace(str(p.pid), "PID"))
        assert served(wbin) == before + (1 if mode == "warm" else 0)
    assert outs["warm"] == outs["cold"]



def test_a_caller_chrooted_into_a_bind_mount_of_the_root_is_not_served_by_the_servers_root(wbin, tmp_path,
                                                                                           make_netns):
    """Row 53. A caller chrooted into another mount of the server's root directory (a recursive bind of /,
    with something mounted over a directory in it) has a root with the same device and inode: it was
    served warm, and its plugin and hooks ran in the server's root, where they saw other files and could
    write where an exec'd plugin could not. The root's mount id is now part of the context: such a caller
    is not this server's (its calls go to a server of its own, started in its root), and what its plugin's
    hook sees is what the exec'd one sees."""
    ns = make_netns("chroot")  # (before the bind: the bind copies the netns mount)
    root, mark = tmp_path / "root", tmp_path / "mark"
    root.mkdir(), mark.mkdir()
    subprocess.run(["mount", "--rbind", "/", str(root)], check=True)  # (the sandbox's own mount namespace)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "skb-chroot-mark", f"{root}{mark}"], check=True)
        (root / str(mark).lstrip("/") / "only-in-the-chroot").write_text("")
        known = {s["key"] for s in servers(wbin)}
        the_server(wbin)
        before = served(wbin)
        setup, probe = f"os.chroot({str(root)!r}); os.chdir('/')", f"ls {mark}; stat -c %i /"
        warm = _call(wbin, tmp_path, ns, setup, probe, "warm", "chroot")
        assert served(wbin) == before, "a chrooted caller was served by a server in another root"
        cold = _call(wbin, tmp_path, ns, setup, probe, "cold", "chroot")
        assert warm == cold and "only-in-the-chroot" in warm[2]
    finally:
        deadline = time.monotonic() + 5  # (the chrooted caller's own server, once it has started)
        while time.monotonic() < deadline:
            new = [s for s in servers(wbin) if s["key"] not in known]
            for s in new:
                ask(os.path.join(WARM_DIR, s["key"] + ".sock"), b"Q")
                wait_for(lambda: pid_gone(s["pid"]), "the chrooted context's server to end")
            if new:
                break
            time.sleep(0.1)
        subprocess.run(["umount", "-R", "-l", str(root)], check=False)
