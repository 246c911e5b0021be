"""Differential and interop: our ptp against Go's /usr/lib/cni/ptp (v1.1.1), and Go's portmap, bandwidth
and tuning chained after ours.

Same config, run one after the other in the sandbox (both would claim the same host routes at once):
the kernel state, the result and the masquerade rules must match, apart from what is random (MACs,
the host veth's name) and our deliberate differences, listed where they show:
- Go v1.1.1 speaks up to 1.0.0 and prints ``"dns": {}`` in 1.0.0 (we omit an empty dns there, as
  Go's newer library does);
- Go v1.1.1 sets both veth ends' txqueuelen to 0 (a bug fixed upstream in v1.6.0); we keep the
  kernel default;
- IPv6: we add addresses without DAD (``nodad``), Go waits for DAD;
- our host veth carries an alias naming its attachment (``skb-cni ptp <hash>``): DEL's proof of ownership.
Each implementation's DEL also cleans up the other's ADD, so a node can switch either way.
"""
import json
import os
import re
import subprocess
import time

import pytest

from tests.helpers import GO_BIN_DIR, cni_env, ip_json, run_plugin
from tests.integration.ptp_support import GO_PTP, Ptp, host_veths, masq_chain_rules, nspath, ptp_conf, reservations

pytestmark = [pytest.mark.kernel, pytest.mark.gobin]
GO_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "ipam")


@pytest.fixture
def impls(bin_dir):
    return {"ours": Ptp(os.path.join(bin_dir, "ptp"), GO_BIN_DIR), "go": Ptp(GO_PTP, GO_BIN_DIR)}


def kernel_state(ns, hostveth, cont_mac, host_mac):
    """Container and host state of one attachment with the random parts (veth name, MACs) replaced."""
    def norm(text):
        text = text.replace(hostveth, "<hostveth>").replace(cont_mac, "<cmac>").replace(host_mac, "<hmac>")
        text = re.sub(r"(?m)^\d+: ", "<ifindex>: ", text.replace(ns, "<netns>"))
        text = re.sub(r" qlen \d+", "", re.sub(r"\bif\d+\b", "if<n>", text))   # Go v1.1.1: txqueuelen 0
        return re.sub(r" +", " ", text)

    def dump(netns, *args):
        return norm(subprocess.run(["ip"] + (["-n", netns] if netns else []) + list(args), capture_output=True,
                                   text=True, check=True).stdout)

    out = {}
    for where in (ns, None):
        key = "container" if where else "host"
        out[key + " addr"] = re.sub(r" qlen \d+", "", dump(where, "-4", "addr", "show"))
        out[key + " routes"] = dump(where, "-d", "-4", "route", "show", "table", "all")
        link = dump(where, "-d", "link", "show", "dev", "eth0" if where else hostveth)
        link = re.sub(r"\s*alias skb-cni ptp [0-9a-f]{32}", "", link)   # our ownership tag (listed above)
        out[key + " link"] = re.sub(r" (qlen|numtxqueues|numrxqueues|gso_max_size|gso_max_segs|tso_max_size|"
                                    r"tso_max_segs|gro_max_size|gso_ipv4_max_size|gro_ipv4_max_size) \d+", "", link)
    return {k: "\n".join(re.sub(r" +", " ", line).rstrip() for line in v.splitlines()) for k, v in out.items()}


def neutral_result(j):
    j = json.loads(json.dumps(j))
    for i in j.get("interfaces", []):
        i.pop("mac", None)
        if i.get("name", "").startswith("veth"):
            i["name"] = "<hostveth>"
        if "sandbox" in i:
            i["sandbox"] = "<netns>"
    if j.get("dns") == {}:
        del j["dns"]
    return j


@pytest.mark.parametrize("version", GO_VERSIONS)
def test_same_result_and_kernel_state(impls, make_netns, data_dir, version):
    seen = {}
    for name, ptp in impls.items():
        conf = ptp_conf(f"{data_dir}-{name}", version=version, mtu=1400)   # each starts at .2
        ns = make_netns()
        r = ptp.add(conf, nspath(ns))
        assert r.rc == 0, (name, r)
        if version in ("0.1.0", "0.2.0"):
            hostveth = host_veths()[0]
            macs = ("-", "-")
        else:
            hostveth = r.json["interfaces"][0]["name"]
            macs = (r.json["interfaces"][1]["mac"], r.json["interfaces"][0]["mac"])
        cmac = ip_json("link", "show", "dev", "eth0", netns=ns)[0]["address"]
        hmac = ip_json("link", "show", "dev", hostveth)[0]["address"]
        assert macs in (("-", "-"), (cmac, hmac))
        seen[name] = (neutral_result(r.json), kernel_state(ns, hostveth, cmac, hmac))
        d = ptp.delete(conf, nspath(ns))
        assert d.rc == 0, (name, d)
        assert host_veths() == [] and reservations(f"{data_dir}-{name}") == {}
    ours, go = seen["ours"], seen["go"]
    assert ours[0] == go[0]
    for key in ours[1]:
        assert ours[1][key] == go[1][key], key


def test_same_masquerade_rules_and_each_deletes_the_others(impls, make_netns, data_dir):
    rules = {}
    for name, ptp in impls.items():
        conf = ptp_conf(f"{data_dir}-{name}", name="sbxnet", ipMasq=True)
        ns = make_netns()
        r = ptp.add(conf, nspath(ns))
        assert r.rc == 0
        rules[name] = masq_chain_rules()
        other = impls["go" if name == "ours" else "ours"]
        d = other.delete(conf, nspath(ns), prev=r.json)   # with the cached result, as libcni sends DEL
        assert d.rc == 0, d
        assert masq_chain_rules() == [], f"{name} ADD, other DEL"
        assert host_veths() == [] and reservations(f"{data_dir}-{name}") == {}
    assert rules["ours"] == rules["go"]
    assert any("CNI-bd8c5e22087bfc0fc5f2b8fa" in r for r in rules["ours"])


