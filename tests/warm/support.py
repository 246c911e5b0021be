"""What the warm-start tests share: the servers' own counters (``skb warm status --json``), waiting for
a state (never for a time), the same call warm and cold, a caller of another context sent to this
install's server (an alias of its socket), a slow call."""
import json
import os
import socket
import subprocess
import time

from tests.helpers import cni_env, run_plugin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WARM_DIR = "/run/skb-cni/warm"
LOOPBACK = {"cniVersion": "1.0.0", "name": "warm-lo", "type": "loopback"}
COLD = {"SKB_WARM": "0"}


def wait_for(pred, what, limit=30.0):
    """Poll until pred() is true (a generous limit: this waits for processes, it does not time them)."""
    deadline = time.monotonic() + limit
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def install_copy(src, dest):
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "build", "bundle.py"), "install", src, dest], check=True,
                   capture_output=True)
    return dest


def servers(bindir):
    out = subprocess.run([os.path.join(bindir, "skb"), "warm", "status", "--json"], capture_output=True, text=True,
                         check=True, timeout=20).stdout  # (a server that hangs is a failure, not a hung test)
    found = {s["pid"]: s for s in json.loads(out) if s.get("binDir") == bindir and not s.get("stopping")}
    return list(found.values())  # (a test's alias socket name leads to a server twice)


def the_server(bindir):
    return wait_for(lambda: (servers(bindir) or [None])[0], f"a warm server for {bindir}")


def ensure_server(bindir):
    """A server for this test's context (calls until one runs, as on a node: the launcher starts one at
    most every 10 s per context)."""
    exe = os.path.join(bindir, "loopback")
    wait_for(lambda: (run_plugin(exe, cni_env("VERSION")), servers(bindir))[1], "a server", 60)
    return the_server(bindir)


def settled(bindir):
    """The servers of bindir once none has a call in flight: a launcher returns as soon as its child has sent
    the exit status, and the server counts the call (served or refused) when it reaps the child, after."""
    def found():
        now = servers(bindir)
        return [now] if all(s["children"] == 0 for s in now) else None  # (a list: true with no server too)
    return wait_for(found, "no call in flight")[0]


def served(bindir):
    return sum(s["served"] for s in settled(bindir))


def refused(bindir, reason):
    return sum(s["refused"].get(reason, 0) for s in settled(bindir))


def pid_gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def stop_servers(bindir):
    """Stop the servers of bindir (only those: other modules' servers are theirs)."""
    for s in servers(bindir):
        ask(os.path.join(WARM_DIR, s["key"] + ".sock"), b"Q")
        wait_for(lambda: pid_gone(s["pid"]), f"server {s['pid']} to end")


def ask(path, what):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    try:
        s.connect(path)
        s.send(what)
        return s.recv(1 << 16)
    except OSError:
        return b""
    finally:
        s.close()


def warm_and_cold(exe, env, stdin=b"", bindir=None, expect_warm=True):
    """The same call with warm start and with SKB_WARM=0: both outcomes, checking which one was served."""
    before = served(bindir)
    w = run_plugin(exe, env, stdin)
    assert served(bindir) == before + (1 if expect_warm else 0), "the warm call was not served as expected"
    c = run_plugin(exe, dict(env, **COLD), stdin)
    assert served(bindir) == before + (1 if expect_warm else 0), "SKB_WARM=0 must go by exec"
    return w, c


def alias(bindir, other_key):
    """Point the socket name of another context at this install's server: a caller of that context then
    reaches a server that is not its own, which must refuse it."""
    srv = the_server(bindir)
    path = os.path.join(WARM_DIR, other_key + ".sock")
    if os.path.lexists(path):
        os.unlink(path)
    os.link(os.path.join(WARM_DIR, srv["key"] + ".sock"), path)
    return path


def key_of_new_server(bindir, run_first_call):
    """Make a first call in another context (it starts that context's server) and return that server's
    key, after stopping it."""
    known = {s["key"] for s in servers(bindir)}
    run_first_call()

    def new():
        for name in os.listdir(WARM_DIR):
            if name.endswith(".sock") and name[:-5] not in known:
                st = json.loads(ask(os.path.join(WARM_DIR, name), b"S") or b"{}")
                if st.get("binDir") == bindir:
                    return st
        return None
    st = wait_for(new, "the other context's server")
    ask(os.path.join(WARM_DIR, st["key"] + ".sock"), b"Q")
    wait_for(lambda: pid_gone(st["pid"]), "the other context's server to end")
    return st["key"]


