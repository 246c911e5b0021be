"""The host-netns guard policy (skb.linux.guard), over every path form of the plugin's own netns."""
import os
import subprocess

import pytest

from skb.linux import guard
from skb.cni.env import CmdArgs
from skb.cni.errors import CNIError

pytestmark = pytest.mark.kernel


@pytest.fixture
def own_paths(tmp_path):
    bind = "/run/netns/guard-own"
    open(bind, "w").close()
    subprocess.run(["mount", "--bind", "/proc/self/ns/net", bind], check=True)
    yield ["/proc/self/ns/net", "/proc/thread-self/ns/net", f"/proc/{os.getpid()}/ns/net", bind]
    subprocess.run(["umount", bind], check=False)
    os.unlink(bind)


def args(command, netns, override=False):
    return CmdArgs(command, "c1", netns, "eth0", "", ["/x"], override)


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_add_check_refuse_own_netns(own_paths, command):
    for path in own_paths:
        with pytest.raises(CNIError) as ei:
            guard.open_target(args(command, path))
        e = ei.value
        assert e.code == 8 and path in e.msg and f"refusing to {command}" in e.msg
        assert "CNI_NETNS_OVERRIDE=1" in e.details


def test_del_changes_nothing_in_own_netns(own_paths, capfd):
    for path in own_paths:
        assert guard.open_target(args("DEL", path)) is None
    assert "changing nothing inside it (the DEL goes on as for a namespace already gone" in capfd.readouterr().err


@pytest.mark.parametrize("command", ["ADD", "CHECK", "DEL"])
def test_override_hands_over_the_own_netns_itself(own_paths, command, capfd):
    """With CNI_NETNS_OVERRIDE the guard stands aside: the handle it returns is the plugin's own netns
    (same namespace inode as /proc/self/ns/net, read with stat, not through skb), under the path given,
    and nothing is said about it."""
    own = os.stat("/proc/self/ns/net")
    for path in own_paths:
        ns = guard.open_target(args(command, path, override=True))
        try:
            st = os.fstat(ns.fd)
            assert (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino) and ns.path == path
        finally:
            ns.close()
    assert capfd.readouterr().err == ""


def test_container_netns_allowed(make_netns):
    name = make_netns()
    for command in ("ADD", "CHECK", "DEL"):
        ns = guard.open_target(args(command, f"/run/netns/{name}"))
        assert ns is not None and ns.path == f"/run/netns/{name}"
        ns.close()


def test_del_ignores_proc_pid_paths_and_gone_netns(make_netns, tmp_path):
    name = make_netns()
    sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "30"])
    try:
        import time
        for _ in range(100):  # wait until the sleeper has entered the netns
            if os.stat(f"/proc/{sleeper.pid}/ns/net").st_ino == os.stat(f"/run/netns/{name}").st_ino:
                break
            time.sleep(0.02)
        path = f"/proc/{sleeper.pid}/ns/net"
        assert guard.open_target(args("DEL", path)) is None          # may be another namespace after PID reuse
        ns = guard.open_target(args("ADD", path))                   # ADD: the runtime just made it
        ns.close()
    finally:
        sleeper.kill()
        sleeper.wait()
    (tmp_path / "f").write_text("")
    for gone in ("", "/run/netns/never", str(tmp_path / "f"), str(tmp_path)):
        assert guard.open_target(args("DEL", gone)) is None, gone


def test_del_resolves_the_path_before_the_proc_rule(make_netns, tmp_path):
    """`..`, `//` and symlinks must not hide a /proc/<pid> path from DEL's rule (they did: only the
    text was looked at). The sleeper's namespace is a real container netns: acting there would work,
    which is exactly why the rule must see through the spelling."""
    name = make_netns()
    sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "30"])
    try:
        import time
        for _ in range(100):
            if os.stat(f"/proc/{sleeper.pid}/ns/net").st_ino == os.stat(f"/run/netns/{name}").st_ino:
                break
            time.sleep(0.02)
        pid = sleeper.pid
        (tmp_path / "link").symlink_to(f"/proc/{pid}/ns/net")
        (tmp_path / "dirlink").symlink_to(f"/proc/{pid}")
        (tmp_path / "rel").symlink_to(f"../../../../../../../../proc/{pid}/ns")
        spellings = [f"/run/../proc/{pid}/ns/net", f"//proc/{pid}/ns/net", f"/proc/./{pid}/ns/net",
                     f"/proc/self/../{pid}/ns/net", str(tmp_path / "link"), str(tmp_path / "dirlink" / "ns" / "net"),
                     str(tmp_path / "rel" / "net"), f"/proc/{pid}/task/{pid}/ns/net", f"/proc/{pid}/root/run/netns/{name}"]
        for path in spellings:
            assert guard.other_process(path) == pid, path
            assert guard.open_target(args("DEL", path)) is None, path
        for own in ("/proc/self/ns/net", "/proc/thread-self/ns/net", f"/proc/{os.getpid()}/ns/net",
                    f"/run/netns/{name}", f"/run/netns/../netns/{name}"):
            assert guard.other_process(own) is None, own
        ns = guard.open_target(args("DEL", f"/run/netns/../netns/{name}"))
        assert ns is not None
        ns.close()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_in_a_warm_calls_child_the_plugin_is_its_launcher():
    """A warm call's child has guard.PLUGIN_PID set to its launcher's pid, the pid the caller knows the
    plugin by: /proc/self, /proc/thread-self and /proc/<launcher> are the plugin's own; the child's own
    pid, which an exec'd plugin never has, is another process's (as the same number is, exec'd)."""
    launcher = subprocess.Popen(["sleep", "30"])
    try:
        guard.PLUGIN_PID = launcher.pid
        for own in ("/proc/self/ns/net", "/proc/thread-self/ns/net", f"/proc/{launcher.pid}/ns/net",
                    "/proc/self/../self/ns/net"):
            assert guard.other_process(own) is None, own
        assert guard.other_process(f"/proc/{os.getpid()}/ns/net") == os.getpid()
        assert guard.other_process(f"/proc/self/../{os.getpid()}/ns/net") == os.getpid()
    finally:
        guard.PLUGIN_PID = None
        launcher.kill()
        launcher.wait()


@pytest.mark.parametrize("command", ["ADD", "CHECK", "DEL"])
def test_a_nul_byte_in_cni_netns_is_code_4(command):
    with pytest.raises(CNIError) as e:
        guard.open_target(args(command, "/run/netns/x\0y"))
    assert e.value.code == 4 and "CNI_NETNS" in e.value.msg
