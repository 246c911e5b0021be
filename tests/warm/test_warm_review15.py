"""Warm start as review 15 found it broken: a runtime's process group hung up by the kernel, a cgroup per
call that could not be removed, a caller's file system that does not answer. Each case is compared with
the exec'd call (SKB_WARM=0), read from outside: exit statuses, /proc, the cgroup file system."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import cni_env
from tests.warm.support import COLD, calls_in_cgroup, server_logs, wait_for


def _pids_cgroup(name):
    """A new cgroup of this process's pids hierarchy (v1), or of v2's root: its dir, or skip."""
    own = open("/proc/self/cgroup").read().splitlines()
    v1 = next((line.split(":", 2)[2] for line in own if "pids" in line.split(":")[1].split(",")), None)
    if v1 is not None and os.path.ismount("/sys/fs/cgroup/pids"):
        cg = os.path.join("/sys/fs/cgroup/pids", v1.lstrip("/"), name)
    elif os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        cg = os.path.join("/sys/fs/cgroup", name)
    else:
        pytest.skip("no cgroup hierarchy this test can make a cgroup in")
    try:
        os.mkdir(cg)
    except OSError as e:
        pytest.skip(f"cannot make a cgroup here: {e}")
    return cg


def _procs(cg):
    return open(os.path.join(cg, "cgroup.procs")).read().split()


def test_a_cgroup_made_for_a_call_can_be_removed_after_it(wbin):
    """A caller that runs each call in a cgroup of its own and removes it after: the server and its spares
    (7 processes) kept it busy (EBUSY) for the 10 minutes until idle. A server now ends at its next
    lifecycle check once no process but its own is in its cgroup."""
    cg = _pids_cgroup(f"skb-test-call-{os.urandom(4).hex()}")  # (two sandboxes can share a pid)
    try:
        calls_in_cgroup(os.path.join(wbin, "loopback"), cg)
        # (review 16: the server started by the first call there sees its caller alone there, and does not
        # serve; one that did serve would end at its next check)
        wait_for(lambda: ("its first caller was alone in its cgroup" in server_logs() or
                          "no other process in its cgroup" in server_logs()) and not _procs(cg),
                 "the server of that cgroup to end, and the cgroup to empty", 30)
        os.rmdir(cg)
    finally:
        if os.path.isdir(cg):
            for pid in _procs(cg):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            wait_for(lambda: not _procs(cg), "the cgroup to empty")
            os.rmdir(cg)


# A runtime in a session of its own (as a service manager starts one), with a stopped member in its
# process group, making plugin calls from several threads: its group is orphaned all along. A warm call's
# child joined the group while its holder (nice 19) had not yet left the session, so for a moment the group
# was not orphaned; the child's end then made it orphaned again, with a stopped member, and the kernel sent
# the whole group SIGHUP and SIGCONT: the runtime died.
RUNTIME = textwrap.dedent('''
    import os, signal, subprocess, sys, threading, time
    exe, warm, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    env = {"PATH": os.environ["PATH"], "CNI_COMMAND": "VERSION", "SKB_WARM": warm}
    stopped = subprocess.Popen(["sleep", "1000"])
    stopped.send_signal(signal.SIGSTOP)
    failed = []
    def calls():
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if subprocess.run([exe], env=env, capture_output=True).returncode:
                failed.append(1)
    threads = [threading.Thread(target=calls) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    stopped.kill()
    print("failed", len(failed))
''')


@pytest.mark.parametrize("warm", ["1", "0"], ids=["warm", "exec"])
def test_a_runtime_with_a_stopped_job_is_never_hung_up(wbin, warm):
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"], start_new_session=True) for _ in range(2)]
    try:
        rt = subprocess.run([sys.executable, "-c", RUNTIME, os.path.join(wbin, "loopback"), warm, "12"],
                            start_new_session=True, capture_output=True, text=True, timeout=120)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert rt.returncode == 0, f"the runtime ended with {rt.returncode} ({rt.stderr[-300:]})"
    assert rt.stdout.strip() == "failed 0", rt.stdout


FUSE_STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuse_stub.py")


@pytest.mark.parametrize("where", ["cwd", "fd"])
def test_a_callers_file_system_that_does_not_answer_holds_no_warm_call(wbin, tmp_path, where):
    """The caller's cwd, or an fd it passes, on a FUSE (or network) file system whose server has stopped
    answering: an exec'd plugin never looks at them and answers at once; the warm path's snapshot read
    their identity with fstat, which waited on the server, unkillable (review 15)."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this machine")
    mnt, flag = tmp_path / "fuse", tmp_path / "hold"
    mnt.mkdir()
    daemon = subprocess.Popen([sys.executable, FUSE_STUB, str(mnt), str(flag)])
    held, f = [], None
    try:
        wait_for(lambda: os.path.ismount(mnt) or daemon.poll() is not None, "the FUSE mount")
        if daemon.poll() is not None:
            pytest.skip("cannot mount a FUSE file system here")
        kw = {"cwd": str(mnt)}
        if where == "fd":
            f = os.open(mnt / "f", os.O_RDONLY)     # (whatever its number: never over one of pytest's own)
            kw = {"pass_fds": (f,)}
        flag.write_text("1" if where == "cwd" else "2")
        exe = os.path.join(wbin, "loopback")
        for label, extra in (("exec", COLD), ("warm", {})):
            p = subprocess.Popen([exe], env=cni_env("VERSION", **extra), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
            try:
                out, _err = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                held.append(label)
                continue
            assert p.returncode == 0 and b"supportedVersions" in out, (label, p.returncode, out)
    finally:
        if f is not None:
            os.close(f)
        daemon.kill()           # (frees any call still held, so that it can end)
        daemon.wait()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    assert held == [], f"held on the file system that does not answer: {held}"
