"""The rtnetlink wire format, pure: constants, attributes and messages, request builders and reply
decoders. No I/O and no kernel: unit-tested on bytes alone. ``skb.linux.netlink`` is the client that
sends these requests.
"""
import _socket
import _struct

AF_INET = _socket.AF_INET
AF_INET6 = _socket.AF_INET6
NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10        # acks carry only the header of our request, not all of it back
NETLINK_EXT_ACK = 11        # errors carry the kernel's explanation ("Nexthop has invalid gateway")
NETLINK_GET_STRICT_CHK = 12  # dump requests are checked, and filtered by their header (Linux 4.20)

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_DUMP_INTR = 0x1, 0x2, 0x4, 0x10
NLM_F_DUMP = 0x300
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLM_F_CAPPED, NLM_F_ACK_TLVS = 0x100, 0x200     # flags of an NLMSG_ERROR
NLMSGERR_ATTR_MSG = 1

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK, RTM_SETLINK = 16, 17, 18, 19
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWNSID, RTM_GETNSID = 88, 90
RTM_GETNEXTHOP = 106
NHA_ID, NHA_GROUP, NHA_OIF, NHA_GATEWAY = 1, 2, 5, 6
NETNSA_NSID, NETNSA_FD = 1, 3

IFF_UP = 0x1
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_TXQLEN, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_NET_NS_FD, IFLA_EXT_MASK = 13, 16, 18, 28, 29
IFLA_IFALIAS, IFLA_LINK_NETNSID = 20, 37
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
VETH_INFO_PEER = 1
RTEXT_FILTER_SKIP_STATS = 1 << 3    # replies without the ~1 KB of counters we never read
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

IFA_ADDRESS, IFA_LOCAL, IFA_LABEL, IFA_BROADCAST, IFA_FLAGS = 1, 2, 3, 4, 8
IFA_F_NODAD, IFA_F_DADFAILED, IFA_F_TENTATIVE, IFA_F_PERMANENT = 0x02, 0x08, 0x40, 0x80

RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC, RTA_METRICS, RTA_TABLE = 1, 4, 5, 6, 7, 8, 15
RTA_MULTIPATH, RTA_VIA, RTA_NH_ID = 9, 18, 30
RTAX_MTU, RTAX_ADVMSS = 2, 8
RT_SCOPE_UNIVERSE, RT_SCOPE_LINK, RT_SCOPE_HOST, RT_SCOPE_NOWHERE = 0, 253, 254, 255
RT_TABLE_UNSPEC, RT_TABLE_COMPAT, RT_TABLE_MAIN, RT_TABLE_LOCAL = 0, 252, 254, 255
RTPROT_KERNEL, RTPROT_BOOT, RTPROT_STATIC = 2, 3, 4
RTN_UNICAST = 1
RTM_F_CLONED = 0x200

_HDR = _struct.Struct("=IHHII")        # nlmsghdr: len, type, flags, seq, pid
_HDR_FLAGS_SEQ = _struct.Struct("=HI")  # nlmsghdr's flags and sequence number, as they sit in it
_RTA = _struct.Struct("=HH")           # rtattr: len, type
_IFINFO = _struct.Struct("=BxHiII")    # ifinfomsg: family, type, index, flags, change
_IFADDR = _struct.Struct("=BBBBI")     # ifaddrmsg: family, prefixlen, flags, scope, index
_RTMSG = _struct.Struct("=BBBBBBBBI")  # rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
_RTNH = _struct.Struct("=HBBi")        # rtnexthop (in RTA_MULTIPATH): len, flags, hops, ifindex
_NHMSG = _struct.Struct("=BBBBI")      # nhmsg: family, scope, protocol, reserved, flags
_U32 = _struct.Struct("=I")
_I32 = _struct.Struct("=i")
_ALEN = {AF_INET: 4, AF_INET6: 16}

# --------------------------------------------------------------------------------------------------
# Addresses


def parse_ip(value):
    """'10.1.0.1' | (family, packed) | packed bytes -> (family, packed)."""
    if isinstance(value, str):
        family = AF_INET6 if ":" in value else AF_INET
        try:
            return family, _socket.inet_pton(family, value)
        except OSError:
            raise ValueError(f"invalid IP address {value!r}") from None
    if isinstance(value, (bytes, bytearray)):
        if len(value) not in (4, 16):
            raise ValueError(f"packed address of {len(value)} bytes")
        return (AF_INET if len(value) == 4 else AF_INET6), bytes(value)
    return value[0], bytes(value[1])


