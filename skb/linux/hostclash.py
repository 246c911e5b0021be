"""Addresses an ADD is about to put on the node that the node already uses (ptp's host-clash check).

ptp gives every pod's host veth the pod's gateway as a /32 (/128) and routes each pod address to its
veth. When the pod range overlaps the node's own network, those addresses may already be the node's: a
gateway that is eth0's address, or the router of the node's default route. Putting it on a veth makes
the node answer for its own router and cuts it off. So before anything is changed the ADD asks: is a
gateway held by a host interface other than a ptp host end (the host ends of a network all hold its
gateway), is a pod address held by any interface, is either the next hop of a host route (ptp's own
host routes have none)? docs/DIAGNOSTICS.md#ptp-refuses-a-range-that-overlaps-the-node.

Cost: one address dump and one route dump (unicast routes, every table) per family the ADD uses, a
nexthop dump only when a route uses nexthop objects. The dumps are read raw and searched for the
wanted addresses as encoded attributes; messages are decoded only where one turns up off the usual
layout, so the hundreds of messages of a busy node are only scanned (bench/hostclash.py: figures in
docs/DIAGNOSTICS.md). A holder counts as a ptp host end by its name and prefix (``veth`` + 8
characters, a /32 or /128: how ptp, ours and the reference, names host ends; an IPv6 address has no
label and borrows the IPv4 one of its interface); any other holder is looked up and judged by what the
kernel says of it (a veth whose peer is in another netns). ``clashes`` decides, and is pure.
"""
import _struct

from skb.cni.errors import CNIError, INVALID_CONFIG
from skb.linux.netlink import NetlinkError
from skb.linux.netlink_codec import (AF_INET, AF_INET6, IFA_ADDRESS, IFA_LABEL, IFA_LOCAL, IFLA_EXT_MASK,
                                     IFLA_IFNAME, IFLA_INFO_KIND, IFLA_LINK_NETNSID, RTA_DST, RTA_GATEWAY, RTA_NH_ID,
                                     RTA_VIA, RTEXT_FILTER_SKIP_STATS, RTM_GETADDR, RTM_GETLINK, RTM_GETNEXTHOP,
                                     RTM_GETROUTE, RTN_UNICAST, RT_TABLE_MAIN, _IFADDR, _IFINFO, _RTMSG, _cstr,
                                     attr_u32, cidr, decode_link, decode_nexthop, decode_route, ifinfomsg,
                                     nexthop_dump_request, ntop, parse_attrs, parse_ip, route_next_hops)

_RTA = _struct.Struct("=HH")
_U32 = _struct.Struct("=I")
_I32 = _struct.Struct("=i")
_AF = _struct.Struct("=H")
LOOKUPS = 16              # holders looked up one by one; past this, one link dump answers for all of them
_PTP_LABEL = _RTA.pack(17, IFA_LABEL) + b"veth"          # IFA_LABEL of a 12-character name "veth..."
_VETH_KIND = _RTA.pack(9, IFLA_INFO_KIND) + b"veth\0"
_PEER_NETNS = _RTA.pack(8, IFLA_LINK_NETNSID)
_USES_OBJECT = _RTA.pack(8, RTA_NH_ID)[:3]          # without its last, zero, byte: a needle ending in 0 is slow
_EMPTY_ROUTE = bytes(_RTMSG.size)
_IPV6_DEFAULT_METRIC = 1024
_ERRNO_NO_NEXTHOPS = (95, 22, 97)   # EOPNOTSUPP, EINVAL, EAFNOSUPPORT: a kernel without nexthop objects


def _needle(kind, packed):
    return _RTA.pack(4 + len(packed), kind) + packed


def is_ptp_name(name):
    """``veth`` + 8 characters (ptp, ours and the reference's, uses 8 hex digits): a ptp host end's name."""
    return len(name) == 12 and name.startswith("veth")


