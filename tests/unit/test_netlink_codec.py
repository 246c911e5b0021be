"""skb.linux.netlink_codec, without a kernel.

Expected bytes are written out by hand from the kernel's struct layouts (linux/netlink.h, rtnetlink.h,
if_link.h, veth.h) and decoded independently with ``struct``, never with the code under test.
"""
import socket
import struct

import pytest
from hypothesis import given, strategies as st

from skb.linux import netlink as nlclient
from skb.linux import netlink_codec as nl


def rtattr(kind, payload):
    """An independent rtattr encoder: u16 len (unpadded), u16 type, payload, zero pad to 4."""
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def walk(data):
    """An independent rtattr decoder: [(type, payload)] in order."""
    out, off = [], 0
    while off + 4 <= len(data):
        n, kind = struct.unpack_from("=HH", data, off)
        out.append((kind, data[off + 4:off + n]))
        off += (n + 3) & ~3
    return out


# -- attributes --------------------------------------------------------------------------------------


def test_attr_pads_to_four_bytes_and_records_unpadded_length():
    assert nl.attr(3, b"eth0\0") == b"\x09\x00\x03\x00eth0\0\0\0\0"
    assert nl.attr(1, b"") == b"\x04\x00\x01\x00"
    assert nl.attr(4, b"\x01\x02\x03\x04") == b"\x08\x00\x04\x00\x01\x02\x03\x04"


def test_attr_u32_and_str():
    assert nl.attr_u32(nl.IFLA_MTU, 1500) == struct.pack("=HHI", 8, 4, 1500)
    assert nl.attr_str(nl.IFLA_IFNAME, "lo") == struct.pack("=HH", 7, 3) + b"lo\0\0"


@given(st.lists(st.tuples(st.integers(1, 0x3FFF), st.binary(max_size=40)), max_size=8))
def test_parse_attrs_inverts_attr(items):
    data = b"".join(nl.attr(k, v) for k, v in items)
    assert len(data) % 4 == 0
    assert nl.parse_attrs(data) == dict(items)     # last one wins, like the dict
    assert walk(data) == items


def test_parse_attrs_drops_nested_and_byteorder_flags():
    data = struct.pack("=HH", 8, 0x8000 | 18) + b"abcd" + struct.pack("=HH", 8, 0x4000 | 2) + b"wxyz"
    assert nl.parse_attrs(data) == {18: b"abcd", 2: b"wxyz"}


def test_parse_attrs_stops_at_a_truncated_attribute():
    data = nl.attr(1, b"abcd") + struct.pack("=HH", 40, 2) + b"short"
    assert nl.parse_attrs(data) == {1: b"abcd"}


def test_parse_attrs_window():
    data = b"HEAD" + nl.attr(1, b"x") + nl.attr(2, b"y")
    assert nl.parse_attrs(data, 4, 12) == {1: b"x"}


def test_nested():
    inner = nl.attr_u32(2, 1300) + nl.attr_u32(8, 1200)
    assert nl.nested(8, nl.attr_u32(2, 1300), nl.attr_u32(8, 1200)) == struct.pack("=HH", 4 + len(inner), 8) + inner


# -- messages ----------------------------------------------------------------------------------------


def test_message_header():
    msg = nl.message(nl.RTM_GETLINK, nl.NLM_F_REQUEST | nl.NLM_F_DUMP, 7, b"\0" * 16)
    assert struct.unpack_from("=IHHII", msg) == (32, 18, 0x301, 7, 0)
    assert len(msg) == 32


def test_split_messages_walks_a_multipart_datagram():
    one = struct.pack("=IHHII", 16 + 5, 16, 2, 9, 1234) + b"abcde" + b"\0\0\0"   # padded to 4
    two = struct.pack("=IHHII", 20, 3, 2, 9, 1234) + b"\0\0\0\0"
    assert list(nl.split_messages(one + two)) == [(16, 2, 9, b"abcde"), (3, 2, 9, b"\0\0\0\0")]


