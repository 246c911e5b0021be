"""Signals reach a warm call as they reach an exec'd one: the child is in the caller's process group (a
group kill takes it and what it started), the launcher passes on what it is sent, and a stopped launcher
stops the call. Each test makes the same call warm and with SKB_WARM=0 and compares what is observable
from outside: exit status, output, files a hook writes, process states read from /proc."""
import json
import os
import signal
import time
import subprocess
import sys

import pytest

from tests.helpers import cni_env
from tests.warm.support import COLD, pid_gone, served, servers, the_server, wait_for

pytestmark = [pytest.mark.frozen, pytest.mark.kernel]


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _group(pgid):
    """The pids of a process group, read from /proc (no status round trip: a short call may be over by
    then on a loaded machine)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[2]) == pgid:
                        out.append(int(pid))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _debug_call(wbin, tmp_path, netns, conf, extra, name, **popen):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(dict({"cniVersion": "1.0.0", "name": "warm-sig", "type": "debug"}, **conf)))
    with open(path) as fin:
        return subprocess.Popen([os.path.join(wbin, "debug")], stdin=fin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=cni_env("ADD", netns=f"/run/netns/{netns}", containerid=name,
                                                                    **extra), **popen)


@pytest.mark.parametrize("mode", ["warm", "cold"])
def test_a_group_kill_takes_the_plugins_children(wbin, tmp_path, make_netns, mode):
    """`timeout -s KILL` kills the caller's process group: an exec'd plugin and the hook it runs die with
    it. So must a warm call's child and its hook: the hook's late write never happens."""
    d = tmp_path / mode
    d.mkdir()
    hook = f"echo $$ > {d}/started; sleep 3; echo late > {d}/late"
    before = served(wbin)
    p = _debug_call(wbin, tmp_path, make_netns("warmgrp"), {"addHooks": [["sh", "-c", hook]]},
                    COLD if mode == "cold" else {}, mode, process_group=0)
    hook_pid = int(wait_for(lambda: (d / "started").exists() and (d / "started").read_text().strip(),
                            "the plugin's hook to start"))
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    wait_for(lambda: pid_gone(hook_pid), "the hook to die with the group")
    assert not (d / "late").exists()
    assert served(wbin) == before + (1 if mode == "warm" else 0)


@pytest.mark.parametrize("how", [signal.SIGSTOP, signal.SIGTSTP])
def test_a_stopped_launcher_stops_the_call(wbin, tmp_path, make_netns, how):
    """SIGSTOP (or SIGTSTP) to the plugin process the runtime started, then SIGCONT: the call stops (its
    process is stopped, it writes nothing), then finishes with the exec'd answer."""
    ns = make_netns("warmstop")
    d = tmp_path / str(how)
    d.mkdir()
    conf = {"inject": {"ADD": {"delayMs": 1500}}}
    outs = {}
    for mode, extra in (("warm", {}), ("cold", COLD)):
        before = served(wbin)
        # (in a process group of its own: in the sandbox's, which is orphaned, the kernel would discard SIGTSTP)
        p = _debug_call(wbin, tmp_path, ns, dict(conf, cniOutput=str(d / f"out-{mode}")), extra, f"stop{mode}",
                        process_group=0)
        try:
            wait_for(lambda: (d / f"out-{mode}").exists(), "the call to have begun")
            if mode == "warm":  # the server's child, in the launcher's group
                child = wait_for(lambda: ([x for x in _group(p.pid) if x != p.pid] or [None])[0], "the call's child")
            else:
                child = p.pid
            os.kill(p.pid, how)
            wait_for(lambda: _state(child) == "T", "the call's process to stop", 10)
            wait_for(lambda: _state(p.pid) == "T", "the launcher to stop", 10)
            os.kill(p.pid, signal.SIGCONT)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                os.kill(p.pid, signal.SIGCONT)
                p.wait()
        outs[mode] = (p.returncode, out)
        assert served(wbin) == before + (1 if mode == "warm" else 0)
    assert outs["warm"] == outs["cold"] and outs["warm"][0] == 0


