"""loopback against the real kernel, as a runtime calls it; kernel state read back with `ip -j`."""
import json
import os
import subprocess

import pytest

from tests.helpers import cni_env, ip_json, link_flags, run_plugin

pytestmark = pytest.mark.kernel

V4, V6 = "127.0.0.1/8", "::1/128"


@pytest.fixture
def loopback(bin_dir):
    return os.path.join(bin_dir, "loopback")


def conf(version="1.0.0", **extra):
    c = {"cniVersion": version, "name": "lo-net", "type": "loopback"}
    c.update(extra)
    return c


def expected(version, netns):
    """The result for a fresh lo, written from the spec's result shapes (docs/REFERENCE.md#result-shapes)."""
    if version in ("0.1.0", "0.2.0"):
        return {"cniVersion": version, "ip4": {"ip": V4}, "ip6": {"ip": V6}, "dns": {}}
    ips = [{"interface": 0, "address": V4}, {"interface": 0, "address": V6}]
    out = {"cniVersion": version, "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": netns}]}
    if version.startswith("0."):
        for ip, fam in zip(ips, "46"):
            ip["version"] = fam
        out["dns"] = {}
    out["ips"] = ips
    return out


def drop_empty_dns(r):
    return {k: v for k, v in r.items() if not (k == "dns" and not v)}


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_add_sets_lo_up_and_reports_it(loopback, make_netns, version):
    ns = make_netns()
    path = f"/run/netns/{ns}"
    assert "UP" not in link_flags("lo", ns)
    r = run_plugin(loopback, cni_env("ADD", netns=path), conf(version))
    assert r.rc == 0, r
    assert "UP" in link_flags("lo", ns)
    addrs = {f"{a['local']}/{a['prefixlen']}" for a in ip_json("addr", "show", "dev", "lo", netns=ns)[0]["addr_info"]}
    assert addrs == {V4, V6}
    assert drop_empty_dns(r.json) == drop_empty_dns(expected(version, path))


def test_cri_style_call(loopback, make_netns):
    """containerd's CRI: cniVersion 0.3.1, CNI_IFNAME=lo, its own network name."""
    ns = make_netns()
    r = run_plugin(loopback, cni_env("ADD", netns=f"/run/netns/{ns}", ifname="lo", args="IgnoreUnknown=1;K8S_POD_NAME=p"),
                   {"cniVersion": "0.3.1", "name": "cni-loopback", "type": "loopback"})
    assert r.rc == 0 and r.json["cniVersion"] == "0.3.1" and r.json["ips"][0]["address"] == V4
    assert "UP" in link_flags("lo", ns)


def test_add_passes_prev_result_through(loopback, make_netns):
    ns = make_netns()
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/x"}],
            "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["10.1.0.1"]}}
    r = run_plugin(loopback, cni_env("ADD", netns=f"/run/netns/{ns}"), conf(prevResult=prev))
    assert r.rc == 0 and r.json == prev
    assert "UP" in link_flags("lo", ns)


def test_check(loopback, make_netns):
    ns = make_netns()
    env = cni_env("CHECK", netns=f"/run/netns/{ns}")
    r = run_plugin(loopback, env, conf())
    assert r.rc == 1 and r.json["msg"] == "loopback interface is down"
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    r = run_plugin(loopback, env, conf())
    assert (r.rc, r.stdout) == (0, "")
    # An address put on lo after ADD (a later plugin's, the pod's own) is not loopback's to judge: the
    # reference's CHECK passes too (only ADD, which reports lo's addresses, refuses one).
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.9.9/32", "dev", "lo"], check=True)
    r = run_plugin(loopback, env, conf())
    assert (r.rc, r.stdout) == (0, "")
    r = run_plugin(loopback, cni_env("ADD", netns=f"/run/netns/{ns}"), conf())
    assert r.rc == 1 and r.json["msg"] == 'loopback interface found with non-loopback address "10.9.9.9"'


def test_del_sets_container_lo_down(loopback, make_netns):
    ns = make_netns()
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    r = run_plugin(loopback, cni_env("DEL", netns=f"/run/netns/{ns}"), conf())
    assert (r.rc, r.stdout) == (0, "")
    assert "UP" not in link_flags("lo", ns)
    r = run_plugin(loopback, cni_env("DEL", netns=f"/run/netns/{ns}"), conf())  # twice is fine
    assert r.rc == 0


def test_del_when_netns_empty_missing_or_gone(loopback, tmp_path):
    for netns in ["", "/run/netns/never-existed", str(tmp_path)]:
        r = run_plugin(loopback, cni_env("DEL", netns=netns), conf())
        assert (r.rc, r.stdout) == (0, ""), netns
    stale = tmp_path / "stale"  # a netns bind mount that was unmounted leaves an empty file
    stale.write_text("")
    assert run_plugin(loopback, cni_env("DEL", netns=str(stale)), conf()).rc == 0