def parse_prefix(value):
    """'10.1.1.5/24' | 'fd00::1' (full length) | (family, packed, prefixlen) | Addr -> the tuple."""
    if isinstance(value, Addr):
        return value.family, value.packed, value.prefixlen
    if isinstance(value, str):
        ip, sep, plen = value.partition("/")
        family, packed = parse_ip(ip)
        bits = len(packed) * 8
        if not sep:
            return family, packed, bits
        if not plen.isdigit() or int(plen) > bits:
            raise ValueError(f"invalid prefix length in {value!r}")
        return family, packed, int(plen)
    family, packed, plen = value
    return family, bytes(packed), plen


def ntop(family, packed):
    return _socket.inet_ntop(family, packed)


def cidr(family, packed, prefixlen):
    return f"{_socket.inet_ntop(family, packed)}/{prefixlen}"


def broadcast4(packed, prefixlen):
    """The IPv4 broadcast address of a prefix (Go's netlink adds one to every v4 address below /31)."""
    host = (1 << (32 - prefixlen)) - 1
    return (int.from_bytes(packed, "big") | host).to_bytes(4, "big")

# --------------------------------------------------------------------------------------------------
# Codec: attributes and messages. Every rtattr is padded to 4 bytes; a nested attribute is an rtattr whose
# payload is more rtattrs. The NLA_F_NESTED flag is not set (iproute2 and Go do not set it either, and
# VETH_INFO_PEER is not a pure nest: an ifinfomsg comes first).


def align(n):
    return (n + 3) & ~3


def attr(kind, payload):
    n = 4 + len(payload)
    return _RTA.pack(n, kind) + payload + b"\0" * (align(n) - n)


def attr_u32(kind, value):
    return attr(kind, _U32.pack(value))


def attr_str(kind, value):
    return attr(kind, value.encode() + b"\0")


def nested(kind, *attrs):
    return attr(kind, b"".join(attrs))


def parse_attrs(data, off=0, end=None):
    """{type: payload} of the rtattrs in data[off:end] (last one wins; NLA_F_* flag bits dropped)."""
    out = {}
    end = len(data) if end is None else end
    while off + 4 <= end:
        n, kind = _RTA.unpack_from(data, off)
        if n < 4 or off + n > end:
            break
        out[kind & 0x3FFF] = data[off + 4:off + n]
        off += align(n)
    return out


def message(kind, flags, seq, payload):
    return _HDR.pack(16 + len(payload), kind, flags, seq, 0) + payload


def split_messages(data):
    """Yield (type, flags, seq, payload) for each netlink message in one datagram."""
    off, end = 0, len(data)
    while off + 16 <= end:
        n, kind, flags, seq, _pid = _HDR.unpack_from(data, off)
        if n < 16 or off + n > end:
            break
        yield kind, flags, seq, data[off + 16:off + n]
        off += align(n)


def parse_error(payload, flags):
    """(errno, kernel message) of an NLMSG_ERROR payload: an int (0 = ack, else -errno), our request's
    header (all of our request unless NLM_F_CAPPED), then extended-ack attributes if NLM_F_ACK_TLVS."""
    err = -_I32.unpack_from(payload)[0]
    text = ""
    if flags & NLM_F_ACK_TLVS and len(payload) >= 20:
        off = 20 if flags & NLM_F_CAPPED else 4 + align(_U32.unpack_from(payload, 4)[0])
        raw = parse_attrs(payload, off).get(NLMSGERR_ATTR_MSG)
        if raw:
            text = raw.rstrip(b"\0").decode(errors="replace")
    return err, text


def _cstr(raw):
    return raw.rstrip(b"\0").decode(errors="replace")


def _u32(raw):
    return _U32.unpack(raw)[0]

# --------------------------------------------------------------------------------------------------
# Request builders (payloads, i.e. without the nlmsghdr)


def ifinfomsg(index=0, flags=0, change=0, family=0):
    return _IFINFO.pack(family, 0, index, flags, change)


