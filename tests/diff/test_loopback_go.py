"""Differential: our loopback and Go's /usr/lib/cni/loopback (v1.1.1) on the same inputs.

Where we deliberately differ, the test says so: Go v1.1.1 speaks up to 1.0.0 (we add 1.1.0), labels a
1.0.0-shaped body with 0.1.0-0.3.x version strings (we print each version's own shape), reports plugin
errors as 999 where we use spec codes, and sets the host's lo down on DEL (we refuse: test_loopback.py).
"""
import os
import subprocess

import pytest

from tests.helpers import GO_BIN_DIR, cni_env, ip_json, link_flags, run_plugin

pytestmark = [pytest.mark.kernel, pytest.mark.gobin]
GO = os.path.join(GO_BIN_DIR, "loopback")
GO_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]


def conf(version="1.0.0", **extra):
    c = {"cniVersion": version, "name": "lo-net", "type": "loopback"}
    c.update(extra)
    return c


def neutral(result):
    """What both results claim, independent of the version's shape: interfaces and addresses."""
    ifaces = [(i["name"], i.get("mac"), i.get("sandbox")) for i in result.get("interfaces", [])]
    ips = [ip["address"] for ip in result.get("ips", [])]
    ips += [result[k]["ip"] for k in ("ip4", "ip6") if k in result]
    return ifaces, sorted(ips)


def lo_state(ns):
    link = ip_json("link", "show", "dev", "lo", netns=ns)[0]
    addrs = ip_json("addr", "show", "dev", "lo", netns=ns)[0]["addr_info"]
    return "UP" in link["flags"], sorted(f"{a['local']}/{a['prefixlen']}" for a in addrs)


@pytest.mark.parametrize("version", GO_VERSIONS)
def test_add_same_kernel_state_and_content(bin_dir, make_netns, version):
    ours_ns, go_ns = make_netns(), make_netns()
    ours = run_plugin(os.path.join(bin_dir, "loopback"), cni_env("ADD", netns=f"/run/netns/{ours_ns}"), conf(version))
    go = run_plugin(GO, cni_env("ADD", netns=f"/run/netns/{go_ns}"), conf(version))
    assert ours.rc == go.rc == 0, (ours, go)
    assert lo_state(ours_ns) == lo_state(go_ns)
    o_ifaces, o_ips = neutral(ours.json)
    g_ifaces, g_ips = neutral(go.json)
    assert o_ips == g_ips
    if version not in ("0.1.0", "0.2.0"):  # those have no interfaces in the spec; Go prints them anyway
        assert [(n, m) for n, m, _ in o_ifaces] == [(n, m) for n, m, _ in g_ifaces]
    assert ours.json["cniVersion"] == go.json["cniVersion"] == version


@pytest.mark.parametrize("version", GO_VERSIONS)
def test_prev_result_passthrough_same(bin_dir, make_netns, version):
    if version in ("0.1.0", "0.2.0"):
        prev = {"cniVersion": version, "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1"}, "dns": {}}
    else:
        prev = {"cniVersion": version, "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}], "dns": {}}
        if version.startswith("0."):
            prev["ips"][0]["version"] = "4"
    results = []
    for exe in (os.path.join(bin_dir, "loopback"), GO):
        r = run_plugin(exe, cni_env("ADD", netns=f"/run/netns/{make_netns()}"), conf(version, prevResult=prev))
        assert r.rc == 0, r
        results.append(neutral(r.json))
    assert results[0] == results[1]


@pytest.mark.parametrize("version", GO_VERSIONS)
def test_del_same_kernel_state(bin_dir, make_netns, version):
    states = []
    for exe in (os.path.join(bin_dir, "loopback"), GO):
        ns = make_netns()
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        r = run_plugin(exe, cni_env("DEL", netns=f"/run/netns/{ns}"), conf(version))
        assert r.rc == 0, r
        states.append(lo_state(ns))
    assert states[0] == states[1]


ENV_CASES = {
    "missing vars": {"CNI_COMMAND": "ADD"},
    "bad container id": dict(cni_env("ADD", containerid="a/b", netns="/x")),
    "bad ifname": dict(cni_env("ADD", ifname="a" * 16, netns="/x")),
    "unknown command": dict(cni_env("FOO", netns="/x")),
    "DEL empty netns": dict(cni_env("DEL", netns="")),
    "DEL missing netns": dict(cni_env("DEL", netns="/run/netns/never")),
}
STDIN_CASES = {
    "bad json": "{\"name\": \"n\",}",
    "empty stdin": "",
    "missing name": "{\"cniVersion\": \"1.0.0\"}",
    "bad name": "{\"cniVersion\": \"1.0.0\", \"name\": \"a b\"}",
    "unsupported version": "{\"cniVersion\": \"0.9.0\", \"name\": \"n\"}",
}


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_env_errors_same_code_and_message(bin_dir, case):
    env = ENV_CASES[case]
    ours = run_plugin(os.path.join(bin_dir, "loopback"), env, conf())
    go = run_plugin(GO, env, conf())
    assert ours.rc == go.rc
    if go.json:
        assert (ours.json["code"], ours.json["msg"]) == (go.json["code"], go.json["msg"])


@pytest.mark.parametrize("case", sorted(STDIN_CASES))
def test_stdin_errors_same_code(bin_dir, case):
    env = cni_env("ADD", netns="/run/netns/never")
    ours = run_plugin(os.path.join(bin_dir, "loopback"), env, STDIN_CASES[case])
    go = run_plugin(GO, env, STDIN_CASES[case])
    assert ours.rc == go.rc == 1
    assert ours.json["code"] == go.json["code"], (ours.json, go.json)


def test_check_down_both_fail(bin_dir, make_netns):
    for exe in (os.path.join(bin_dir, "loopback"), GO):
        ns = make_netns()
        r = run_plugin(exe, cni_env("CHECK", netns=f"/run/netns/{ns}"), conf("0.4.0"))
        assert r.rc == 1 and r.json["msg"] == "loopback interface is down"


def test_go_sets_host_lo_down_we_do_not(bin_dir):
    """The incident the guard exists for, reproduced in the sandbox: Go v1.1.1 DEL with CNI_NETNS naming
    the (sandbox) host's netns sets its lo DOWN; ours leaves it UP. The sandbox's lo is restored after."""
    env = cni_env("DEL", netns="/proc/self/ns/net")
    try:
        assert run_plugin(os.path.join(bin_dir, "loopback"), env, conf()).rc == 0
        assert "UP" in link_flags("lo")
        assert run_plugin(GO, env, conf()).rc == 0
        assert "UP" not in link_flags("lo")
    finally:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