def test_split_messages_ignores_a_bogus_length():
    bad = struct.pack("=IHHII", 8, 16, 0, 1, 0) + b"x" * 8
    assert list(nl.split_messages(bad)) == []


def _error_payload(err, request, tlvs=b"", capped=True):
    echoed = request[:16] if capped else request
    return struct.pack("=i", -err) + echoed + tlvs


def test_parse_error_ack_and_errno():
    req = nl.message(nl.RTM_NEWADDR, 5, 3, b"\0" * 8)
    assert nl.parse_error(_error_payload(0, req), 0) == (0, "")
    assert nl.parse_error(_error_payload(17, req), nl.NLM_F_CAPPED) == (17, "")


def test_parse_error_reads_extended_ack_capped_and_uncapped():
    req = nl.message(nl.RTM_NEWROUTE, 5, 3, b"\0" * 12 + rtattr(1, b"\x0a\0\0\0"))
    tlv = rtattr(nl.NLMSGERR_ATTR_MSG, b"Nexthop has invalid gateway\0") + rtattr(2, struct.pack("=I", 28))
    capped = _error_payload(101, req, tlv, capped=True)
    assert nl.parse_error(capped, nl.NLM_F_CAPPED | nl.NLM_F_ACK_TLVS) == (101, "Nexthop has invalid gateway")
    full = _error_payload(101, req, tlv, capped=False)
    assert nl.parse_error(full, nl.NLM_F_ACK_TLVS) == (101, "Nexthop has invalid gateway")


# -- addresses ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,family,plen", [("10.1.1.5/24", socket.AF_INET, 24), ("10.1.1.5", socket.AF_INET, 32),
                                              ("fd00::1/64", socket.AF_INET6, 64), ("::1", socket.AF_INET6, 128),
                                              ("0.0.0.0/0", socket.AF_INET, 0)])
def test_parse_prefix(text, family, plen):
    ip = text.split("/")[0]
    assert nl.parse_prefix(text) == (family, socket.inet_pton(family, ip), plen)
    assert nl.parse_prefix((family, socket.inet_pton(family, ip), plen)) == nl.parse_prefix(text)
    assert nl.cidr(*nl.parse_prefix(text)) == f"{ip}/{plen}"


@pytest.mark.parametrize("bad", ["10.1.1.5/33", "fd00::/129", "10.1.1/24", "10.1.1.5/x", "nonsense", "10.1.1.5/-1"])
def test_parse_prefix_rejects(bad):
    with pytest.raises(ValueError):
        nl.parse_prefix(bad)


def test_parse_ip_forms():
    packed = socket.inet_pton(socket.AF_INET, "10.0.0.1")
    assert nl.parse_ip("10.0.0.1") == nl.parse_ip(packed) == nl.parse_ip((socket.AF_INET, packed)) \
        == (socket.AF_INET, packed)
    with pytest.raises(ValueError):
        nl.parse_ip(b"\0\0\0")


@pytest.mark.parametrize("net,brd", [("10.1.1.5/24", "10.1.1.255"), ("10.1.1.5/8", "10.255.255.255"),
                                     ("192.168.7.9/30", "192.168.7.11"), ("10.0.0.1/0", "255.255.255.255")])
def test_broadcast4(net, brd):
    _, packed, plen = nl.parse_prefix(net)
    assert nl.broadcast4(packed, plen) == socket.inet_aton(brd)


# -- request payloads --------------------------------------------------------------------------------


def test_link_select_by_index_and_name():
    assert nl.link_select(7) == struct.pack("=BxHiII", 0, 0, 7, 0, 0)
    assert nl.link_select("eth0") == struct.pack("=BxHiII", 0, 0, 0, 0, 0) + rtattr(3, b"eth0\0")