class Held:
    """An interface address equal to one the ADD wants. ``labelled``: the interface holds a gateway under
    a ptp host end's label (seen in the IPv4 dump); ``kind``/``peer_elsewhere``: None unless looked up."""

    __slots__ = ("family", "packed", "index", "name", "prefixlen", "peer", "labelled", "kind", "peer_elsewhere")

    def __init__(self, family, packed, index, name, prefixlen, peer=False):
        self.family, self.packed, self.index, self.name = family, packed, index, name
        self.prefixlen, self.peer = prefixlen, peer
        self.labelled, self.kind, self.peer_elsewhere = False, None, None

    def host_prefix(self):
        return self.prefixlen == (32 if self.family == AF_INET else 128)

    def presumed(self):
        """Taken for a ptp host end without a look-up: by its name (or label) and prefix."""
        return self.host_prefix() and not self.peer and (self.labelled or is_ptp_name(self.name or ""))

    def ptp_end(self):
        if self.peer or not self.host_prefix():
            return False
        if self.kind is not None:
            return self.kind == "veth" and bool(self.peer_elsewhere)
        return self.presumed()

    def describe(self):
        where = self.name or f"#{self.index}"
        if self.peer:
            return f"the peer address of {where}'s point-to-point link ({cidr(self.family, self.packed, self.prefixlen)})"
        return f"an address of the host's interface {where} ({cidr(self.family, self.packed, self.prefixlen)})"


class Hop:
    """A host route whose next hop is an address the ADD wants (or, ``dest``, a main-table route to that very
    address: ptp's own host route to a pod could not be added); ``route`` says it as ``ip route`` would."""

    __slots__ = ("family", "packed", "route", "dest")

    def __init__(self, family, packed, route, dest=False):
        self.family, self.packed, self.route, self.dest = family, packed, route, dest


def clashes(wanted, held, hops):
    """Pure: [(role, text, why)] for each wanted address in use on the node. ``wanted``: [(role, family,
    packed, text)], role "gateway" (may sit on ptp host ends, which share it) or "address" (nowhere)."""
    out = []
    for role, family, packed, text in wanted:
        for h in held:
            if (h.family, h.packed) == (family, packed) and not (role == "gateway" and h.ptp_end()):
                out.append((role, text, f"it is {h.describe()}"))
                break
        else:
            for hop in hops:
                if (hop.family, hop.packed) == (family, packed) and (role == "address" or not hop.dest):
                    what = "the destination" if hop.dest else "the next hop"
                    out.append((role, text, f"it is {what} of the host route {hop.route}"))
                    break
    return out


# ---------------------------------------------------------------------------------------------------
# reading the node: dumps read raw, searched for the wanted addresses as encoded attributes


def _bodies(blob):
    """(start, end) of each message body (after its 16-byte nlmsghdr) of a dump read raw."""
    off, n = 0, len(blob)
    while off + 16 <= n:
        length = _U32.unpack_from(blob, off)[0]
        if length < 16:
            return
        yield off + 16, off + length
        off += (length + 3) & ~3


def _body_at(blob, pos):
    """The message body that holds byte ``pos``."""
    for start, end in _bodies(blob):
        if start <= pos < end:
            return blob[start:end]
    return b""


def _common(values):
    first = min(values)
    last = max(values)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]


def _positions(blob, kind, targets):
    """{packed: [offsets of the rtattr of type ``kind`` that holds it]}: one search for the attribute
    header and the first two bytes the targets share (a needle ending in a zero byte is a slow one), then
    a look at each place found."""
    out = {t: [] for t in targets}
    for size in {len(t) for t in targets}:
        same = [t for t in targets if len(t) == size]
        needle = _RTA.pack(4 + size, kind) + _common(same)[:2]
        pos = blob.find(needle)
        while pos >= 0:
            value = blob[pos + 4:pos + 4 + size]
            if value in out:
                out[value].append(pos)
            pos = blob.find(needle, pos + 1)
    return out


