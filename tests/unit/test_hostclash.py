"""skb.linux.hostclash without a kernel: the decision (pure), and the reading of raw dumps from messages
built here byte by byte with ``struct`` (the kernel's layouts: linux/netlink.h, if_addr.h, rtnetlink.h,
nexthop.h), never with the codec under test. The same check against a real node: tests/integration/
test_ptp_hostclash.py."""
import socket
import struct

import pytest

from skb.cni.errors import CNIError
from skb.linux import hostclash as hc
from skb.linux import netlink_codec as nl

V4, V6 = socket.AF_INET, socket.AF_INET6


def a4(text):
    return socket.inet_pton(V4, text)


def a6(text):
    return socket.inet_pton(V6, text)


def rtattr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def msg(kind, body, seq=1, flags=2):
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body + b"\0" * ((4 - len(body) % 4) % 4)


def addr_msg(family, packed, plen, index, label=None, local=None):
    """An address message laid out as the kernel writes it: IFA_ADDRESS, IFA_LOCAL (IPv4), IFA_LABEL, IFA_FLAGS."""
    body = struct.pack("=BBBBI", family, plen, 0x80, 0, index) + rtattr(1, packed)
    if family == V4:
        body += rtattr(2, local or packed)
    if label:
        body += rtattr(3, label.encode() + b"\0")
    return msg(20, body + rtattr(8, struct.pack("=I", 0x80)))


def route_msg(family, dst, dst_len, gateway=None, oif=2, table=254, multipath=None, nh_id=None, via=None):
    body = struct.pack("=BBBBBBBBI", family, dst_len, 0, 0, table if table < 256 else 252, 3, 0, 1, 0)
    body += rtattr(15, struct.pack("=I", table))
    if dst_len:
        body += rtattr(1, dst)
    if gateway:
        body += rtattr(5, gateway)
    if via:
        body += rtattr(18, struct.pack("=H", via[0]) + via[1])
    if multipath:
        hops = b""
        for gw, index in multipath:
            attrs = rtattr(5, gw)
            hops += struct.pack("=HBBi", 8 + len(attrs), 0, 0, index) + attrs
        body += rtattr(9, hops)
    if nh_id is not None:
        body += rtattr(30, struct.pack("=I", nh_id))
    if oif:
        body += rtattr(4, struct.pack("=I", oif))
    return msg(24, body)


def done(seq=1):
    return struct.pack("=IHHII", 20, 3, 2, seq, 0) + struct.pack("=i", 0)


class FakeNetlink:
    """Answers dump_raw from prepared messages (one datagram, NLMSG_DONE stripped as the client does)
    and link_get from a table of links."""

    def __init__(self, addrs=(), routes=(), nexthops=None, links=None):
        self.addrs, self.routes, self.nexthops, self.links = list(addrs), list(routes), nexthops, links or {}
        self.requests = []

    def dump_raw(self, kind, payload, what, strict=False):
        self.requests.append((kind, payload[0], strict))
        if kind == nl.RTM_GETADDR:
            return [b"".join(m for m in self.addrs if m[16] == payload[0])]
        if kind == nl.RTM_GETROUTE:
            return [b"".join(m for m in self.routes if m[16] == payload[0])]
        if kind == nl.RTM_GETNEXTHOP:
            if self.nexthops is None:
                raise nl_error(95)
            return [b"".join(self.nexthops)]
        raise AssertionError(kind)

    def link_get(self, index):
        if index not in self.links:
            raise nl_error(19)
        link = nl.Link()
        link.index, (link.name, link.kind, link.link_netnsid) = index, self.links[index]
        return link


def nl_error(errno_):
    from skb.linux.netlink import NetlinkError
    return NetlinkError("no", err=errno_)


# -- the codec additions ---------------------------------------------------------------------------------


