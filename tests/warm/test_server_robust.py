"""The server is never blocked and never crashed by a client, a low limit or a burst; a call it cannot
serve goes by exec, and a call that had not begun is never turned into an error (docs/WARM.md).

Each test shows the outcome from outside: a legitimate call still served warm (the server's counters), its
answer equal to the exec'd one, the server's pid unchanged, no code 999."""
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import subprocess
import threading
import time

import pytest

from tests.helpers import cni_env, run_plugin
from tests.warm.support import (COLD, LOOPBACK, WARM_DIR, Caller, ask, calls_in_cgroup, ensure_server, install_copy, pid_gone,
                                refused, served, server_logs, servers, settled, slow_debug_call, stop_servers, the_server,
                                wait_for)

pytestmark = [pytest.mark.frozen, pytest.mark.kernel]


def _connect(srv):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.path.join(WARM_DIR, srv["key"] + ".sock"))
    return s


def _version(wbin, **extra):
    return run_plugin(os.path.join(wbin, "loopback"), cni_env("VERSION", **extra))


def test_idle_clients_cost_a_call_nothing(wbin):
    """Root clients that connect and say nothing: calls are still served (not after the launcher's 2 s
    wait, by exec), `skb warm status` answers, and the silent clients are dropped after their deadline."""
    srv = the_server(wbin)
    idle = [_connect(srv) for _ in range(3)]
    try:
        before = served(wbin)
        for _ in range(3):
            w, c = _version(wbin), _version(wbin, **COLD)
            assert (w.rc, w.stdout) == (c.rc, c.stdout)
        assert served(wbin) == before + 3  # (servers() itself asks `skb warm status`, with a timeout)
        for s in idle:  # each is answered with a refusal once its deadline has passed
            s.settimeout(30)
            assert s.recv(100) == b"Rno-request"
    finally:
        for s in idle:
            s.close()
    assert the_server(wbin)["pid"] == srv["pid"]


def test_a_killed_child_is_reported_at_once_with_an_idle_client_connected(wbin, tmp_path, make_netns):
    """A call's child killed while a silent client holds a connection: the launcher ends (by the same
    signal) without waiting for that client."""
    srv = the_server(wbin)
    p = slow_debug_call(wbin, tmp_path, 60000, make_netns("warmkill"))
    child = wait_for(lambda: (servers(wbin)[0]["childPids"] or [None])[0], "the call's child")
    idle = _connect(srv)
    try:
        os.kill(child, signal.SIGKILL)
        p.wait(timeout=20)  # before the idle client leaves (it never sends anything)
        assert p.returncode == -signal.SIGKILL
    finally:
        idle.close()


def _ready(srv):
    return len([s for s in srv["spares"] if s["ready"]])


def test_no_spare_is_forked_while_a_call_runs_and_one_is_ready(wbin, tmp_path, make_netns):
    """The pool is refilled after a call, not during it, while a ready spare is left for the next call
    (a fork and a new spare's start take CPU from the call); a burst that took every ready spare gets new
    ones while its calls run."""
    ensure_server(wbin)
    srv = wait_for(lambda: next((s for s in servers(wbin) if _ready(s) == 3), None), "three ready spares")
    made = srv["sparesMade"]
    p = slow_debug_call(wbin, tmp_path, 60000, make_netns("warmfill"))
    try:
        wait_for(lambda: servers(wbin)[0]["children"] == 1, "the call in flight")
        deadline = time.monotonic() + 1.0  # (a refill came at once, before this change: a non-event, watched)
        while time.monotonic() < deadline:
            now = servers(wbin)[0]
            assert now["children"] == 1 and now["sparesMade"] == made, now
            time.sleep(0.05)
    finally:
        p.kill()
        p.wait()
    wait_for(lambda: servers(wbin)[0]["children"] == 0 and _ready(servers(wbin)[0]) == 3, "the pool refilled")
    assert servers(wbin)[0]["sparesMade"] == made + 1
    # Three calls at once take the three ready spares: new ones come while the calls still run.
    procs = [slow_debug_call(wbin, tmp_path, 60000, make_netns(f"warmfill{i}"), name=f"f{i}") for i in range(3)]
    try:
        wait_for(lambda: servers(wbin)[0]["children"] == 3 and _ready(servers(wbin)[0]) >= 1,
                 "a ready spare while three calls run")
    finally:
        for q in procs:
            q.kill()
            q.wait()


def _stat(pid):
    """(ppid, nice) of a process, read from the kernel."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[1]), int(fields[16])


def test_spares_are_made_at_low_priority_and_wait_at_the_servers(wbin):
    """A pool spare is made off every call's path: its holder runs at nice 19 for its whole life (it only
    waits), and the spare runs at 19 until it waits for calls, then at the server's own priority, or at the
    last call's once its rehearsal has adopted that (a call is never accepted at 19). Read from /proc."""
    ensure_server(wbin)
    old = {s["pid"] for s in servers(wbin)[0]["spares"]}
    for _ in range(4):  # (every spare left was made after these calls, and rehearses this process's values)
        assert _version(wbin).rc == 0
    srv = wait_for(lambda: next((s for s in servers(wbin) if len([x for x in s["spares"] if x["prepared"]
                                                                  and x["pid"] not in old]) == 3), None),
                   "three new prepared spares")
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert mine != 19
    for spare in srv["spares"]:
        holder, nice = _stat(spare["pid"])
        assert nice == mine, (spare, nice, mine)
        assert _stat(holder) == (srv["pid"], 19), (spare, _stat(holder))


def _cap_eff(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)


CAP_SYS_NICE = 23


NO_SYS_NICE = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"]


def _new_servers(wbin, known):
    return [s for s in settled(wbin) if s["pid"] not in known]


def _stop(wbin, srvs):
    for s in srvs:
        ask(os.path.join(WARM_DIR, s["key"] + ".sock"), b"Q")
        wait_for(lambda: pid_gone(s["pid"]), "that server to end")


def test_spares_of_callers_that_may_not_raise_their_priority_never_lower_it(wbin):
    """Without CAP_SYS_NICE (a rootless runtime's user namespace, a bounding set without it), a process
    may lower its priority but never raise it again. A server started there has spares that keep the
    server's priority while they prepare, and that do not rehearse a lower one a call had: at nice 19, or
    at the last call's 5, every later call at 0 would be refused as `nice` and go by exec."""
    call = Caller(wbin, prefix=NO_SYS_NICE)
    known = {s["pid"] for s in servers(wbin)}
    try:
        assert call()[0] == 0  # (the runner has answered: setpriv has exec'd it)
        assert not _cap_eff(call.runner.pid) >> CAP_SYS_NICE & 1  # (the premise, read from the kernel)

        def theirs():
            return (_new_servers(wbin, known) or [None])[0]
        srv = wait_for(lambda: (call(), theirs())[1], "a server for callers without CAP_SYS_NICE", 60)
        mine = os.getpriority(os.PRIO_PROCESS, srv["pid"])
        assert mine == 0 and srv["sparesLowerPriority"] is False

        def prepared(old):  # the server once three spares made after ``old`` ones have prepared
            s = theirs()
            return s if len([x for x in s["spares"] if x["prepared"] and x["pid"] not in old]) == 3 else None
        srv = wait_for(lambda: prepared(()), "three prepared spares")
        assert [_stat(x["pid"])[1] for x in srv["spares"]] == [mine] * 3
        for _ in range(3):  # calls at nice 5: a spare takes each on (it may lower its priority)
            assert call(before=["nice", "-n", "5"])[0] == 0
        assert theirs()["served"] == srv["served"] + 3
        srv = wait_for(lambda: prepared({x["pid"] for x in srv["spares"]}),
                       "three new prepared spares (each rehearsed the last call, at nice 5)")
        assert [_stat(x["pid"])[1] for x in srv["spares"]] == [mine] * 3
        for _ in range(3):
            assert call()[0] == 0
        after = theirs()
        assert (after["served"] - srv["served"], after["refused"].get("nice", 0)) == (3, 0)
    finally:
        call.close()
        _stop(wbin, _new_servers(wbin, known))


def test_a_caller_above_a_servers_priority_it_cannot_give_gets_a_server_of_its_own(wbin):
    """Without CAP_SYS_NICE, a server started by a caller at nice 5 can never serve a caller at 0 (its
    children cannot raise their priority). The first such call goes by exec, with the exec'd outcome, and
    the server ends: the next calls start a server at 0, which serves them (and would serve calls at 5)."""
    call = Caller(wbin, prefix=NO_SYS_NICE)
    known = {s["pid"] for s in servers(wbin)}
    at5 = ["nice", "-n", "5"]
    try:
        first = wait_for(lambda: (call(before=at5), _new_servers(wbin, known))[1], "a server started at 5", 60)[0]
        assert os.getpriority(os.PRIO_PROCESS, first["pid"]) == 5
        got = call()
        assert got == call({"SKB_WARM": "0"}) and got[0] == 0
        # (the first call at 0 ends it; one that missed it, a launcher's wait run out on a loaded machine, went
        # by exec without reaching it: the next one does)
        wait_for(lambda: (call(), pid_gone(first["pid"]))[1], "the server started at nice 5 to end")
        known.add(first["pid"])
        second = wait_for(lambda: (call(), _new_servers(wbin, known))[1], "a server started at nice 0", 60)[0]
        assert os.getpriority(os.PRIO_PROCESS, second["pid"]) == 0
        before = _new_servers(wbin, known)[0]
        assert call()[0] == 0 and call(before=at5)[0] == 0
        after = _new_servers(wbin, known)[0]
        assert (after["served"] - before["served"], after["refused"].get("nice", 0)) == (2, 0)
    finally:
        call.close()
        _stop(wbin, _new_servers(wbin, known))