def test_our_del_of_a_go_pair_needs_the_cached_result(impls, make_netns, data_dir):
    """Go's host veth has a random name and no alias: our DEL deletes Go's pair only when the cached
    result names its host end and the kernel shows it is CNI_IFNAME's peer. Without a cached result it
    is not provably this network's (it may be another network's eth0): left to the netns's deletion."""
    conf = ptp_conf(data_dir)
    ns = make_netns()
    r = impls["go"].add(conf, nspath(ns))
    assert r.rc == 0, r
    assert impls["ours"].delete(conf, nspath(ns)).rc == 0
    assert host_veths() == [r.json["interfaces"][0]["name"]] and reservations(data_dir) == {}
    assert impls["ours"].delete(conf, nspath(ns), prev=r.json).rc == 0
    assert host_veths() == []


def test_go_leaks_masquerade_without_netns_we_do_not(impls, make_netns, data_dir):
    """docs/REFERENCE.md#deleting-twice: after `ip netns del`, Go's DEL leaves the chain; ours removes it."""
    conf = ptp_conf(data_dir, ipMasq=True)
    for name, ptp in impls.items():
        ns = make_netns()
        assert ptp.add(conf, nspath(ns)).rc == 0
        subprocess.run(["ip", "netns", "del", ns], check=True)
        assert ptp.delete(conf, nspath(ns)).rc == 0
        leaked = masq_chain_rules()
        if name == "go":
            assert leaked, "Go v1.1.1 is expected to leak here"
            assert impls["ours"].delete(conf, "").rc == 0   # our DEL cleans up Go's leak
            assert masq_chain_rules() == []
        else:
            assert not leaked
        # Go's host veth (and ours, if our DEL came too late to find it) goes when the kernel destroys the
        # deleted netns, which it does in the background: wait for that, so that no test finds it later.
        deadline = time.monotonic() + 30
        while host_veths() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host_veths() == [], "the kernel never destroyed the deleted netns' veth pair"


# --------------------------------------------------------------------------------------------------
# chaining: Go's portmap, bandwidth and tuning after our ptp


def test_go_portmap_bandwidth_tuning_accept_our_result(bin_dir, make_netns, data_dir):
    ns = make_netns()
    version = "1.0.0"
    chain = [
        ptp_conf(data_dir, version=version),
        {"type": "portmap", "capabilities": {"portMappings": True},
         "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 8080, "protocol": "tcp"}]}},
        {"type": "bandwidth", "ingressRate": 8000000, "ingressBurst": 80000},
        {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.accept_local": "1"}},
    ]
    exes = [os.path.join(bin_dir, "ptp")] + [os.path.join(GO_BIN_DIR, c["type"]) for c in chain[1:]]
    path = f"{bin_dir}:{GO_BIN_DIR}"

    def conf_for(i, prev):
        c = dict(chain[i], cniVersion=version, name="ptpnet")
        if prev is not None:
            c["prevResult"] = prev
        return c

    prev = None
    for i, exe in enumerate(exes):
        r = run_plugin(exe, cni_env("ADD", netns=nspath(ns), path=path), conf_for(i, prev))
        assert r.rc == 0, (chain[i]["type"], r)
        prev = r.json
    hostveth = prev["interfaces"][0]["name"]
    assert prev["interfaces"][1]["sandbox"] == nspath(ns)
    # each plugin acted on our interfaces
    assert "10.22.0.2:8080" in subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    qdisc = subprocess.run(["tc", "qdisc", "show", "dev", hostveth], capture_output=True, text=True).stdout
    assert "tbf" in qdisc, qdisc
    out = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.conf.eth0.accept_local"],
                         capture_output=True, text=True).stdout.strip()
    assert out == "1"
    for i, exe in enumerate(exes):
        if chain[i]["type"] == "portmap":
            continue   # Go's portmap v1.1.1 CHECK wants its IPv6 chain even for an IPv4-only result (its bug)
        c = run_plugin(exe, cni_env("CHECK", netns=nspath(ns), path=path), conf_for(i, prev))
        assert c.rc == 0, (chain[i]["type"], c)
    for i in reversed(range(len(exes))):
        d = run_plugin(exes[i], cni_env("DEL", netns=nspath(ns), path=path), conf_for(i, prev))
        assert d.rc == 0, (chain[i]["type"], d)
    assert host_veths() == [] and reservations(data_dir) == {}
    assert "10.22.0.2:8080" not in subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0"])
def test_chain_in_older_versions(bin_dir, make_netns, data_dir, version):
    ns = make_netns()
    path = f"{bin_dir}:{GO_BIN_DIR}"
    r = run_plugin(os.path.join(bin_dir, "ptp"), cni_env("ADD", netns=nspath(ns), path=path),
                   ptp_conf(data_dir, version=version))
    assert r.rc == 0
    t = {"cniVersion": version, "name": "ptpnet", "type": "tuning", "mtu": 1300, "prevResult": r.json}
    rt = run_plugin(os.path.join(GO_BIN_DIR, "tuning"), cni_env("ADD", netns=nspath(ns), path=path), t)
    assert rt.rc == 0, rt
    assert ip_json("link", "show", "dev", "eth0", netns=ns)[0]["mtu"] == 1300
    assert run_plugin(os.path.join(GO_BIN_DIR, "tuning"), cni_env("DEL", netns=nspath(ns), path=path), t).rc == 0
    assert run_plugin(os.path.join(bin_dir, "ptp"), cni_env("DEL", netns=nspath(ns), path=path),
                      ptp_conf(data_dir, version=version)).rc == 0