def test_route_next_hops_reads_gateway_via_multipath_and_nexthop_id():
    body = route_msg(V4, a4("10.9.0.0"), 16, gateway=a4("10.0.0.1"), oif=3)[16:]
    assert nl.route_next_hops(body) == ([(V4, a4("10.0.0.1"), 3)], None)
    body = route_msg(V4, a4("10.9.0.0"), 16, multipath=[(a4("10.0.0.2"), 4), (a4("10.0.0.3"), 5)], oif=0)[16:]
    assert nl.route_next_hops(body) == ([(V4, a4("10.0.0.2"), 4), (V4, a4("10.0.0.3"), 5)], None)
    body = route_msg(V4, b"", 0, via=(V6, a6("fe80::1")), oif=7)[16:]
    assert nl.route_next_hops(body) == ([(V6, a6("fe80::1"), 7)], None)
    body = route_msg(V6, a6("fd00::"), 64, nh_id=12, oif=0)[16:]
    assert nl.route_next_hops(body) == ([], 12)


def test_decode_nexthop_with_gateway_and_group():
    head = struct.pack("=BBBBI", V4, 0, 3, 0, 0)
    one = head + rtattr(1, struct.pack("=I", 5)) + rtattr(5, struct.pack("=I", 2)) + rtattr(6, a4("10.0.0.7"))
    assert nl.decode_nexthop(one) == (5, V4, a4("10.0.0.7"), 2, [])
    group = struct.pack("=BBBBI", 0, 0, 3, 0, 0) + rtattr(1, struct.pack("=I", 9)) + \
        rtattr(2, struct.pack("=IBBH", 5, 1, 0, 0) + struct.pack("=IBBH", 6, 1, 0, 0))
    assert nl.decode_nexthop(group) == (9, 0, None, 0, [5, 6])


# -- the decision -----------------------------------------------------------------------------------------


GW, POD = (V4, a4("10.244.1.1")), (V4, a4("10.244.1.9"))
WANTED = [("gateway", *GW, "10.244.1.1"), ("address", *POD, "10.244.1.9")]


def held(packed, name, plen=32, kind=None, peer_elsewhere=None, peer=False, labelled=False):
    h = hc.Held(V4, packed, 7, name, plen, peer=peer)
    h.kind, h.peer_elsewhere, h.labelled = kind, peer_elsewhere, labelled
    return h


@pytest.mark.parametrize("holder, clash", [
    (held(GW[1], "veth1a2b3c4d"), False),                                  # a ptp host end, by name
    (held(GW[1], None, labelled=True), False),                             # by the label of its IPv4 address
    (held(GW[1], "renamed0", kind="veth", peer_elsewhere=True), False),    # looked up: a veth, peer elsewhere
    (held(GW[1], "eth0", plen=24, kind="veth", peer_elsewhere=True), True),   # not a /32
    (held(GW[1], "veth1a2b3c4d", plen=24), True),
    (held(GW[1], "dummy0", kind="dummy", peer_elsewhere=False), True),
    (held(GW[1], "lo", kind="", peer_elsewhere=False), True),
    (held(GW[1], "veth00000001", kind="veth", peer_elsewhere=False), True),   # the kernel's word wins
    (held(GW[1], "ppp0", peer=True), True),                                # the far end of a point-to-point link
    (held(POD[1], "veth1a2b3c4d"), True),                                  # a pod address may sit nowhere
])
def test_who_may_hold_the_gateway(holder, clash):
    found = hc.clashes(WANTED, [holder], [])
    assert bool(found) == clash, found
    if clash:
        assert found[0][2].startswith("it is ")


def test_a_next_hop_clashes_and_is_named():
    hop = hc.Hop(*GW, "default via 10.244.1.1 dev eth0")
    assert hc.clashes(WANTED, [], [hop]) == [("gateway", "10.244.1.1",
                                              "it is the next hop of the host route default via 10.244.1.1 dev eth0")]
    assert hc.clashes(WANTED, [], []) == []


def test_ptp_names():
    assert hc.is_ptp_name("veth0a1b2c3d") and not hc.is_ptp_name("veth0") and not hc.is_ptp_name("eth0a1b2c3d4")


# -- reading raw dumps ------------------------------------------------------------------------------------


def ptp_ends(n, start=10):
    return [addr_msg(V4, a4("10.244.1.1"), 32, start + i, f"veth{i:08x}") for i in range(n)]