def _held(nl, family, roles, ptp_ends):
    """Holders of the wanted addresses of ``family`` ({packed: role}), from one address dump read raw.
    The kernel writes IFA_ADDRESS right after the 8-byte ifaddrmsg (family, prefix length, flags, scope,
    index), then for IPv4 IFA_LOCAL and (a /32 has no broadcast) IFA_LABEL. So the usual holder of a
    gateway is read from where its attribute sits: an IPv4 /32 under a ptp host end's label is counted,
    its interface index kept in ``ptp_ends``; an IPv6 /128 on such an interface is passed over. Anything
    else (a pod address held, a point-to-point peer, another layout) is decoded."""
    blob = b"".join(nl.dump_raw(RTM_GETADDR, _IFADDR.pack(family, 0, 0, 0, 0), "addresses"))
    out, odd = [], []
    for packed, role in roles.items():
        address, local = _needle(IFA_ADDRESS, packed), _needle(IFA_LOCAL, packed)
        total, locals_ = blob.count(address), blob.count(local)
        if not total and not locals_:
            continue
        if role == "gateway" and family == AF_INET and locals_ == total:
            ends = _first(blob, address + local + _PTP_LABEL, family, 32)
            ptp_ends.update(ends)
            if len(ends) == total:
                continue                                # the usual case: only ptp host ends hold it
        elif role == "gateway" and family == AF_INET6 and not locals_:
            found = _first(blob, address, family, None)
            if len(found) == total:
                out += [Held(family, packed, i, None, plen) for i, plen in found.items()
                        if not (i in ptp_ends and plen == 128)]
                continue
        odd.append(packed)
    for packed in odd:
        seen = set()
        for kind in (IFA_ADDRESS, IFA_LOCAL):
            for pos in _positions(blob, kind, [packed])[packed]:
                body = _body_at(blob, pos)
                if body and body not in seen:
                    seen.add(body)
                    out += _decode_held(body, roles, ptp_ends)
    return out


def _first(blob, needle, family, plen):
    """{interface index: prefix length} of the address messages whose attributes begin with ``needle``
    (and whose prefix length is ``plen``, unless None): the ifaddrmsg sits just before it."""
    out = {}
    pos = blob.find(needle)
    while pos >= 8:
        if blob[pos - 8] == family and plen in (None, blob[pos - 7]):
            out[_U32.unpack_from(blob, pos - 4)[0]] = blob[pos - 7]
        pos = blob.find(needle, pos + 1)
    return out


def _decode_held(body, roles, ptp_ends):
    fam, plen, _flags, _scope, index = _IFADDR.unpack_from(body)
    a = parse_attrs(body, _IFADDR.size)
    local, address = a.get(IFA_LOCAL), a.get(IFA_ADDRESS)
    name = _cstr(a[IFA_LABEL]) if IFA_LABEL in a else None
    mine = local if local is not None else address
    if mine in roles:
        if roles[mine] == "gateway" and index in ptp_ends and plen == (32 if fam == AF_INET else 128):
            return []                                   # counted as a ptp host end already
        return [Held(fam, mine, index, name, plen)]
    if local is not None and address in roles:         # a point-to-point link: the remote end
        return [Held(fam, address, index, name, plen, peer=True)]
    return []


def _links(nl, indexes):
    """{index: (name, kind, peer in another netns)} of these links, from one link dump read raw: the
    name is the first attribute the kernel writes; kind and peer are found by their encoded bytes."""
    out = {}
    blob = b"".join(nl.dump_raw(RTM_GETLINK, ifinfomsg() + attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS), "links"))
    for start, end in _bodies(blob):
        index = _I32.unpack_from(blob, start + 4)[0]
        if index not in indexes:
            continue
        n, kind = _RTA.unpack_from(blob, start + _IFINFO.size)
        if kind == IFLA_IFNAME:
            name = _cstr(blob[start + _IFINFO.size + 4:start + _IFINFO.size + n])
        else:
            name = decode_link(blob[start:end]).name
        out[index] = (name, "veth" if blob.find(_VETH_KIND, start, end) >= 0 else "other",
                      blob.find(_PEER_NETNS, start, end) >= 0)
    return out


