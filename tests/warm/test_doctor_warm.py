"""skb doctor's `warm-start-off` note, judged by the launcher itself: a process named like a runtime, started
with an environment (or a uid, or a seccomp filter) that may turn warm start off, makes a plugin call the
way libcni does (its own environment plus the CNI_ variables). The doctor must name that process exactly
when its call was not served by the warm server (the server's own counter says which)."""
import json
import os
import subprocess

import pytest

from tests.helpers import cni_env
from tests.warm.support import ensure_server, install_copy, served, stop_servers

pytestmark = [pytest.mark.frozen, pytest.mark.kernel]

# The runtime: sets itself up (argv[1], Python), names itself containerd, then makes one call per line of
# stdin with its environment plus the CNI_ variables (argv[2]) and prints the exit status.
RUNTIME = r"""
import ctypes, json, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
exec(sys.argv[1])
libc.prctl(15, b"containerd", 0, 0, 0)
print("ready", flush=True)
env = dict(e.split("=", 1) for e in open("/proc/self/environ").read().split("\0") if e)  # (not Python's LC_CTYPE)
for exe in sys.stdin:
    p = subprocess.run([exe.strip()], env=dict(env, **json.loads(sys.argv[2])),
                       input=b'{"cniVersion": "1.0.0", "name": "x", "type": "loopback"}', capture_output=True)
    print(p.returncode, flush=True)
"""

# A seccomp filter that allows everything (a unit's SystemCallFilter= is one that allows a list)
SECCOMP = r"""
insn = (ctypes.c_ushort * 4)(0x06, 0, 0, 0)                   # BPF_RET|BPF_K: the k below
k = ctypes.c_uint32.from_buffer(insn, 4); k.value = 0x7fff0000  # SECCOMP_RET_ALLOW
prog = (ctypes.c_ulong * 2)(1, ctypes.addressof(insn))          # sock_fprog: one instruction
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0, ctypes.get_errno()   # PR_SET_SECCOMP, FILTER
"""

CASES = {  # id: (environment added to the runtime's, its setup, warm start stays on)
    "plain": ({}, "", True),
    "SKB_WARM=Yes": ({"SKB_WARM": "Yes"}, "", True),
    "SKB_WARM=": ({"SKB_WARM": ""}, "", True),
    "SKB_WARM=off": ({"SKB_WARM": "off"}, "", False),
    "SKB_WARM=0": ({"SKB_WARM": "0"}, "", False),
    "MALLOC_ARENA_MAX": ({"MALLOC_ARENA_MAX": "2"}, "", False),
    "GLIBC_TUNABLES": ({"GLIBC_TUNABLES": "glibc.malloc.check=0"}, "", False),
    "LD_PRELOAD=": ({"LD_PRELOAD": ""}, "", False),
    "LD_LIBRARY_PATH": ({"LD_LIBRARY_PATH": "/nonexistent"}, "", True),
    "PYTHONHASHSEED": ({"PYTHONHASHSEED": "1"}, "", True),
    "seccomp": ({}, SECCOMP, False),
    "not-root": ({}, "os.setresuid(65534, 0, 0)", False),  # (a real uid other than 0 is enough)
}


