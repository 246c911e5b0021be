"""skb.linux.netns against the kernel: opening every path form, rejecting what is not a netns, entering and
leaving, and the host-netns guard. Identity is checked with os.stat of the nsfs files, not our code."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from skb.linux import netns
from skb.cni.errors import CNIError

pytestmark = pytest.mark.kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ident(path):
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def current():
    return ident("/proc/thread-self/ns/net")


@pytest.fixture
def bind_mount():
    """bind_mount(src) -> a file under /run (the sandbox's tmpfs) with src bind-mounted on it."""
    made = []

    def make(src):
        target = f"/run/skbt-bind-{uuid.uuid4().hex[:8]}"
        open(target, "w").close()
        subprocess.run(["mount", "--bind", src, target], check=True)
        made.append(target)
        return target

    yield make
    for target in made:
        subprocess.run(["umount", target], check=False)
        os.unlink(target)


@pytest.fixture
def sleeper(make_netns):
    """(netns name, pid) of a process running inside that netns."""
    name = make_netns()
    want = ident(f"/run/netns/{name}")
    proc = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "60"])
    try:
        for _ in range(200):
            try:
                if ident(f"/proc/{proc.pid}/ns/net") == want:
                    break
            except OSError:
                pass
            time.sleep(0.01)
        else:
            pytest.fail("the sleeper never entered its netns")
        yield name, proc.pid
    finally:
        proc.kill()
        proc.wait()

# -- opening -------------------------------------------------------------------------------------------


def test_open_every_path_form(sleeper, bind_mount):
    name, pid = sleeper
    want = ident(f"/run/netns/{name}")
    forms = [f"/run/netns/{name}", f"/var/run/netns/{name}", f"/proc/{pid}/ns/net",
             bind_mount(f"/proc/{pid}/ns/net"), bind_mount(f"/run/netns/{name}")]
    handles = [netns.NetNS.open(p) for p in forms]
    try:
        for path, ns in zip(forms, handles):
            assert ns.path == path and ns.fd >= 0
            assert ns.ident() == want, path
            assert ns.same_as(handles[0])
            assert not netns.is_own(ns)
    finally:
        for ns in handles:
            ns.close()


def test_open_own_forms():
    with netns.NetNS.open("/proc/self/ns/net") as ns, netns.own_netns() as own:
        assert ns.ident() == own.ident() == current()
        assert netns.is_own(ns) and netns.is_own(own)


def test_close_and_context_manager():
    ns = netns.NetNS.open("/proc/self/ns/net")
    fd = ns.fd
    with ns:
        os.fstat(fd)
    assert ns.fd == -1
    with pytest.raises(OSError):
        os.fstat(fd)
    ns.close()      # twice is fine


def test_missing_path_is_not_found_code_3(make_netns):
    with pytest.raises(netns.NetNSNotFound) as e:
        netns.NetNS.open("/run/netns/skbt-never-made")
    assert e.value.code == 3
    assert e.value.msg == 'network namespace "/run/netns/skbt-never-made" does not exist'
    name = make_netns()
    subprocess.run(["ip", "netns", "del", name], check=True)
    with pytest.raises(netns.NetNSNotFound):
        netns.NetNS.open(f"/run/netns/{name}")


@pytest.mark.parametrize("make,what", [
    (lambda tmp: _write(tmp / "f", "hello"), "a regular file on "),
    (lambda tmp: str(tmp), "a directory on "),
    (lambda tmp: "/proc/self/ns/mnt", "a mnt namespace"),
    (lambda tmp: "/proc/self/ns/uts", "a uts namespace"),
    (lambda tmp: "/dev/null", "a character device on "),
])
def test_not_a_netns_is_code_4(tmp_path, make, what):
    path = make(tmp_path)
    with pytest.raises(CNIError) as e:
        netns.NetNS.open(path)
    assert not isinstance(e.value, netns.NetNSNotFound)
    assert e.value.code == 4
    assert e.value.msg.startswith(f'CNI_NETNS "{path}" is not a network namespace ({what}')
    assert "/run/netns/NAME" in e.value.details and "/proc/PID/ns/net" in e.value.details


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_regular_file_names_its_filesystem(tmp_path):
    path = _write(tmp_path / "f", "x")
    fstype = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True).stdout.strip()
    with pytest.raises(CNIError) as e:
        netns.NetNS.open(path)
    # stat -f names some types differently (ext2/ext3 for ext4, "tmpfs" alike): check the common ones
    if fstype in ("tmpfs", "overlayfs", "xfs", "btrfs"):
        assert f"a regular file on {fstype.replace('overlayfs', 'overlay')})" in e.value.msg


