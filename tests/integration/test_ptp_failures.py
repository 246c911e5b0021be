"""A failed ptp ADD leaves nothing behind. Each test provokes a failure at one step and compares the
sandbox before and after: host and container links, addresses and routes, iptables and nftables
rules, host-local's reservation files and the host's forwarding sysctls (tests/integration/ptp_support.py).
"""
import json
import os
import stat
import subprocess
import time

import pytest

from tests.helpers import GO_BIN_DIR, cni_env, ip_json
from tests.integration.ptp_support import (Ptp, host_veths, masq_chain_rules, nspath, ptp_conf, reservations,
                                           snapshot)

pytestmark = pytest.mark.kernel


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "ipam")


@pytest.fixture(params=["our-host-local", "go-host-local"])
def ptp(request, bin_dir):
    return Ptp(os.path.join(bin_dir, "ptp"), bin_dir if request.param == "our-host-local" else GO_BIN_DIR)


@pytest.fixture
def ours(bin_dir):
    return Ptp(os.path.join(bin_dir, "ptp"), bin_dir)


def script(path, text):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fails_cleanly(ptp, conf, ns, data_dir, expect, netns_names=None, **kw):
    """ADD fails with a message containing ``expect`` and the sandbox is as it was."""
    names = [ns] if netns_names is None else netns_names
    before = snapshot(data_dir, names, conf["name"])
    r = ptp.add(conf, nspath(ns), **kw)
    assert r.rc == 1 and expect in r.json["msg"], r
    after = snapshot(data_dir, names, conf["name"])
    assert after == before
    return r


def test_ipam_failure(ptp, make_netns, data_dir):
    ns = make_netns()
    conf = ptp_conf(data_dir, v4="10.22.0.1/24")   # host bits set: host-local refuses the range
    fails_cleanly(ptp, conf, ns, data_dir, "10.22.0.0")
    conf = ptp_conf(data_dir)
    conf["ipam"]["type"] = "nosuchipam"
    r = fails_cleanly(ptp, conf, ns, data_dir, 'failed to find plugin "nosuchipam" in path [')
    assert r.json["code"] == 7


def test_range_exhausted(ptp, make_netns, data_dir):
    conf = ptp_conf(data_dir, v4="10.22.0.0/30")    # one address besides the gateway
    first = make_netns()
    assert ptp.add(conf, nspath(first), containerid="a").rc == 0
    fails_cleanly(ptp, conf, make_netns(), data_dir, "10.22.0", containerid="b")
    assert ptp.delete(conf, nspath(first), containerid="a").rc == 0


def test_interface_name_taken_before_ipam(ptp, make_netns, data_dir):
    ns = make_netns()
    subprocess.run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "other0"], check=True)
    fails_cleanly(ptp, ptp_conf(data_dir), ns, data_dir, "container veth name provided (eth0) already exists")
    assert not os.path.exists(os.path.join(data_dir, "ptpnet", "last_reserved_ip.0")), "IPAM must not run"


def test_interface_name_taken_after_ipam(bin_dir, make_netns, data_dir, tmp_path):
    """The name appears between the check and the veth creation (here: created by the IPAM plugin
    itself): the veth creation fails and the reservation is released."""
    ns = make_netns()
    d = tmp_path / "ipam-bin"
    d.mkdir()
    script(str(d / "host-local"), f'[ "$CNI_COMMAND" = ADD ] && ip -n {ns} link add eth0 type veth peer name other0\n'
                                  f'exec {GO_BIN_DIR}/host-local\n')
    ptp = Ptp(os.path.join(bin_dir, "ptp"), str(d))
    conf = ptp_conf(data_dir)
    before = snapshot(data_dir, [ns])
    r = ptp.add(conf, nspath(ns))
    assert r.rc == 1 and "container veth name provided (eth0) already exists" in r.json["msg"], r
    subprocess.run(["ip", "-n", ns, "link", "del", "eth0"], check=True)
    assert snapshot(data_dir, [ns]) == before


