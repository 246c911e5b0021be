"""A pod range that overlaps the node's own network.

For each host-local range of a network whose pods the node routes (ptp, bridge): the node's addresses
and the networks they sit on, the routers its routes go through (every table), and the routes into the
range, all outside the pods' own interfaces (ptp host ends: veths whose peer lives in another netns and
that hold no wider address than a /32 or /128, since a node's eth0 is a veth too in a container or a
VM; a bridge plugin's bridge). Any of them inside the range is the same cause, so it is one finding,
which also says what ptp's ADD will answer (skb.linux.hostclash decides for the gateway as ptp does).
"""
import os

from skb.cni.addr import IP, Net
from skb.cni.errors import CNIError
from skb.linux import hostclash
from skb.linux.netlink import RtNetlink
from skb.linux.netlink_codec import AF_INET, AF_INET6, RTPROT_KERNEL, RT_SCOPE_LINK, RT_TABLE_LOCAL
from skb.tool.doctor.findings import Finding
from skb.tool.doctor.ipamconf import range_sets
from skb.tool.doctor.node import ROUTED_TYPES

_FAMILY = {4: AF_INET, 6: AF_INET6}


def _ranges(networks):
    """(network, plugin type, bridge name or None, start, end, gateway, subnet) of every host-local range
    of a routed plugin."""
    out = []
    for n in networks:
        for p in n.plugins:
            ipam = p.raw.get("ipam")
            if p.type not in ROUTED_TYPES or p.ipam_type != "host-local" or not isinstance(ipam, dict):
                continue
            bridge = p.raw.get("bridge") if isinstance(p.raw.get("bridge"), str) else "cni0"
            for rs in range_sets(ipam)[0]:
                for start, end, gw, subnet in rs.ranges:
                    out.append((n, p.type, bridge if p.type == "bridge" else None, start, end, gw, subnet))
    return out


def _ip(family, packed):
    return IP(4 if family == AF_INET else 6, int.from_bytes(packed, "big"))


def check_overlap(networks, findings):
    ranges = _ranges(networks)
    if not ranges:
        return
    try:
        with RtNetlink(label="the node") as nl:
            links = {link.index: link for link in nl.link_list()}
            addrs = nl.addr_list()
            routes = [r for fam in sorted({_FAMILY[x[6].family] for x in ranges})
                      for r in hostclash.gateway_routes(nl, fam)]
            local = nl.route_list(table=None)
            wide = {a.index for a in addrs if a.prefixlen < len(a.packed) * 8 and a.scope != RT_SCOPE_LINK}
            ends = {i for i, link in links.items()          # ptp host ends (a node's eth0 may be a veth too)
                    if link.kind == "veth" and link.link_netnsid is not None and i not in wide}
            for n, ptype, bridge, start, end, gw, subnet in ranges:
                pods = ends | {i for i, link in links.items() if bridge is not None and link.name == bridge}
                reasons = _reasons(nl, links, addrs, routes, local, pods, start, end, subnet)
                if reasons:
                    findings.append(_finding(nl, n, ptype, gw, subnet, reasons))
    except CNIError as e:
        findings.append(Finding("warning", "pod-range-overlap", "cannot read the node's addresses and routes", str(e),
                                "run skb doctor as root on the node"))


def _reasons(nl, links, addrs, routes, all_routes, pods, start, end, subnet):
    name = (lambda i: links[i].name if i in links else f"#{i}")
    out = []
    for a in addrs:
        if a.index in pods or a.family != _FAMILY[subnet.family]:
            continue
        ip = _ip(a.family, a.packed)
        on = Net(ip, a.prefixlen)
        if on.overlaps(subnet):
            mine = " (an address host-local may hand out)" if start.value <= ip.value <= end.value else ""
            out.append(f"{name(a.index)} has {a.cidr}{mine}")
    names = {}
    for route, hops in routes:
        for fam, packed, oif in hops:
            if oif not in pods and _ip(fam, packed) in subnet and fam == _FAMILY[subnet.family]:
                out.append(f"the node routes through {hostclash.route_text(nl, route, fam, packed, oif, names)}")
    for r in all_routes:
        if r.family != _FAMILY[subnet.family] or r.table == RT_TABLE_LOCAL or r.oif in pods or r.gw_packed \
                or r.protocol == RTPROT_KERNEL or r.dst_len < subnet.prefixlen:
            continue            # the kernel's routes are the networks of the addresses above
        if _ip(r.family, r.dst_packed) in subnet:
            out.append(f"the node routes {r.dst} to {name(r.oif)}")
    return out


def _finding(nl, n, ptype, gw, subnet, reasons):
    where = f'network "{n.name}" ({os.path.basename(n.source)})'
    family = _FAMILY[gw.family]
    wanted = [("gateway", family, gw.packed, str(gw))]
    refusal = hostclash.clashes(wanted, *hostclash.read(nl, wanted)) if ptype == "ptp" else []
    if refusal:
        outcome = (f"skb's ptp refuses every ADD: the gateway {gw} {refusal[0][2][3:]} (the reference ptp puts it on "
                   "each pod's host veth and cuts the node off from it)")
    else:
        outcome = ((f"{ptype}'s ADD accepts it (neither skb's nor the reference's can tell from the node that another "
                    "host uses an address), and " if ptype == "ptp" else "")
                   + "pods get addresses of a network the node is already on: other hosts there cannot reach them, "
                   "and host-local may hand out an address that is in use")
    return Finding("error", "pod-range-overlap", f"the pod range {subnet} of {where} overlaps the node's own network",
                   "; ".join(dict.fromkeys(reasons)) + f"; {outcome}",
                   f"give {where} a range outside the node's networks (ipam of {ptype} in {n.source}), e.g. the "
                   "node's pod CIDR from kubectl get node -o jsonpath='{.spec.podCIDRs}'", n.source)