def link_select(link):
    """The ifinfomsg + attributes that name an existing link: by index, or by IFLA_IFNAME with index 0."""
    if isinstance(link, int):
        return ifinfomsg(index=link)
    return ifinfomsg() + attr_str(IFLA_IFNAME, link)


def veth_payload(name, peer, peer_netns_fd=None, mtu=None, up=False):
    """RTM_NEWLINK payload for a veth pair. The peer's own ifinfomsg and attributes go inside
    IFLA_LINKINFO / IFLA_INFO_DATA / VETH_INFO_PEER; with IFLA_NET_NS_FD there, the kernel creates the
    peer directly in that netns: moving a device afterwards would cost ~15 ms more. No IFLA_TXQLEN is
    sent, so both ends get the kernel default (Go <= v1.5 sent 0). ``up`` sets the first end up in the same
    request; the peer cannot be (the kernel opens it before its partner exists: ENOTCONN)."""
    peer_attrs = ifinfomsg() + attr_str(IFLA_IFNAME, peer)
    if mtu:
        peer_attrs += attr_u32(IFLA_MTU, mtu)
    if peer_netns_fd is not None:
        peer_attrs += attr_u32(IFLA_NET_NS_FD, peer_netns_fd)
    out = ifinfomsg(flags=IFF_UP if up else 0, change=IFF_UP if up else 0) + attr_str(IFLA_IFNAME, name)
    if mtu:
        out += attr_u32(IFLA_MTU, mtu)
    return out + nested(IFLA_LINKINFO, attr(IFLA_INFO_KIND, b"veth"),
                        nested(IFLA_INFO_DATA, attr(VETH_INFO_PEER, peer_attrs)))


def addr_payload(index, prefix, scope=RT_SCOPE_UNIVERSE, flags=0, broadcast=True):
    """RTM_NEWADDR/RTM_DELADDR payload. IPv4 needs IFA_LOCAL (the address itself) and IFA_ADDRESS (the
    peer, = local when not point-to-point); IPv6 takes IFA_ADDRESS alone."""
    family, packed, plen = parse_prefix(prefix)
    out = _IFADDR.pack(family, plen, flags & 0xFF, scope, index)
    if family == AF_INET:
        out += attr(IFA_LOCAL, packed)
    out += attr(IFA_ADDRESS, packed)
    if broadcast and family == AF_INET and plen < 31:
        out += attr(IFA_BROADCAST, broadcast4(packed, plen))
    if flags > 0xFF:
        out += attr_u32(IFA_FLAGS, flags)
    return out


def route_payload(dst, gateway=None, oif=None, scope=RT_SCOPE_UNIVERSE, protocol=RTPROT_BOOT,
                  table=RT_TABLE_MAIN, priority=None, mtu=None, advmss=None, prefsrc=None, rtype=RTN_UNICAST):
    """RTM_NEWROUTE/RTM_DELROUTE payload. Tables above 255 do not fit rtm_table: RTA_TABLE carries the
    real number (always sent; the kernel prefers it). A default route has no RTA_DST."""
    family, packed, plen = parse_prefix(dst)
    out = _RTMSG.pack(family, plen, 0, 0, table if table < 256 else RT_TABLE_COMPAT, protocol, scope, rtype, 0)
    if plen:
        out += attr(RTA_DST, packed)
    out += attr_u32(RTA_TABLE, table)
    if gateway is not None:
        gfamily, gpacked = parse_ip(gateway)
        if gfamily != family:
            raise ValueError(f"gateway {ntop(gfamily, gpacked)} is not of the family of {cidr(family, packed, plen)}")
        out += attr(RTA_GATEWAY, gpacked)
    if oif:
        out += attr_u32(RTA_OIF, oif)
    if priority is not None:
        out += attr_u32(RTA_PRIORITY, priority)
    if prefsrc is not None:
        out += attr(RTA_PREFSRC, parse_ip(prefsrc)[1])
    if mtu or advmss:
        out += nested(RTA_METRICS, *([attr_u32(RTAX_MTU, mtu)] if mtu else []),
                      *([attr_u32(RTAX_ADVMSS, advmss)] if advmss else []))
    return out

# --------------------------------------------------------------------------------------------------
# Reply decoders