def test_address_in_use_on_the_host(ptp, make_netns, data_dir):
    """The host already routes the address handed out (another network, a leftover): the reference
    ignores it and the pod is unreachable; we fail and undo."""
    subprocess.run(["ip", "route", "add", "blackhole", "10.22.0.2/32"], check=True)
    try:   # (a blackhole route: not one hostclash reads, so the kernel refuses ptp's host route, late)
        r = fails_cleanly(ptp, ptp_conf(data_dir), make_netns(), data_dir,
                          "pod address 10.22.0.2 is already in use on the node: the host already has a route to "
                          "10.22.0.2/32")
        assert r.json["code"] == 7, r
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", "10.22.0.2/32"], check=True)


def test_second_attachment_with_the_same_gateway(ptp, make_netns, data_dir):
    """The reference's observed leak (docs/REFERENCE.md#ptp): eth1 with the same gateway fails on the gateway route and
    leaves eth1, its address and a default route in the pod. Here eth1 goes away, eth0 stays intact."""
    ns = make_netns()
    conf = ptp_conf(data_dir)
    r = ptp.add(conf, nspath(ns))
    assert r.rc == 0
    r1 = fails_cleanly(ptp, ptp_conf(data_dir), ns, data_dir, "10.22.0.1/32", ifname="eth1")
    assert "already exists" in r1.json["msg"]
    assert ptp.check(conf, nspath(ns), r.json).rc == 0
    assert ptp.delete(conf, nspath(ns)).rc == 0


def test_missing_netns_costs_no_address(ptp, data_dir):
    before = snapshot(data_dir)
    r = ptp.add(ptp_conf(data_dir), "/run/netns/does-not-exist")
    assert r.rc == 1 and r.json["code"] == 3, r
    assert snapshot(data_dir) == before
    assert not os.path.exists(os.path.join(data_dir, "ptpnet", "last_reserved_ip.0")), "IPAM must not run"


def test_ipam_result_without_gateway(bin_dir, make_netns, data_dir):
    ptp = Ptp(os.path.join(bin_dir, "ptp"), GO_BIN_DIR)
    conf = {"cniVersion": "1.0.0", "name": "ptpnet", "type": "ptp",
            "ipam": {"type": "static", "addresses": [{"address": "10.22.0.5/24"}]}}
    r = fails_cleanly(ptp, conf, make_netns(), data_dir, "IPAM result address 10.22.0.5/24 has no gateway")
    assert r.json["code"] == 7


def _fake_tools(tmp_path, failing, passing=()):
    """A directory to put first on PATH: each tool in ``failing`` fails when asked to change rules
    (restore, nft -f) and otherwise runs the real one."""
    d = tmp_path / "fakebin"
    d.mkdir(exist_ok=True)
    for tool in failing:
        real = f"/usr/sbin/{tool}"
        script(str(d / tool), f'case "$*" in *--noflush*|*"-f -"*) echo "{tool}: injected failure" >&2; exit 1;; esac\n'
                              f'exec {real} "$@"\n')
    return f"{d}:/usr/sbin:/usr/bin:/sbin:/bin"


def test_masquerade_failure_iptables_v6_after_v4(ptp, make_netns, data_dir, tmp_path):
    """ip6tables fails after the IPv4 rules went in: the IPv4 rules are removed again."""
    path = _fake_tools(tmp_path, ["ip6tables-restore"])
    conf = ptp_conf(data_dir, v6="fd00:22::/64", ipMasq=True, ipMasqBackend="iptables")
    fails_cleanly(ptp, conf, make_netns(), data_dir, "injected failure", PATH=path)


def test_masquerade_failure_nftables(ptp, make_netns, data_dir, tmp_path):
    path = _fake_tools(tmp_path, ["nft"])
    conf = ptp_conf(data_dir, ipMasq=True, ipMasqBackend="nftables")
    fails_cleanly(ptp, conf, make_netns(), data_dir, "injected failure", PATH=path)


@pytest.fixture
def ip_forward_off():
    name = "/proc/sys/net/ipv4/ip_forward"
    old = open(name).read().strip()
    with open(name, "w") as f:
        f.write("0")
    yield
    with open(name, "w") as f:
        f.write(old)