def _look_up(nl, held):
    """Fill in name, kind and peer of the holders that could be ptp host ends (a /32 or /128, not a
    point-to-point peer) but are not presumed to be one, and the name of those without one."""
    todo = [h for h in held if not h.presumed() and (h.name is None or (h.host_prefix() and not h.peer))]
    if not todo:
        return
    if len(todo) > LOOKUPS:
        links = _links(nl, {h.index for h in todo})
    else:
        links = {}
        for h in todo:
            try:
                link = nl.link_get(h.index)
            except NetlinkError:
                continue
            links[h.index] = (link.name, link.kind, link.link_netnsid is not None)
    for h in todo:
        if h.index in links:
            h.name, h.kind, h.peer_elsewhere = links[h.index]


def _name(nl, index, names):
    if index not in names:
        try:
            names[index] = nl.link_get(index).name
        except NetlinkError:
            names[index] = f"#{index}"
    return names[index]


def _route_text(nl, route, gw_family, gw_packed, oif, names):
    dst = "default" if route.dst_len == 0 else route.dst
    text = f"{dst} via {ntop(gw_family, gw_packed)}"
    if oif:
        text += f" dev {_name(nl, oif, names)}"
    if route.table != RT_TABLE_MAIN:
        text += f" table {route.table}"
    return text


def _hops(nl, family, targets, names, via=()):
    """Routes of ``family`` (every table) whose next hop is one of the packed addresses in ``targets``
    (or, for IPv4 routes, an IPv6 gateway in ``via``): by RTA_GATEWAY, RTA_VIA or an RTA_MULTIPATH hop,
    found by their encoded bytes, or by a nexthop object (``ip route ... nhid N``, looked up only when a
    route uses one); then the main table's routes to one of them alone (a /32 or /128, ``dest``). Only
    unicast routes are read: the kernel is asked to leave out the others."""
    blob = b"".join(nl.dump_raw(RTM_GETROUTE, _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, RTN_UNICAST, 0), "routes",
                                strict=True))
    return _next_hops(nl, blob, targets, names, via) + _destinations(nl, blob, family, targets, names)


def _destinations(nl, blob, family, targets, names):
    """Main-table routes to a pod address of ``targets`` alone (a leftover of an attachment never deleted,
    another network's route to a pod): the kernel would refuse ptp's own host route to it. Each address is
    searched for as its whole encoded RTA_DST (a node's ptp host routes share their first bytes)."""
    out, bits = [], 32 if family == AF_INET else 128
    for packed in [p for p, role in targets.items() if role == "address"]:
        needle = _needle(RTA_DST, packed)
        pos = blob.find(needle)
        while pos >= 0:
            body = _body_at(blob, pos) or _EMPTY_ROUTE
            route = decode_route(body)
            # ptp's own route is TOS 0 at metric 0 (IPv6: 1024, what the kernel makes of 0): one the kernel
            # would refuse beside it (the same metric), or prefer to it (a lower one), clashes; one of
            # another TOS, or behind it, does not (review 16)
            if route.dst_len == bits and route.table == RT_TABLE_MAIN and route.dst_packed == packed and \
                    body[3] == 0 and route.priority <= (0 if family == AF_INET else _IPV6_DEFAULT_METRIC):
                via = f" via {route.gateway}" if route.gw_packed else ""
                dev = f" dev {_name(nl, route.oif, names)}" if route.oif else ""
                metric = f" metric {route.priority}" if route.priority else ""
                out.append(Hop(family, packed, f"{ntop(family, packed)}{via}{dev}{metric}", dest=True))
                break
            pos = blob.find(needle, pos + 1)
    return out


def _next_hops(nl, blob, targets, names, via):
    spots = [p for ps in _positions(blob, RTA_GATEWAY, targets).values() for p in ps]
    if via:
        needles = [_needle(RTA_VIA, _AF.pack(AF_INET6) + p) for p in via]
        spots += [blob.find(n) for n in needles if n in blob]
    objects = _objects(nl, set(targets) | set(via)) if _USES_OBJECT in blob else {}
    if objects:
        spots += [start for start, end in _bodies(blob) if blob.find(_USES_OBJECT, start, end) >= 0]
    out, seen = [], set()
    for pos in spots:
        body = _body_at(blob, pos)
        if not body or body in seen:
            continue
        seen.add(body)
        gateways, nh_id = route_next_hops(body)
        route = decode_route(body)
        for fam, packed, oif in gateways + objects.get(nh_id, []):
            if packed in targets or packed in via:
                mark = f" (nexthop id {nh_id})" if (fam, packed, oif) in objects.get(nh_id, []) else ""
                out.append(Hop(fam, packed, _route_text(nl, route, fam, packed, oif, names) + mark))
    return out


