"""ptp and host-local among the other plugins of a chain and what a runtime's libcni really sends: what a
later plugin changed, what a 1.1.0 route asks for, a GC list written as null (review 15).

Kernel state is read back with `ip -j`; reservations from the files on disk.
"""
import os
import subprocess

import pytest

from tests.helpers import GO_BIN_DIR, cni_env, ip_json, run_plugin
from tests.integration.ptp_support import Ptp, host_veths, nspath, ptp_conf, reservations, snapshot
from tests.integration.test_ptp_ownership import data_dir, ours  # noqa: F401 (fixtures)

pytestmark = pytest.mark.kernel


def _go(name):
    path = os.path.join(GO_BIN_DIR, name)
    if not os.path.exists(path):
        pytest.skip(f"no Go {name} in {GO_BIN_DIR}")
    return path


def test_check_after_tuning_set_the_container_mtu(ours, make_netns, data_dir):
    """A later plugin of the chain (Go's tuning) sets eth0's MTU: CHECK must tolerate it, as Go's ptp and
    tuning's own CHECK do. Ours failed every CHECK of such a pod with code 999."""
    tuning = _go("tuning")
    ns = make_netns()
    conf = ptp_conf(data_dir, mtu=1400)
    r = ours.add(conf, nspath(ns))
    assert r.rc == 0, r
    tconf = {"cniVersion": "1.0.0", "name": "ptpnet", "type": "tuning", "mtu": 1300, "prevResult": r.json}
    t = run_plugin(tuning, cni_env("ADD", netns=nspath(ns), path=GO_BIN_DIR), tconf)
    assert t.rc == 0, t
    assert ip_json("link", "show", "dev", "eth0", netns=ns)[0]["mtu"] == 1300
    c = ours.check(conf, nspath(ns), t.json)
    assert (c.rc, c.stdout) == (0, ""), c
    # the host end is ptp's alone: its MTU is still compared
    host = r.json["interfaces"][0]["name"]
    subprocess.run(["ip", "link", "set", host, "mtu", "1280"], check=True)
    c = ours.check(conf, nspath(ns), t.json)
    assert c.rc == 1 and f"host veth {host} MTU 1280" in c.json["msg"], c
    assert ours.delete(conf, nspath(ns)).rc == 0


def test_a_routes_mtu_and_advmss_are_applied(ours, make_netns, data_dir):
    """At 1.1.0 a route's mtu and advmss are in the result: the kernel's route must carry them too."""
    ns = make_netns()
    routes = [{"dst": "192.168.0.0/16", "mtu": 1300, "advmss": 1200, "priority": 7}, {"dst": "0.0.0.0/0"}]
    conf = ptp_conf(data_dir, version="1.1.0", routes=routes)
    r = ours.add(conf, nspath(ns))
    assert r.rc == 0, r
    assert {"dst": "192.168.0.0/16", "mtu": 1300, "advmss": 1200, "priority": 7} in r.json["routes"]
    got = [x for x in ip_json("route", "show", "192.168.0.0/16", netns=ns)]
    assert len(got) == 1 and got[0]["metric"] == 7, got
    assert set(got[0].get("metrics", [{}])[0].items()) >= {("mtu", 1300), ("advmss", 1200)}, got
    c = ours.check(conf, nspath(ns), r.json)
    assert (c.rc, c.stdout) == (0, ""), c
    assert ours.delete(conf, nspath(ns)).rc == 0


@pytest.mark.parametrize("dst,gw", [("10.99.0.0/16", "fd00::1"), ("::/0", "10.22.0.1")])
def test_host_local_refuses_a_route_whose_gateway_is_of_the_other_version(ours, make_netns, data_dir, dst, gw):
    """Was code 999 "internal error ... this is a bug in skb-cni" with a traceback, from the route's
    encoding, after the veth was made."""
    ns = make_netns()
    conf = ptp_conf(data_dir, routes=[{"dst": dst, "gw": gw}])
    before = snapshot(data_dir, [ns], "ptpnet")
    r = ours.add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7, r
    assert r.json["msg"] == f"invalid field ipam.routes[0].gw: {gw} is not of the IP version of dst {dst}", r
    assert "Traceback" not in r.stderr
    assert snapshot(data_dir, [ns], "ptpnet") == before


def test_ptp_refuses_an_ipam_results_route_of_mixed_versions(bin_dir, make_netns, data_dir):
    """A foreign IPAM (Go's static) passes such a route on: ptp refuses it, code 7, before making anything."""
    _go("static")
    ptp = Ptp(os.path.join(bin_dir, "ptp"), GO_BIN_DIR)
    ns = make_netns()
    conf = {"cniVersion": "1.0.0", "name": "ptpnet", "type": "ptp",
            "ipam": {"type": "static", "addresses": [{"address": "10.22.0.5/24", "gateway": "10.22.0.1"}],
                     "routes": [{"dst": "10.99.0.0/16", "gw": "fd00::1"}]}}
    before = snapshot(data_dir, [ns], "ptpnet")
    r = ptp.add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7, r
    assert r.json["msg"] == "IPAM result route 10.99.0.0/16 has gateway fd00::1, of the other IP version", r
    assert snapshot(data_dir, [ns], "ptpnet") == before and not host_veths()