def test_veth_payload_puts_the_peer_and_its_netns_inside_linkinfo():
    data = nl.veth_payload("eth0", "veth1234abcd", peer_netns_fd=9, mtu=1400)
    assert struct.unpack_from("=BxHiII", data) == (0, 0, 0, 0, 0)
    top = walk(data[16:])
    assert [k for k, _ in top] == [nl.IFLA_IFNAME, nl.IFLA_MTU, nl.IFLA_LINKINFO]
    assert top[0][1] == b"eth0\0" and struct.unpack("=I", top[1][1]) == (1400,)
    assert all(k != nl.IFLA_TXQLEN for k, _ in top)
    info = dict(walk(top[2][1]))
    assert info[nl.IFLA_INFO_KIND].rstrip(b"\0") == b"veth"
    peer_msg = dict(walk(info[nl.IFLA_INFO_DATA]))[nl.VETH_INFO_PEER]
    assert struct.unpack_from("=BxHiII", peer_msg) == (0, 0, 0, 0, 0)
    peer = walk(peer_msg[16:])
    assert peer == [(nl.IFLA_IFNAME, b"veth1234abcd\0"), (nl.IFLA_MTU, struct.pack("=I", 1400)),
                    (nl.IFLA_NET_NS_FD, struct.pack("=I", 9))]


def test_veth_payload_minimal_and_up():
    data = nl.veth_payload("a", "b", up=True)
    assert struct.unpack_from("=BxHiII", data) == (0, 0, 0, nl.IFF_UP, nl.IFF_UP)
    info = dict(walk(dict(walk(data[16:]))[nl.IFLA_LINKINFO]))
    peer_msg = dict(walk(info[nl.IFLA_INFO_DATA]))[nl.VETH_INFO_PEER]
    assert struct.unpack_from("=BxHiII", peer_msg) == (0, 0, 0, 0, 0)    # the peer cannot be set up here
    assert walk(peer_msg[16:]) == [(nl.IFLA_IFNAME, b"b\0")]               # no MTU, no netns


def test_addr_payload_v4_has_local_address_and_broadcast():
    data = nl.addr_payload(5, "10.1.1.5/24")
    assert struct.unpack_from("=BBBBI", data) == (socket.AF_INET, 24, 0, 0, 5)
    ip = socket.inet_aton("10.1.1.5")
    assert walk(data[8:]) == [(nl.IFA_LOCAL, ip), (nl.IFA_ADDRESS, ip), (nl.IFA_BROADCAST, socket.inet_aton("10.1.1.255"))]


def test_addr_payload_v4_slash31_and_no_broadcast():
    assert [k for k, _ in walk(nl.addr_payload(5, "10.1.1.4/31")[8:])] == [nl.IFA_LOCAL, nl.IFA_ADDRESS]
    assert [k for k, _ in walk(nl.addr_payload(5, "10.1.1.5/24", broadcast=False)[8:])] == [nl.IFA_LOCAL, nl.IFA_ADDRESS]


def test_addr_payload_v6_has_only_ifa_address_and_flags():
    data = nl.addr_payload(3, "fd00::5/64", scope=0, flags=nl.IFA_F_NODAD)
    assert struct.unpack_from("=BBBBI", data) == (socket.AF_INET6, 64, nl.IFA_F_NODAD, 0, 3)
    assert walk(data[8:]) == [(nl.IFA_ADDRESS, socket.inet_pton(socket.AF_INET6, "fd00::5"))]
    big = nl.addr_payload(3, "fd00::5/64", flags=0x200)   # IFA_F_NOPREFIXROUTE does not fit the u8
    assert dict(walk(big[8:]))[nl.IFA_FLAGS] == struct.pack("=I", 0x200)


def test_route_payload_defaults_boot_main_unicast():
    data = nl.route_payload("10.2.0.0/16", gateway="10.1.1.1", oif=4)
    assert struct.unpack_from("=BBBBBBBBI", data) == (socket.AF_INET, 16, 0, 0, 254, 3, 0, 1, 0)
    assert walk(data[12:]) == [(nl.RTA_DST, socket.inet_aton("10.2.0.0")), (nl.RTA_TABLE, struct.pack("=I", 254)),
                               (nl.RTA_GATEWAY, socket.inet_aton("10.1.1.1")), (nl.RTA_OIF, struct.pack("=I", 4))]


