"""A small rtnetlink client: links, veth pairs, addresses and routes, in the netns the socket was opened in.

Why not pyroute2: importing it costs ~150 ms and each request 0.3-1 ms; a plugin process lives for a
few milliseconds. This client speaks the wire format directly over ``_socket`` + ``_struct``
(10-80 µs a request) and does only what the plugins need.

Layout: constants, then the pure codec (``attr``, ``parse_attrs``, ``message``, request builders and
reply decoders; unit-tested without a kernel), then ``RtNetlink``, the only part doing I/O.

A socket belongs to the netns of the thread that created it, for its whole life. To talk to a container's
netns, create the socket inside ``skb.netns.enter(ns)`` (``RtNetlink.for_netns(ns)`` does that); the
``label`` names that netns in every error message.

Addresses are given as strings ("10.1.1.5/24", "fd00::1") or tuples ``(family, packed, prefixlen)``;
objects read back carry text (``Addr.address``, ``Addr.cidr``, ``Route.dst``, ``Route.gateway``) and the same as packed bytes.
"""
import _socket
import _struct
import errno as _errno
import os

from skb.errors import CNIError, INTERNAL, TRY_AGAIN

AF_INET = _socket.AF_INET
AF_INET6 = _socket.AF_INET6
NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10        # acks carry only the header of our request, not all of it back
NETLINK_EXT_ACK = 11        # errors carry the kernel's explanation ("Nexthop has invalid gateway")

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_DUMP_INTR = 0x1, 0x2, 0x4, 0x10
NLM_F_DUMP = 0x300
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLM_F_CAPPED, NLM_F_ACK_TLVS = 0x100, 0x200     # flags of an NLMSG_ERROR
NLMSGERR_ATTR_MSG = 1

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK, RTM_SETLINK = 16, 17, 18, 19
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26

IFF_UP = 0x1
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_TXQLEN, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_NET_NS_FD, IFLA_EXT_MASK = 13, 16, 18, 28, 29
IFLA_LINK_NETNSID = 37
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
VETH_INFO_PEER = 1
RTEXT_FILTER_SKIP_STATS = 1 << 3    # replies without the ~1 KB of counters we never read
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

IFA_ADDRESS, IFA_LOCAL, IFA_LABEL, IFA_BROADCAST, IFA_FLAGS = 1, 2, 3, 4, 8
IFA_F_NODAD, IFA_F_DADFAILED, IFA_F_TENTATIVE, IFA_F_PERMANENT = 0x02, 0x08, 0x40, 0x80

RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC, RTA_METRICS, RTA_TABLE = 1, 4, 5, 6, 7, 8, 15
RTAX_MTU, RTAX_ADVMSS = 2, 8
RT_SCOPE_UNIVERSE, RT_SCOPE_LINK, RT_SCOPE_HOST, RT_SCOPE_NOWHERE = 0, 253, 254, 255
RT_TABLE_UNSPEC, RT_TABLE_COMPAT, RT_TABLE_MAIN, RT_TABLE_LOCAL = 0, 252, 254, 255
RTPROT_KERNEL, RTPROT_BOOT, RTPROT_STATIC = 2, 3, 4
RTN_UNICAST = 1
RTM_F_CLONED = 0x200

_HDR = _struct.Struct("=IHHII")        # nlmsghdr: len, type, flags, seq, pid
_RTA = _struct.Struct("=HH")           # rtattr: len, type
_IFINFO = _struct.Struct("=BxHiII")    # ifinfomsg: family, type, index, flags, change
_IFADDR = _struct.Struct("=BBBBI")     # ifaddrmsg: family, prefixlen, flags, scope, index
_RTMSG = _struct.Struct("=BBBBBBBBI")  # rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
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
                 "link_netnsid", "master")

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
    return link


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

# --------------------------------------------------------------------------------------------------
# Errors


class NetlinkError(CNIError):
    """A request the kernel refused. ``errno`` is the kernel's errno, ``kernel_msg`` its extended-ack
    text (may be empty), ``subject`` the name or address concerned when known."""

    def __init__(self, msg, details="", err=0, kernel_msg="", subject=None):
        CNIError.__init__(self, INTERNAL, msg, details)
        self.errno = err
        self.kernel_msg = kernel_msg
        self.subject = subject


class NotFound(NetlinkError):
    """ENODEV / ENOENT / ESRCH / EADDRNOTAVAIL: the link, route or address is not there (DEL: success)."""


class Exists(NetlinkError):
    """EEXIST: a link name, address or route is already there."""


_GONE = (_errno.ENODEV, _errno.ENOENT, _errno.ESRCH, _errno.EADDRNOTAVAIL)


