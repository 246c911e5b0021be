"""The skb runner drives any CNI plugin, not only ours: the Go reference plugins in /usr/lib/cni (v1.1.1,
CNI up to 1.0.0) through skb add/check/del/gc, alone and chained with ours. Kernel state is read back
with ip -j, IPAM state from host-local's files."""
import json
import os
import subprocess

import pytest

from skb.tool import libcni
from tests.helpers import GO_BIN_DIR, ip_json, link_flags

pytestmark = [pytest.mark.kernel, pytest.mark.gobin]


@pytest.fixture
def skb(bin_dir):
    return os.path.join(bin_dir, "skb")


class Net:
    def __init__(self, tmp_path, cni_path):
        self.conf = tmp_path / "net.d"
        self.conf.mkdir()
        self.cache = tmp_path / "cache"
        self.data = tmp_path / "ipam"
        self.cni_path = cni_path

    def write(self, obj, name="10-net.conflist"):
        (self.conf / name).write_text(json.dumps(obj))

    def run(self, skb, *args):
        return subprocess.run([skb, *args, "--conf-dir", str(self.conf), "--cni-path", self.cni_path,
                               "--cache-dir", str(self.cache)], capture_output=True, text=True, timeout=60)

    def reservations(self, network):
        d = self.data / network
        if not d.exists():
            return {}
        return {f: (d / f).read_bytes() for f in os.listdir(d) if f[0].isdigit()}

    def cache_record(self, network, netns, ifname="eth0"):
        path = self.cache / "results" / f"{network}-{libcni.cnitool_container_id(netns)}-{ifname}"
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture
def go_net(tmp_path):
    return Net(tmp_path, GO_BIN_DIR)