def _objects(nl, targets):
    """{nexthop object id: [(family, packed gateway, oif)]} of the objects (and groups) whose gateway is
    one of ``targets``; {} on a kernel without nexthop objects."""
    try:
        blob = b"".join(nl.dump_raw(RTM_GETNEXTHOP, nexthop_dump_request(), "nexthops"))
    except NetlinkError as e:
        if e.errno in _ERRNO_NO_NEXTHOPS:
            return {}
        raise
    found = [decode_nexthop(blob[start:end]) for start, end in _bodies(blob)]
    hops = {i: [(fam, gw, oif)] for i, fam, gw, oif, _members in found if gw in targets}
    for i, _fam, _gw, _oif, members in found:
        group = [h for m in members for h in hops.get(m, [])]
        if group:
            hops[i] = group
    return hops


def gateway_routes(nl, family):
    """[(Route, [(family, packed gateway, oif)])] of every unicast route of ``family`` with a next hop, in
    every table, every message decoded: for ``skb doctor``, which looks at the whole table."""
    blob = b"".join(nl.dump_raw(RTM_GETROUTE, _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, RTN_UNICAST, 0), "routes",
                                strict=True))
    out = []
    for start, end in _bodies(blob):
        body = blob[start:end]
        gateways, _nh_id = route_next_hops(body)
        if gateways:
            out.append((decode_route(body), gateways))
    return out


def route_text(nl, route, gw_family, gw_packed, oif, names=None):
    """A route with one of its next hops, as ``ip route`` writes it."""
    return _route_text(nl, route, gw_family, gw_packed, oif, {} if names is None else names)


def read(nl, wanted):
    """(held, hops) for the wanted addresses, from the netns of ``nl``."""
    held, hops, names, ptp_ends = [], [], {}, set()
    families = sorted({w[1] for w in wanted})
    v6 = {w[2] for w in wanted if w[1] == AF_INET6}
    for family in families:
        roles = {w[2]: w[0] for w in wanted if w[1] == family}
        held += _held(nl, family, roles, ptp_ends)
        hops += _hops(nl, family, roles, names, via=v6 if family == AF_INET else ())
    for h in held:
        h.labelled = h.index in ptp_ends
    _look_up(nl, held)
    return held, hops


def refuse(nl, addresses):
    """Raise a CNI error (code 7) when an ADD's gateway or pod address is in use on the node, naming the
    interface or the route; ``addresses``: [(pod address, gateway, subnet)] as text."""
    wanted = []
    for ip, gateway, _subnet in addresses:
        for role, text in (("gateway", gateway), ("address", ip)):
            family, packed = parse_ip(text)
            if not any(w[2] == packed for w in wanted):
                wanted.append((role, family, packed, text))
    found = clashes(wanted, *read(nl, wanted))
    if not found:
        return
    role, text, why = found[0]
    subnet = next(s for ip, gw, s in addresses if text in (ip, gw))
    more = "".join(f"; {r} {t} too: {w}" for r, t, w in found[1:])
    if why.startswith("it is the destination"):
        raise CNIError(INVALID_CONFIG, f"pod address {text} is already in use on the node: {why}",
                       f"the node already routes {text} itself: another network whose range overlaps {subnet}, or the "
                       f"leftover of an attachment never deleted{more}. ptp routes each pod address to its veth; nothing "
                       "was changed. Delete that attachment (or the route), or give the network a range of its own")
    raise CNIError(INVALID_CONFIG, f"{'gateway' if role == 'gateway' else 'pod address'} {text} is already in use "
                                   f"on the node: {why}",
                   f"the range {subnet} overlaps the node's own network{more}. ptp puts the gateway on every pod's "
                   "host veth and routes each pod address to its veth, so the node would take that address from "
                   "its owner; nothing was changed. Give the network a range outside the node's networks (skb "
                   "doctor names the overlap)")
