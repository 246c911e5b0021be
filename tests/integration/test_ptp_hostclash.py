"""ptp refuses a range that overlaps the node's own network (skb.linux.hostclash), on a node built in the
sandbox: a netns with its own eth0 (10.244.1.5/24), a router at 10.244.1.1 in another netns and a default
route through it. ptp runs inside that node netns as a runtime on that node would run it. Kernel state is
read back with ``ip -j`` before and after; the node must still reach its router afterwards.

The reference ptp takes the same ADD and puts 10.244.1.1/32 on the pod's host veth: the node then routes
its own gateway locally (test_the_reference_cuts_the_node_off_its_router shows it)."""
import json
import os
import shutil
import subprocess
import uuid

import pytest

from tests.helpers import GO_BIN_DIR, cni_env, ip_json
from tests.integration.ptp_support import GO_PTP, ping, reservations

pytestmark = pytest.mark.kernel
IP = shutil.which("ip") or "/usr/sbin/ip"


class Node:
    """A node netns (eth0 10.244.1.5/24 and fd44::5/64, default routes via .1 and ::1) with its router in
    a netns of its own, and pod netns made on demand. Everything goes at the end."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.ns, self.lan = f"node-{tag}", f"lan-{tag}"
        self.pods = []
        for ns in (self.ns, self.lan):
            subprocess.run([IP, "netns", "add", ns], check=True)
            self.ip(ns, "link", "set", "lo", "up")
        self.ip(self.ns, "link", "add", "eth0", "type", "veth", "peer", "name", "lan0", "netns", self.lan)
        self.ip(self.ns, "addr", "add", "10.244.1.5/24", "dev", "eth0")
        self.ip(self.ns, "addr", "add", "fd44::5/64", "dev", "eth0", "nodad")
        self.ip(self.lan, "addr", "add", "10.244.1.1/24", "dev", "lan0")
        self.ip(self.lan, "addr", "add", "fd44::1/64", "dev", "lan0", "nodad")
        self.ip(self.ns, "link", "set", "eth0", "up")
        self.ip(self.lan, "link", "set", "lan0", "up")
        self.ip(self.ns, "route", "add", "default", "via", "10.244.1.1")
        self.ip(self.ns, "-6", "route", "add", "default", "via", "fd44::1")

    @staticmethod
    def ip(ns, *args):
        subprocess.run([IP, "-n", ns, *args], check=True, capture_output=True)

    def pod(self):
        name = f"pod-{uuid.uuid4().hex[:6]}"
        subprocess.run([IP, "netns", "add", name], check=True)
        self.pods.append(name)
        return name

    def state(self):
        """What an ADD may change on the node, read with ip -j (and the forwarding sysctls)."""
        def j(*args):
            out = subprocess.run([IP, "-n", self.ns, "-j", *args], capture_output=True, text=True, check=True).stdout
            return json.loads(out) if out.strip() else []
        fwd = subprocess.run([IP, "netns", "exec", self.ns, "cat", "/proc/sys/net/ipv4/ip_forward",
                              "/proc/sys/net/ipv6/conf/all/forwarding"], capture_output=True, text=True).stdout
        return {"links": [(x["ifname"], x["flags"]) for x in j("link", "show")],
                "addrs": [(x["ifname"], a["local"], a["prefixlen"]) for x in j("addr", "show")
                          for a in x.get("addr_info", [])],
                "routes": sorted(json.dumps(r, sort_keys=True) for fam in ("-4", "-6")
                                 for r in j(fam, "route", "show", "table", "all")),
                "forwarding": fwd.split()}

    def route_to(self, dst):
        return ip_json("route", "get", dst, netns=self.ns)[0]

    def reaches(self, dst):
        return ping(dst, netns=self.ns, count=1)

    def close(self):
        for ns in self.pods + [self.lan, self.ns]:
            subprocess.run([IP, "netns", "del", ns], check=False)


@pytest.fixture
def node():
    n = Node()
    yield n
    n.close()


def conf(data_dir, *ranges, version="1.0.0"):
    return {"cniVersion": version, "name": "pods", "type": "ptp",
            "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": [[r] for r in ranges]}}


def run(node, exe, command, config, pod="", cni_path=None, containerid="c1"):
    env = cni_env(command, containerid=containerid, netns=f"/run/netns/{pod}" if pod else "",
                  path=cni_path or os.path.dirname(exe))
    p = subprocess.run([IP, "netns", "exec", node.ns, exe], env=env, input=json.dumps(config).encode(),
                       capture_output=True, timeout=60)
    out = p.stdout.decode(errors="replace")
    return p.returncode, (json.loads(out) if out.strip() else None), p.stderr.decode(errors="replace")


def refused(node, bin_dir, data_dir, rng, expect):
    """ADD of a pod with ``rng`` fails with code 7 naming ``expect``; the node is as it was, still
    reaches its router, and no address stays reserved."""
    pod = node.pod()
    before = node.state()
    rc, out, err = run(node, os.path.join(bin_dir, "ptp"), "ADD", conf(data_dir, rng), pod)
    assert rc == 1 and out["code"] == 7 and expect in out["msg"], (out, err)
    assert "nothing was changed" in out["details"] and "overlaps the node's own network" in out["details"]
    assert node.state() == before
    assert [x["ifname"] for x in ip_json("link", "show", netns=pod)] == ["lo"]
    assert reservations(data_dir, "pods") == {}
    assert node.route_to("10.244.1.1").get("type") != "local" and node.reaches("10.244.1.1")
    return out


def test_refuses_the_nodes_router_as_gateway(node, bin_dir, tmp_path):
    """The issue's node: pod range 10.244.1.0/24 on a node whose eth0 is 10.244.1.5/24 behind 10.244.1.1."""
    assert node.reaches("10.244.1.1")
    out = refused(node, bin_dir, str(tmp_path / "ipam"), {"subnet": "10.244.1.0/24"},
                  "gateway 10.244.1.1 is already in use on the node: it is the next hop of the host route "
                  "default via 10.244.1.1 dev eth0")
    assert "the range 10.244.1.0/24 overlaps" in out["details"]
    assert node.route_to("10.244.1.1")["dev"] == "eth0"