def test_hostile_requests_are_refused_and_the_server_stays(wbin):
    srv = the_server(wbin)
    garbage = refused(wbin, "message")
    for payload in (b"W\xff\xff\xff\xff\xff", b"Wgarbage", b"Z", b"W" + bytes([0x43]) + struct.pack("<I", 3) + b"abc"):
        s = _connect(srv)
        s.settimeout(10)
        s.send(payload)
        assert s.recv(100) == b"Rmessage"
        s.close()
    # a request larger than the server reads: refused, nothing read past it
    s = _connect(srv)
    s.settimeout(10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    try:
        s.send(b"W" + b"\0" * (2 << 20))
        assert s.recv(100) == b"Rmessage"
    except OSError:  # (the kernel may refuse a datagram that large outright: just as good)
        pass
    s.close()
    assert refused(wbin, "message") >= garbage + 4
    # status requests from a client that never reads its answers: the server does not wait for it
    deaf = [_connect(srv) for _ in range(20)]
    for s in deaf:
        s.send(b"S")
    w, c = _version(wbin), _version(wbin, **COLD)
    assert (w.rc, w.stdout) == (c.rc, c.stdout)
    for s in deaf:
        s.close()
    assert the_server(wbin)["pid"] == srv["pid"]


def _low_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))


def _burst(wbin, tmp_path, ns, n=16):
    """n concurrent debug ADDs (300 ms each) by callers with `ulimit -n 40`: (outputs, the exec'd output)."""
    conf = tmp_path / "burst.json"
    conf.write_text(json.dumps({"cniVersion": "1.0.0", "name": "warm-burst", "type": "debug",
                                "inject": {"ADD": {"delayMs": 300}}}))
    procs = []
    for i in range(n):
        with open(conf) as fin:
            procs.append(subprocess.Popen([os.path.join(wbin, "debug")], stdin=fin, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, preexec_fn=_low_limit,
                                          env=cni_env("ADD", containerid=f"b{i}", netns=f"/run/netns/{ns}")))
    outs = [(p.communicate(timeout=120), p.returncode) for p in procs]
    with open(conf) as fin:
        cold = subprocess.run([os.path.join(wbin, "debug")], stdin=fin, capture_output=True, preexec_fn=_low_limit,
                              env=cni_env("ADD", containerid="b0", netns=f"/run/netns/{ns}", **COLD))
    return outs, (cold.stdout, cold.returncode)


def test_callers_under_a_low_fd_limit(wbin, tmp_path, make_netns):
    """Callers with `ulimit -n 40` (soft and hard): a burst of 16 calls from them gets the exec'd answer
    every time, whether they find no server (the first one may start one: a server never keeps such a
    limit, it raises it or does not start) or a server started by a usual caller (each child takes on
    the limit of 40). No 999, no server crash."""
    ns = make_netns("warmburst")
    stop_servers(wbin)
    outs, cold = _burst(wbin, tmp_path, ns)
    assert all(rc == 0 and out == cold[0] for (out, _), rc in outs), outs
    for srv in servers(wbin):  # one started by those callers: with a limit of its own, or none at all
        assert int(open(f"/proc/{srv['pid']}/limits").read().split("Max open files")[1].split()[0]) >= 4096
    stop_servers(wbin)
    exe = os.path.join(wbin, "loopback")
    wait_for(lambda: (run_plugin(exe, cni_env("VERSION")), servers(wbin))[1], "a server started as usual", 60)
    srv = the_server(wbin)
    before = served(wbin)
    outs, cold = _burst(wbin, tmp_path, ns)
    assert all(rc == 0 and out == cold[0] for (out, _), rc in outs), outs
    assert the_server(wbin)["pid"] == srv["pid"]
    assert served(wbin) > before  # (calls beyond what the server can take go by exec: that is allowed)