def test_route_payload_default_route_has_no_dst_and_big_table_uses_rta_table():
    data = nl.route_payload("::/0", gateway="fd00::1", table=1000, priority=100, scope=nl.RT_SCOPE_UNIVERSE)
    fam, dlen, _, _, table, proto, scope, rtype, _ = struct.unpack_from("=BBBBBBBBI", data)
    assert (fam, dlen, table, proto, rtype) == (socket.AF_INET6, 0, nl.RT_TABLE_COMPAT, 3, 1)
    attrs = dict(walk(data[12:]))
    assert nl.RTA_DST not in attrs
    assert attrs[nl.RTA_TABLE] == struct.pack("=I", 1000)
    assert attrs[nl.RTA_PRIORITY] == struct.pack("=I", 100)
    assert attrs[nl.RTA_GATEWAY] == socket.inet_pton(socket.AF_INET6, "fd00::1")


def test_route_payload_metrics_and_scope():
    data = nl.route_payload("10.1.1.5/32", oif=2, scope=nl.RT_SCOPE_HOST, mtu=1300, advmss=1200, prefsrc="10.1.1.1")
    assert struct.unpack_from("=BBBBBBBBI", data)[6] == 254
    attrs = dict(walk(data[12:]))
    assert dict(walk(attrs[nl.RTA_METRICS])) == {nl.RTAX_MTU: struct.pack("=I", 1300),
                                                 nl.RTAX_ADVMSS: struct.pack("=I", 1200)}
    assert attrs[nl.RTA_PREFSRC] == socket.inet_aton("10.1.1.1")


def test_route_payload_rejects_mixed_families():
    with pytest.raises(ValueError):
        nl.route_payload("10.0.0.0/8", gateway="fd00::1")

# -- reply decoders (replies built by hand the way the kernel lays them out) ---------------------------


def test_decode_link():
    linkinfo = rtattr(nl.IFLA_INFO_KIND, b"veth\0") + rtattr(nl.IFLA_INFO_DATA, b"")
    payload = struct.pack("=BxHiII", 0, 1, 7, 0x1003, 0) + b"".join([
        rtattr(nl.IFLA_IFNAME, b"eth0\0"), rtattr(nl.IFLA_MTU, struct.pack("=I", 1400)),
        rtattr(nl.IFLA_ADDRESS, bytes.fromhex("0a58c0a80002")), rtattr(nl.IFLA_OPERSTATE, b"\x06"),
        rtattr(nl.IFLA_TXQLEN, struct.pack("=I", 1000)), rtattr(nl.IFLA_LINK, struct.pack("=I", 12)),
        rtattr(nl.IFLA_LINK_NETNSID, struct.pack("=i", 0)), rtattr(nl.IFLA_LINKINFO | 0x8000, linkinfo)])
    link = nl.decode_link(payload)
    assert (link.index, link.name, link.mtu, link.mac, link.kind) == (7, "eth0", 1400, "0a:58:c0:a8:00:02", "veth")
    assert link.up and link.operstate == "UP" and link.txqlen == 1000
    assert (link.link_index, link.link_netnsid, link.master) == (12, 0, 0)


def test_decode_link_without_optional_attributes():
    link = nl.decode_link(struct.pack("=BxHiII", 0, 772, 1, 0, 0) + rtattr(nl.IFLA_IFNAME, b"lo\0"))
    assert (link.name, link.mtu, link.mac, link.kind, link.up, link.operstate) == ("lo", 0, "", "", False, "UNKNOWN")
    assert link.link_netnsid is None