def test_refuses_the_nodes_router_ipv6(node, bin_dir, tmp_path):
    refused(node, bin_dir, str(tmp_path / "ipam"), {"subnet": "fd44::/64"},
            "gateway fd44::1 is already in use on the node: it is the next hop of the host route default via "
            "fd44::1 dev eth0")


def test_refuses_a_gateway_that_is_an_address_of_the_node(node, bin_dir, tmp_path):
    refused(node, bin_dir, str(tmp_path / "ipam"), {"subnet": "10.244.1.0/24", "gateway": "10.244.1.5"},
            "gateway 10.244.1.5 is already in use on the node: it is an address of the host's interface eth0 "
            "(10.244.1.5/24)")


def test_refuses_a_pod_address_that_is_the_nodes_own(node, bin_dir, tmp_path):
    refused(node, bin_dir, str(tmp_path / "ipam"),
            {"subnet": "10.244.1.0/24", "rangeStart": "10.244.1.5", "rangeEnd": "10.244.1.9", "gateway": "10.244.1.200"},
            "pod address 10.244.1.5 is already in use on the node: it is an address of the host's interface eth0")


@pytest.mark.parametrize("setup, expect", [
    (["route", "add", "10.99.0.0/16", "via", "10.244.1.7"], "next hop of the host route 10.99.0.0/16 via 10.244.1.7 dev eth0"),
    (["route", "add", "10.98.0.0/16", "via", "10.244.1.7", "table", "100"],
     "10.98.0.0/16 via 10.244.1.7 dev eth0 table 100"),
    (["route", "add", "10.97.0.0/16", "nexthop", "via", "10.244.1.2", "nexthop", "via", "10.244.1.7"],
     "10.97.0.0/16 via 10.244.1.7 dev eth0"),
    (["nexthop", "add", "id", "41", "via", "10.244.1.7", "dev", "eth0"], None),
    (["addr", "add", "10.244.1.7/32", "dev", "lo"], "an address of the host's interface lo (10.244.1.7/32)"),
])
def test_refuses_a_pod_address_the_node_routes_through_or_holds(node, bin_dir, tmp_path, setup, expect):
    node.ip(node.ns, *setup)
    if setup[0] == "nexthop":                  # a route made with a nexthop object
        node.ip(node.ns, "route", "add", "10.96.0.0/16", "nhid", "41")
        expect = "10.96.0.0/16 via 10.244.1.7 dev eth0 (nexthop id 41)"
    refused(node, bin_dir, str(tmp_path / "ipam"),
            {"subnet": "10.244.1.0/24", "rangeStart": "10.244.1.7", "rangeEnd": "10.244.1.9", "gateway": "10.244.1.200"},
            expect)


