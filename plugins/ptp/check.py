"""ptp's CHECK: both ends of the pair (links, addresses, routes, the host end's MTU), the host end proven
the container end's peer, the masquerade rules and forwarding, against the runtime's cached result.
Loaded only for CHECK (ptp.py imports it there).
"""
from skb.cni.errors import CNIError, INTERNAL, INVALID_CONFIG
from skb.cni.result import parse_prev_result
from skb.linux import guard
from skb.linux import sysctl
from skb.linux.netlink import NotFound, RtNetlink
from skb.linux.netlink_codec import RT_SCOPE_HOST, RT_SCOPE_LINK, parse_prefix

from skb_plugins.ptp.config import Addressing
from skb_plugins.ptp.ownership import verified_peer


def check(call):
    """CHECK: the IPAM plugin's CHECK, then both ends of the pair, the masquerade rules and forwarding
    against the runtime's cached result."""
    args, conf = call.args, call.conf
    ns = guard.open_target(args)
    with ns:
        call.ipam.check()
        if conf.prev_result is None:
            raise CNIError(INVALID_CONFIG, "ptp: Required prevResult missing",   # (the reference: 999)
                           "CHECK needs the ADD result as the configuration's prevResult (the runtime's cached "
                           "result): give the prevResult key")
        prev = parse_prev_result(conf.cni_version, conf.prev_result)
        cont_if = next((i for i in prev.interfaces if i.name == args.ifname and i.sandbox == args.netns), None)
        if cont_if is None:
            raise CNIError(INTERNAL, f"Sandbox in prevResult  doesn't match configured netns: {args.netns}",
                           f"prevResult has no interface {args.ifname!r} with sandbox {args.netns!r}")
        host_if = next((i for i in prev.interfaces if i.sandbox is None), None)
        addrs = [Addressing(ipc) for ipc in prev.ips if ipc.gateway is not None]
        with RtNetlink.for_netns(ns) as cnl:
            cont = _check_container(args, conf, cnl, cont_if, prev, addrs)
        with RtNetlink() as hnl:
            _check_host(hnl, ns, conf, cont, host_if, addrs)
    if conf.ip_masq and addrs:
        from skb.linux import masq      # only with ipMasq (see config.py)
        backend = conf.masq_backend or masq.choose(None)
        masq.check(masq.Masq(conf.name, args.ifname, args.container_id,
                             [(a.ip, a.subnet, a.family) for a in addrs]), backend)
    for fam, name in ((4, "net/ipv4/ip_forward"), (6, "net/ipv6/conf/all/forwarding")):
        if any(a.family == fam for a in addrs) and sysctl.read(name) != "1":
            raise CNIError(INTERNAL, f"IP forwarding is off ({name.replace('/', '.')} = 0)",
                           "ptp's pods reach nothing beyond the node without it")


def _check_container(args, pc, cnl, cont_if, prev, addrs):
    name = args.ifname
    try:
        link = cnl.link_get(name)
    except NotFound:
        raise CNIError(INTERNAL, f"ptp: Container Interface name in prevResult: {name} not found") from None
    if link.kind != "veth":
        raise CNIError(INTERNAL, f"Error: Container interface {name} not of type veth/p2p")
    if cont_if.mac and cont_if.mac != link.mac:
        raise CNIError(INTERNAL, f"ptp: Interface {name} Mac {cont_if.mac} doesn't match container Mac: {link.mac}")
    # No MTU comparison here: a later plugin of the chain (tuning) may set the container end's, and CHECK
    # must tolerate what later plugins changed (the reference's CHECK compares no MTU at all).
    have = {(a.family, a.packed, a.prefixlen) for a in cnl.addr_list(index=link.index)}
    for ipc in prev.ips:
        if parse_prefix(ipc.address) not in have:
            raise CNIError(INTERNAL, f"Failed to match addr {ipc.address} on interface {name}")
    routes = cnl.route_list(table=254)
    mine = [r for r in routes if r.oif == link.index]

    def has(dst, gw=None, scope=None):
        want = parse_prefix(dst)
        gw_packed = parse_prefix(gw)[1] if gw else None
        return any(r.prefix == want and (gw is None or r.gw_packed == gw_packed) and
                   (scope is None or r.scope == scope) for r in mine)

    for a in addrs:
        # (IPv6 routes have no scope: the kernel reports every one as universe)
        if not has(f"{a.gateway}/{a.host_bits}", scope=RT_SCOPE_LINK if a.family == 4 else None):
            raise CNIError(INTERNAL, f"Failed to find Gateway {a.gateway} for interface {name}",
                           f"route {a.gateway}/{a.host_bits} dev {name} scope link is missing")
        if a.subnet != f"{a.gateway}/{a.host_bits}" and not has(a.subnet, a.gateway):
            raise CNIError(INTERNAL, f"Expected Route {a.subnet} via {a.gateway} dev {name} not found in routing table")
    tables = {254: routes}
    for r in prev.routes:
        is_default = r.dst in ("0.0.0.0/0", "::/0")
        want = parse_prefix(r.dst)
        table = r.table if r.table else 254   # (a route with a table, CNI 1.1: in that one, as ADD put it)
        if table not in tables:
            tables[table] = cnl.route_list(table=table)
        ok = any(x.prefix == want and (is_default or r.gw is None or x.gw_packed == parse_prefix(r.gw)[1])
                 for x in tables[table])
        if not ok:
            via = f" via {r.gw}" if r.gw else ""
            where = f" {table}" if table != 254 else ""
            raise CNIError(INTERNAL, f"Expected Route {r.dst}{via} not found in routing table{where}")
    return link


def _check_host(hnl, ns, pc, cont, host_if, addrs):
    host = verified_peer(hnl, ns, cont)
    if host is None:
        raise CNIError(INTERNAL, f"ptp: the host end of {cont.name} is missing",
                       f"{cont.name}'s veth peer is not a veth in the host's netns (ifindex {cont.link_index})")
    if host_if is not None:
        if host_if.name != host.name:
            raise CNIError(INTERNAL, f"ptp: host veth {host_if.name} in prevResult is not the peer of "
                                     f"{cont.name} ({host.name} is)")
        if host_if.mac and host_if.mac != host.mac:
            raise CNIError(INTERNAL, f"ptp: Interface {host.name} Mac {host_if.mac} doesn't match host Mac: {host.mac}")
    if not host.up:
        raise CNIError(INTERNAL, f"ptp: host veth {host.name} is down")
    if pc.mtu and host.mtu != pc.mtu:
        raise CNIError(INTERNAL, f"ptp: host veth {host.name} MTU {host.mtu} doesn't match the configured mtu {pc.mtu}")
    have = {(a.family, a.packed, a.prefixlen) for a in hnl.addr_list(index=host.index)}
    routes = [r for r in hnl.route_list(table=254) if r.oif == host.index]
    for a in addrs:
        if parse_prefix(f"{a.gateway}/{a.host_bits}") not in have:
            raise CNIError(INTERNAL, f"ptp: gateway {a.gateway}/{a.host_bits} missing on host veth {host.name}")
        want = parse_prefix(f"{a.ip}/{a.host_bits}")
        if not any(r.prefix == want and (r.scope == RT_SCOPE_HOST or a.family == 6) for r in routes):
            raise CNIError(INTERNAL, f"ptp: host route {a.ip}/{a.host_bits} dev {host.name} scope host is missing")