def test_forwarding_failure_is_the_last_step(bin_dir, make_netns, data_dir, tmp_path, ip_forward_off):
    """/proc/sys/net/ipv4/ip_forward read-only (a private mount for this call): the very last step
    fails, after masquerading; everything is undone and ip_forward is still 0."""
    real = os.path.join(bin_dir, "ptp")
    f = "/proc/sys/net/ipv4/ip_forward"
    wrapper = script(str(tmp_path / "ptp-ro-sysctl"),
                     f"exec unshare --mount sh -c 'mount --bind {f} {f} && mount -o remount,bind,ro {f} {f} && "
                     f"exec {real}'\n")
    ptp = Ptp(wrapper, bin_dir)
    conf = ptp_conf(data_dir, ipMasq=True)
    r = fails_cleanly(ptp, conf, make_netns(), data_dir, "Could not enable IP forwarding")
    assert open(f).read().strip() == "0"
    assert host_veths() == [] and reservations(data_dir) == {}
    assert r.json["code"] == 999


def test_container_lo_ipv6_setting_restored(ours, make_netns, data_dir):
    """ptp turns IPv6 on for the container's lo when it adds IPv6 addresses; a failed ADD puts it back."""
    ns = make_netns()
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.lo.disable_ipv6=1"], check=True)
    subprocess.run(["ip", "route", "add", "blackhole", "10.22.0.2/32"], check=True)
    try:
        fails_cleanly(ours, ptp_conf(data_dir, v6="fd00:22::/64"), ns, data_dir, "already has a route to")
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", "10.22.0.2/32"], check=True)
    out = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv6.conf.lo.disable_ipv6"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "1"


def test_del_after_a_failed_add_spares_the_interface_it_did_not_make(ours, make_netns, data_dir):
    """The runtime DELs after a failed ADD; CNI_IFNAME belongs to something else (here a veth with both
    ends in the container, as another plugin might have made): it must survive that DEL."""
    ns = make_netns()
    subprocess.run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "other0"], check=True)
    assert ours.add(ptp_conf(data_dir), nspath(ns)).rc == 1
    r = ours.delete(ptp_conf(data_dir), nspath(ns))
    assert r.rc == 0 and "left alone" in r.stderr
    assert sorted(link["ifname"] for link in ip_json("link", "show", netns=ns)) == ["eth0", "lo", "other0"]


def test_live_attachment_in_another_netns_keeps_its_address(ours, make_netns, data_dir):
    """The same container id + ifname added into a second netns (a runtime bug): refused before IPAM, so
    the live pod keeps its address (our host-local would hand it back, and undoing would free it)."""
    first, second = make_netns(), make_netns()
    r = ours.add(ptp_conf(data_dir), nspath(first))
    assert r.rc == 0
    before = snapshot(data_dir, [first, second])
    r2 = ours.add(ptp_conf(data_dir), nspath(second))
    assert r2.rc == 1 and "already exists" in r2.json["msg"], r2
    assert snapshot(data_dir, [first, second]) == before
    assert ours.delete(ptp_conf(data_dir), nspath(first)).rc == 0


def test_unreadable_ipam_result_is_released(bin_dir, make_netns, data_dir, tmp_path):
    """An IPAM plugin that reserves, then prints something that is not a result: ptp releases it."""
    d = tmp_path / "ipam-bin"
    d.mkdir()
    script(str(d / "host-local"), f'out=$({bin_dir}/host-local) || {{ echo "$out"; exit 1; }}\n'
                                  '[ "$CNI_COMMAND" = ADD ] && echo "log: allocated" && echo "$out"\nexit 0\n')
    ptp = Ptp(os.path.join(bin_dir, "ptp"), str(d))
    ns = make_netns()
    r = ptp.add(ptp_conf(data_dir), nspath(ns))
    assert r.rc == 1 and "unreadable result" in r.json["msg"], r
    assert reservations(data_dir) == {}


def test_gc_without_a_list_keeps_masquerading(ours, make_netns, data_dir):
    ns = make_netns()
    conf = ptp_conf(data_dir, version="1.1.0", ipMasq=True)
    assert ours.add(conf, nspath(ns)).rc == 0
    rules = masq_chain_rules()
    assert rules
    assert ours("GC", conf).rc == 0                       # cnitool's gc: no list at all
    assert masq_chain_rules() == rules
    assert ours("GC", dict(conf, **{"cni.dev/valid-attachments": []})).rc == 0
    assert masq_chain_rules() == []
    assert ours.delete(conf, nspath(ns)).rc == 0