def test_decode_addr_v4_prefers_local_and_u32_flags():
    local, peer = socket.inet_aton("10.1.1.5"), socket.inet_aton("10.1.1.9")
    payload = struct.pack("=BBBBI", socket.AF_INET, 32, 0x80, 0, 3) + rtattr(nl.IFA_ADDRESS, peer) \
        + rtattr(nl.IFA_LOCAL, local) + rtattr(nl.IFA_LABEL, b"eth0\0") + rtattr(nl.IFA_FLAGS, struct.pack("=I", 0x280))
    a = nl.decode_addr(payload)
    assert (a.address, a.cidr, a.index, a.flags, a.label) == ("10.1.1.5", "10.1.1.5/32", 3, 0x280, "eth0")
    assert nl.parse_prefix(a) == (socket.AF_INET, local, 32)


def test_decode_addr_v6():
    ip = socket.inet_pton(socket.AF_INET6, "fe80::1")
    a = nl.decode_addr(struct.pack("=BBBBI", socket.AF_INET6, 64, 0x80, 253, 2) + rtattr(nl.IFA_ADDRESS, ip))
    assert (a.cidr, a.scope, a.flags, a.label) == ("fe80::1/64", 253, 0x80, "")


def test_decode_route():
    metrics = rtattr(nl.RTAX_MTU, struct.pack("=I", 1300))
    payload = struct.pack("=BBBBBBBBI", socket.AF_INET, 16, 0, 0, 252, 3, 0, 1, 0) + b"".join([
        rtattr(nl.RTA_TABLE, struct.pack("=I", 1000)), rtattr(nl.RTA_DST, socket.inet_aton("10.2.0.0")),
        rtattr(nl.RTA_GATEWAY, socket.inet_aton("10.1.1.1")), rtattr(nl.RTA_OIF, struct.pack("=I", 2)),
        rtattr(nl.RTA_PRIORITY, struct.pack("=I", 7)), rtattr(nl.RTA_METRICS, metrics)])
    r = nl.decode_route(payload)
    assert (r.dst, r.gateway, r.oif, r.table, r.protocol, r.priority, r.mtu, r.advmss) == \
        ("10.2.0.0/16", "10.1.1.1", 2, 1000, 3, 7, 1300, 0)
    assert r.prefix == (socket.AF_INET, socket.inet_aton("10.2.0.0"), 16)


def test_decode_default_route_without_table_attribute():
    r = nl.decode_route(struct.pack("=BBBBBBBBI", socket.AF_INET6, 0, 0, 0, 254, 3, 0, 1, 0))
    assert (r.dst, r.gateway, r.table, r.prefsrc) == ("::/0", None, 254, None)


@given(st.sampled_from([socket.AF_INET, socket.AF_INET6]).flatmap(
    lambda f: st.tuples(st.just(f), st.binary(min_size=4 if f == socket.AF_INET else 16,
                                              max_size=4 if f == socket.AF_INET else 16),
                        st.integers(0, 32 if f == socket.AF_INET else 128))))
def test_route_payload_round_trips_through_decode(prefix):
    fam, packed, plen = prefix
    r = nl.decode_route(nl.route_payload(prefix, table=300, priority=5))
    assert (r.family, r.dst_len, r.table, r.priority, r.protocol) == (fam, plen, 300, 5, nl.RTPROT_BOOT)
    assert r.dst_packed == (packed if plen else b"\0" * len(packed))

# -- the request/reply loop, against a scripted fake socket ------------------------------------------


class FakeSocket:
    """Records what is sent; answers each recv_into with the next scripted datagram (a function of the
    last request's sequence number)."""

    def __init__(self, script):
        self.script = list(script)
        self.sent = []

    def send(self, data):
        self.sent.append(data)
        return len(data)

    def recv_into(self, buf, nbytes, flags=0):
        seq = struct.unpack_from("=IHHII", self.sent[-1])[3]
        data = self.script.pop(0)(seq)
        buf[:len(data)] = data
        return len(data)

    def close(self):
        pass


def client(script):
    c = object.__new__(nlclient.RtNetlink)
    c.label, c._sock, c._seq, c._buf = "/run/netns/fake", FakeSocket(script), 0, bytearray(65536)
    return c