class Link:
    __slots__ = ("index", "name", "flags", "mtu", "mac", "kind", "operstate", "txqlen", "link_index",
                 "link_netnsid", "master", "alias")

    @property
    def up(self):
        return bool(self.flags & IFF_UP)

    def __repr__(self):
        return f"Link({self.index}, {self.name!r}, kind={self.kind!r}, up={self.up}, mtu={self.mtu}, mac={self.mac!r})"


def decode_link(payload):
    _family, _type, index, flags, _change = _IFINFO.unpack_from(payload)
    a = parse_attrs(payload, 16)
    link = Link()
    link.index, link.flags = index, flags
    link.name = _cstr(a.get(IFLA_IFNAME, b""))
    link.mtu = _u32(a[IFLA_MTU]) if IFLA_MTU in a else 0
    link.mac = a[IFLA_ADDRESS].hex(":") if IFLA_ADDRESS in a else ""
    link.txqlen = _u32(a[IFLA_TXQLEN]) if IFLA_TXQLEN in a else 0
    state = a.get(IFLA_OPERSTATE, b"\0")[0]
    link.operstate = OPERSTATES[state] if state < len(OPERSTATES) else str(state)
    link.kind = _cstr(parse_attrs(a[IFLA_LINKINFO]).get(IFLA_INFO_KIND, b"")) if IFLA_LINKINFO in a else ""
    link.link_index = _u32(a[IFLA_LINK]) if IFLA_LINK in a else 0
    link.link_netnsid = _I32.unpack(a[IFLA_LINK_NETNSID])[0] if IFLA_LINK_NETNSID in a else None
    link.master = _u32(a[IFLA_MASTER]) if IFLA_MASTER in a else 0
    link.alias = _cstr(a[IFLA_IFALIAS]) if IFLA_IFALIAS in a else ""
    return link


def nsid_request(fd):
    """RTM_GETNSID payload: which id this netns gives the netns open on ``fd`` (a padded rtgenmsg, then
    NETNSA_FD)."""
    return b"\0\0\0\0" + attr_u32(NETNSA_FD, fd)


def decode_nsid(payload):
    """The NETNSA_NSID of an RTM_NEWNSID reply; None when the kernel has assigned none (-1)."""
    raw = parse_attrs(payload, 4).get(NETNSA_NSID)
    nsid = _I32.unpack(raw)[0] if raw and len(raw) == 4 else -1
    return None if nsid < 0 else nsid


class Addr:
    """An address on a link: ``packed`` bytes, with ``address`` ("10.1.1.5") and ``cidr`` ("10.1.1.5/24")."""

    __slots__ = ("index", "family", "packed", "prefixlen", "scope", "flags", "label")

    @property
    def address(self):
        return ntop(self.family, self.packed)

    @property
    def cidr(self):
        return cidr(self.family, self.packed, self.prefixlen)

    @property
    def prefix(self):
        return self.family, self.packed, self.prefixlen

    def __repr__(self):
        return f"Addr({self.cidr}, index={self.index}, scope={self.scope}, flags={self.flags:#x})"


def decode_addr(payload):
    family, plen, flags, scope, index = _IFADDR.unpack_from(payload)
    a = parse_attrs(payload, 8)
    addr = Addr()
    addr.index, addr.family, addr.prefixlen, addr.scope = index, family, plen, scope
    addr.packed = a.get(IFA_LOCAL) or a.get(IFA_ADDRESS, b"")   # v4 point-to-point: LOCAL is ours
    addr.flags = _u32(a[IFA_FLAGS]) if IFA_FLAGS in a else flags
    addr.label = _cstr(a[IFA_LABEL]) if IFA_LABEL in a else ""
    return addr