@pytest.fixture
def host_lo_guard():
    """The sandbox's own netns plays the node: its lo must still be UP after each case."""
    assert "UP" in link_flags("lo")
    yield
    assert "UP" in link_flags("lo"), "the (sandbox) host's lo was set DOWN"


def host_paths(tmp_path):
    bind = "/run/netns/host-bind"
    open(bind, "w").close()
    subprocess.run(["mount", "--bind", "/proc/self/ns/net", bind], check=True)
    sleeper = subprocess.Popen(["sleep", "30"])  # a host process: its /proc/<pid> path names the host netns
    return bind, sleeper, ["/proc/self/ns/net", "/proc/thread-self/ns/net", f"/proc/{os.getpid()}/ns/net",
                           f"/proc/{sleeper.pid}/ns/net", bind]


def test_del_never_touches_host_netns(loopback, host_lo_guard, tmp_path):
    bind, sleeper, paths = host_paths(tmp_path)
    try:
        for path in paths:
            r = run_plugin(loopback, cni_env("DEL", netns=path), conf())
            assert (r.rc, r.stdout) == (0, ""), path
            assert "UP" in link_flags("lo"), f"DEL with CNI_NETNS={path} set the host's lo down"
    finally:
        sleeper.kill()
        subprocess.run(["umount", bind], check=False)
        os.unlink(bind)


def test_del_via_proc_1_in_a_pid_namespace(loopback, bin_dir, host_lo_guard):
    """/proc/1/ns/net: inside a private PID namespace (so PID 1 is ours, never the machine's init)."""
    env = cni_env("DEL", netns="/proc/1/ns/net")
    cmd = ["unshare", "--pid", "--fork", "--mount", "--mount-proc", "env", "-i"] + \
          [f"{k}={v}" for k, v in env.items()] + [loopback]
    p = subprocess.run(cmd, input=json.dumps(conf()).encode(), capture_output=True, timeout=30)
    assert p.returncode == 0, p
    assert "UP" in link_flags("lo")


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_add_and_check_refuse_host_netns(loopback, host_lo_guard, tmp_path, command):
    bind, sleeper, paths = host_paths(tmp_path)
    try:
        for path in paths:
            r = run_plugin(loopback, cni_env(command, netns=path), conf())
            assert r.rc == 1 and r.json["code"] == 8, (path, r)
            assert "CNI_NETNS_OVERRIDE" in r.json["details"]
    finally:
        sleeper.kill()
        subprocess.run(["umount", bind], check=False)
        os.unlink(bind)


def test_override_allows_own_netns(loopback, host_lo_guard):
    r = run_plugin(loopback, cni_env("ADD", netns="/proc/self/ns/net", CNI_NETNS_OVERRIDE="1"), conf())
    assert r.rc == 0 and r.json["ips"][0]["address"] == V4


def test_add_errors_name_the_netns(loopback, tmp_path):
    r = run_plugin(loopback, cni_env("ADD", netns="/run/netns/nope"), conf())
    assert r.rc == 1 and r.json["code"] == 3 and "/run/netns/nope" in r.json["msg"]
    f = tmp_path / "file"
    f.write_text("")
    r = run_plugin(loopback, cni_env("ADD", netns=str(f)), conf())
    assert r.rc == 1 and r.json["code"] == 4 and str(f) in r.json["msg"]


@pytest.mark.parametrize("command", ["STATUS", "GC"])
def test_status_and_gc_succeed(loopback, command):
    r = run_plugin(loopback, cni_env(command), conf("1.1.0"))
    assert (r.rc, r.stdout) == (0, "")


def test_version_and_about(loopback):
    r = run_plugin(loopback, {"CNI_COMMAND": "VERSION"})
    assert r.json["supportedVersions"] == ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
    r = run_plugin(loopback, {})
    assert r.rc == 0 and r.stdout == "" and "CNI protocol versions supported" in r.stderr


def test_debug_log_records_calls_for_replay(loopback, make_netns, tmp_path):
    ns = make_netns()
    log = tmp_path / "calls.jsonl"
    r = run_plugin(loopback, cni_env("ADD", netns=f"/run/netns/{ns}"), conf(skbDebugLog=str(log)))
    assert r.rc == 0
    run_plugin(loopback, cni_env("DEL", netns=f"/run/netns/{ns}", SKB_DEBUG_LOG=str(log)), "{broken")
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["command"] for r in recs] == ["ADD", "DEL"]
    assert recs[0]["env"]["CNI_NETNS"] == f"/run/netns/{ns}" and json.loads(recs[0]["stdin"])["name"] == "lo-net"
    assert recs[0]["exitCode"] == 0 and json.loads(recs[0]["stdout"])["ips"]
    assert recs[1]["exitCode"] == 1 and recs[1]["stdin"] == "{broken" and json.loads(recs[1]["stdout"])["code"] == 6
    assert oct(log.stat().st_mode & 0o777) == "0o600"