def msg(kind, flags, seq, payload):
    return struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 4242) + payload + b"\0" * (-len(payload) % 4)


def link_msg(seq, index, name, flags=nl.NLM_F_MULTI):
    return msg(nl.RTM_NEWLINK, flags, seq, struct.pack("=BxHiII", 0, 1, index, 0, 0) + rtattr(3, name.encode() + b"\0"))


def done(seq, flags=nl.NLM_F_MULTI):
    return msg(nl.NLMSG_DONE, flags, seq, struct.pack("=i", 0))


def error(seq, err, text=b""):
    flags = nl.NLM_F_CAPPED | (nl.NLM_F_ACK_TLVS if text else 0)
    body = struct.pack("=i", -err) + struct.pack("=IHHII", 32, 0, 0, seq, 0)
    if text:
        body += rtattr(nl.NLMSGERR_ATTR_MSG, text + b"\0")
    return msg(nl.NLMSG_ERROR, flags, seq, body)


def test_dump_spanning_datagrams_and_ignoring_stale_replies():
    c = client([lambda s: link_msg(s - 1, 9, "stale") + link_msg(s, 1, "lo"),
                lambda s: link_msg(s, 2, "eth0") + done(s)])
    assert [link.name for link in c.link_list()] == ["lo", "eth0"]
    sent = c._sock.sent[0]
    assert struct.unpack_from("=IHHII", sent)[1:4] == (nl.RTM_GETLINK, nl.NLM_F_REQUEST | nl.NLM_F_DUMP, 1)


def test_interrupted_dump_is_retried():
    c = client([lambda s: link_msg(s, 1, "lo", nl.NLM_F_MULTI | nl.NLM_F_DUMP_INTR) + done(s),
                lambda s: link_msg(s, 1, "lo") + link_msg(s, 2, "eth0") + done(s)])
    assert [link.name for link in c.link_list()] == ["lo", "eth0"]
    assert len(c._sock.sent) == 2


def test_dump_interrupted_every_time_is_try_again():
    c = client([lambda s: done(s, nl.NLM_F_MULTI | nl.NLM_F_DUMP_INTR)] * 10)
    with pytest.raises(nlclient.CNIError) as e:
        c.link_list()
    assert e.value.code == 11 and "interrupted" in e.value.msg


def test_error_reply_becomes_typed_error_with_kernel_text():
    c = client([lambda s: error(s, 19)])
    with pytest.raises(nlclient.NotFound) as e:
        c.link_get("eth9")
    assert e.value.msg == 'link "eth9" not found in netns /run/netns/fake' and e.value.errno == 19
    c = client([lambda s: error(s, 22, b"Invalid prefix for given prefix length")])
    with pytest.raises(nlclient.NetlinkError) as e:
        c.route_add("10.1.1.5/16", oif=3)
    assert e.value.msg == "adding route 10.1.1.5/16 dev link #3 in netns /run/netns/fake: invalid argument (EINVAL)"
    assert e.value.details == "kernel: Invalid prefix for given prefix length"
    assert not isinstance(e.value, (nlclient.NotFound, nlclient.Exists))


def test_ack_request_sets_ack_flag_and_waits_for_it():
    c = client([lambda s: error(s, 0)])
    c.link_set_up(3)
    kind, flags = struct.unpack_from("=IHHII", c._sock.sent[0])[1:3]
    assert (kind, flags) == (nl.RTM_SETLINK, nl.NLM_F_REQUEST | nl.NLM_F_ACK)
    assert struct.unpack_from("=BxHiII", c._sock.sent[0], 16) == (0, 0, 3, nl.IFF_UP, nl.IFF_UP)


def test_done_carrying_an_error():
    c = client([lambda s: msg(nl.NLMSG_DONE, nl.NLM_F_MULTI, s, struct.pack("=i", -95))])
    with pytest.raises(nlclient.NetlinkError) as e:
        c.route_list()
    assert e.value.errno == 95 and e.value.msg.startswith("listing routes in netns /run/netns/fake")