def test_a_signal_sent_to_the_launcher_reaches_the_call(wbin, tmp_path, make_netns):
    """SIGINT to the plugin process alone (not its group) while it works: an exec'd plugin gets it (Python
    raises KeyboardInterrupt), and so must a warm call's child, with the same exit status and output."""
    ns = make_netns("warmint")
    outs = {}
    for mode, extra in (("warm", {}), ("cold", COLD)):
        marker = tmp_path / f"int-{mode}"
        conf = {"cniOutput": str(marker), "inject": {"ADD": {"delayMs": 20000}}}
        # (SIGINT at its default in the plugin's caller: a suite started in the background by a shell
        # without job control inherits it ignored, and so would an exec'd plugin, which then never sees it)
        p = _debug_call(wbin, tmp_path, ns, conf, extra, f"int{mode}",
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        wait_for(lambda: marker.exists(), "the call to be in its delay")
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
        outs[mode] = (p.returncode, out, err.decode().replace(f"[PYI-{p.pid}:", "[PYI-PID:"))
    assert outs["warm"][:2] == outs["cold"][:2], outs
    assert outs["warm"][0] != 0
    # the same traceback and last words on stderr
    assert outs["warm"][2] == outs["cold"][2] and "KeyboardInterrupt" in outs["cold"][2], outs
    assert the_server(wbin)


def test_the_child_is_in_the_callers_process_group(wbin, tmp_path, make_netns):
    marker = tmp_path / "pg-out"
    p = _debug_call(wbin, tmp_path, make_netns("warmpg"), {"cniOutput": str(marker),
                                                         "inject": {"ADD": {"delayMs": 10000}}}, {}, "pg",
                    process_group=0)
    wait_for(lambda: marker.exists(), "the call to have begun")
    child = wait_for(lambda: (servers(wbin)[0]["childPids"] or [None])[0], "the call's child")
    assert os.getpgid(child) == p.pid == os.getpgid(p.pid)
    assert os.getsid(child) == os.getsid(p.pid)
    p.communicate(timeout=30)
    assert p.returncode == 0


# A caller whose process group is orphaned (a runtime started by its service manager leads its own
# session and group, and its parent is in another session). Run in a process of its own (setsid).
_ORPHANED = r"""
import json, os, signal, subprocess, sys, time
os.setsid()
debug, loopback, conf, env, marker, mode = sys.argv[1:]
env = json.loads(env)
bindir = os.path.dirname(loopback)
def servers():
    st = subprocess.run([os.path.join(bindir, "skb"), "warm", "status", "--json"], capture_output=True,
                        text=True).stdout
    return {s["pid"]: s.get("served", 0) for s in json.loads(st) if s.get("binDir") == bindir}
others = set(servers())  # (of other sessions)
mine = None
if mode == "cold":
    env["SKB_WARM"] = "0"
else:  # this new session's first calls start its server: until it serves, as on a node
    for _ in range(600):
        subprocess.run([loopback], env=dict(env, CNI_COMMAND="VERSION"), capture_output=True)
        mine = next((pid for pid, n in servers().items() if pid not in others and n > 0), None)
        if mine:
            break
        time.sleep(0.05)
    assert mine, "no server of its own in this session"
before = servers().get(mine, 0)
stopped = subprocess.Popen(["sleep", "300"])  # a stopped member of the group
os.kill(stopped.pid, signal.SIGSTOP)
with open(conf) as fin:
    p = subprocess.Popen([debug], env=env, stdin=fin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
while not os.path.exists(marker):
    time.sleep(0.01)
os.kill(p.pid, signal.SIGTSTP)  # an orphaned group: the kernel discards it for an exec'd plugin
try:
    out, err = p.communicate(timeout=60)
    rc = p.returncode
except subprocess.TimeoutExpired:
    os.kill(p.pid, signal.SIGCONT)
    out, err = p.communicate()
    rc = "stopped"
with open(f"/proc/{stopped.pid}/stat") as f:  # no SIGHUP and SIGCONT reached the group when the call ended
    member = f.read().rsplit(")", 1)[1].split()[0]
stopped.kill()
served = servers().get(mine, 0) - before if mine else 0
print(json.dumps({"rc": rc, "out": out.decode(), "member": member, "served": served}))
"""


def test_a_caller_in_an_orphaned_process_group(wbin, tmp_path, make_netns):
    """In an orphaned group, SIGTSTP to the plugin is discarded (it finishes), and its end sends nothing to
    the group (a stopped member stays stopped): so warm, whose child joins the group but whose parent is
    outside the caller's session."""
    ns = make_netns("warmorph")
    outs = {}
    for mode in ("warm", "cold"):
        marker = tmp_path / f"orph-{mode}"
        conf = tmp_path / f"orph-{mode}.json"
        conf.write_text(json.dumps({"cniVersion": "1.0.0", "name": "warm-orph", "type": "debug",
                                    "cniOutput": str(marker), "inject": {"ADD": {"delayMs": 1000}}}))
        env = cni_env("ADD", netns=f"/run/netns/{ns}", containerid=f"orph{mode}")
        p = subprocess.run([sys.executable, "-c", _ORPHANED, os.path.join(wbin, "debug"),
                            os.path.join(wbin, "loopback"), str(conf), json.dumps(env), str(marker), mode],
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        outs[mode] = json.loads(p.stdout)
    assert outs["warm"].pop("served") == 1 and outs["cold"].pop("served") == 0, outs
    assert outs["warm"] == outs["cold"], outs
    assert outs["warm"]["rc"] == 0 and outs["warm"]["member"] == "T"


def test_a_long_calls_launcher_stopped_late_stops_its_child(wbin, tmp_path, make_netns):
    """Past a second in flight the server looks at launchers every 50 ms, not 5 (review 16: hung calls cost
    it CPU for as long as they hung): a launcher stopped then still stops its child, and continues it."""
    marker = tmp_path / "long-out"
    p = _debug_call(wbin, tmp_path, make_netns("warmlong"), {"cniOutput": str(marker),
                                                           "inject": {"ADD": {"delayMs": 8000}}}, {}, "long")
    wait_for(lambda: marker.exists(), "the call to have begun")
    child = wait_for(lambda: (servers(wbin)[0]["childPids"] or [None])[0], "the call's child")
    time.sleep(1.5)   # (past LONG_CALL: the state this test needs is a call that has run that long)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _state(child) == "T", "the child to stop with its launcher")
    finally:
        os.kill(p.pid, signal.SIGCONT)
    wait_for(lambda: _state(child) != "T", "the child to run again")
    p.communicate(timeout=60)
    assert p.returncode == 0


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return ""
