"""skb.linux.netlink against the kernel, in throwaway namespaces inside the sandbox.

Every outcome is read back independently: ``ip -j`` (tests.helpers.ip_json) and, for fields ``ip -j``
hides (route protocol ``boot``), ``ip``'s own filters or pyroute2.
"""
import errno
import os
import subprocess
import time

import pytest

from skb.linux import netlink as nl
from skb.linux import netlink_codec as nlc
from skb.linux import netns
from tests.helpers import ip_json

pytestmark = pytest.mark.kernel


def ip(*args, netns=None):
    cmd = ["ip"] + (["-n", netns] if netns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True)


def names(netns=None):
    return {link["ifname"] for link in ip_json("link", "show", netns=netns)}


@pytest.fixture
def ctr(make_netns):
    """A container netns with a veth pair d0/d1 inside (this kernel has no dummy module), both up."""
    name = make_netns()
    ip("link", "add", "d0", "type", "veth", "peer", "name", "d1", netns=name)
    ip("link", "set", "d0", "up", netns=name)
    ip("link", "set", "d1", "up", netns=name)
    return name


@pytest.fixture
def cnl(ctr):
    with nl.RtNetlink.for_netns(f"/run/netns/{ctr}") as client:
        yield client


@pytest.fixture
def hostnl():
    with nl.RtNetlink(label="sandbox-host") as client:
        yield client


# -- links ---------------------------------------------------------------------------------------------


def test_link_get_by_name_and_index_matches_ip(cnl, ctr):
    want = ip_json("-d", "link", "show", "dev", "d0", netns=ctr)[0]
    for key in ("d0", want["ifindex"]):
        link = cnl.link_get(key)
        assert (link.index, link.name, link.mtu, link.mac, link.txqlen) == \
            (want["ifindex"], "d0", want["mtu"], want["address"], want["txqlen"])
        assert link.kind == want["linkinfo"]["info_kind"] == "veth"
        assert link.up == ("UP" in want["flags"])
        assert link.operstate == want["operstate"]
    peer = ip_json("link", "show", "dev", "d1", netns=ctr)[0]
    assert cnl.link_get("d0").link_index == peer["ifindex"]


def test_link_list_matches_ip(cnl, ctr):
    assert {link.name for link in cnl.link_list()} == names(ctr) == {"lo", "d0", "d1"}


def test_link_get_missing_names_link_and_netns(cnl, ctr):
    with pytest.raises(nl.NotFound) as e:
        cnl.link_get("nope0")
    assert e.value.msg == f'link "nope0" not found in netns /run/netns/{ctr}'
    assert e.value.errno == errno.ENODEV and e.value.code == 999
    with pytest.raises(nl.NotFound):
        cnl.link_get(4242)


def test_link_set_down_up_mtu(cnl, ctr):
    cnl.link_set_down("d0")
    assert "UP" not in ip_json("link", "show", "dev", "d0", netns=ctr)[0]["flags"]
    cnl.link_set_up("d0")
    assert "UP" in ip_json("link", "show", "dev", "d0", netns=ctr)[0]["flags"]
    cnl.link_set("d0", mtu=1400)
    assert ip_json("link", "show", "dev", "d0", netns=ctr)[0]["mtu"] == 1400
    index = cnl.link_get("d0").index
    cnl.link_set(index, up=False, mtu=1300)
    got = ip_json("link", "show", "dev", "d0", netns=ctr)[0]
    assert got["mtu"] == 1300 and "UP" not in got["flags"]


def test_link_set_missing_and_bad_mtu(cnl, ctr):
    with pytest.raises(nl.NotFound) as e:
        cnl.link_set_up("nope0")
    assert f'link "nope0" not found in netns /run/netns/{ctr}' == e.value.msg
    with pytest.raises(nl.NetlinkError) as e:
        cnl.link_set("d0", mtu=10)
    assert e.value.errno == errno.EINVAL and "/run/netns/" + ctr in e.value.msg and "mtu 10" in e.value.msg


def test_veth_peer_created_directly_in_another_netns(hostnl, make_netns):
    ctr = make_netns()
    with netns.NetNS.open(f"/run/netns/{ctr}") as target:
        hostnl.veth_add("skbh0", "eth0", peer_netns=target, mtu=1400)
    try:
        host = ip_json("-d", "link", "show", "dev", "skbh0")[0]
        inside = ip_json("-d", "link", "show", "dev", "eth0", netns=ctr)[0]
        assert host["linkinfo"]["info_kind"] == inside["linkinfo"]["info_kind"] == "veth"
        assert host["mtu"] == inside["mtu"] == 1400
        assert host["txqlen"] == inside["txqlen"] == 1000        # no IFLA_TXQLEN 0 (the Go <= v1.5 bug)
        assert host["link_index"] == inside["ifindex"] and inside["link_index"] == host["ifindex"]
        assert "link_netnsid" in host and "link_netnsid" in inside
        assert "eth0" not in names() and "skbh0" not in names(ctr)
    finally:
        ip("link", "del", "skbh0")
    assert "eth0" not in names(ctr)