RNG4 = {"subnet": "10.244.1.0/24", "rangeStart": "10.244.1.7", "rangeEnd": "10.244.1.9", "gateway": "10.244.1.200"}
RNG6 = {"subnet": "fd44::/64", "rangeStart": "fd44::7", "rangeEnd": "fd44::9", "gateway": "fd44::200"}


@pytest.mark.parametrize("setup, rng, expect", [
    (["route", "add", "10.244.1.7/32", "dev", "eth0"], RNG4, "10.244.1.7 dev eth0"),
    (["route", "add", "10.244.1.7/32", "via", "10.244.1.1"], RNG4, "10.244.1.7 via 10.244.1.1 dev eth0"),
    (["-6", "route", "add", "fd44::7/128", "dev", "eth0"], RNG6, "fd44::7 dev eth0 metric 1024"),
    (["-6", "route", "add", "fd44::7/128", "dev", "eth0", "metric", "100"], RNG6, "fd44::7 dev eth0 metric 100"),
])
def test_refuses_a_pod_address_the_node_already_routes_before_making_anything(node, bin_dir, tmp_path, setup, rng,
                                                                               expect):
    """A main-table route to the pod address itself (another network's, or a leftover of an attachment never
    deleted): refused before IPAM's reservation stays, the veth is made or anything else changes, code 7.
    (It used to be found only when the kernel refused ptp's own host route: code 999, after the veth.)"""
    node.ip(node.ns, *setup)
    pod = node.pod()
    before = node.state()
    data_dir = str(tmp_path / "ipam")
    rc, out, err = run(node, os.path.join(bin_dir, "ptp"), "ADD", conf(data_dir, rng), pod)
    assert rc == 1 and out["code"] == 7, (out, err)
    assert out["msg"] == (f"pod address {rng['rangeStart']} is already in use on the node: it is the destination of "
                          f"the host route {expect}"), out
    assert "leftover of an attachment never deleted" in out["details"] and "nothing was changed" in out["details"]
    assert node.state() == before
    assert [x["ifname"] for x in ip_json("link", "show", netns=pod)] == ["lo"]
    assert reservations(data_dir, "pods") == {}


@pytest.mark.parametrize("setup, rng", [
    (["route", "add", "10.244.1.7/32", "dev", "eth0", "table", "100"], RNG4),   # a policy table's: the node's
    (["route", "add", "10.244.1.7/32", "dev", "eth0", "metric", "100"], RNG4),  # behind ptp's (metric 0)
    (["route", "add", "10.244.1.7/32", "tos", "0x10", "dev", "eth0"], RNG4),    # for that TOS only
    (["-6", "route", "add", "fd44::7/128", "dev", "eth0", "metric", "2000"], RNG6),  # behind ptp's (1024)
])
def test_a_route_to_the_pod_address_ptp_s_own_route_goes_before_is_not_refused(node, bin_dir, tmp_path, setup, rng):
    """Only a main-table route the kernel would refuse beside ptp's host route, or prefer to it, stands in its
    way: another table's, another TOS's, or one of a higher metric does not (review 16: Go's ptp and ours
    before took these, and the pod worked)."""
    node.ip(node.ns, *setup)
    pod = node.pod()
    rc, out, err = run(node, os.path.join(bin_dir, "ptp"), "ADD", conf(str(tmp_path / "ipam"), rng), pod)
    assert rc == 0, (out, err)
    assert node.route_to(rng["rangeStart"])["dev"].startswith("veth")


def test_refuses_a_gateway_held_by_a_veth_that_is_not_a_ptp_host_end(node, bin_dir, tmp_path):
    """Named like a ptp host end, but holding the gateway with a /24 and its peer on the node: not one."""
    node.ip(node.ns, "link", "add", "veth0000abcd", "type", "veth", "peer", "name", "other0")
    node.ip(node.ns, "addr", "add", "10.55.0.1/24", "dev", "veth0000abcd")
    refused(node, bin_dir, str(tmp_path / "ipam"), {"subnet": "10.55.0.0/24"},
            "an address of the host's interface veth0000abcd (10.55.0.1/24)")