def _with_ipam_script(bin_dir, tmp_path, data_dir, body):
    """Our ptp whose IPAM plugin is the shell script ``body`` (ipam.type "script-ipam", found first in
    CNI_PATH), and its config."""
    cni = tmp_path / "cni"
    cni.mkdir()
    script(str(cni / "script-ipam"), body)
    conf = ptp_conf(data_dir)
    conf["ipam"]["type"] = "script-ipam"
    return Ptp(os.path.join(bin_dir, "ptp"), f"{cni}:{bin_dir}"), conf


@pytest.mark.parametrize("netns_of_second", ["same", "another"])
def test_two_adds_of_one_attachment_at_once_leave_the_pod_its_address(bin_dir, make_netns, data_dir, tmp_path,
                                                                       netns_of_second):
    """A runtime that retries an ADD while the first still runs (same container id and ifname; the same
    netns, or another one): one ADD makes the pod, the other fails, and the pod keeps its address
    reserved. An IPAM plugin that takes a second over ADD holds both calls between the checks ptp makes
    before IPAM and the veth; before the attachment lock, the loser's undo (an IPAM DEL of the
    attachment) released the winner's address, which host-local then hands to the next pod."""
    from concurrent.futures import ThreadPoolExecutor
    ptp, conf = _with_ipam_script(bin_dir, tmp_path, data_dir,
                                  f'[ "$CNI_COMMAND" = ADD ] && sleep 1\nexec {bin_dir}/host-local "$@"\n')
    first = make_netns()
    nets = [first, first if netns_of_second == "same" else make_netns()]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda ns: ptp.add(conf, nspath(ns)), nets))
    made = [(r, ns) for r, ns in zip(runs, nets) if r.rc == 0]
    failed = [r for r in runs if r.rc != 0]
    assert len(made) == 1 and len(failed) == 1, runs
    assert "already exists" in failed[0].json["msg"], failed[0]
    result, ns = made[0]
    ip = result.json["ips"][0]["address"].split("/")[0]
    in_pod = [a["local"] for link in ip_json("addr", "show", "dev", "eth0", netns=ns) for a in link["addr_info"]]
    assert ip in in_pod
    assert list(reservations(data_dir)) == [ip]          # the live pod's address is still reserved
    assert len(host_veths()) == 1
    # and the next pod gets another address
    other = make_netns()
    r = ptp.add(conf, nspath(other), containerid="ctr2")
    assert r.rc == 0 and r.json["ips"][0]["address"].split("/")[0] != ip, r
    for cid, n in (("ctr1", ns), ("ctr2", other)):
        assert ptp.delete(conf, nspath(n), containerid=cid).rc == 0
    assert reservations(data_dir) == {} and host_veths() == []


def test_an_add_beside_a_del_of_the_same_attachment_keeps_its_address(bin_dir, make_netns, data_dir, tmp_path):
    """A DEL whose IPAM DEL is slow, and an ADD of the same attachment sent meanwhile (a runtime that
    retries, or one that recreates a pod under the same id): before the attachment lock the ADD made the
    pod and then the DEL's IPAM DEL released its address (the reference does the same); now the ADD waits
    for the DEL, and the pod it makes keeps its address."""
    import threading
    marker = tmp_path / "del-in-ipam"
    ptp, conf = _with_ipam_script(bin_dir, tmp_path, data_dir, f'[ "$CNI_COMMAND" = DEL ] && {{ : > {marker}; '
                                  f'sleep 1; }}\nexec {bin_dir}/host-local "$@"\n')
    ns = make_netns()
    dels = []
    t = threading.Thread(target=lambda: dels.append(ptp.delete(conf, nspath(ns))))
    t.start()
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.exists(), "the DEL never reached its IPAM plugin"
        r = ptp.add(conf, nspath(ns))
    finally:
        t.join()
    assert dels[0].rc == 0 and r.rc == 0, (dels, r)
    ip = r.json["ips"][0]["address"].split("/")[0]
    assert list(reservations(data_dir)) == [ip]
    assert ptp.delete(conf, nspath(ns)).rc == 0
    assert reservations(data_dir) == {} and host_veths() == []