def test_veth_from_inside_with_peer_on_the_host_up(cnl, ctr, hostnl):
    """Go's SetupVeth direction: sent from the container netns, the peer lands in the host netns."""
    with netns.own_netns() as host:
        cnl.veth_add("eth0", "vethskb01", peer_netns=host, up=True)
    try:
        inside = ip_json("link", "show", "dev", "eth0", netns=ctr)[0]
        outside = ip_json("link", "show", "dev", "vethskb01")[0]
        assert "UP" in inside["flags"] and "UP" not in outside["flags"]
        hostnl.link_set_up("vethskb01")
        outside = ip_json("link", "show", "dev", "vethskb01")[0]
        assert "UP" in outside["flags"] and "LOWER_UP" in outside["flags"]
        assert outside["link_index"] == inside["ifindex"]
        assert inside["mtu"] == outside["mtu"] == 1500
    finally:
        cnl.link_del("eth0")
    assert "vethskb01" not in names() and "eth0" not in names(ctr)


def test_veth_name_clashes_say_which_name_and_where(cnl, ctr):
    with netns.own_netns() as host:
        with pytest.raises(nl.Exists) as e:
            cnl.veth_add("d0", "vethskb02", peer_netns=host, peer_label="the host")
        assert e.value.msg == f'link name "d0" already exists in netns /run/netns/{ctr}'
        assert e.value.subject == "d0"
        ip("link", "add", "vethskb03", "type", "veth", "peer", "name", "vethskb04")
        try:
            with pytest.raises(nl.Exists) as e:
                cnl.veth_add("eth0", "vethskb03", peer_netns=host, peer_label="the host")
            assert e.value.msg == 'link name "vethskb03" already exists in netns the host'
            assert e.value.subject == "vethskb03" and e.value.errno == errno.EEXIST
        finally:
            ip("link", "del", "vethskb03")
    assert "eth0" not in names(ctr)


def test_link_del_removes_both_ends_and_then_reports_not_found(cnl, ctr):
    cnl.link_del("d0")
    assert names(ctr) == {"lo"}
    with pytest.raises(nl.NotFound) as e:
        cnl.link_del("d0")
    assert e.value.msg == f'link "d0" not found in netns /run/netns/{ctr}'


def test_socket_stays_in_the_netns_it_was_opened_in(ctr):
    with netns.enter(f"/run/netns/{ctr}"):
        client = nl.RtNetlink()
        assert client.label == f"/run/netns/{ctr}"
    with client:
        assert {link.name for link in client.link_list()} == {"lo", "d0", "d1"}
        assert "d0" not in names()

# -- addresses -----------------------------------------------------------------------------------------


def addr_info(ctr, dev="d0"):
    return {(a["local"], a["prefixlen"]): a for a in ip_json("addr", "show", "dev", dev, netns=ctr)[0]["addr_info"]}


def test_addr_add_list_del_v4_v6(cnl, ctr):
    cnl.addr_add("d0", "10.1.1.5/24")
    cnl.addr_add("d0", "fd00::5/64", flags=nlc.IFA_F_NODAD)
    got = addr_info(ctr)
    v4, v6 = got[("10.1.1.5", 24)], got[("fd00::5", 64)]
    assert v4["family"] == "inet" and v4["broadcast"] == "10.1.1.255" and v4["scope"] == "global"
    assert v6["family"] == "inet6" and v6.get("nodad") is True and not v6.get("tentative")
    listed = {a.cidr for a in cnl.addr_list("d0")}
    assert listed == {f"{a}/{p}" for a, p in got}
    assert {a.cidr for a in cnl.addr_list("d0", family=nlc.AF_INET)} == {"10.1.1.5/24"}
    index = cnl.link_get("d0").index
    assert {a.cidr for a in cnl.addr_list(index=index)} == listed
    assert all(a.index == index for a in cnl.addr_list("d0"))
    cnl.addr_del("d0", "10.1.1.5/24")
    v6addr = [a for a in cnl.addr_list("d0") if a.address == "fd00::5"][0]
    cnl.addr_del("d0", v6addr)
    assert ("10.1.1.5", 24) not in addr_info(ctr) and ("fd00::5", 64) not in addr_info(ctr)