def test_pods_share_the_gateway_on_their_host_ends(node, bin_dir, tmp_path):
    """A range that does not overlap the node: many pods, dual-stack, all hold the same gateways; DEL,
    DEL without the netns, and ADD again of the same container all work."""
    data = str(tmp_path / "ipam")
    c = conf(data, {"subnet": "10.66.0.0/24"}, {"subnet": "fd66::/64"})
    exe = os.path.join(bin_dir, "ptp")
    pods = [node.pod() for _ in range(6)]
    for i, pod in enumerate(pods):
        rc, out, err = run(node, exe, "ADD", c, pod, containerid=f"c{i}")
        assert rc == 0, (out, err)
    holders = [x["ifname"] for x in ip_json("addr", "show", netns=node.ns)
               if any(a["local"] == "10.66.0.1" for a in x.get("addr_info", []))]
    assert len(holders) == 6
    assert run(node, exe, "DEL", c, "", containerid="c0")[0] == 0          # DEL without the netns
    rc, out, err = run(node, exe, "ADD", c, pods[0], containerid="c0")      # the same container again
    assert rc == 0, (out, err)
    for i, pod in enumerate(pods):
        assert run(node, exe, "DEL", c, pod, containerid=f"c{i}")[0] == 0
    assert reservations(data, "pods") == {}
    assert node.reaches("10.244.1.1")


@pytest.mark.gobin
def test_the_reference_cuts_the_node_off_its_router(node, tmp_path):
    """What the refusal prevents: Go's ptp accepts the same ADD, and the node then routes 10.244.1.1 (its
    router) to itself. Our ptp also accepts a gateway held by the reference's host ends (a node moving
    from one implementation to the other)."""
    data = str(tmp_path / "ipam")
    pod = node.pod()
    rc, out, err = run(node, GO_PTP, "ADD", conf(data, {"subnet": "10.244.1.0/24"}), pod, cni_path=GO_BIN_DIR)
    assert rc == 0, (out, err)
    try:
        assert node.route_to("10.244.1.1")["type"] == "local"
    finally:
        assert run(node, GO_PTP, "DEL", conf(data, {"subnet": "10.244.1.0/24"}), pod, cni_path=GO_BIN_DIR)[0] == 0
    assert node.route_to("10.244.1.1")["dev"] == "eth0"


@pytest.mark.gobin
def test_a_gateway_held_by_the_references_host_ends_is_accepted(node, bin_dir, tmp_path):
    data = str(tmp_path / "ipam")
    c = conf(data, {"subnet": "10.67.0.0/24"})
    go_pod, our_pod = node.pod(), node.pod()
    assert run(node, GO_PTP, "ADD", c, go_pod, cni_path=GO_BIN_DIR, containerid="go1")[0] == 0
    try:
        rc, out, err = run(node, os.path.join(bin_dir, "ptp"), "ADD", c, our_pod, cni_path=bin_dir, containerid="ours1")
        assert rc == 0, (out, err)
        assert run(node, os.path.join(bin_dir, "ptp"), "DEL", c, our_pod, cni_path=bin_dir, containerid="ours1")[0] == 0
    finally:
        run(node, GO_PTP, "DEL", c, go_pod, cni_path=GO_BIN_DIR, containerid="go1")


def test_a_range_that_only_lies_in_the_nodes_network_is_not_refused(node, bin_dir, tmp_path):
    """docs/DIAGNOSTICS.md, "What it does not refuse": a gateway and pod addresses inside eth0's network
    that are neither the node's addresses nor a router it routes through. The ADD goes through, as the
    reference's does (pods routed on the node's LAN are a design some operators choose); the doctor reports
    the range as pod-range-overlap (test_doctor_setups.py)."""
    data = str(tmp_path / "ipam")
    pod = node.pod()
    rng = {"subnet": "10.244.1.0/24", "rangeStart": "10.244.1.101", "rangeEnd": "10.244.1.110",
           "gateway": "10.244.1.100"}
    rc, out, err = run(node, os.path.join(bin_dir, "ptp"), "ADD", conf(data, rng), pod)
    assert rc == 0 and out["ips"][0]["address"] == "10.244.1.101/24", (out, err)
    assert node.route_to("10.244.1.101")["dev"] == out["interfaces"][0]["name"]
    assert node.reaches("10.244.1.1")
    rc, out, err = run(node, os.path.join(bin_dir, "ptp"), "DEL", conf(data, rng), pod)
    assert rc == 0 and reservations(data, "pods") == {}, (out, err)