def not_offered_via_alias(wbin, call, reason):
    """``call(extra_env)`` makes a call from another context: the first one starts that context's server
    (then stopped); the next one reaches this install's server instead (an alias of its socket). Its
    launcher reads the server's key in its proof's name and goes by exec without offering the call, with
    the exec'd outcome: the server neither serves it nor gets to refuse it (for ``reason``, its own check
    of such a call). Returns that outcome."""
    key = key_of_new_server(wbin, call)
    name = alias(wbin, key)
    ours = os.stat(name).st_ino
    try:
        before, refusals = served(wbin), refused(wbin, reason)
        w = call()
        assert served(wbin) == before and refused(wbin, reason) == refusals
        assert w == call(COLD)
        return w
    finally:
        if os.path.lexists(name) and os.stat(name, follow_symlinks=False).st_ino == ours:
            os.unlink(name)  # (else the other context's new server replaced it: it ends when idle, or with wbin)


_RUNNER = r"""
import json, os, subprocess, sys
exec(sys.argv[1])  # what makes this caller's context another one (the same for every call below)
for line in sys.stdin:
    cmd, env = json.loads(line)
    p = subprocess.run(cmd, env=env, capture_output=True)
    print(json.dumps([p.returncode, p.stdout.hex(), p.stderr.hex()]), flush=True)
"""


class Caller:
    """One process that makes loopback VERSION calls for a test, in a context of its own: started by
    ``prefix`` (a command that execs the rest), then changed by ``setup`` (Python, run first). Each call
    is (returncode, stdout hex, stderr hex)."""

    def __init__(self, wbin, setup="", prefix=()):
        self.runner = subprocess.Popen([*prefix, "/usr/bin/python3", "-c", _RUNNER, setup], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
        self.exe = os.path.join(wbin, "loopback")
        self.env = cni_env("VERSION")

    def __call__(self, extra={}, before=()):
        self.runner.stdin.write(json.dumps([[*before, self.exe], dict(self.env, **extra)]) + "\n")
        self.runner.stdin.flush()
        return json.loads(self.runner.stdout.readline())

    def close(self):
        self.runner.stdin.close()
        self.runner.wait()


def not_offered_from_another(wbin, setup, reason):
    """not_offered_via_alias, for calls made by one process whose context ``setup`` (Python, run first)
    changed."""
    call = Caller(wbin, setup)
    try:
        assert not_offered_via_alias(wbin, call, reason)[0] == 0
    finally:
        call.close()


def slow_debug_call(bindir, tmp_path, ms, netns, extra=None, name="slow"):
    conf = {"cniVersion": "1.0.0", "name": "warm-slow", "type": "debug", "inject": {"ADD": {"delayMs": ms}}}
    with open(tmp_path / f"{name}.json", "w") as f:
        json.dump(conf, f)
    fin = open(tmp_path / f"{name}.json")
    env = cni_env("ADD", netns=f"/run/netns/{netns}", containerid=name, path=bindir, **(extra or {}))
    return subprocess.Popen([os.path.join(bindir, "debug")], env=env, stdin=fin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def calls_in_cgroup(exe, cg, n=3):
    """``n`` VERSION calls of ``exe`` from processes that join the cgroup ``cg`` first, each warm and exec'd:
    the same answers."""
    def join():
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    for _ in range(n):
        w = subprocess.run([exe], env=cni_env("VERSION"), capture_output=True, preexec_fn=join)
        c = subprocess.run([exe], env=cni_env("VERSION", **COLD), capture_output=True, preexec_fn=join)
        assert (w.returncode, w.stdout) == (c.returncode, c.stdout) and w.returncode == 0, w


def server_logs():
    """What every server's log under WARM_DIR says, together."""
    return "".join(open(os.path.join(WARM_DIR, n), errors="replace").read() for n in os.listdir(WARM_DIR)
                   if n.endswith(".log"))