def test_go_loopback(skb, go_net, make_netns):
    ns = make_netns()
    path = f"/run/netns/{ns}"
    go_net.write({"cniVersion": "1.0.0", "name": "lo-net", "plugins": [{"type": "loopback"}]})
    p = go_net.run(skb, "add", "lo-net", path)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["interfaces"] == [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": path}]
    assert "UP" in link_flags("lo", ns)
    assert go_net.cache_record("lo-net", path)["result"] == res
    assert go_net.run(skb, "check", "lo-net", path).returncode == 0
    p = go_net.run(skb, "del", "lo-net", path)
    assert p.returncode == 0, p.stderr
    assert "UP" not in link_flags("lo", ns) and go_net.cache_record("lo-net", path) is None
    assert "UP" in link_flags("lo")


def host_local_net(net, version="1.0.0"):
    return {"cniVersion": version, "name": "hl", "plugins": [
        {"type": "host-local", "ipam": {"type": "host-local", "subnet": "10.55.0.0/24", "dataDir": str(net.data)}}]}


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0"])
def test_go_host_local_as_the_plugin(skb, go_net, version, tmp_path):
    go_net.write(host_local_net(go_net, version))
    ns = str(tmp_path / "netns-a")   # host-local never opens the netns
    p = go_net.run(skb, "add", "hl", ns, "-i", "net1")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["cniVersion"] == version and res["ips"][0]["address"] == "10.55.0.2/24"
    cid = libcni.cnitool_container_id(ns)
    assert go_net.reservations("hl") == {"10.55.0.2": f"{cid}\r\nnet1".encode()}
    if version != "0.3.1":
        assert go_net.run(skb, "check", "hl", ns, "-i", "net1").returncode == 0
    p = go_net.run(skb, "del", "hl", ns, "-i", "net1")
    assert p.returncode == 0, p.stderr
    assert go_net.reservations("hl") == {}


def test_go_host_local_errors_come_through(skb, go_net, tmp_path):
    go_net.write({"cniVersion": "1.0.0", "name": "hl", "plugins": [
        {"type": "host-local", "ipam": {"type": "host-local", "subnet": "10.55.0.0/31", "dataDir": str(go_net.data)}}]})
    p = go_net.run(skb, "add", "hl", str(tmp_path / "n"))
    assert p.returncode == 1
    assert 'plugin type="host-local" failed (add): invalid range set 0: Network 10.55.0.0/31 too small to allocate from' \
        in p.stderr


def test_go_host_local_cnitool_gc_releases_every_cached_attachment(skb, go_net, tmp_path):
    go_net.write(host_local_net(go_net))
    for name in ("a", "b"):
        assert go_net.run(skb, "add", "hl", str(tmp_path / name)).returncode == 0
    assert len(go_net.reservations("hl")) == 2
    p = go_net.run(skb, "gc", "hl")          # 1.0.0: no GC verb, only DELs of the cached attachments
    assert p.returncode == 0, p.stderr
    assert go_net.reservations("hl") == {} and not list((go_net.cache / "results").iterdir())


def test_go_ptp_with_host_local(skb, go_net, make_netns):
    ns = make_netns()
    path = f"/run/netns/{ns}"
    go_net.write({"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.56.0.0/24", "dataDir": str(go_net.data),
                                 "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "loopback"}]})
    p = go_net.run(skb, "add", "pods", path)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    eth0 = [i for i in res["interfaces"] if i["name"] == "eth0"][0]
    assert eth0["sandbox"] == path and res["ips"][0]["interface"] == res["interfaces"].index(eth0)
    addrs = [a["local"] for a in ip_json("addr", "show", "dev", "eth0", netns=ns)[0]["addr_info"] if a["family"] == "inet"]
    assert addrs == ["10.56.0.2"] and "UP" in link_flags("lo", ns)   # loopback ran too, given ptp's prevResult
    assert go_net.run(skb, "check", "pods", path).returncode == 0
    p = go_net.run(skb, "del", "pods", path)
    assert p.returncode == 0, p.stderr
    assert [link["ifname"] for link in ip_json("link", "show", netns=ns)] == ["lo"]
    assert go_net.reservations("pods") == {}


def test_go_plugins_chained_with_ours(skb, tmp_path, bin_dir, make_netns):
    """Go ptp + host-local, then our debug (capturing what the Go plugin handed on), then Go loopback."""
    net = Net(tmp_path, f"{GO_BIN_DIR}:{bin_dir}")
    cap = tmp_path / "cap.jsonl"
    net.write({"cniVersion": "0.4.0", "name": "mixed", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.57.0.0/24", "dataDir": str(net.data)}},
        {"type": "debug", "captureFile": str(cap)},
        {"type": "loopback"}]})
    ns = make_netns()
    p = net.run(skb, "add", "mixed", ns)
    assert p.returncode == 0, p.stderr
    final = json.loads(p.stdout)
    rec = json.loads(cap.read_text().splitlines()[0])
    handed = json.loads(rec["stdin"])["prevResult"]
    assert json.loads(rec["stdout"]) == handed      # debug passed Go ptp's result through untouched
    assert final["ips"] == handed["ips"] and final["cniVersion"] == "0.4.0"
    assert net.run(skb, "del", "mixed", ns).returncode == 0
    dels = [json.loads(line) for line in cap.read_text().splitlines()][1:]
    assert [d["command"] for d in dels] == ["DEL"] and json.loads(dels[0]["stdin"])["prevResult"]["ips"] == final["ips"]
    assert net.reservations("mixed") == {}


def test_go_ptp_result_probed_by_the_doctor(skb, go_net, make_netns):
    go_net.write({"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.58.0.0/24", "dataDir": str(go_net.data)}}]})
    p = subprocess.run([skb, "doctor", "--json", "--probe", "--conf-dir", str(go_net.conf), "--bin-dir", GO_BIN_DIR,
                        "--containerd-config=", "--crio-config=", "--crio-config-dir=",
                        "--cache-dir", str(go_net.cache)], capture_output=True, text=True, timeout=120)
    out = json.loads(p.stdout)
    notes = [f["what"] for f in out["notes"] if f["code"] == "probe"]
    assert notes == ["probe ADD ok: eth0 got 10.58.0.2/24"], out
    assert go_net.reservations("pods") == {}