@pytest.mark.parametrize("keys", [("cni.dev/valid-attachments", "cni.dev/attachments"), ("cni.dev/attachments",)])
def test_gc_with_a_null_list_releases_every_reservation(ours, make_netns, data_dir, keys):
    """libcni writes Go's empty slice as null: a network none of whose attachments is valid any more.
    Ours read null as "no list" and released nothing, so the leaks GC is for stayed."""
    conf = ptp_conf(data_dir, version="1.1.0")
    nets = {}
    for cid in ("a", "b"):
        nets[cid] = make_netns()
        assert ours.add(conf, nspath(nets[cid]), containerid=cid).rc == 0
    for cid, ns in nets.items():   # the pods are gone, as they are when a runtime sends such a GC
        assert ours.delete(dict(conf, ipam=dict(conf["ipam"], dataDir=data_dir + "-elsewhere")), nspath(ns),
                           containerid=cid).rc == 0
    assert len(reservations(data_dir)) == 2
    g = ours("GC", dict(conf, **{k: None for k in keys}), containerid="", ifname="")
    assert g.rc == 0, g
    assert reservations(data_dir) == {}
    # with neither key (cnitool's gc) nothing is released
    assert ours.add(conf, nspath(nets["a"]), containerid="a").rc == 0
    assert ours("GC", conf, containerid="", ifname="").rc == 0
    assert len(reservations(data_dir)) == 1


@pytest.mark.parametrize("route, words", [
    ({"dst": "10.50.0.0/16", "mtu": 67}, "ipam.routes[0].mtu: 67 is out of range (68 to 65535 for IPv4"),
    ({"dst": "10.50.0.0/16", "mtu": 4294967295}, "ipam.routes[0].mtu: 4294967295 is out of range"),
    ({"dst": "fd50::/64", "mtu": 1000}, "ipam.routes[0].mtu: 1000 is out of range (1280 to 65535 for IPv6"),
    ({"dst": "10.50.0.0/16", "advmss": 4294967295}, "ipam.routes[0].advmss: 4294967295 is out of range"),
])
def test_a_route_mtu_the_kernel_would_clamp_or_no_pod_could_use_is_refused(ours, make_netns, data_dir, route, words):
    """Review 15 (after mtu and advmss came to be applied): 4294967295 became 65520 in the kernel while the
    result said otherwise, and 1 made the destination unusable; both were accepted."""
    ns = make_netns()
    conf = ptp_conf(data_dir, version="1.1.0", v6="fd22::/64", routes=[route])
    before = snapshot(data_dir, [ns], "ptpnet")
    r = ours.add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7 and words in r.json["msg"], r
    assert snapshot(data_dir, [ns], "ptpnet") == before


@pytest.mark.parametrize("routes, words", [
    ([{"dst": "10.99.0.0/16", "gw": "10.22.0.254"}],
     "IPAM result route 10.99.0.0/16 via 10.22.0.254: the pod cannot reach 10.22.0.254"),
    ([{"dst": "0.0.0.0/0"}, {"dst": "0.0.0.0/0"}], "IPAM result route 0.0.0.0/0 is there twice (routes[0] and routes[1])"),
    ([{"dst": "10.22.0.0/24"}], "IPAM result route 10.22.0.0/24 is ptp's own route to the pod's subnet"),
    ([{"dst": "10.22.0.1/32"}], "IPAM result route 10.22.0.1/32 is ptp's own route to the pod's gateway"),
])
def test_ipam_routes_the_pod_could_not_have_are_refused_before_anything_is_made(ours, make_netns, data_dir, routes,
                                                                                 words):
    """Review 16: a gw other than the pod's gateway was code 999 (the kernel's ENETUNREACH) after the veth was
    made, and the reference installs a route that leads nowhere; a route twice, or one of ptp's own, went
    through (the reference fails on each with "file exists")."""
    ns = make_netns()
    conf = ptp_conf(data_dir, routes=routes)
    before = snapshot(data_dir, [ns], "ptpnet")
    r = ours.add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7 and r.json["msg"] == words, r
    assert "ipam.routes" in r.json["details"], r
    assert snapshot(data_dir, [ns], "ptpnet") == before and not host_veths()


def test_routes_through_the_gateway_and_twice_with_other_metrics_are_taken(ours, make_netns, data_dir):
    ns = make_netns()
    conf = ptp_conf(data_dir, routes=[{"dst": "10.99.0.0/16", "gw": "10.22.0.1"}, {"dst": "0.0.0.0/0"},
                                      {"dst": "0.0.0.0/0", "priority": 200}], version="1.1.0")
    r = ours.add(conf, nspath(ns))
    assert r.rc == 0, r
    assert ip_json("route", "show", "10.99.0.0/16", netns=ns)[0]["gateway"] == "10.22.0.1"
    assert sorted(x.get("metric", 0) for x in ip_json("route", "show", "default", netns=ns)) == [0, 200]
    assert ours.delete(conf, nspath(ns)).rc == 0


@pytest.mark.parametrize("prev", ["hello", 42, [1, 2]])
def test_a_prev_result_that_is_no_result_is_refused_by_add(ours, make_netns, data_dir, prev):
    """Review 16: ptp ADD took any prevResult (and made the pod); the reference's and our loopback refuse it."""
    ns = make_netns()
    conf = dict(ptp_conf(data_dir), prevResult=prev)
    before = snapshot(data_dir, [ns], "ptpnet")
    r = ours.add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 6 and r.json["msg"].startswith("prevResult"), r
    assert snapshot(data_dir, [ns], "ptpnet") == before and not host_veths()
    assert ours.delete(conf, nspath(ns)).rc == 0