class _KernelError(Exception):
    def __init__(self, err, text):
        Exception.__init__(self, err, text)
        self.err, self.text = err, text


def _reason(err):
    text = os.strerror(err)
    return f"{text[:1].lower()}{text[1:]} ({_errno.errorcode.get(err, err)})"

# --------------------------------------------------------------------------------------------------
# The client


class RtNetlink:
    """One NETLINK_ROUTE socket, bound to the netns of the thread that creates it.

    ``label`` names that netns in error messages (e.g. the CNI_NETNS path); by default the netns the
    thread is in according to ``skb.netns``. Links are given by name (str), index (int) or Link.
    """

    __slots__ = ("label", "_sock", "_seq", "_buf")

    def __init__(self, label=None):
        if label is None:
            from skb.netns import current_label
            label = current_label()
        self.label = label
        try:
            sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC, NETLINK_ROUTE)
        except OSError as e:
            raise CNIError(INTERNAL, f"cannot open a netlink socket in netns {label}: {_reason(e.errno)}") from None
        for opt in (NETLINK_EXT_ACK, NETLINK_CAP_ACK):
            try:
                sock.setsockopt(SOL_NETLINK, opt, 1)
            except OSError:
                pass    # old kernel: errors come without the kernel's explanation
        sock.bind((0, 0))
        self._sock = sock
        self._seq = 0
        self._buf = bytearray(65536)    # a dump datagram is at most 32 KiB (kernel cap)

    @classmethod
    def for_netns(cls, ns):
        """A client bound to ``ns`` (NetNS or path): enters it just long enough to open the socket."""
        from skb.netns import enter
        with enter(ns) as entered:
            return cls(label=entered.path)

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- transport --------------------------------------------------------------------------------

    def _talk(self, kind, flags, payload):
        """Send one request; return (reply payloads, dump-interrupted). NLMSG_ERROR -> _KernelError."""
        self._seq += 1
        seq = self._seq
        try:
            self._sock.send(message(kind, flags | NLM_F_REQUEST, seq, payload))
        except OSError as e:
            raise CNIError(INTERNAL, f"cannot send a netlink request in netns {self.label}: {_reason(e.errno)}") from None
        replies, intr = [], False
        buf = self._buf
        while True:
            try:
                n = self._sock.recv_into(buf, len(buf), _socket.MSG_TRUNC)
            except OSError as e:
                raise CNIError(INTERNAL, f"cannot read a netlink reply in netns {self.label}: {_reason(e.errno)}") from None
            if n > len(buf):
                raise CNIError(INTERNAL, f"netlink reply of {n} bytes truncated in netns {self.label}")
            for rkind, rflags, rseq, body in split_messages(bytes(buf[:n])):
                if rseq != seq:
                    continue            # a late reply to an earlier request
                if rflags & NLM_F_DUMP_INTR:
                    intr = True
                if rkind == NLMSG_ERROR:
                    err, text = parse_error(body, rflags)
                    if err:
                        raise _KernelError(err, text)
                    return replies, intr
                if rkind == NLMSG_DONE:
                    err = -_I32.unpack_from(body)[0] if len(body) >= 4 else 0
                    if err:
                        text = parse_attrs(body, 4).get(NLMSGERR_ATTR_MSG, b"") if rflags & NLM_F_ACK_TLVS else b""
                        raise _KernelError(err, _cstr(text))
                    return replies, intr
                if rkind == NLMSG_NOOP:
                    continue
                replies.append(body)
                if not rflags & NLM_F_MULTI and not flags & NLM_F_ACK:
                    return replies, intr

    def _ack(self, kind, flags, payload):
        self._talk(kind, flags | NLM_F_ACK, payload)

    def _dump(self, kind, payload, what):
        # NLM_F_DUMP_INTR: the table changed while the kernel walked it, the reply may miss or repeat
        # entries. Retry (as Go's netlinksafe does); it is rare and the tables are small.
        for _ in range(10):
            try:
                replies, intr = self._talk(kind, NLM_F_DUMP, payload)
            except _KernelError as e:
                raise self._error(e, f"listing {what}") from None
            if not intr:
                return replies
        raise CNIError(TRY_AGAIN, f"listing {what} in netns {self.label} was interrupted 10 times",
                       "the table kept changing while it was read; try again")

    def _error(self, e, what, messages=None, subject=None):
        """The exception for a refused request: a known phrasing from ``messages`` (errno -> text), else
        '<what> in netns <label>: <reason> (<ERRNO>)'; the kernel's own explanation goes to details."""
        msg = messages.get(e.err) if messages else None
        if not msg:
            msg = f"{what} in netns {self.label}: {_reason(e.err)}"
        details = f"kernel: {e.text}" if e.text else ""
        cls = Exists if e.err == _errno.EEXIST else NotFound if e.err in _GONE else NetlinkError
        return cls(msg, details, e.err, e.text, subject)

    def _index(self, link):
        """(ifindex, name for messages) of a link given by Link, index or name."""
        if isinstance(link, Link):
            return link.index, link.name
        if isinstance(link, int):
            return link, f"link #{link}"
        return self.link_get(link).index, link

    # -- links ------------------------------------------------------------------------------------

    def link_get(self, link):
        """The Link with this name or index; NotFound when there is none."""
        payload = link_select(link) + attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
        try:
            replies, _ = self._talk(RTM_GETLINK, 0, payload)
        except _KernelError as e:
            shown = f'"{link}"' if isinstance(link, str) else f"#{link}"
            raise self._error(e, f"getting link {shown}", {
                _errno.ENODEV: f"link {shown} not found in netns {self.label}"}, link) from None
        return decode_link(replies[0])

    def link_list(self):
        replies = self._dump(RTM_GETLINK, ifinfomsg() + attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS), "links")
        return [decode_link(p) for p in replies]

    def link_set(self, link, up=None, mtu=None):
        """Set a link up or down and/or its MTU, in one request."""
        if isinstance(link, Link):
            link = link.index
        payload = link_select(link)
        if up is not None:
            payload = _IFINFO.pack(0, 0, link if isinstance(link, int) else 0, IFF_UP if up else 0, IFF_UP) \
                + payload[16:]
        if mtu is not None:
            payload += attr_u32(IFLA_MTU, mtu)
        try:
            self._ack(RTM_SETLINK, 0, payload)
        except _KernelError as e:
            shown = f'"{link}"' if isinstance(link, str) else f"#{link}"
            change = ", ".join(x for x in ("up" if up else "down" if up is not None else "",
                                           f"mtu {mtu}" if mtu is not None else "") if x)
            raise self._error(e, f"setting link {shown} {change}", {
                _errno.ENODEV: f"link {shown} not found in netns {self.label}"}, link) from None

    def link_set_up(self, link):
        self.link_set(link, up=True)

    def link_set_down(self, link):
        self.link_set(link, up=False)

    def link_del(self, link):
        """Delete a link (a veth: both ends, wherever the peer is). NotFound when it is not there."""
        if isinstance(link, Link):
            link = link.index
        try:
            self._ack(RTM_DELLINK, 0, link_select(link))
        except _KernelError as e:
            shown = f'"{link}"' if isinstance(link, str) else f"#{link}"
            raise self._error(e, f"deleting link {shown}", {
                _errno.ENODEV: f"link {shown} not found in netns {self.label}"}, link) from None

    def veth_add(self, name, peer, peer_netns=None, mtu=None, up=False, peer_label=None):
        """Create veth ``name`` here with its peer ``peer`` created directly in ``peer_netns`` (a NetNS,
        an fd, or None for this netns). Exists (with ``subject`` = the clashing name) when a name is taken."""
        fd = peer_netns if peer_netns is None or isinstance(peer_netns, int) else peer_netns.fd
        if peer_label is None:
            peer_label = getattr(peer_netns, "path", None) or (self.label if peer_netns is None else f"fd {fd}")
        try:
            self._ack(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, veth_payload(name, peer, fd, mtu, up))
        except _KernelError as e:
            if e.err != _errno.EEXIST:
                raise self._error(e, f"creating veth {name!r} (peer {peer!r} in netns {peer_label})") from None
            # Which name clashed? The kernel does not say; ours is easy to check, else it was the peer's.
            try:
                self.link_get(name)
                clash, where = name, self.label
            except NotFound:
                clash, where = peer, peer_label
            raise self._error(e, "", {e.err: f'link name "{clash}" already exists in netns {where}'}, clash) from None

    # -- addresses --------------------------------------------------------------------------------

    def addr_add(self, link, prefix, scope=RT_SCOPE_UNIVERSE, flags=0, broadcast=True):
        """Add an address ('10.1.1.5/24', or a (family, packed, prefixlen) tuple). IPv4 below /31 gets a
        broadcast address, as Go's netlink does. ``flags`` e.g. IFA_F_NODAD."""
        index, lname = self._index(link)
        payload = addr_payload(index, prefix, scope, flags, broadcast)
        try:
            self._ack(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, payload)
        except _KernelError as e:
            text = cidr(*parse_prefix(prefix))
            raise self._error(e, f"adding address {text} to {lname}", {
                _errno.EEXIST: f"address {text} already on {lname} in netns {self.label}"}, text) from None

    def addr_list(self, link=None, family=0, index=None):
        """Addresses of one link (or all), of one family (or both). ``index=N`` is ``link=N``."""
        if index is None:
            index = self._index(link)[0] if link is not None else 0
        replies = self._dump(RTM_GETADDR, _IFADDR.pack(family, 0, 0, 0, 0), "addresses")
        addrs = [decode_addr(p) for p in replies]
        return [a for a in addrs if a.index == index] if index else addrs

    def addr_del(self, link, prefix):
        """Remove an address; NotFound (EADDRNOTAVAIL) when it is not on the link."""
        index, lname = self._index(link)
        try:
            self._ack(RTM_DELADDR, 0, addr_payload(index, prefix, broadcast=False))
        except _KernelError as e:
            text = cidr(*parse_prefix(prefix))
            raise self._error(e, f"removing address {text} from {lname}", {
                _errno.EADDRNOTAVAIL: f"address {text} not on {lname} in netns {self.label}"}, text) from None

    # -- routes -----------------------------------------------------------------------------------

    def route_add(self, dst, gateway=None, oif=None, scope=RT_SCOPE_UNIVERSE, protocol=RTPROT_BOOT,
                  table=RT_TABLE_MAIN, priority=None, mtu=None, advmss=None, prefsrc=None, exclusive=True):
        """Add a route. ``exclusive=False`` drops NLM_F_EXCL (Go's "ECMP add": an identical route is not an
        error for IPv6, and IPv4 adds a second nexthop path only when metrics differ)."""
        self._route(NLM_F_CREATE | (NLM_F_EXCL if exclusive else 0), "adding", dst, gateway, oif, scope,
                    protocol, table, priority, mtu, advmss, prefsrc)

    def route_replace(self, dst, gateway=None, oif=None, scope=RT_SCOPE_UNIVERSE, protocol=RTPROT_BOOT,
                      table=RT_TABLE_MAIN, priority=None, mtu=None, advmss=None, prefsrc=None):
        self._route(NLM_F_CREATE | NLM_F_REPLACE, "replacing", dst, gateway, oif, scope, protocol, table,
                    priority, mtu, advmss, prefsrc)

    def route_del(self, dst, gateway=None, oif=None, table=RT_TABLE_MAIN, priority=None, scope=RT_SCOPE_NOWHERE,
                  protocol=0):
        """Delete the first route matching what is given (a Route from route_list() works too). Scope
        NOWHERE and protocol 0 match any, as `ip route del` does. NotFound (ESRCH) when none matches."""
        if isinstance(dst, Route):
            r = dst
            dst, gateway, oif, table, priority = r.prefix, r.gw_packed, r.oif, r.table, r.priority
        self._route(0, "deleting", dst, gateway, oif, scope, protocol, table, priority, None, None, None,
                    kind=RTM_DELROUTE, rtype=0)

    def route_list(self, family=0, table=RT_TABLE_MAIN, oif=None):
        """Routes of one table (None: all tables), family (0: both) and output link (None: any).
        Cached clones are left out."""
        if oif is not None:
            oif = self._index(oif)[0]
        replies = self._dump(RTM_GETROUTE, _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0), "routes")
        out = []
        for p in replies:
            r = decode_route(p)
            if (table is None or r.table == table) and (oif is None or r.oif == oif) \
                    and not r.flags & RTM_F_CLONED:
                out.append(r)
        return out

    def _route(self, flags, verb, dst, gateway, oif, scope, protocol, table, priority, mtu, advmss, prefsrc,
               kind=RTM_NEWROUTE, rtype=RTN_UNICAST):
        index, lname = self._index(oif) if oif is not None else (0, "")
        payload = route_payload(dst, gateway, index, scope, protocol, table, priority, mtu, advmss, prefsrc, rtype)
        try:
            self._ack(kind, flags, payload)
        except _KernelError as e:
            text = cidr(*parse_prefix(dst))
            if gateway is not None:
                text += f" via {ntop(*parse_ip(gateway))}"
            if lname:
                text += f" dev {lname}"
            if table != RT_TABLE_MAIN:
                text += f" table {table}"
            raise self._error(e, f"{verb} route {text}", {
                _errno.EEXIST: f"route {text} already exists in netns {self.label}",
                _errno.ESRCH: f"route {text} not found in netns {self.label}" if kind == RTM_DELROUTE else "",
                _errno.ENETUNREACH: f"route {text} in netns {self.label}: gateway not reachable through any "
                                    f"connected route (ENETUNREACH)",
            }, text) from None