@pytest.mark.parametrize("planted", ["symlink", "fifo", "directory"])
def test_something_else_at_the_lock_files_name_is_left_alone(ours, make_netns, data_dir, tmp_path, planted):
    """Anything but a regular file at /run/skb-cni/ptp.lock (a root process may put one there): ADD and
    DEL go on unlocked, never follow a link (its target is neither created nor changed), never block on
    a FIFO, and leave the thing where it was."""
    os.makedirs("/run/skb-cni", mode=0o755, exist_ok=True)
    lock = "/run/skb-cni/ptp.lock"
    target = tmp_path / "target"
    if os.path.lexists(lock):
        os.unlink(lock)
    if planted == "symlink":
        os.symlink(target, lock)
    elif planted == "fifo":
        os.mkfifo(lock)
    else:
        os.mkdir(lock)
    try:
        ns = make_netns()
        r = ours.add(ptp_conf(data_dir), nspath(ns))
        assert r.rc == 0, r
        assert ours.delete(ptp_conf(data_dir), nspath(ns)).rc == 0
        assert not os.path.lexists(target)
        mode = os.lstat(lock).st_mode
        assert {"symlink": stat.S_ISLNK, "fifo": stat.S_ISFIFO, "directory": stat.S_ISDIR}[planted](mode)
        assert reservations(data_dir) == {} and host_veths() == []
    finally:
        if os.path.isdir(lock) and not os.path.islink(lock):
            os.rmdir(lock)
        else:
            os.unlink(lock)


def test_a_call_run_in_process_keeps_no_lock(bin_dir, make_netns, data_dir):
    """ptp run in this process (skel.run, as a test or a tool does). The first version of the lock was
    held until the process ended, so the next call of that attachment, exec'd, waited for ever (the test
    suite hung on it). The lock is the call's: released when the call ends."""
    import json
    from skb.plugin import skel
    from skb_plugins.ptp import ptp as ptp_plugin
    ns = make_netns()
    conf = ptp_conf(data_dir)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "ctr1", "CNI_NETNS": nspath(ns), "CNI_IFNAME": "eth0",
           "CNI_ARGS": "", "CNI_PATH": bin_dir, "PATH": os.environ["PATH"]}
    out = skel.run(ptp_plugin.PLUGIN, env, json.dumps(conf))
    assert out.code == 0, out.stdout
    r = Ptp(os.path.join(bin_dir, "ptp"), bin_dir).delete(conf, nspath(ns))
    assert r.rc == 0, r
    assert reservations(data_dir) == {} and host_veths() == []


def test_ptp_reached_again_from_its_own_ipam_is_refused_not_a_deadlock(bin_dir, make_netns, data_dir, tmp_path):
    """An IPAM plugin that is a wrapper running ptp again for the same attachment (a misconfiguration that
    the delegation guards do not see: the wrapper is another program). Before the lock it failed at once
    ("already exists"); with the first version of the lock the inner call waited for its outer one, which
    waited for it: a hang. Now the inner call sees that the lock's holder is its own ancestor and refuses
    (code 7), and the outer ADD fails and undoes."""
    ptp, conf = _with_ipam_script(bin_dir, tmp_path, data_dir,
                                  f"sed 's/\"script-ipam\"/\"host-local\"/' | {bin_dir}/ptp\n")
    ns = make_netns()
    for warm in ("1", "0"):
        r = ptp.add(conf, nspath(ns), SKB_WARM=warm)
        assert r.rc != 0 and "an ancestor of this call" in r.json["msg"], r
        assert ip_json("link", "show", netns=ns)[0]["ifname"] == "lo" and len(ip_json("link", "show", netns=ns)) == 1
        assert reservations(data_dir) == {} and host_veths() == []