class Route:
    """A route: ``dst`` ("10.1.0.0/16", "0.0.0.0/0"), ``gateway`` and ``prefsrc`` (text or None), the same as
    packed bytes in ``dst_packed``/``gw_packed``/``prefsrc_packed``; ``mtu``/``advmss`` 0 when unset."""

    __slots__ = ("family", "dst_packed", "dst_len", "gw_packed", "oif", "scope", "protocol", "table", "priority",
                 "type", "prefsrc_packed", "mtu", "advmss", "flags")

    @property
    def dst(self):
        return cidr(self.family, self.dst_packed, self.dst_len)

    @property
    def gateway(self):
        return ntop(self.family, self.gw_packed) if self.gw_packed else None

    @property
    def prefsrc(self):
        return ntop(self.family, self.prefsrc_packed) if self.prefsrc_packed else None

    @property
    def prefix(self):
        return self.family, self.dst_packed, self.dst_len

    def __repr__(self):
        via = f" via {self.gateway}" if self.gw_packed else ""
        return (f"Route({self.dst}{via} oif={self.oif} table={self.table} scope={self.scope} "
                f"proto={self.protocol} metric={self.priority})")


def decode_route(payload):
    family, dlen, _slen, _tos, table, proto, scope, rtype, flags = _RTMSG.unpack_from(payload)
    a = parse_attrs(payload, 12)
    r = Route()
    r.family, r.dst_len, r.scope, r.protocol, r.type, r.flags = family, dlen, scope, proto, rtype, flags
    r.dst_packed = a.get(RTA_DST) or b"\0" * _ALEN.get(family, 0)
    r.gw_packed = a.get(RTA_GATEWAY)
    r.prefsrc_packed = a.get(RTA_PREFSRC)
    r.oif = _u32(a[RTA_OIF]) if RTA_OIF in a else 0
    r.table = _u32(a[RTA_TABLE]) if RTA_TABLE in a else table
    r.priority = _u32(a[RTA_PRIORITY]) if RTA_PRIORITY in a else 0
    metrics = parse_attrs(a[RTA_METRICS]) if RTA_METRICS in a else {}
    r.mtu = _u32(metrics[RTAX_MTU]) if RTAX_MTU in metrics else 0
    r.advmss = _u32(metrics[RTAX_ADVMSS]) if RTAX_ADVMSS in metrics else 0
    return r


def route_next_hops(payload):
    """The next hops of a route message: ([(family, packed gateway, oif)], nexthop object id or None).
    A route's gateway is RTA_GATEWAY, or RTA_VIA (an IPv4 route through an IPv6 gateway: family, then
    the address), or one per rtnexthop of RTA_MULTIPATH (each with its own attributes); a route made
    with a nexthop object carries RTA_NH_ID instead (its gateways are the object's)."""
    family = payload[0]
    a = parse_attrs(payload, 12)
    oif = _u32(a[RTA_OIF]) if RTA_OIF in a else 0
    hops = []
    if RTA_GATEWAY in a:
        hops.append((family, a[RTA_GATEWAY], oif))
    if RTA_VIA in a and len(a[RTA_VIA]) >= 2:
        via_family = int.from_bytes(a[RTA_VIA][:2], "little")
        hops.append((via_family, a[RTA_VIA][2:], oif))
    mp = a.get(RTA_MULTIPATH, b"")
    off = 0
    while off + 8 <= len(mp):
        n, _flags, _hops, index = _RTNH.unpack_from(mp, off)
        if n < 8 or off + n > len(mp):
            break
        sub = parse_attrs(mp, off + 8, off + n)
        if RTA_GATEWAY in sub:
            hops.append((family, sub[RTA_GATEWAY], index))
        if RTA_VIA in sub and len(sub[RTA_VIA]) >= 2:
            hops.append((int.from_bytes(sub[RTA_VIA][:2], "little"), sub[RTA_VIA][2:], index))
        off += align(n)
    nh_id = _u32(a[RTA_NH_ID]) if RTA_NH_ID in a else None
    return hops, nh_id


def decode_nexthop(payload):
    """A nexthop object (RTM_NEWNEXTHOP): (id, family, packed gateway or None, oif, [member ids of a
    group])."""
    family = payload[0]
    a = parse_attrs(payload, _NHMSG.size)
    group = a.get(NHA_GROUP, b"")
    members = [_u32(group[i:i + 4]) for i in range(0, len(group) - 7, 8)]   # struct nexthop_grp: id, weight, pad
    return (_u32(a[NHA_ID]) if NHA_ID in a else 0, family, a.get(NHA_GATEWAY),
            _u32(a[NHA_OIF]) if NHA_OIF in a else 0, members)


def nexthop_dump_request(family=0):
    return _NHMSG.pack(family, 0, 0, 0, 0)