def test_ptp_host_ends_are_counted_in_the_raw_dump_not_listed():
    fake = FakeNetlink(addrs=ptp_ends(50) + [addr_msg(V4, a4("192.168.0.5"), 24, 2, "eth0")],
                       routes=[route_msg(V4, b"", 0, gateway=a4("192.168.0.1"))])
    assert hc.read(fake, WANTED) == ([], [])
    assert (nl.RTM_GETROUTE, V4, True) in fake.requests          # routes: unicast only, asked strictly


def test_an_odd_holder_among_ptp_ends_is_found_and_looked_up():
    odd = addr_msg(V4, a4("10.244.1.1"), 32, 3, "dummy0")
    fake = FakeNetlink(addrs=ptp_ends(20) + [odd], links={3: ("dummy0", "dummy", None)})
    found = hc.clashes(WANTED, *hc.read(fake, WANTED))
    assert found == [("gateway", "10.244.1.1", "it is an address of the host's interface dummy0 (10.244.1.1/32)")]


def test_a_point_to_point_peer_and_a_pod_address_are_decoded():
    peer = addr_msg(V4, a4("10.244.1.1"), 32, 4, "ppp0", local=a4("100.64.0.2"))
    mine = addr_msg(V4, a4("10.244.1.9"), 24, 2, "eth0")
    found = hc.clashes(WANTED, *hc.read(FakeNetlink(addrs=[peer, mine]), WANTED))
    assert [f[2] for f in found] == ["it is the peer address of ppp0's point-to-point link (10.244.1.1/32)",
                                     "it is an address of the host's interface eth0 (10.244.1.9/24)"]


def test_ipv6_holders_borrow_the_ipv4_labels_of_their_interface():
    wanted = WANTED + [("gateway", V6, a6("fd44::1"), "fd44::1"), ("address", V6, a6("fd44::9"), "fd44::9")]
    v6 = [addr_msg(V6, a6("fd44::1"), 128, 10 + i) for i in range(5)]
    fake = FakeNetlink(addrs=ptp_ends(5) + v6)
    assert hc.clashes(wanted, *hc.read(fake, wanted)) == []
    stray = addr_msg(V6, a6("fd44::1"), 128, 99)                 # no IPv4 label: looked up
    fake = FakeNetlink(addrs=ptp_ends(5) + v6 + [stray], links={99: ("eth9", "other", None)})
    assert hc.clashes(wanted, *hc.read(fake, wanted)) == [
        ("gateway", "fd44::1", "it is an address of the host's interface eth9 (fd44::1/128)")]


def test_next_hops_in_any_table_multipath_and_nexthop_objects():
    routes = [route_msg(V4, a4("10.9.0.0"), 16, gateway=a4("10.244.1.9"), table=100, oif=2),
              route_msg(V4, a4("10.8.0.0"), 16, multipath=[(a4("10.0.0.2"), 2), (a4("10.244.1.1"), 2)], oif=0),
              route_msg(V4, a4("10.7.0.0"), 16, nh_id=40, oif=0),
              route_msg(V4, a4("10.6.0.0"), 16, gateway=a4("10.244.1.19"), oif=2)]    # not wanted
    head = struct.pack("=BBBBI", V4, 0, 3, 0, 0)
    objects = [msg(104, head + rtattr(1, struct.pack("=I", 41)) + rtattr(5, struct.pack("=I", 2)) +
                   rtattr(6, a4("10.244.1.1"))),
               msg(104, struct.pack("=BBBBI", 0, 0, 3, 0, 0) + rtattr(1, struct.pack("=I", 40)) +
                   rtattr(2, struct.pack("=IBBH", 41, 1, 0, 0)))]
    fake = FakeNetlink(routes=routes, nexthops=objects, links={2: ("eth0", "veth", None)})
    _held, hops = hc.read(fake, WANTED)
    assert sorted(h.route for h in hops) == ["10.7.0.0/16 via 10.244.1.1 dev eth0 (nexthop id 40)",
                                             "10.8.0.0/16 via 10.244.1.1 dev eth0",
                                             "10.9.0.0/16 via 10.244.1.9 dev eth0 table 100"]
    fake = FakeNetlink(routes=routes[2:3])                       # a kernel without nexthop objects
    assert hc.read(fake, WANTED) == ([], [])