def test_stale_netns_file_says_nothing_is_mounted():
    """What a netns path looks like when its bind mount went away but the file stayed."""
    path = f"/run/netns/skbt-stale-{uuid.uuid4().hex[:8]}"
    open(path, "w").close()
    try:
        with pytest.raises(CNIError) as e:
            netns.NetNS.open(path)
        assert e.value.code == 4
        assert "an empty regular file (nothing is mounted on it" in e.value.msg and "on tmpfs" in e.value.msg
    finally:
        os.unlink(path)


def test_empty_path_is_code_4():
    with pytest.raises(CNIError) as e:
        netns.NetNS.open("")
    assert e.value.code == 4 and e.value.msg == "CNI_NETNS is empty"


def test_fifo_does_not_hang(tmp_path):
    path = str(tmp_path / "fifo")
    os.mkfifo(path)
    with pytest.raises(CNIError) as e:
        netns.NetNS.open(path)
    assert "(a FIFO (named pipe) on " in e.value.msg


@pytest.fixture
def open_dir():
    """A temp dir uid 65534 can reach (pytest's tmp_path sits in a root-only dir), holding a copy of skb/:
    where the checkout lives (/root is mode 0700 on Debian) must not matter."""
    d = tempfile.mkdtemp(prefix="skb-open-", dir="/tmp")
    os.chmod(d, 0o755)
    shutil.copytree(os.path.join(ROOT, "skb"), os.path.join(d, "skb"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for dirpath, dirnames, filenames in os.walk(d):
        for name in dirnames + filenames:
            os.chmod(os.path.join(dirpath, name), 0o755 if name in dirnames else 0o644)
    yield d
    shutil.rmtree(d)


def _as_nobody(open_dir, code, *args):
    """Run ``code`` (using skb.linux.netns) as uid/gid 65534; return its parsed JSON output."""
    prog = ("import os, sys, json\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
            "from skb.linux import netns\nfrom skb.cni.errors import CNIError\n" + code)
    out = subprocess.run([sys.executable, "-B", "-c", prog, *args], capture_output=True, text=True, cwd=open_dir,
                         timeout=30, env={"PYTHONPATH": open_dir, "PATH": os.environ["PATH"]})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_permission_errors_are_code_5(open_dir, make_netns):
    secret = os.path.join(open_dir, "secret")
    with open(secret, "w") as f:
        f.write("x")
    os.chmod(secret, 0o600)
    name = make_netns()
    got = _as_nobody(
        open_dir,
        "res = []\n"
        "try:\n    netns.NetNS.open(sys.argv[1])\nexcept CNIError as e:\n    res.append([e.code, e.msg])\n"
        "try:\n    ns = netns.NetNS.open(sys.argv[2])\n    res.append('opened')\n"
        "    with netns.enter(ns): pass\nexcept CNIError as e:\n    res.append([e.code, e.msg])\n"
        "print(json.dumps(res))\n", secret, f"/run/netns/{name}")
    assert got[0] == [5, f'cannot open CNI_NETNS "{secret}": permission denied (EACCES)']
    # nsfs files are world-readable: opening works, entering needs CAP_SYS_ADMIN
    assert got[1:] == ["opened", [5, f'cannot enter network namespace "/run/netns/{name}": '
                                     f"operation not permitted (EPERM)"]]

# -- entering ------------------------------------------------------------------------------------------


def test_enter_switches_and_restores(make_netns):
    name = make_netns()
    before = current()
    target = ident(f"/run/netns/{name}")
    with netns.NetNS.open(f"/run/netns/{name}") as ns:
        with netns.enter(ns) as entered:
            assert entered is ns
            assert current() == target
            assert netns.current_label() == f"/run/netns/{name}"
            with open("/proc/sys/net/ipv4/ip_forward") as f:   # /proc/sys follows the thread
                f.read()
        assert current() == before
        assert ns.fd >= 0           # enter() does not close a handle it was given
    assert netns.current_label().endswith("(the plugin's own)")


def test_enter_by_path_restores_on_exception(make_netns):
    name = make_netns()
    before = current()
    with pytest.raises(ZeroDivisionError):
        with netns.enter(f"/run/netns/{name}"):
            assert current() == ident(f"/run/netns/{name}")
            1 / 0
    assert current() == before


def test_nested_enter(make_netns):
    a, b = make_netns(), make_netns()
    before = current()
    with netns.enter(f"/run/netns/{a}"):
        with netns.enter(f"/run/netns/{b}"):
            assert current() == ident(f"/run/netns/{b}")
            assert netns.current_label() == f"/run/netns/{b}"
        assert current() == ident(f"/run/netns/{a}")
    assert current() == before


def test_enter_missing_path_raises_not_found():
    before = current()
    with pytest.raises(netns.NetNSNotFound):
        with netns.enter("/run/netns/skbt-never-made"):
            pytest.fail("entered a missing netns")
    assert current() == before


def test_enter_failure_leaves_us_where_we_were(tmp_path):
    f = open(tmp_path / "f", "w")
    fake = netns.NetNS("/fake", f.fileno())     # not an nsfs fd: setns() says EINVAL
    before = current()
    with pytest.raises(CNIError) as e:
        with netns.enter(fake):
            pytest.fail("entered a regular file")
    assert e.value.code == 999 and 'cannot enter network namespace "/fake"' in e.value.msg
    assert current() == before
    fake.fd = -1
    f.close()


def test_failed_switch_back_stops_the_process(make_netns):
    """If setns() back to our own netns fails, nothing after the with-block may run."""
    name = make_netns()
    prog = ("import os\nfrom skb.linux import netns\n"
            "real = netns.libc_function('setns', 'int', 'int', 'int')\ncalls = []\n"
            "def flaky(fd, nstype):\n    calls.append(fd)\n"
            "    if len(calls) == 2:\n        raise OSError(1, 'Operation not permitted')\n    real(fd, nstype)\n"
            "netns._setns = flaky\n"
            f"with netns.enter('/run/netns/{name}'):\n    print('inside', flush=True)\n"
            "print('AFTER')\n")
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0] == "inside" and "AFTER" not in out.stdout
    err = json.loads(lines[1])
    assert err["code"] == 999
    assert err["msg"] == f"cannot switch back from network namespace /run/netns/{name}: operation not permitted (EPERM)"
    assert "FATAL" in out.stderr


def test_setns_without_importing_ctypes():
    """setns() is resolved through _ctypes alone: ``import ctypes`` costs ~3 ms on every plugin call."""
    prog = ("import sys\nfrom skb.linux import netns\nnetns.libc_function('setns', 'int', 'int', 'int')\n"
            "print(' '.join(m for m in ('ctypes', '_ctypes') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["_ctypes"]

# -- the host-netns guard ------------------------------------------------------------------------------


def own_forms(bind_mount):
    return ["/proc/self/ns/net", "/proc/thread-self/ns/net", f"/proc/{os.getpid()}/ns/net",
            f"/proc/{os.getpid()}/task/{os.getpid()}/ns/net", bind_mount("/proc/self/ns/net")]


def test_is_own_recognises_own_netns_by_every_path(bind_mount):
    for path in own_forms(bind_mount):
        with netns.NetNS.open(path) as ns:
            assert netns.is_own(ns), path


def test_is_own_false_for_other_netns(sleeper, bind_mount):
    name, pid = sleeper
    for path in (f"/run/netns/{name}", f"/proc/{pid}/ns/net", bind_mount(f"/proc/{pid}/ns/net")):
        with netns.NetNS.open(path) as ns:
            assert not netns.is_own(ns)


def test_guard_inside_enter_still_means_the_process_own(make_netns):
    name = make_netns()
    with netns.NetNS.open(f"/run/netns/{name}") as target, netns.own_netns() as own:
        with netns.enter(target):
            assert not netns.is_own(target)
            assert netns.is_own(own)
            with netns.NetNS.open("/proc/thread-self/ns/net") as here:   # names the target while inside
                assert here.same_as(target) and not netns.is_own(here)