def test_a_server_that_ends_before_the_call_began_sends_it_to_exec(wbin):
    """The call was accepted (the launcher has ACCEPTED and sent GO), but the server dies before its child
    began it (a failpoint stops each spare of the server right after it takes a call): the launcher goes
    by exec, and the call's answer is the exec'd one, never code 999."""
    exe = os.path.join(wbin, "loopback")
    failpoint = None
    try:
        srv, failpoint = _server_with_failpoint(wbin, "stop-before-begin")
        p = subprocess.Popen([exe], env=cni_env("VERSION"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child = wait_for(lambda: (servers(wbin)[0]["childPids"] or [None])[0], "the call's child")
        wait_for(lambda: open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] == "T",
                 "the child to stop before beginning")
        os.kill(srv["pid"], signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        cold = run_plugin(exe, cni_env("VERSION", **COLD))
        assert (p.returncode, out.decode()) == (cold.rc, cold.stdout), err
        wait_for(lambda: pid_gone(child), "the child to die with its server")
    finally:
        if failpoint and os.path.exists(failpoint):
            os.unlink(failpoint)
        stop_servers(wbin)


def _server_with_failpoint(wbin, name):
    """A new server whose spares all have the failpoint ``name``: (its status, the failpoint's path)."""
    stop_servers(wbin)
    exe = os.path.join(wbin, "loopback")
    wait_for(lambda: (run_plugin(exe, cni_env("VERSION")), servers(wbin))[1], "a server", 60)
    srv = the_server(wbin)
    failpoint = os.path.join(WARM_DIR, srv["key"] + ".failpoint")
    with open(failpoint, "w") as f:
        f.write(name)
    stop_servers(wbin)
    os.unlink(os.path.join(WARM_DIR, srv["key"] + ".spawn"))  # (the next call may start a server at once)
    run_plugin(exe, cni_env("VERSION"))
    return the_server(wbin), failpoint  # (its spares read the failpoint when they are made)


def test_a_spare_takes_a_call_before_it_has_prepared(wbin):
    """A spare waits for calls from the moment it is made and prepares itself only meanwhile: a call never
    waits for a preparation. With preparations that never end (a failpoint), every call is still served
    warm by a spare, none by a child the server had to fork for it."""
    failpoint = None
    try:
        srv, failpoint = _server_with_failpoint(wbin, "never-prepared")
        wait_for(lambda: len([s for s in the_server(wbin)["spares"] if s["ready"]]) == 3, "three waiting spares")
        before = served(wbin)
        for _ in range(8):
            w, c = _version(wbin), _version(wbin, **COLD)
            assert (w.rc, w.stdout) == (c.rc, c.stdout)
        now = the_server(wbin)
        assert now["pid"] == srv["pid"] and served(wbin) == before + 8, now
        assert now["dedicatedMade"] == 0 and not any(s["prepared"] for s in now["spares"]), now
    finally:
        if failpoint and os.path.exists(failpoint):
            os.unlink(failpoint)
        stop_servers(wbin)


def _refusals(wbin):
    return sum(sum(s["refused"].values()) for s in servers(wbin))


def test_spares_share_no_writable_memory(wbin):
    """Spares receive requests at the same moment: memory one could write and another read would let two
    calls tear each other's requests. Read from the kernel (/proc/<spare>/maps): no spare has a shared
    writable mapping (an anonymous one shows as /dev/zero, shared with the server and every sibling)."""
    ensure_server(wbin)
    srv = wait_for(lambda: next((s for s in servers(wbin) if len([x for x in s["spares"] if x["pid"]]) >= 2), None),
                   "a server with two spares")
    for spare in srv["spares"]:
        if not spare["pid"]:
            continue
        with open(f"/proc/{spare['pid']}/maps") as f:
            shared = [line.strip() for line in f if line.split()[1][1] == "w" and line.split()[1][3] == "s"]
        assert shared == [], (spare, shared)
    before = _refusals(wbin)
    outs = []
    def burst():
        outs.extend(_version(wbin) for _ in range(20))
    threads = [threading.Thread(target=burst) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cold = _version(wbin, **COLD)
    assert {(r.rc, r.stdout) for r in outs} == {(cold.rc, cold.stdout)}
    log = "".join(open(os.path.join(WARM_DIR, f)).read() for f in os.listdir(WARM_DIR) if f.endswith(".log"))
    assert _refusals(wbin) == before, log     # 120 calls, six at a time: none refused


def test_a_late_request_is_the_servers_to_wait_for(wbin):
    """A client that connects and sends its request late: the spare that accepted it passes it on to the
    server (a silent client never holds a spare), which waits for it and answers it (here: a malformed
    request, refused); a legitimate call meanwhile is served warm."""
    srv = ensure_server(wbin)
    s = _connect(srv)
    s.settimeout(20)
    before = served(wbin)
    w, c = _version(wbin), _version(wbin, **COLD)
    assert (w.rc, w.stdout) == (c.rc, c.stdout) and served(wbin) == before + 1
    s.send(b"Wlate garbage")
    assert s.recv(100) == b"Rmessage"
    s.close()


def _stack_unlimited():
    resource.setrlimit(resource.RLIMIT_STACK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def test_no_server_from_a_caller_with_an_infinite_stack_limit(wbin):
    """Such a caller's calls go by exec (rlimit-stack), and the server it would start does not: its
    children would keep the legacy memory layout that limit gives it (docs/WARM.md, row 101)."""
    key = ensure_server(wbin)["key"]
    stop_servers(wbin)
    os.unlink(os.path.join(WARM_DIR, key + ".spawn"))  # (so that the first call below may start one at once)
    exe = os.path.join(wbin, "loopback")
    for _ in range(3):
        p = subprocess.run([exe], env=cni_env("VERSION"), capture_output=True, preexec_fn=_stack_unlimited)
        cold = run_plugin(exe, cni_env("VERSION", **COLD))
        assert (p.returncode, p.stdout.decode()) == (cold.rc, cold.stdout)
    logs = [n for n in os.listdir(WARM_DIR) if n.endswith(".log")]
    said = "".join(open(os.path.join(WARM_DIR, n)).read() for n in logs)
    assert "infinite stack limit" in said, said
    assert not servers(wbin)
    ensure_server(wbin)


@pytest.mark.parametrize("reader", [False, True], ids=["fifo", "fifo-with-a-reader"])
def test_a_fifo_at_the_logs_name_never_holds_a_server(wbin, reader):
    """Opened for writing, a FIFO blocks until someone reads it: a server started while one sits at its
    log's name waited there for ever, before any socket or lock (no bound counted it, `skb warm stop`
    saw nothing), and each launcher 10 s later started one more. The server now ends at once."""
    srv = ensure_server(wbin)
    argv = open(f"/proc/{srv['pid']}/cmdline", "rb").read().split(b"\0")[:-1]   # as its launcher started it
    stop_servers(wbin)
    log = os.path.join(WARM_DIR, srv["key"] + ".log")
    os.unlink(log)
    os.mkfifo(log, 0o600)
    held = os.open(log, os.O_RDONLY | os.O_NONBLOCK) if reader else -1
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert p.wait(timeout=20) != 0
        finally:
            p.kill()
            p.wait()
        assert stat.S_ISFIFO(os.lstat(log).st_mode)    # left as it was
        if reader:   # and never written to: it is not the server's log
            assert os.read(held, 65536) == b""
        w, c = _version(wbin), _version(wbin, **COLD)   # and calls go by exec meanwhile
        assert (w.rc, w.stdout) == (c.rc, c.stdout) and w.rc == 0
    finally:
        if held >= 0:
            os.close(held)
        os.unlink(log)
    ensure_server(wbin)


def test_an_inherited_fd_past_the_servers_limit_goes_by_exec(wbin):
    """An fd the caller holds at a number a spare cannot place its own fds above (the last one its limit
    allows): refused (fds), by exec, with the exec'd answer."""
    srv = ensure_server(wbin)
    limit = int(open(f"/proc/{srv['pid']}/limits").read().split("Max open files")[1].split()[0])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < limit:
        pytest.skip(f"this test's own fd limit ({hard}) is below the server's ({limit})")
    exe = os.path.join(wbin, "loopback")
    target = limit - 1
    # (bash: it opens any fd number; subprocess's own preexec would be undone by its close_fds)
    call = ["bash", "-c", f'ulimit -n {limit} && exec {target}<&0 && exec "$0"', exe]
    before = refused(wbin, "fds")
    p = subprocess.run(call, env=cni_env("VERSION"), capture_output=True)
    c = subprocess.run(call, env=cni_env("VERSION", **COLD), capture_output=True)
    assert (p.returncode, p.stdout) == (c.returncode, c.stdout) and p.returncode == 0
    assert refused(wbin, "fds") == before + 1


# A caller that enters a Landlock domain of its own in which no regular file may be made (the handled
# access LANDLOCK_ACCESS_FS_MAKE_REG, no rule): a domain is kept across execve, so an exec'd plugin is in
# it, and a process can never leave one. (The debug log the calls ask for is a file the domain forbids.)
LANDLOCK = r"""
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
fd = libc.syscall(444, ctypes.create_string_buffer(struct.pack("Q", 1 << 8)), 8, 0)
assert fd >= 0 and libc.syscall(446, fd, 0) == 0, ctypes.get_errno()
"""


def _landlock_or_skip():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(444, None, 0, 1) < 1:  # LANDLOCK_CREATE_RULESET_VERSION: its ABI version
        pytest.skip(f"this kernel has no Landlock to confine a caller with ({os.strerror(ctypes.get_errno())})")


def test_a_caller_in_a_landlock_domain_is_not_served_by_a_server_outside_it(wbin, tmp_path):
    """A caller confined by Landlock, and a server that is not (row 31): a warm child would have run the
    plugin unconfined (a sandbox escape: it made the file the caller's domain forbids). The launcher sees
    it may not read the server's process, and goes by exec; the outcome is the exec'd one."""
    _landlock_or_skip()
    srv = the_server(wbin)
    log = tmp_path / "debug.jsonl"
    call = Caller(wbin, LANDLOCK)
    try:
        before = served(wbin)
        got = call({"SKB_DEBUG_LOG": str(log)})
        assert (got[0], log.exists(), served(wbin)) == (0, False, before)
        assert got == call({"SKB_DEBUG_LOG": str(log), **COLD})
    finally:
        call.close()
    # (the same call from outside the domain is served, and makes the file: the difference is real)
    assert _version(wbin, SKB_DEBUG_LOG=str(log)).rc == 0
    assert (log.exists(), served(wbin), the_server(wbin)["pid"]) == (True, before + 1, srv["pid"])


def test_a_server_started_in_a_landlock_domain_serves_only_that_domain(wbin, tmp_path):
    """A server started by a confined caller is confined itself, and so is every child it forks: it serves
    that caller's calls (the same domain, and the file stays unmade as exec'd), but a caller outside the
    domain would be confined by it. Its call goes by exec (the file is made, as exec'd) and the server ends:
    the next calls start a server outside the domain, which serves them."""
    _landlock_or_skip()
    stop_servers(wbin)
    log = tmp_path / "debug.jsonl"
    call = Caller(wbin, LANDLOCK)
    known = set()
    try:
        confined = wait_for(lambda: (call(), _new_servers(wbin, known))[1], "a server started in the domain", 60)[0]
        known.add(confined["pid"])
        got = call({"SKB_DEBUG_LOG": str(log)})
        assert (got[0], log.exists(), settled(wbin)[0]["served"]) == (0, False, confined["served"] + 1)
        assert got == call({"SKB_DEBUG_LOG": str(log), **COLD})
        r = _version(wbin, SKB_DEBUG_LOG=str(log))
        assert (r.rc, log.exists()) == (0, True)
        wait_for(lambda: pid_gone(confined["pid"]), "the server started in the domain to end")
        log.unlink()
        outside = wait_for(lambda: (_version(wbin), _new_servers(wbin, known))[1], "a server outside the domain", 60)[0]
        assert _version(wbin, SKB_DEBUG_LOG=str(log)).rc == 0 and log.exists()
        assert settled(wbin)[0]["served"] == outside["served"] + 1
    finally:
        call.close()
    ensure_server(wbin)


def test_a_server_keeps_none_of_its_first_callers_fds(wbin):
    """The call that starts a server goes by exec, and the exec'd plugin's end closes the fds it inherited
    (a pipe's write end: its reader sees EOF; a lock; a namespace). The server must not keep them open for
    its whole life: it is started with none of its first caller's fds but stdio."""
    _next_call_starts_a_server(wbin)
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        p = subprocess.run([os.path.join(wbin, "loopback")], env=cni_env("VERSION"), input=json.dumps(LOOPBACK).encode(),
                           capture_output=True, pass_fds=(w,))
        assert p.returncode == 0
        srv = ensure_server(wbin)
        pipe = os.readlink(f"/proc/self/fd/{w}")
        os.close(w)
        w = None
        held = [f for f in os.listdir(f"/proc/{srv['pid']}/fd") if _link(f"/proc/{srv['pid']}/fd/{f}") == pipe]
        assert held == []
        assert os.read(r, 1) == b""  # EOF: no process holds the write end
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def _next_call_starts_a_server(wbin):
    """Stop this context's server, and forget when the last one was started (the launcher starts one at most
    every 10 s per context): the next call starts one."""
    key = the_server(wbin)["key"]
    stop_servers(wbin)
    try:
        os.unlink(os.path.join(WARM_DIR, key + ".spawn"))
    except FileNotFoundError:
        pass


def _link(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


SIGCHLD_BLOCKED = ("import json, os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD]); "
                   "os.execve(sys.argv[1], sys.argv[1:], json.loads(os.environ['CALL_ENV']))")


def test_the_call_that_starts_a_server_leaves_no_signal_pending(wbin, tmp_path, make_netns):
    """A caller that blocks SIGCHLD: the launcher's start of a server must not leave one pending (pending
    signals survive the exec) in the plugin, which then goes by exec: its pending sets as exec'd."""
    ns = make_netns("warmchld")
    outs = {}
    for mode, extra in (("first", {}), ("cold", COLD)):
        _next_call_starts_a_server(wbin)
        out = tmp_path / f"pending-{mode}"
        conf = {"cniVersion": "1.0.0", "name": "warm-chld", "type": "debug",
                "addHooks": [["sh", "-c", f"grep -E '^(SigPnd|ShdPnd)' /proc/$PPID/status > {out}"]]}
        env = cni_env("ADD", containerid=f"chld-{mode}", netns=f"/run/netns/{ns}", **extra)
        p = subprocess.run(["/usr/bin/python3", "-c", SIGCHLD_BLOCKED, os.path.join(wbin, "debug")],
                           env={"CALL_ENV": json.dumps(env)}, input=json.dumps(conf).encode(), capture_output=True)
        assert p.returncode == 0, p.stderr
        outs[mode] = out.read_text()
        if mode == "first":
            wait_for(lambda: servers(wbin), "the server that call started")
    assert outs["first"] == outs["cold"] and "0000000000000000" in outs["cold"], outs
    ensure_server(wbin)


@pytest.mark.parametrize("kib", [40, 48, 56])
def test_a_caller_with_a_small_stack_goes_by_exec(wbin, kib):
    """A soft RLIMIT_STACK of a few dozen KiB: the exec'd plugin works; the launcher's warm path needs more
    (it crashed at 44 to 56 KiB), so such a call goes by exec, with the exec'd outcome."""
    the_server(wbin)

    limit = (kib << 10, resource.getrlimit(resource.RLIMIT_STACK)[1])

    def call(**extra):
        return subprocess.run([os.path.join(wbin, "loopback")], env=cni_env("VERSION", **extra),
                              input=json.dumps(LOOPBACK).encode(), capture_output=True,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_STACK, limit))
    before = served(wbin)
    w, c = call(), call(**COLD)
    assert (w.returncode, w.stdout) == (c.returncode, c.stdout) and c.returncode == 0
    assert served(wbin) == before


def _capture_request(wbin):
    """A genuine request, as this test's launcher sends it (its snapshot; its proof is the secret of a file
    of ours; no fd), caught by a socket of ours put where the context's server listens; the launcher is
    refused, and goes by exec."""
    key = the_server(wbin)["key"]
    stop_servers(wbin)
    path = os.path.join(WARM_DIR, key + ".sock")
    fake = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fake.bind(path)
    fake.listen(1)
    fake.settimeout(30)
    proof = os.memfd_create("skb-warm-proof-" + key)  # (the launcher reads the server's fd 255 through /proc: ours here)
    os.write(proof, os.urandom(32))
    os.dup2(proof, 255, inheritable=False)
    os.close(proof)
    try:
        p = subprocess.Popen([os.path.join(wbin, "loopback")], env=cni_env("VERSION"), stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # (its fds are ours too now)
        conn, _ = fake.accept()
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 300)
        conn.send(b"Rtest")
        conn.close()
        p.communicate(json.dumps(LOOPBACK).encode(), timeout=30)
    finally:
        os.close(255)
        fake.close()
        os.unlink(path)
    os.unlink(os.path.join(WARM_DIR, key + ".spawn"))
    ensure_server(wbin)
    assert fds == [] and data[-37:-32] == b"K" + struct.pack("<I", 32), (fds, data[-37:])
    return data


def _with_proof(data, secret):
    """A captured request with another proof (its last record)."""
    return data[:-32] + secret


def _secret(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.pread(fd, 32, 0).ljust(32, b"\0")
    finally:
        os.close(fd)


def _in_fork(work):
    """What ``work()`` returns (bytes), run in a fork of the test that then ends (``?`` and the exception
    if it raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        answer = b"?"
        try:
            answer = work()
        except BaseException as e:
            answer = f"?{e}".encode()
        finally:
            os.write(w, answer)
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        return f.read()


def _send_as(path, data, drop_caps=False, confine=False, proof=None):
    """The answer to ``data``, sent from a fork of the test that first gave up every capability
    (``drop_caps``; uid 0 stays, so the root-only socket dir and socket still let it in) or entered a
    Landlock domain (``confine``), and then put what it reads of ``proof`` (a path) in the proof's place."""
    def work():
        request = data
        if confine:
            exec(LANDLOCK, {})
        if proof:
            request = _with_proof(request, _secret(proof))
        if drop_caps:
            import ctypes
            hdr, caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # all sets empty
            if ctypes.CDLL(None, use_errno=True).capset(hdr, caps) != 0:
                raise OSError(ctypes.get_errno(), "capset")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(10)
        s.connect(path)
        s.send(request)
        return s.recv(100)
    return _in_fork(work)


def test_a_snapshot_that_is_not_the_callers_own_is_refused(wbin):
    """A root process that gave up its capabilities sends the request (snapshot and proof) of a launcher
    that had them all: served, its call would run with every capability. The kernel's word on the
    connecting process (its status lines) is not the snapshot's: refused as `peer`. The same request from
    a process with the launcher's privilege is accepted (the pid differs; nothing else does). (The process opens
    the proof before it gives up its capabilities: without CAP_SYS_PTRACE it could not have, row 31.)"""
    data = _capture_request(wbin)
    srv = the_server(wbin)
    path, proof = os.path.join(WARM_DIR, srv["key"] + ".sock"), f"/proc/{srv['pid']}/fd/255"
    before = refused(wbin, "peer")
    assert _send_as(path, data, drop_caps=True, proof=proof).startswith(b"Rpeer")
    assert refused(wbin, "peer") == before + 1
    assert _send_as(path, data, proof=proof) == b"A"  # (no G follows: its child ends unused)


def test_a_confined_client_cannot_skip_the_launchers_proof(wbin):
    """A root process in a Landlock domain, whose launcher would go by exec (it may not read the server's
    process), sends a request itself, without the launcher's check: it cannot open the server's
    proof file (its fd 255, opened through /proc/<pid>/fd), and any other fd in the proof's place is refused
    (`proof`). An unconfined process
    that opens the file itself is accepted."""
    _landlock_or_skip()
    data = _capture_request(wbin)
    srv = the_server(wbin)
    path = os.path.join(WARM_DIR, srv["key"] + ".sock")
    proof = f"/proc/{srv['pid']}/fd/255"
    assert _send_as(path, data, confine=True, proof=proof).startswith(b"?[Errno 13]")
    assert _send_as(path, data, confine=True, proof="/proc/self/environ") == b"Rproof"
    assert _send_as(path, data, proof=proof) == b"A"
    assert the_server(wbin)["pid"] == srv["pid"]


def test_a_client_that_ended_before_its_request_is_refused_and_the_server_stays(wbin):
    """The process that connected has ended (its socket lives on in another, which sends the request): what
    /proc and kcmp say of its pid may be another process's, so the call is refused as `peer: gone`, and the
    server stays (it was refused as `landlock`, which ends the server: any client could have ended it)."""
    data = _with_proof(_capture_request(wbin), _secret(f"/proc/{the_server(wbin)['pid']}/fd/255"))
    srv = the_server(wbin)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    try:
        pid = os.fork()
        if pid == 0:
            try:
                s.connect(os.path.join(WARM_DIR, srv["key"] + ".sock"))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        s.send(data)
        assert s.recv(100) == b"Rpeer: gone"
        assert refused(wbin, "landlock") == 0 and the_server(wbin)["pid"] == srv["pid"]
    finally:
        s.close()


def _release(fifo):
    """Let every process blocked opening ``fifo`` for reading go on (it reads an empty file)."""
    while True:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader is waiting any more
            return


def _killed_at_once(exe, env, wbin=None):
    """Start a call as a runtime does (stdout a pipe), SIGKILL it (a runtime's timeout) once it is under
    way (warm: a child has taken it), and return whether the caller's stdout reached EOF within 10 s."""
    p = subprocess.Popen([exe], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        if wbin:
            wait_for(lambda: the_server(wbin)["children"] >= 1 or p.poll() is not None, "the call to be taken")
        p.kill()
        p.wait()
        return _read_to_eof(p.stdout, 10) is not None
    finally:
        p.stdout.close()


def _read_to_eof(f, limit):
    """What ``f`` (a pipe) gives until EOF, or None when EOF has not come within ``limit`` seconds."""
    got, deadline = b"", time.monotonic() + limit
    while time.monotonic() < deadline:
        if select.select([f], [], [], max(0.0, deadline - time.monotonic()))[0]:
            data = os.read(f.fileno(), 1 << 16)
            if not data:
                return got
            got += data
    return None


def test_a_call_that_blocks_in_its_adoption_dies_with_its_launcher_and_holds_up_no_other(wbin, tmp_path):
    """TZ names a FIFO: tzset() blocks opening it, exec'd (the interpreter's start) and warm (the child's
    adoption, before B). A runtime's timeout SIGKILLs the launcher. Exec'd, the plugin dies with it and the
    caller's stdout reaches EOF; warm, the child held that pipe on, blocked, for as long as the FIFO had no
    writer: the server now kills a child whose launcher hung up before it said BEGAN. The next spares
    rehearse that call's values: they blocked in the same tzset() after saying they were ready, and every
    later call waited 2 s for an accept and then the caller's stdout never closed. A rehearsal now leaves
    the zone alone: later calls are served."""
    fifo = str(tmp_path / "zone")
    os.mkfifo(fifo)
    exe = os.path.join(wbin, "loopback")
    try:
        wait_for(lambda: [s["prepared"] for s in the_server(wbin)["spares"]] == [True] * 3, "three prepared spares")
        assert _killed_at_once(exe, cni_env("VERSION", TZ=fifo), wbin), "warm: the caller's stdout stayed open"
        assert _killed_at_once(exe, cni_env("VERSION", TZ=fifo, **COLD)), "exec'd: the caller's stdout stayed open"
        settled(wbin)
        for _ in range(4):  # (the pool's spares, and the next, rehearse the blocked call)
            wait_for(lambda: [s["prepared"] for s in the_server(wbin)["spares"]] == [True] * 3, "three prepared spares",
                     limit=10)
            before = served(wbin)
            r = run_plugin(exe, cni_env("VERSION"), timeout=10)
            assert (r.rc, r.stdout) == (0, _version(wbin, **COLD).stdout)
            assert served(wbin) == before + 1
    finally:
        _release(fifo)


def test_a_request_nobody_accepts_holds_none_of_the_callers_fds(wbin):
    """The server and its spares are stopped (SIGSTOP; a frozen cgroup or a debugger would do the same):
    nobody accepts the call, and the launcher goes by exec after its 2 s. Its request stays queued on the
    socket until somebody reads it. It carried the caller's fds, the runtime's stdout pipe among them, so
    EOF never came while the server stayed stopped, although the exec'd plugin had answered and ended.
    The request now carries only the proof (the caller's fds come with GO, once a child has the call)."""
    wait_for(lambda: [s["prepared"] for s in the_server(wbin)["spares"]] == [True] * 3, "three prepared spares")
    srv = the_server(wbin)
    pids = [srv["pid"]] + [s["pid"] for s in srv["spares"]]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        p = subprocess.Popen([os.path.join(wbin, "loopback")], env=cni_env("VERSION"), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            out = _read_to_eof(p.stdout, 15)
        finally:
            p.stdout.close()
        assert p.wait(timeout=15) == 0
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert out is not None, "the caller's stdout stayed open"
    assert out.decode() == _version(wbin, **COLD).stdout
    before = served(wbin)
    assert _version(wbin).rc == 0
    assert served(wbin) == before + 1
    assert the_server(wbin)["pid"] == srv["pid"]


def _kernel_refuses_fds():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.setsockopt(socket.SOL_SOCKET, 83, 0)  # SO_PASSRIGHTS (Linux 6.16)
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_no_client_can_pass_the_server_an_fd(wbin):
    """The fds a client passes with its request are the receiver's to drop, and dropping the last reference
    can block (a TCP socket with SO_LINGER waits out its linger time, a file on a hung FUSE mount its
    flush): the kernel does it in the receiving process, even for fds a message had no room for. A root
    client with no capability at all passed three lingering sockets, and the spares and the server that
    read them stopped accepting for the linger time: calls waited 2 s each and went by exec. A request
    now carries no fd (its proof is a secret, read where only a process that may read the server can), and
    where the kernel has SO_PASSRIGHTS the server's socket refuses every fd: sending one fails in the
    sender, whoever would have accepted it (a spare or the server). Legitimate calls are still served."""
    if not _kernel_refuses_fds():
        pytest.skip("this kernel has no SO_PASSRIGHTS (Linux 6.16): a client's fds reach the server "
                    "(docs/WARM.md, Who may ask)")
    wait_for(lambda: [s["prepared"] for s in the_server(wbin)["spares"]] == [True] * 3, "three prepared spares")
    srv = the_server(wbin)
    for _ in range(5):  # (spares and, once none waits, the server)
        s = _connect(srv)
        try:
            with pytest.raises(PermissionError):
                socket.send_fds(s, [b"W"], [0])
        finally:
            s.close()
    before = served(wbin)
    assert _version(wbin).rc == 0
    assert served(wbin) == before + 1
    assert the_server(wbin)["pid"] == srv["pid"]


def _send_lingering(conn, listener, seconds):
    """Send on ``conn`` GO with the wrong fds (one: /dev/null), at once another message with /dev/null, then
    one with a TCP socket (on lo, in the sandbox) whose last close() waits ``seconds`` (SO_LINGER set, and
    data ``listener`` never accepts), from a fork of the test that then exits: an exiting process drops
    its sockets without waiting, so the last reference is the message's. Returns which sends the kernel
    took."""
    def work():
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        t.connect(listener.getsockname())
        t.setblocking(False)
        try:
            while True:
                t.send(b"x" * 4096)
        except BlockingIOError:
            pass
        t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, seconds))
        took = b""
        null = os.open("/dev/null", os.O_RDONLY)
        for kind, fd in ((b"G", null), (b"Z", null), (b"T", t.fileno())):
            try:
                socket.send_fds(conn, [kind], [fd])
                took += b"1"
            except OSError:
                took += b"0"
        return took
    return _in_fork(work)


def test_fds_a_client_sends_after_its_call_was_accepted_never_reach_the_server(wbin):
    """Once a call is accepted, its connection takes fds (GO brings the caller's). A client that sent GO
    with the wrong fds and at once more messages with fds left them queued on the connection (the child
    read GO alone and ended; after a fix, GO and the next one), and the server, the last to hold it,
    dropped them in close() as it reaped the call: a lingering socket there stopped the server for its
    linger time. Now the child makes the connection refuse fds as soon as
    GO has come, and refuses the call if anything came with or after it, leaving what it read to its exit
    (which never lingers). The server answers at once (`skb warm status` gives up after 20 s; the socket
    lingers 60) and still serves calls."""
    if not _kernel_refuses_fds():
        pytest.skip("this kernel has no SO_PASSRIGHTS (Linux 6.16): a client's fds reach the server "
                    "(docs/WARM.md, Who may ask)")
    data = _with_proof(_capture_request(wbin), _secret(f"/proc/{the_server(wbin)['pid']}/fd/255"))
    wait_for(lambda: [s["prepared"] for s in the_server(wbin)["spares"]] == [True] * 3, "three prepared spares")
    srv = the_server(wbin)
    spares = [sp["pid"] for sp in srv["spares"]]  # (one of them takes the call)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    s = _connect(srv)
    s.settimeout(10)
    try:
        s.send(data)
        assert s.recv(100) == b"A"
        # The child, stopped meanwhile, has not read GO when the other two come: all three are queued (a
        # child that read GO first would refuse the rest at once: a race the test must not leave to the CPUs)
        for pid in spares:
            os.kill(pid, signal.SIGSTOP)
        try:
            took = _send_lingering(s, listener, 60)
        finally:
            for pid in spares:
                os.kill(pid, signal.SIGCONT)
        assert took == b"111"
        try:
            s.recv(100)  # the child's refusal, or its end (X)
        except ConnectionResetError:  # (the server closed the connection with messages still on it)
            pass
    finally:
        s.close()
    settled(wbin)  # (each status request answered: `skb warm status` would give up first)
    before = served(wbin)
    assert _version(wbin).rc == 0
    assert served(wbin) == before + 1
    assert the_server(wbin)["pid"] == srv["pid"]
    listener.close()


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_a_child_stopped_for_its_launcher_ends_when_the_launcher_is_killed(wbin):
    """A launcher stopped after ACCEPTED (job control stopping the runtime's group, say): the server stops
    the call's child too. The launcher is then SIGKILLed before it sent GO: the child, which never got
    GO, must run again and end by itself (it stayed stopped for good, a call in flight for ever, and the
    server could never stop). A client of ours plays the launcher, with a captured request."""
    data = _with_proof(_capture_request(wbin), _secret(f"/proc/{the_server(wbin)['pid']}/fd/255"))
    srv = the_server(wbin)
    pid = os.fork()
    if pid == 0:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.settimeout(10)
            s.connect(os.path.join(WARM_DIR, srv["key"] + ".sock"))
            s.send(data)
            if s.recv(100) == b"A":
                os.kill(os.getpid(), signal.SIGSTOP)
        finally:
            os._exit(0)
    try:
        wait_for(lambda: _state(pid) == "T", "the client to stop")
        child = wait_for(lambda: (the_server(wbin)["childPids"] or [None])[0], "the call's child")
        wait_for(lambda: _state(child) == "T", "the server to stop the call's child")
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    settled(wbin)  # (no call in flight any more)
    assert the_server(wbin)["pid"] == srv["pid"]


_FAKE_SERVER = r"""
import ctypes, os, socket, sys
path, report = sys.argv[1], sys.argv[2]
if sys.argv[3:] == ["userns"]:  # a user namespace of its own (no map needed), with the caller's capability lines
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        print("no user namespace", flush=True)
        sys.exit(0)
    want = {l.split(":")[0]: int(l.split()[1], 16) for l in open("/proc/%d/status" % os.getppid())
            if l.startswith(("CapPrm", "CapEff", "CapBnd", "CapInh"))}
    for bit in range(64):
        if not want["CapBnd"] >> bit & 1:
            libc.prctl(24, bit, 0, 0, 0)  # PR_CAPBSET_DROP
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
    caps = (ctypes.c_uint32 * 6)(want["CapEff"] & 0xffffffff, want["CapPrm"] & 0xffffffff, want["CapInh"] & 0xffffffff,
                                 want["CapEff"] >> 32, want["CapPrm"] >> 32, want["CapInh"] >> 32)
    assert libc.capset(hdr, caps) == 0, ctypes.get_errno()
proof = os.memfd_create("skb-warm-proof-" + os.path.basename(path)[:-5])  # (named as a genuine server's proof)
os.write(proof, b"x" * 32)
os.dup2(proof, 255)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path + ".fake")
os.rename(path + ".fake", path)
s.listen(8)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(5)
try:
    got = c.recv(1 << 20)
except OSError:
    got = b""
if got:
    c.send(b"A")  # (it would take the call: the launcher's GO brings it the caller's fds)
with open(report, "w") as f:
    f.write(str(len(got)))
"""


def test_a_root_process_without_capabilities_cannot_pose_as_the_server(tmp_path):
    """Any root process, even one with no capability at all, may write in the root-owned socket dir: it
    put a socket of its own in place of a context's, with a 32-byte file at its fd 255, and the launcher,
    which checked only that its peer was root and that it could read the peer's fd 255 (a privileged
    launcher may read any process), sent it the call: the request (environment, CNI_ARGS) and, with GO, the
    caller's fds (stdio, the runtime's namespaces); it could make up the result. The launcher now sends a
    request only to a peer with its own ids, capabilities, no_new_privs, seccomp mode and memory nodes (a
    genuine server of its context has them), still alive when it has read them (SO_PEERPIDFD). The same
    fake with the caller's full privileges does get the request: the check, not the fake, refuses it.
    Review 7 then made the fake enter a user namespace of its own (no capability needed), where it may set
    its capability lines to the caller's: the launcher compared only the lines, and sent it the request and
    the caller's fds, and took its made-up result. A peer must now be in the launcher's user namespace, and
    in all the namespaces of the key, as a genuine server is."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    try:
        path = os.path.join(WARM_DIR, ensure_server(bindir)["key"] + ".sock")
        got = {}
        none = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
        for who, prefix, extra in (("no capabilities", none, []), ("own user namespace", none, ["userns"]),
                                   ("full privileges", [], [])):
            report = str(tmp_path / f"fake-{len(got)}")
            fake = subprocess.Popen(prefix + ["/usr/bin/python3", "-c", _FAKE_SERVER, path, report, *extra],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                said = fake.stdout.readline()
                if said == b"no user namespace\n":  # (none to be had here: that part is not tried)
                    got[who] = 0
                    continue
                assert said == b"listening\n", fake.stderr.read()
                w = _version(bindir)
                c = _version(bindir, **COLD)
                assert (w.rc, w.stdout) == (c.rc, c.stdout) and w.rc == 0  # (exec'd, either way)
                fake.wait(timeout=30)
            finally:
                fake.kill()
                fake.wait()
            got[who] = int(open(report).read())
        assert got["no capabilities"] == 0, "a root process without capabilities got a call's request"
        assert got["own user namespace"] == 0, "a root process without capabilities, in a user namespace of its own, got a request"
        assert got["full privileges"] > 0  # (the control: such a fake is as privileged as the caller)
    finally:
        stop_servers(bindir)


def _sched(pid):
    """(policy, real-time priority, nice) of pid, from /proc/<pid>/stat."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[38]), int(f[37]), int(f[16])


def test_a_server_started_by_a_real_time_caller_is_not_real_time(tmp_path, make_netns):
    """A server started by a SCHED_RR caller kept SCHED_RR for its life, and so did its holders and spares:
    their forks and preparation (at nice 19 under an ordinary policy, which a real-time one ignores) took
    the CPU before the node's ordinary work. The launcher starts a server at SCHED_OTHER (its nice kept);
    a real-time caller's call still runs at its caller's policy (row 84). Nor does a server keep a first
    caller's real-time I/O class (review 7): it starts with the default one, which follows its nice."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    try:
        first = subprocess.run(["ionice", "-c", "1", "-n", "0", "chrt", "-r", "7", os.path.join(bindir, "loopback")],
                               env=cni_env("VERSION"),
                               capture_output=True, timeout=30)
        assert first.returncode == 0, first.stderr
        srv = ensure_server(bindir)
        spares = wait_for(lambda: [s["pid"] for s in the_server(bindir)["spares"] if s.get("pid")] or None,
                          "spares")
        holders = [int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) for p in spares]
        for pid in [srv["pid"], *spares, *holders]:
            assert _sched(pid)[:2] == (0, 0), f"{pid}: policy, rt priority {_sched(pid)[:2]}"
            io = subprocess.run(["ionice", "-p", str(pid)], capture_output=True, text=True, check=True).stdout
            assert io.startswith("none"), f"{pid}: I/O class {io}"
        out = tmp_path / "policy"
        conf = {"cniVersion": "1.0.0", "name": "rt", "type": "debug",
                "addHooks": [["sh", "-c", f"chrt -p $PPID > {out}"]]}
        env = cni_env("ADD", netns=f"/run/netns/{make_netns('rtcall')}", containerid="rt")
        before = served(bindir)
        p = subprocess.run(["chrt", "-r", "7", os.path.join(bindir, "debug")], env=env, capture_output=True,
                           input=json.dumps(conf).encode(), timeout=30)
        assert p.returncode == 0, p.stdout
        assert served(bindir) == before + 1
        assert "SCHED_RR" in out.read_text() and "priority: 7" in out.read_text()
    finally:
        stop_servers(bindir)


def test_sockets_of_killed_servers_keep_no_context_from_a_server(tmp_path):
    """At most 16 servers run at once, counted by the sockets in the socket dir. A server killed (SIGKILL,
    the OOM killer) leaves its socket behind, and nothing removes it: after 16 such, no new context (a
    runtime restarted in a new session, say) ever got a server again, and its every call went by exec,
    silently. The launcher now counts, at that count, only the sockets a server listens on."""
    os.makedirs(WARM_DIR, mode=0o700, exist_ok=True)  # (as the launcher makes it: it uses no other)
    stale = [os.path.join(WARM_DIR, f"deadbeef{i:08x}.sock") for i in range(16)]
    for path in stale:  # (bound, never listened on, closed: as a killed server's, ECONNREFUSED)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.bind(path)
        s.close()
    try:
        _a_new_context_is_served(tmp_path)
    finally:
        for path in stale:
            os.unlink(path)


def _a_new_context_is_served(tmp_path):
    """A new install's first calls start a server for its context, which then serves its calls."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    try:
        srv = ensure_server(bindir)
        before = served(bindir)
        assert _version(bindir).rc == 0
        assert served(bindir) == before + 1
        assert srv["pid"] == the_server(bindir)["pid"]
    finally:
        stop_servers(bindir)


_LISTENERS = r"""
import os, resource, socket, sys
n, name = int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))
held = []
for i in range(n):  # names that sort before any server's; never an accept
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(os.path.join(sys.argv[1], "%s%016x.sock" % (name, i)))
    s.listen(4096)  # (a backlog no test fills: a full one refuses connects, and is not counted)
    held.append(s)
print("listening", flush=True)
sys.stdin.read()
"""


def _plant_listeners(where, n, prefix=(), name=""):
    """n sockets in ``where`` with a listener that never accepts (by a root process without capabilities
    with ``prefix``), named ``name`` and a number, until the returned process is killed."""
    p = subprocess.Popen([*prefix, "/usr/bin/python3", "-c", _LISTENERS, where, str(n), name],
                         stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"listening\n", p.stderr.read()
    return p


def _unplant(p, where, n, name=""):
    p.kill()
    p.wait()
    for i in range(n):
        os.unlink(os.path.join(where, "%s%016x.sock" % (name, i)))


def _listener_of_a_dead_process(path):
    """A socket listening on path, made by a root process without capabilities that passed it on to us
    and ended: (the socket, the dead process's pid, which SO_PEERCRED still names)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    pid = os.fork()
    if pid == 0:
        try:
            import ctypes
            hdr, caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
            if ctypes.CDLL(None).capset(hdr, caps) == 0:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.bind(path)
                s.listen(4096)
                socket.send_fds(b, [b"x"], [s.fileno()])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    _, fds, _, _ = socket.recv_fds(a, 10, 1)
    a.close()
    b.close()
    return socket.socket(fileno=fds[0]), pid


def _peer_pid(path):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.connect(path)
    try:
        return struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    finally:
        c.close()


def _recycled_listeners(n):
    """n sockets in the socket dir whose listener, a root process without capabilities, ended, its pid
    recycled by a privileged process (forced here with ns_last_pid, in the sandbox's pid namespace; on a
    node, any root daemon started later): (sockets, those processes)."""
    socks, holders = [], []
    for i in range(n):
        path = os.path.join(WARM_DIR, "%016x.sock" % i)
        for _ in range(10):  # (another process of the sandbox may take the pid first)
            s, dead = _listener_of_a_dead_process(path)
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(dead - 1))
            p = subprocess.Popen(["sleep", "600"])
            if p.pid == dead:
                break
            p.kill()
            p.wait()
            s.close()
            os.unlink(path)
        else:
            pytest.fail("no pid recycled")
        assert _peer_pid(path) == p.pid
        socks.append(s)
        holders.append(p)
    return socks, holders


@pytest.mark.parametrize("how", ["listening", "pid-recycled"])
def test_listeners_of_a_root_process_without_capabilities_keep_no_context_from_a_server(tmp_path, how):
    """A root process without capabilities may bind and listen in the root-owned socket dir. At 16 sockets
    the launcher counted every one with a listener as a server: 16 such listeners kept every new context
    from a server, for good (review 7). It now counts only a listener with its privileges in its user
    namespace, still the process whose pid it read (review 8: the listener that ended, its pid taken by a
    privileged process, passed the privileges check); and it reads the dir in the detached child that
    starts the server, so a full dir costs no call anything."""
    os.makedirs(WARM_DIR, mode=0o700, exist_ok=True)  # (as the launcher makes it: it uses no other)
    if how == "listening":
        planted = _plant_listeners(WARM_DIR, 16, ["setpriv", "--bounding-set=-all", "--inh-caps=-all"])
        socks, holders = [], [planted]
    else:
        socks, holders = _recycled_listeners(16)
    try:
        _a_new_context_is_served(tmp_path)
    finally:
        for p in holders:
            p.kill()
            p.wait()
        for s in socks:
            s.close()
        for i in range(16):
            os.unlink(os.path.join(WARM_DIR, "%016x.sock" % i))


def test_stop_with_a_thousand_silent_listeners_under_a_low_limit(tmp_path):
    """`skb warm stop` asked every socket at once with a thread each: with a thousand silent listeners in the
    dir and a limit on the command's address space (any limit that refuses threads), it failed with an
    internal error, and the real server ran on (review 7). It now asks them all from one thread, and the
    server is stopped. (The client's own code, in a process of its own under the limit, on a dir of the
    test's with a link to one server's socket.)"""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    srv = ensure_server(bindir)
    links = "/run/skb-cni/test-stop-many"  # (not under /tmp: a link needs the sockets' filesystem)
    os.makedirs(links)
    os.link(os.path.join(WARM_DIR, srv["key"] + ".sock"), os.path.join(links, srv["key"] + ".sock"))
    planted = _plant_listeners(links, 1000)
    try:
        stop = subprocess.run(["prlimit", "--as=1500000000", "--nofile=4096", sys.executable, "-c",
                               "import sys; from skb.plugin.warm import client; client.WARM_DIR = sys.argv[1]; "
                               "print(len(client.stop_all(wait=0)))", links],
                              capture_output=True, text=True, timeout=60, cwd=os.getcwd())
        assert stop.returncode == 0 and stop.stdout.split() == ["1001"], (stop.stdout, stop.stderr[-2000:])
        wait_for(lambda: pid_gone(srv["pid"]), f"server {srv['pid']} to end")
    finally:
        _unplant(planted, links, 1000)
        for name in os.listdir(links):
            os.unlink(os.path.join(links, name))
        os.rmdir(links)


def test_a_request_too_large_to_hand_on_goes_by_exec_at_once(wbin):
    """A request travels again, whole, from the spare (or the server) to the call's child, on a channel
    whose buffer must keep room for the child's reply. A caller's environment of 195-208 KiB made a request
    that was accepted, and then dropped: refused after `A` (`adopt`), the call a few ms slower than exec,
    and at the top of that range the spare died and spare-making paused. A launcher now sends no request
    over 160 KiB (a larger one, over about 208 KiB, never arrived anyway): such a call goes by exec at
    once, no server or spare refuses or loses anything, and a call of 150 KiB is still served."""
    wait_for(lambda: [s["prepared"] for s in the_server(wbin)["spares"]] == [True] * 3, "three prepared spares")
    srv = settled(wbin)[0]
    for kib in (190, 195, 200, 205):
        big = {f"BIG{i}": "x" * (5 << 10) for i in range(kib // 5)}  # (one string: at most 128 KiB)
        w, c = _version(wbin, **big), _version(wbin, **big, **COLD)
        assert (w.rc, w.stdout) == (c.rc, c.stdout) and w.rc == 0, kib
    after = settled(wbin)[0]
    assert (after["pid"], after["served"], after["refused"]) == (srv["pid"], srv["served"], srv["refused"])
    assert _version(wbin, **{f"BIG{i}": "x" * (5 << 10) for i in range(30)}).rc == 0
    assert served(wbin) == srv["served"] + 1


def test_stop_reaches_servers_that_cannot_answer(tmp_path):
    """`skb warm stop` asked each server for its status, one after another, 5 s each, and skipped one
    that did not answer: with three stopped servers (SIGSTOP, a frozen cgroup) it took 15 s, printed
    "stopped 0", and the servers ran on once continued. It now asks all at once, and asks one that does not
    answer to stop all the same: the request waits for it, and it ends once it runs again. (The client's
    own code, on links to three servers' sockets in a dir of the test's: a stop of every server in the
    socket dir would end other tests' servers.)"""
    from skb.plugin.warm import client
    bindirs = [install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / f"bin{i}")) for i in range(3)]
    srvs = [ensure_server(b) for b in bindirs]
    links = "/run/skb-cni/test-stop"  # (not under /tmp: a link needs the sockets' filesystem)
    os.makedirs(links)
    old = client.WARM_DIR
    try:
        for s in srvs:
            os.link(os.path.join(WARM_DIR, s["key"] + ".sock"), os.path.join(links, s["key"] + ".sock"))
            os.kill(s["pid"], signal.SIGSTOP)
        client.WARM_DIR = links
        stopped = client.stop_all(wait=0)
    finally:
        client.WARM_DIR = old
        for s in srvs:
            os.kill(s["pid"], signal.SIGCONT)
        for name in os.listdir(links):
            os.unlink(os.path.join(links, name))
        os.rmdir(links)
    assert sorted(k for k, *_ in stopped) == sorted(s["key"] for s in srvs)
    for s in srvs:
        wait_for(lambda: pid_gone(s["pid"]), f"server {s['pid']} to end once continued")


_FLOOD = r"""
import collections, socket, sys, time
path, per_10ms = sys.argv[1], int(sys.argv[2])
held, made, failed, at = collections.deque(), 0, 0, time.monotonic()
while True:
    for _ in range(per_10ms):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
        try:
            s.connect(path)  # and never a word
            made += 1
        except OSError:  # EAGAIN: the backlog is full
            failed += 1
            s.close()
            continue
        held.append(s)
        if len(held) > 300:
            held.popleft().close()
    if made + failed >= per_10ms * 100:
        print(made, failed, flush=True)
        made = failed = 0
    at += 0.01
    time.sleep(max(0.0, at - time.monotonic()))
"""


def test_silent_connections_at_a_high_rate_keep_no_call_from_its_spare(wbin):
    """A root client that opens 2,500 connections a second and sends nothing on any. A spare used to give
    each connection 2 ms for its request before it accepted the next, so three spares took at most 1,500
    a second, whatever the CPU: the backlog (128) filled, half the flood's connects failed, and a
    launcher's connect failed too (it went by exec) or waited behind up to 85 ms of silent ones. A spare
    now waits for a request without blocking and goes on accepting: the backlog never fills (the flood's
    own connects say so), and every call is served warm, with the answer exec gives."""
    srv = ensure_server(wbin)
    before = served(wbin)
    flood = subprocess.Popen([sys.executable, "-c", _FLOOD, os.path.join(WARM_DIR, srv["key"] + ".sock"), "25"],
                             stdout=subprocess.PIPE, text=True)
    try:
        seconds = [flood.stdout.readline().split()]  # a second of it before the calls
        cold = _version(wbin, **COLD)
        for _ in range(40):
            w = _version(wbin)
            assert (w.rc, w.stdout) == (cold.rc, cold.stdout)
        seconds.append(flood.stdout.readline().split())
    finally:
        flood.kill()
        flood.wait()
    for made, failed in seconds:  # (connects that found the backlog full; about 1,000 a second before)
        assert int(failed) < int(made) // 20, seconds
    assert served(wbin) == before + 40
    assert the_server(wbin)["pid"] == srv["pid"]


_GARBAGE = r"""
import os, select, socket, sys
answers = [b"1", b"[]", b'{"key": "x"}', b'{"pid": "self"}', b'{"pid": 1}', b"\xff" * 70000, b"[" * 60000,
           b'{"pid": %d}' % os.getpid()]
socks = {}
for i, a in enumerate(answers):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(os.path.join(sys.argv[1], "%016x.sock" % (0xfffffffffffffa0 + i)))
    s.listen(64)
    socks[s.fileno()] = (s, a)
print("listening", flush=True)
while True:
    for fd in select.select(list(socks), [], [])[0]:
        s, a = socks[fd]
        c, _ = s.accept()
        try:
            c.recv(100)
            c.send(a)
        except OSError:
            pass
        c.close()
"""

_STATUS_UNDER_A_LIMIT = r"""
import argparse, json, os, sys, time
from skb.plugin.warm import client
from skb.tool import warm
client.WARM_DIR = sys.argv[1]
held = [os.open("/dev/null", os.O_RDONLY) for _ in range(20)]  # (fds its caller left open)
at = time.monotonic()
entries = client.status_all()
took = time.monotonic() - at
warm.command(argparse.Namespace(action="status", json=False))
print(json.dumps({"took": took, "entries": entries}))
"""


def test_status_under_a_low_fd_limit_with_silent_and_lying_listeners(tmp_path):
    """`skb warm status` with 64 silent listeners and 8 that answer what no server would (a number, a list,
    a pid that is not theirs, 70 KB of junk; review 9: JSON nested too deep to decode, which crashed both
    commands, and a status with nothing but the liar's own pid, which crashed the text output), under an
    fd limit of 60 with 20 fds already open (review 8):
    the one-thread client asked them in batches with a timeout each (25 s), ran out of fds (an internal
    error), and took any answer for a server's (the text output crashed on one). It now asks within one
    timeout for all, as many at a time as the limit leaves room for (those it has no room for in time are
    sent the request unanswered, and shown as not answering: here the planted ones come after the
    server, by name), and a status counts only as a JSON object whose pid is its listener's: the real
    server's entry is right, the liar with its own pid is shown as an answer this version cannot read,
    and each other one is an error."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    srv = ensure_server(bindir)
    links = "/run/skb-cni/test-status-limit"  # (not under /tmp: a link needs the sockets' filesystem)
    os.makedirs(links)
    os.link(os.path.join(WARM_DIR, srv["key"] + ".sock"), os.path.join(links, srv["key"] + ".sock"))
    silent = _plant_listeners(links, 64, name="~")  # (asked after the server, by name: below)
    liars = subprocess.Popen(["setpriv", "--bounding-set=-all", "--inh-caps=-all", "/usr/bin/python3", "-c", _GARBAGE,
                              links], stdout=subprocess.PIPE)
    try:
        assert liars.stdout.readline() == b"listening\n"
        p = subprocess.run(["prlimit", "--nofile=60:60", sys.executable, "-c", _STATUS_UNDER_A_LIMIT, links],
                           capture_output=True, text=True, timeout=120, cwd=os.getcwd())
        assert p.returncode == 0, p.stderr[-3000:]
        text, got = p.stdout.rsplit("\n", 2)[0], json.loads(p.stdout.rsplit("\n", 2)[1])
        good = [e for e in got["entries"] if "error" not in e]  # (the liar that says its own pid is one)
        assert sorted(e["pid"] for e in good) == sorted([liars.pid, srv["pid"]]) and len(got["entries"]) == 73
        assert f"{srv['key']}: pid {srv['pid']}" in text and text.count("not answering") == 71
        assert f"pid {liars.pid}, an answer this version cannot read" in text
        assert got["took"] < 9  # one 5 s timeout for all, not one per batch (a bound on the wait, not a speed)
    finally:
        liars.kill()
        liars.wait()
        _unplant(silent, links, 64, "~")
        for name in os.listdir(links):
            os.unlink(os.path.join(links, name))
        os.rmdir(links)
        stop_servers(bindir)


def test_a_full_socket_dir_never_holds_a_callers_stdout(tmp_path):
    """The count of servers (at most 16) reads the socket dir in the detached child that would start a
    server. It read it before closing the caller's fds, so with a dir a root process had filled (here
    20,000 sockets of ended listeners) a new context's first call ended while its stdout stayed open
    until the read was done (review 9: 0.7-1 s with 150,000), and a runtime that reads to EOF waited. The
    child now closes them first; and it reads at most 16,384 entries (a dir with more is no servers')."""
    os.makedirs(WARM_DIR, mode=0o700, exist_ok=True)  # (as the launcher makes it: it uses no other)
    planted = [os.path.join(WARM_DIR, "%016x.sock" % (0xe000000000000000 + i)) for i in range(20000)]
    for path in planted:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.bind(path)
        s.close()
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))  # (a new context: its first call)
    try:
        p = subprocess.Popen([os.path.join(bindir, "loopback")], env=cni_env("VERSION"), stdout=subprocess.PIPE)
        p.wait(timeout=30)
        os.set_blocking(p.stdout.fileno(), False)
        out = p.stdout.read()
        assert p.returncode == 0 and json.loads(out)["cniVersion"]
        assert os.read(p.stdout.fileno(), 1) == b""  # EOF at once: no other process holds the pipe
    finally:
        for path in planted:
            os.unlink(path)
        stop_servers(bindir)


def _calls_until(bindir, pred, what):
    """Loopback VERSION calls of this test's context (each correct, warm or not) until pred() holds."""
    exe = os.path.join(bindir, "loopback")

    def step():
        p = run_plugin(exe, cni_env("VERSION"))
        assert p.rc == 0 and '"supportedVersions"' in p.stdout, p
        return pred()
    return wait_for(step, what, 40)  # (a context starts a server at most every 10 s)


def test_a_symlink_at_the_socket_name_is_never_followed_and_gets_replaced(tmp_path):
    """A root process may write the socket dir, and put a symlink at a context's socket name: a chain of
    them costs each connect() its walk, more than the exec it ends in. The launcher never follows a link
    there (here, to a listener of the test's: it never sees a connection) and starts a server, whose
    socket replaces the link."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    decoy = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        name = os.path.join(WARM_DIR, ensure_server(bindir)["key"] + ".sock")
        stop_servers(bindir)
        decoy.bind(str(tmp_path / "decoy.sock"))
        decoy.listen(64)
        decoy.setblocking(False)
        os.symlink(tmp_path / "decoy.sock", name + ".link")
        os.rename(name + ".link", name)
        _calls_until(bindir, lambda: stat.S_ISSOCK(os.lstat(name).st_mode) and servers(bindir),
                     "a server whose socket replaced the link")
        with pytest.raises(BlockingIOError):
            decoy.accept()
        before = served(bindir)
        assert run_plugin(os.path.join(bindir, "loopback"), cni_env("VERSION")).rc == 0
        assert served(bindir) == before + 1
    finally:
        decoy.close()
        stop_servers(bindir)


def test_a_hard_link_to_another_contexts_socket_gets_replaced(tmp_path):
    """A root process may hard-link another context's socket (the same caller's in another session) at
    this context's name: its server stops (its socket was replaced), and every call went to the other
    server, whose child refused it only once it had the caller's fds, for good (the launcher started a
    server only when there was no socket). The server's proof names its key: the launcher goes by exec
    without offering the call, and starts this context's server, whose socket replaces the link."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    other = Caller(bindir, prefix=["setsid"])
    try:
        ours = ensure_server(bindir)
        name = os.path.join(WARM_DIR, ours["key"] + ".sock")

        def theirs():
            assert other()[0] == 0
            return next((s for s in servers(bindir) if s["key"] != ours["key"]), None)
        their = wait_for(theirs, "the other session's server", 40)
        theirs_at = os.path.join(WARM_DIR, their["key"] + ".sock")
        os.link(theirs_at, name + ".link")
        os.rename(name + ".link", name)
        wait_for(lambda: pid_gone(ours["pid"]), "our server to stop (its socket was replaced)")
        refusals = json.loads(ask(theirs_at, b"S"))["refused"]
        _calls_until(bindir, lambda: os.lstat(name).st_ino != os.lstat(theirs_at).st_ino and len(servers(bindir)) == 2,
                     "a server of our own again")
        # (no call was offered to theirs: a link put back at once, again and again, would make them all refusals)
        assert json.loads(ask(theirs_at, b"S"))["refused"] == refusals
        before = served(bindir)
        assert run_plugin(os.path.join(bindir, "loopback"), cni_env("VERSION")).rc == 0
        assert served(bindir) == before + 1
        assert ask(name, b"S") and json.loads(ask(name, b"S"))["key"] == ours["key"]
    finally:
        other.close()
        stop_servers(bindir)


def test_a_directory_at_the_socket_name_leaves_no_file_per_start(tmp_path):
    """A directory at a context's socket name (a root process may make one) cannot be renamed over: each
    server start (one per 10 s) failed, and left its socket's temporary name behind, one file per start,
    until the dir held too many entries for any context to get a server. Calls go by exec."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    try:
        key = ensure_server(bindir)["key"]
        stop_servers(bindir)
        os.mkdir(os.path.join(WARM_DIR, key + ".sock"))
        log = os.path.join(WARM_DIR, key + ".log")

        def failed_starts():
            with open(log, errors="replace") as f:
                return f.read().count("Is a directory") >= 2
        _calls_until(bindir, failed_starts, "two server starts that found the directory")
        assert [n for n in os.listdir(WARM_DIR) if n.startswith(key + ".sock.")] == []
    finally:
        os.rmdir(os.path.join(WARM_DIR, key + ".sock"))
        stop_servers(bindir)


def _memory_cgroup(tmp_name, limit):
    """A new memory cgroup (v1's memory hierarchy, or v2's root) limited to ``limit`` bytes, or skip."""
    own = open("/proc/self/cgroup").read().splitlines()
    v1 = next((line.split(":", 2)[2] for line in own if "memory" in line.split(":")[1].split(",")), None)
    if v1 is not None and os.path.ismount("/sys/fs/cgroup/memory"):
        cg, knob = os.path.join("/sys/fs/cgroup/memory", v1.lstrip("/"), tmp_name), "memory.limit_in_bytes"
    elif "memory" in open("/sys/fs/cgroup/cgroup.subtree_control").read().split():
        cg, knob = os.path.join("/sys/fs/cgroup", tmp_name), "memory.max"
    else:
        pytest.skip("no memory cgroup controller this test can make a cgroup of")
    try:
        os.mkdir(cg)
        with open(os.path.join(cg, knob), "w") as f:
            f.write(str(limit))
    except OSError as e:
        pytest.skip(f"cannot make a limited memory cgroup here: {e}")
    return cg


def test_no_server_where_the_callers_memory_cgroup_has_no_room_for_it(wbin):
    """Review 14: started in a runtime's cgroup with a tight memory.max, the server (the largest process
    there) was the OOM killer's choice, and the calls its children ran in that moment ended in 999. A
    server now starts only with 64 MiB of room left; the calls there go by exec, with the exec'd answers."""
    cg = _memory_cgroup(f"skb-test-{os.getpid()}", 48 << 20)
    try:
        calls_in_cgroup(os.path.join(wbin, "loopback"), cg)
        wait_for(lambda: "its memory cgroup has" in server_logs(), "the server's refusal in its log")
        assert "below 64 MiB" in server_logs()
    finally:   # (a server that did start there, on a build without the check, must not keep it alive)
        for pid in open(os.path.join(cg, "cgroup.procs")).read().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        wait_for(lambda: not open(os.path.join(cg, "cgroup.procs")).read().strip(), "the cgroup empties")
        os.rmdir(cg)