@pytest.mark.parametrize("case", CASES)
def test_doctor_names_exactly_the_runtimes_whose_calls_go_by_exec(wbin, tmp_path, case):
    extra, setup, stays_on = CASES[case]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **extra}
    runtime = subprocess.Popen(["/usr/bin/python3", "-c", RUNTIME, setup, json.dumps(cni_env("VERSION"))], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert runtime.stdout.readline() == "ready\n"
        before = served(wbin)
        runtime.stdin.write(os.path.join(wbin, "loopback") + "\n")
        runtime.stdin.flush()
        assert runtime.stdout.readline() == "0\n"
        warm = served(wbin) == before + 1
        (tmp_path / "net.d").mkdir()
        p = subprocess.run([os.path.join(wbin, "skb"), "doctor", "--json", "--conf-dir", str(tmp_path / "net.d"),
                            "--bin-dir", wbin, "--containerd-config", "", "--crio-config", "", "--crio-config-dir", "",
                            "--no-version", "--no-status"], capture_output=True, text=True, timeout=120)
        assert "Traceback" not in p.stderr, p.stderr
        out = json.loads(p.stdout)
        named = [f for f in out["problems"] + out["notes"]
                 if f["code"] == "warm-start-off" and f"(pid {runtime.pid})" in f["what"]]
    finally:
        runtime.stdin.close()
        runtime.wait()
    assert warm == stays_on, "the launcher did not do what this case expects of it"
    assert bool(named) == (not warm), named
    if named:
        assert named[0]["severity"] == "note" and named[0]["fix"]


def test_doctor_shows_no_raw_bytes_of_a_process_and_judges_root_processes_only(wbin, tmp_path):
    """Any user can name a process containerd and set its environment: the doctor names only processes
    that run as root, and shows what it read of them with escapes, never raw (a terminal would act on
    them)."""
    evil = "\x1b[31m\x1b]0;title\x07\x1b[2K"
    runtimes = {}
    try:
        for who, setup in (("root", ""), ("nobody", "os.setresuid(65534, 65534, 65534)")):
            runtimes[who] = subprocess.Popen(["/usr/bin/python3", "-c", RUNTIME, setup, "{}"], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, text=True, env={"SKB_WARM": evil})
            assert runtimes[who].stdout.readline() == "ready\n"
        (tmp_path / "net.d").mkdir()
        p = subprocess.run([os.path.join(wbin, "skb"), "doctor", "--json", "--conf-dir", str(tmp_path / "net.d"),
                            "--bin-dir", wbin, "--containerd-config", "", "--crio-config", "", "--crio-config-dir", "",
                            "--no-version", "--no-status"], capture_output=True, text=True, timeout=120)
        found = {who: [f for f in json.loads(p.stdout)["notes"] if f"(pid {r.pid})" in f["what"]]
                 for who, r in runtimes.items()}
    finally:
        for r in runtimes.values():
            r.stdin.close()
            r.wait()
    assert found["nobody"] == []
    assert len(found["root"]) == 1 and "\x1b" not in found["root"][0]["evidence"]
    assert "SKB_WARM=\\x1b[31m" in found["root"][0]["evidence"]


def test_doctor_names_a_plugin_dir_with_the_opt_out_file(tmp_path):
    """`.skb-warm-off` next to the launchers turns warm start off for every runtime: the doctor says so
    for that dir (it said nothing), judged by the launcher (its call is not served), and not for the
    same dir without the file."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path / "bin"))
    (tmp_path / "net.d").mkdir()

    def notes():
        p = subprocess.run([os.path.join(bindir, "skb"), "doctor", "--json", "--conf-dir", str(tmp_path / "net.d"),
                            "--bin-dir", bindir, "--containerd-config", "", "--crio-config", "",
                            "--crio-config-dir", "", "--no-version", "--no-status"],
                           capture_output=True, text=True, timeout=120)
        assert "Traceback" not in p.stderr, p.stderr
        out = json.loads(p.stdout)
        return [f for f in out["problems"] + out["notes"] if f["code"] == "warm-start-off" and bindir in f["what"]]
    try:
        ensure_server(bindir)
        assert notes() == []
        (tmp_path / "bin" / ".skb-warm-off").touch()
        before = served(bindir)
        p = subprocess.run([os.path.join(bindir, "loopback")], env=cni_env("VERSION"), capture_output=True)
        assert p.returncode == 0 and served(bindir) == before  # (the launcher did not ask its server)
        found = notes()
    finally:
        stop_servers(bindir)
    assert len(found) == 1 and found[0]["severity"] == "note" and ".skb-warm-off" in found[0]["evidence"], found
