"""A small rtnetlink client: links, veth pairs, addresses and routes, in the netns the socket was opened in.

Why not pyroute2: importing it costs ~150 ms and each request 0.3-1 ms; a plugin process lives for a
few milliseconds. This client speaks the wire format directly over ``_socket`` + ``_struct``
(10-80 µs a request) and does only what the plugins need.

The wire format (constants, ``attr``, ``parse_attrs``, ``message``, request builders, reply decoders) is
``skb.linux.netlink_codec``; this module is the errors and ``RtNetlink``, the only part doing I/O.

A socket belongs to the netns of the thread that created it, for its whole life. To talk to a container's
netns, create the socket inside ``skb.linux.netns.enter(ns)`` (``RtNetlink.for_netns(ns)`` does that); the
``label`` names that netns in every error message.

Addresses are given as strings ("10.1.1.5/24", "fd00::1") or tuples ``(family, packed, prefixlen)``;
objects read back carry text (``Addr.address``, ``Addr.cidr``, ``Route.dst``, ``Route.gateway``) and the same as packed bytes.
"""
import _socket
import errno as _errno

from skb.cni.errors import CNIError, INTERNAL, TRY_AGAIN, errno_reason
from skb.linux.netns import current_label, enter
from skb.linux.netlink_codec import (IFA_F_NODAD, IFF_UP, IFLA_EXT_MASK, IFLA_MTU, Link, NETLINK_CAP_ACK,
                                       NETLINK_GET_STRICT_CHK, _HDR, _HDR_FLAGS_SEQ,
                                       NETLINK_EXT_ACK, NETLINK_ROUTE, NLMSGERR_ATTR_MSG, NLMSG_DONE,
                                       NLMSG_ERROR, NLMSG_NOOP, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CREATE,
                                       NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL, NLM_F_MULTI, NLM_F_REPLACE,
                                       NLM_F_REQUEST, RTEXT_FILTER_SKIP_STATS, RTM_DELADDR, RTM_DELLINK,
                                       RTM_DELROUTE, RTM_F_CLONED, RTM_GETADDR, RTM_GETLINK, RTM_GETROUTE,
                                       RTM_NEWADDR, RTM_NEWLINK, RTM_NEWROUTE, RTM_SETLINK, RTN_UNICAST,
                                       RTPROT_BOOT, RT_SCOPE_NOWHERE, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN,
                                       Route, SOL_NETLINK, _I32, _IFADDR, _IFINFO, _RTMSG, _cstr,
                                       IFLA_IFALIAS, RTM_GETNSID, addr_payload, attr_str, attr_u32, cidr,
                                       decode_addr, decode_link, decode_nsid, decode_route, nsid_request,
                                       ifinfomsg, link_select, message, ntop, parse_attrs, parse_error,
                                       parse_ip, parse_prefix, route_payload, split_messages, veth_payload)

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


# --------------------------------------------------------------------------------------------------
# The client