def test_addr_scope_and_tuple_form(cnl, ctr):
    import socket
    cnl.addr_add("d0", (socket.AF_INET, socket.inet_aton("10.7.0.1"), 16), scope=nlc.RT_SCOPE_LINK, broadcast=False)
    a = addr_info(ctr)[("10.7.0.1", 16)]
    assert a["scope"] == "link" and "broadcast" not in a


def test_addr_duplicate_names_address_link_and_netns(cnl, ctr):
    cnl.addr_add("d0", "10.1.1.5/24")
    with pytest.raises(nl.Exists) as e:
        cnl.addr_add("d0", "10.1.1.5/24")
    assert e.value.msg == f"address 10.1.1.5/24 already on d0 in netns /run/netns/{ctr}"
    assert e.value.errno == errno.EEXIST
    cnl.addr_add("d0", "fd00::5/64", flags=nlc.IFA_F_NODAD)
    with pytest.raises(nl.Exists) as e:
        cnl.addr_add("d0", "fd00::5/64")
    assert e.value.msg == f"address fd00::5/64 already on d0 in netns /run/netns/{ctr}"


def test_addr_errors_missing(cnl, ctr):
    with pytest.raises(nl.NotFound) as e:
        cnl.addr_del("d0", "10.9.9.9/24")
    assert e.value.msg == f"address 10.9.9.9/24 not on d0 in netns /run/netns/{ctr}"
    with pytest.raises(nl.NotFound) as e:
        cnl.addr_add("nope0", "10.9.9.9/24")
    assert e.value.msg == f'link "nope0" not found in netns /run/netns/{ctr}'

# -- routes --------------------------------------------------------------------------------------------


def routes(ctr, *args, family="-4"):
    return ip_json(family, "route", "show", *args, netns=ctr)


@pytest.fixture
def addressed(cnl, ctr):
    cnl.addr_add("d0", "10.1.1.5/24")
    cnl.addr_add("d0", "fd00::5/64", flags=nlc.IFA_F_NODAD)
    return cnl


def test_route_add_v4_gateway_boot_main(addressed, ctr):
    addressed.route_add("10.2.0.0/16", gateway="10.1.1.1", oif="d0")
    got = [r for r in routes(ctr, "proto", "boot") if r["dst"] == "10.2.0.0/16"]
    assert len(got) == 1 and got[0]["gateway"] == "10.1.1.1" and got[0]["dev"] == "d0"
    assert "scope" not in got[0]            # universe
    listed = [r for r in addressed.route_list(nlc.AF_INET) if r.dst == "10.2.0.0/16"]
    assert len(listed) == 1
    r = listed[0]
    assert (r.gateway, r.protocol, r.table, r.scope, r.oif) == \
        ("10.1.1.1", nlc.RTPROT_BOOT, nlc.RT_TABLE_MAIN, 0, addressed.link_get("d0").index)


def test_route_scopes_table_metric_metrics(addressed, ctr):
    addressed.route_add("10.3.0.0/16", oif="d0", scope=nlc.RT_SCOPE_LINK)
    addressed.route_add("10.9.9.9/32", oif="d0", scope=nlc.RT_SCOPE_HOST)
    addressed.route_add("0.0.0.0/0", gateway="10.1.1.1", table=100, priority=7, mtu=1300, advmss=1200)
    assert [r["scope"] for r in routes(ctr, "proto", "boot") if r["dst"] == "10.3.0.0/16"] == ["link"]
    assert [r["scope"] for r in routes(ctr, "proto", "boot") if r["dst"] == "10.9.9.9"] == ["host"]
    t100 = routes(ctr, "table", "100", "proto", "boot")
    assert len(t100) == 1
    assert (t100[0]["dst"], t100[0]["gateway"], t100[0]["metric"]) == ("default", "10.1.1.1", 7)
    assert t100[0]["metrics"] == [{"mtu": 1300, "advmss": 1200}]
    listed = addressed.route_list(nlc.AF_INET, table=100)
    assert [(r.dst, r.priority, r.mtu, r.advmss, r.table) for r in listed] == [("0.0.0.0/0", 7, 1300, 1200, 100)]
    assert "10.9.9.9/32" in {r.dst for r in addressed.route_list(table=None)}


def test_route_table_above_255(addressed, ctr):
    addressed.route_add("10.4.0.0/16", oif="d0", scope=nlc.RT_SCOPE_LINK, table=1000)
    assert [r["dst"] for r in routes(ctr, "table", "1000")] == ["10.4.0.0/16"]
    assert [r.table for r in addressed.route_list(table=1000)] == [1000]