def test_refuse_names_the_first_clash_and_lists_the_others():
    fake = FakeNetlink(addrs=[addr_msg(V4, a4("10.244.1.9"), 24, 2, "eth0")],
                       routes=[route_msg(V4, b"", 0, gateway=a4("10.244.1.1"))], links={2: ("eth0", "veth", None)})
    with pytest.raises(CNIError) as e:
        hc.refuse(fake, [("10.244.1.9", "10.244.1.1", "10.244.1.0/24")])
    assert e.value.code == 7
    assert e.value.msg == ("gateway 10.244.1.1 is already in use on the node: it is the next hop of the host route "
                           "default via 10.244.1.1 dev eth0")
    assert e.value.details.startswith("the range 10.244.1.0/24 overlaps the node's own network; address 10.244.1.9 "
                                      "too: it is an address of the host's interface eth0 (10.244.1.9/24)")
    hc.refuse(FakeNetlink(), [("10.244.1.9", "10.244.1.1", "10.244.1.0/24")])


def test_read_raw_recognises_the_end_and_an_interruption():
    """The client's raw dump reader on datagrams as the kernel sends them."""
    from skb.linux.netlink import RtNetlink

    class Sock:
        def __init__(self, datagrams):
            self.datagrams = list(datagrams)

        def recv_into(self, buf, n, flags):
            d = self.datagrams.pop(0)
            buf[:len(d)] = d
            return len(d)

    client = RtNetlink.__new__(RtNetlink)
    client.label, client._buf = "test", bytearray(65536)
    a, b = addr_msg(V4, a4("10.0.0.1"), 32, 3, "x"), addr_msg(V4, a4("10.0.0.2"), 32, 4, "y")
    client._sock = Sock([a, b + done()])
    assert client._read_raw(1) == ([a, b], False)
    interrupted = bytearray(b)
    struct.pack_into("=H", interrupted, 6, 2 | 0x10)
    client._sock = Sock([bytes(interrupted) + done()])
    assert client._read_raw(1)[1] is True
    client._sock = Sock([struct.pack("=IHHII", 20, 3, 2, 1, 0) + struct.pack("=i", -95)])
    with pytest.raises(Exception) as e:
        client._read_raw(1)
    assert e.value.err == 95


def test_a_main_table_route_to_a_pod_address_alone_clashes_only_as_a_pod_address():
    """A /32 route to the pod address in the main table: ptp's own host route could not be added."""
    routes = [route_msg(V4, a4("10.244.1.9"), 32, oif=2),                          # the clash
              route_msg(V4, a4("10.244.1.1"), 32, oif=2),                          # to the gateway: its own case
              route_msg(V4, a4("10.244.1.9"), 32, oif=2, table=100),               # another table
              route_msg(V4, a4("10.244.1.9"), 31, oif=2)]                          # not the address alone
    fake = FakeNetlink(routes=routes, links={2: ("eth0", "veth", None)})
    _held, hops = hc.read(fake, WANTED)
    assert [(h.route, h.dest) for h in hops] == [("10.244.1.9 dev eth0", True)]
    assert hc.clashes(WANTED, [], hops) == [("address", "10.244.1.9",
                                             "it is the destination of the host route 10.244.1.9 dev eth0")]
    gw_only = [("gateway", *POD, "10.244.1.9")]
    assert hc.clashes(gw_only, [], hops) == []
    with pytest.raises(CNIError) as e:
        hc.refuse(fake, [("10.244.1.9", "10.244.1.1", "10.244.1.0/24")])
    assert e.value.code == 7 and "leftover of an attachment never deleted" in e.value.details
    fake = FakeNetlink(routes=routes[1:], links={2: ("eth0", "veth", None)})
    hc.refuse(fake, [("10.244.1.9", "10.244.1.1", "10.244.1.0/24")])