class RtNetlink:
    """One NETLINK_ROUTE socket, bound to the netns of the thread that creates it.

    ``label`` names that netns in error messages (e.g. the CNI_NETNS path); by default the netns the
    thread is in according to ``skb.linux.netns``. Links are given by name (str), index (int) or Link.
    """

    __slots__ = ("label", "_sock", "_seq", "_buf")

    def __init__(self, label=None):
        if label is None:
            label = current_label()
        self.label = label
        try:
            sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC, NETLINK_ROUTE)
        except OSError as e:
            raise CNIError(INTERNAL, f"cannot open a netlink socket in netns {label}: {errno_reason(e.errno)}") from None
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
        with enter(ns) as entered:
            return cls(label=entered.path)

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- transport --------------------------------------------------------------------------------

    def _send(self, kind, flags, payload):
        """Send one request; its sequence number."""
        self._seq += 1
        try:
            self._sock.send(message(kind, flags | NLM_F_REQUEST, self._seq, payload))
        except OSError as e:
            raise CNIError(INTERNAL, f"cannot send a netlink request in netns {self.label}: {errno_reason(e.errno)}") from None
        return self._seq

    def _recv(self):
        """One datagram of the reply."""
        try:
            n = self._sock.recv_into(self._buf, len(self._buf), _socket.MSG_TRUNC)
        except OSError as e:
            raise CNIError(INTERNAL, f"cannot read a netlink reply in netns {self.label}: {errno_reason(e.errno)}") from None
        if n > len(self._buf):
            raise CNIError(INTERNAL, f"netlink reply of {n} bytes truncated in netns {self.label}")
        return bytes(self._buf[:n])

    @staticmethod
    def _end(kind, flags, body):
        """An NLMSG_ERROR or NLMSG_DONE ends a reply: _KernelError when it carries an error."""
        if kind == NLMSG_ERROR:
            err, text = parse_error(body, flags)
        else:
            err = -_I32.unpack_from(body)[0] if len(body) >= 4 else 0
            text = _cstr(parse_attrs(body, 4).get(NLMSGERR_ATTR_MSG, b"")) if err and flags & NLM_F_ACK_TLVS else ""
        if err:
            raise _KernelError(err, text)

    def _talk(self, kind, flags, payload):
        """Send one request; return (reply payloads, dump-interrupted). NLMSG_ERROR -> _KernelError."""
        seq = self._send(kind, flags, payload)
        replies, intr = [], False
        while True:
            for rkind, rflags, rseq, body in split_messages(self._recv()):
                if rseq != seq:
                    continue            # a late reply to an earlier request
                if rflags & NLM_F_DUMP_INTR:
                    intr = True
                if rkind == NLMSG_ERROR or rkind == NLMSG_DONE:
                    self._end(rkind, rflags, body)
                    return replies, intr
                if rkind == NLMSG_NOOP:
                    continue
                replies.append(body)
                if not rflags & NLM_F_MULTI and not flags & NLM_F_ACK:
                    return replies, intr

    def _ack(self, kind, flags, payload):
        self._talk(kind, flags | NLM_F_ACK, payload)

    def _dump(self, kind, payload, what):
        return self._until_whole(what, lambda: self._talk(kind, NLM_F_DUMP, payload))

    def _until_whole(self, what, once):
        """``once()`` -> (reply, interrupted), until a reply is not interrupted. NLM_F_DUMP_INTR: the table
        changed while the kernel walked it, the reply may miss or repeat entries. Retry (as Go's netlinksafe
        does); it is rare and the tables are small. ``what`` names the table in errors."""
        for _ in range(10):
            try:
                reply, intr = once()
            except _KernelError as e:
                raise self._error(e, f"listing {what}") from None
            if not intr:
                return reply
        raise CNIError(TRY_AGAIN, f"listing {what} in netns {self.label} was interrupted 10 times",
                       "the table kept changing while it was read; try again")

    def dump_raw(self, kind, payload, what, strict=False):
        """The datagrams of a dump reply, undecoded: for a caller that searches them for a few encoded
        attributes instead of decoding hundreds of messages (skb.linux.hostclash). Only the message
        headers are read here (sequence, end, error, interruption: retried as ``_dump`` is). ``strict``
        has the kernel apply the filters of the request's header (NETLINK_GET_STRICT_CHK, Linux 4.20;
        an older kernel dumps everything, which is still correct). ``what`` names the table in errors."""
        if strict:
            try:
                self._sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
            except OSError:
                strict = False
        try:
            return self._until_whole(what, lambda: self._read_raw(self._send(kind, NLM_F_DUMP, payload)))
        finally:
            if strict:
                self._sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 0)

    def _read_raw(self, seq):
        """Datagrams until the dump's NLMSG_DONE. A dump reply is recognised without walking it: its end
        is a 20-byte NLMSG_DONE at the end of the last datagram, and an interruption shows as a header
        with NLM_F_MULTI | NLM_F_DUMP_INTR and our sequence number (a false match only costs a retry).
        Anything else (an error, an extended acknowledgement) is walked message by message."""
        datagrams, intr = [], False
        interrupted = _HDR_FLAGS_SEQ.pack(NLM_F_MULTI | NLM_F_DUMP_INTR, seq)
        while True:
            data = self._recv()
            n = len(data)
            intr = intr or interrupted in data
            if n >= 20:
                length, kind, _flags, rseq, _pid = _HDR.unpack_from(data, n - 20)
                if length == 20 and kind == NLMSG_DONE and rseq == seq and not _I32.unpack_from(data, n - 4)[0]:
                    datagrams.append(data[:n - 20])
                    return datagrams, intr
            off = 0
            while off + 16 <= n:
                length, kind, flags, rseq, _pid = _HDR.unpack_from(data, off)
                if length < 16:
                    break
                if rseq == seq and kind in (NLMSG_ERROR, NLMSG_DONE):
                    self._end(kind, flags, data[off + 16:off + length])
                    datagrams.append(data[:off])
                    return datagrams, intr
                off += (length + 3) & ~3
            datagrams.append(data)

    def _error(self, e, what, messages=None, subject=None):
        """The exception for a refused request: a known phrasing from ``messages`` (errno -> text), else
        '<what> in netns <label>: <reason> (<ERRNO>)'; the kernel's own explanation goes to details."""
        msg = messages.get(e.err) if messages else None
        if not msg:
            msg = f"{what} in netns {self.label}: {errno_reason(e.err)}"
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

    def link_set(self, link, up=None, mtu=None, alias=None):
        """Set a link up or down, its MTU and/or its alias (``ip link set ... alias``), in one request."""
        if isinstance(link, Link):
            link = link.index
        payload = link_select(link)
        if up is not None:
            payload = _IFINFO.pack(0, 0, link if isinstance(link, int) else 0, IFF_UP if up else 0, IFF_UP) \
                + payload[16:]
        if mtu is not None:
            payload += attr_u32(IFLA_MTU, mtu)
        if alias is not None:
            payload += attr_str(IFLA_IFALIAS, alias)
        try:
            self._ack(RTM_SETLINK, 0, payload)
        except _KernelError as e:
            shown = f'"{link}"' if isinstance(link, str) else f"#{link}"
            change = ", ".join(x for x in ("up" if up else "down" if up is not None else "",
                                           f"mtu {mtu}" if mtu is not None else "",
                                           f"alias {alias!r}" if alias is not None else "") if x)
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

    def nsid_of(self, ns):
        """The id this socket's netns gives the netns ``ns`` (a NetNS or an fd): what a link's
        ``link_netnsid`` holds when its peer lives there. None when none is assigned."""
        fd = ns if isinstance(ns, int) else ns.fd
        try:
            replies, _ = self._talk(RTM_GETNSID, 0, nsid_request(fd))
        except _KernelError as e:
            raise self._error(e, "getting the id of a network namespace") from None
        return decode_nsid(replies[0]) if replies else None

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