def test_route_v6(addressed, ctr):
    addressed.route_add("fd01::/64", gateway="fd00::1", oif="d0", priority=50)
    addressed.route_add("::/0", gateway="fd00::1", table=100)
    got = [r for r in routes(ctr, "proto", "boot", family="-6") if r["dst"] == "fd01::/64"]
    assert len(got) == 1 and got[0]["gateway"] == "fd00::1" and got[0]["metric"] == 50
    assert [(r["dst"], r["gateway"]) for r in routes(ctr, "table", "100", family="-6")] == [("default", "fd00::1")]
    listed = {r.dst: r for r in addressed.route_list(nlc.AF_INET6)}
    assert listed["fd01::/64"].gateway == "fd00::1" and listed["fd01::/64"].protocol == nlc.RTPROT_BOOT
    addressed.route_del("fd01::/64", gateway="fd00::1")
    assert not [r for r in routes(ctr, family="-6") if r["dst"] == "fd01::/64"]


def test_route_replace_and_delete(addressed, ctr):
    addressed.route_add("10.2.0.0/16", gateway="10.1.1.1")
    addressed.route_replace("10.2.0.0/16", gateway="10.1.1.2")
    got = [r for r in routes(ctr) if r["dst"] == "10.2.0.0/16"]
    assert [r["gateway"] for r in got] == ["10.1.1.2"]
    addressed.route_replace("10.5.0.0/16", oif="d0", scope=nlc.RT_SCOPE_LINK)   # replace creates too
    assert [r for r in routes(ctr, "proto", "boot") if r["dst"] == "10.5.0.0/16"]
    route = [r for r in addressed.route_list() if r.dst == "10.5.0.0/16"][0]
    addressed.route_del(route)
    addressed.route_del("10.2.0.0/16")
    assert not {"10.2.0.0/16", "10.5.0.0/16"} & {r["dst"] for r in routes(ctr)}
    with pytest.raises(nl.NotFound) as e:
        addressed.route_del("10.2.0.0/16", gateway="10.1.1.2")
    assert e.value.msg == f"route 10.2.0.0/16 via 10.1.1.2 not found in netns /run/netns/{ctr}"
    assert e.value.errno == errno.ESRCH


def test_route_errors_name_route_and_netns(addressed, ctr):
    with pytest.raises(nl.NetlinkError) as e:
        addressed.route_add("10.2.0.0/16", gateway="10.9.0.1", oif="d0")
    assert e.value.errno == errno.ENETUNREACH
    assert e.value.msg.startswith(f"route 10.2.0.0/16 via 10.9.0.1 dev d0 in netns /run/netns/{ctr}: gateway not")
    assert "(ENETUNREACH)" in e.value.msg
    assert e.value.details.startswith("kernel: ")         # the extended ack made it through
    addressed.route_add("10.2.0.0/16", gateway="10.1.1.1")
    with pytest.raises(nl.Exists) as e:
        addressed.route_add("10.2.0.0/16", gateway="10.1.1.1")
    assert e.value.msg == f"route 10.2.0.0/16 via 10.1.1.1 already exists in netns /run/netns/{ctr}"
    addressed.route_add("10.2.0.0/16", gateway="10.1.1.1", priority=5, exclusive=False)
    assert len([r for r in routes(ctr) if r["dst"] == "10.2.0.0/16"]) == 2


def test_route_list_matches_pyroute2(addressed, ctr):
    from pyroute2 import NetNS
    addressed.route_add("10.2.0.0/16", gateway="10.1.1.1", table=100, priority=9)
    ours = {(r.dst, r.gateway, r.oif, r.priority, r.protocol) for r in addressed.route_list(nlc.AF_INET, table=100)}
    with NetNS(ctr, flags=0) as ipr:
        theirs = {(f"{r.get('RTA_DST') or '0.0.0.0'}/{r['dst_len']}", r.get("RTA_GATEWAY"), r.get("RTA_OIF") or 0,
                   r.get("RTA_PRIORITY") or 0, r["proto"])
                  for r in ipr.get_routes(family=nlc.AF_INET, table=100)}
    assert ours == theirs == {("10.2.0.0/16", "10.1.1.1", addressed.link_get("d0").index, 9, 3)}

# -- cost ----------------------------------------------------------------------------------------------


def test_many_requests_on_one_socket(cnl, ctr, capsys):
    """1000 lookups on one socket: every reply matches its request (sequence numbers never drift) and
    agrees with ip's view. The cost is printed, not asserted (bench/ measures speed)."""
    index = ip_json("link", "show", "d0", netns=ctr)[0]["ifindex"]
    start = time.perf_counter()
    got = {cnl.link_get("d0").index for _ in range(1000)}
    per = (time.perf_counter() - start) * 1e3
    with capsys.disabled():
        print(f"\n  link_get: {per:.1f} us/request")
    assert got == {index}