def test_a_lock_others_may_take_is_not_used(ours, make_netns, data_dir):
    """A socket dir or lock file others may write (a world-writable /run/skb-cni, a ptp.lock of mode 0666):
    a process of any user could hold the lock and keep every ADD and DEL waiting. Such a lock is not
    used: the call goes on unlocked, as the reference's does, and says so on stderr."""
    os.makedirs("/run/skb-cni", mode=0o755, exist_ok=True)
    lock = "/run/skb-cni/ptp.lock"
    holder = ("import fcntl, os, sys, time\n"
              "fd = os.open(sys.argv[1], os.O_RDWR)\n"
              "fcntl.lockf(fd, fcntl.LOCK_EX, 0, 0)\n"
              "print('held', flush=True)\n"
              "sys.stdin.read()\n")
    for how in ("dir", "file"):
        if how == "dir":
            os.chmod("/run/skb-cni", 0o777)
        else:
            os.close(os.open(lock, os.O_RDWR | os.O_CREAT, 0o600))
            os.chmod(lock, 0o666)
        os.close(os.open(lock, os.O_RDWR | os.O_CREAT, 0o666))
        os.chmod(lock, 0o666)
        p = subprocess.Popen(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                              "/usr/bin/python3", "-c", holder, lock], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert p.stdout.readline() == b"held\n"
            if how == "file":
                os.chmod("/run/skb-cni", 0o755)
            ns = make_netns()
            r = ours.add(ptp_conf(data_dir), nspath(ns))
            assert r.rc == 0 and "runs without the attachment lock" in r.stderr, r
            d = ours.delete(ptp_conf(data_dir), nspath(ns))
            assert d.rc == 0 and "runs without the attachment lock" in d.stderr, d
        finally:
            p.kill()
            p.wait()
            os.chmod("/run/skb-cni", 0o755)
            os.unlink(lock)
    assert reservations(data_dir) == {} and host_veths() == []


def test_a_dual_stack_add_that_cannot_switch_ipv6_forwarding_on_changes_neither(bin_dir, make_netns, tmp_path):
    """IPv4 forwarding was switched on before the IPv6 write failed (review 14): a failed ADD changed it.
    Both are opened for writing first now. (Run by exec, in a mount namespace of its own where the IPv6
    switch is read-only: a warm server started there would outlive the test.)"""
    ns = make_netns()
    v4, v6 = "/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"
    before = [open(f).read() for f in (v4, v6)]
    try:
        for f in (v4, v6):
            with open(f, "w") as out:
                out.write("0")
        conf = ptp_conf(str(tmp_path / "data"), v6="fd22::/64")
        env = dict(cni_env("ADD", containerid="fw1", netns=f"/run/netns/{ns}", path=bin_dir), SKB_WARM="0")
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            f'mount --bind -o ro {v6} {v6} && exec "$0"', os.path.join(bin_dir, "ptp")],
                           input=json.dumps(conf).encode(), env=env, capture_output=True)
        assert p.returncode == 1 and "forwarding" in json.loads(p.stdout)["msg"], p
        assert [open(f).read() for f in (v4, v6)] == ["0\n", "0\n"]
        assert [link["ifname"] for link in ip_json("link", "show", netns=ns)] == ["lo"]
        assert not [n for n in os.listdir(tmp_path / "data" / "ptpnet") if n[0].isdigit()]
    finally:
        for f, value in zip((v4, v6), before):
            with open(f, "w") as out:
                out.write(value)


def test_an_untagged_veth_at_the_attachments_name_is_named_as_what_a_del_would_remove(ptp, make_netns, data_dir):
    """Review 14: a veth under the name this attachment derives, without skb's tag, is taken for the
    attachment's own (made before tags) and a DEL removes it; the refusal said only "DEL the attachment",
    which removes what may be another pod's interface. It now says to look first. The veth stays."""
    from skb_plugins.ptp.ownership import host_veth_name
    ns, other = make_netns(), make_netns()
    name = host_veth_name("ptpnet", "ctr1", "eth0")
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", other], check=True)
    try:
        r = ptp.add(ptp_conf(data_dir), nspath(ns))
        assert r.rc == 1 and "already exists" in r.json["msg"], r
        assert "without skb's tag" in r.json["details"] and f"ip -d link show {name}" in r.json["details"], r
        assert [link["ifname"] for link in ip_json("link", "show", netns=other)] == ["lo", "eth0"]
    finally:
        subprocess.run(["ip", "link", "del", name], check=False)
