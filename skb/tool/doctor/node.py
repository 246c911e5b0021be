"""The node itself: lo, forwarding, rp_filter."""
from skb.cni.errors import CNIError
from skb.linux.netlink import RtNetlink
from skb.tool.doctor.findings import Finding
from skb.tool.doctor.files import BadFile, read_regular
from skb.tool.doctor.reservations import cached_records

ROUTED_TYPES = ("ptp", "bridge")     # plugins whose pod traffic the node routes


def _sysctl(name):
    return _sysctl_at(name.replace(".", "/"))


def _sysctl_at(path):
    try:
        return read_regular("/proc/sys/" + path, 4096).decode(errors="replace").strip()
    except BadFile:
        return None


def check_host_lo(findings):
    try:
        with RtNetlink(label="the node") as nl:
            lo = nl.link_get("lo")
    except CNIError as e:
        findings.append(Finding("warning", "host-lo-down", "cannot read the node's lo", str(e),
                                "run skb doctor as root on the node"))
        return
    if not lo.flags & 0x1:
        findings.append(Finding(
            "error", "host-lo-down", "the node's loopback interface lo is DOWN",
            f"lo (index {lo.index}) has no UP flag; everything that talks to localhost on the node fails "
            "(kubelet, the runtime's own sockets). A DEL of the reference loopback plugin aimed at a reused "
            "/proc/PID/ns/net does exactly this",
            "ip link set lo up; then find the runtime call that did it (skb log of the debug capture)"))


def check_routing(networks, cache_dir, findings):
    routed = [n for n in networks if any(p.type in ROUTED_TYPES for p in n.plugins)]
    if not routed:
        return
    names = ", ".join(f'"{n.name}"' for n in routed)
    subnets = [s for n in routed for s in _subnets(n)]
    v4 = not subnets or any(":" not in s for s in subnets)   # no subnet given (another IPAM): assume IPv4
    v6 = any(":" in s for s in subnets)
    if v4 and _sysctl("net.ipv4.ip_forward") == "0":
        findings.append(Finding(
            "error", "forwarding-off", "IPv4 forwarding is off on the node",
            f"net.ipv4.ip_forward = 0; pods of {names} are routed through the node and cannot reach anything "
            "beyond it (ptp turns it on at ADD, as bridge does with isGateway: if one ran, something turned it "
            "off again, e.g. a sysctl.d file or systemd-networkd's IPForward=no)",
            "sysctl -w net.ipv4.ip_forward=1 and persist it in /etc/sysctl.d/"))
    if v6 and _sysctl("net.ipv6.conf.all.forwarding") == "0":
        findings.append(Finding(
            "error", "forwarding-off", "IPv6 forwarding is off on the node",
            f"net.ipv6.conf.all.forwarding = 0 and {names} hand out IPv6 addresses",
            "sysctl -w net.ipv6.conf.all.forwarding=1 and persist it in /etc/sysctl.d/"))
    if not v4:
        return
    strict = [f"net.ipv4.conf.{k}.rp_filter = 1" for k in ("all", "default") if _sysctl(f"net.ipv4.conf.{k}.rp_filter") == "1"]
    for ifname in _host_side_interfaces(routed, cache_dir):
        if _sysctl_at(f"net/ipv4/conf/{ifname}/rp_filter") == "1":
            strict.append(f"net.ipv4.conf.{ifname}.rp_filter = 1 (host side of a pod)")
    homes = _uplinks()
    for ifname in homes or ():     # an uplink's own setting filters what arrives on it just the same
        if _sysctl_at(f"net/ipv4/conf/{ifname}/rp_filter") == "1" and not any(x.startswith("net.ipv4.conf.all.")
                                                                               for x in strict):
            strict.append(f"net.ipv4.conf.{ifname}.rp_filter = 1 (an uplink)")
    if strict:
        # ptp's own traffic passes strict filtering (each pod address has its own route through its own veth:
        # README, PTP.md). What it drops arrives on one interface with a reply that would leave by another:
        # a node with more than one uplink, or a pod on more than one routed network (its replies from the
        # second one leave by its default route, through the first one's veth).
        pods = _pods_on_several_networks(routed, cache_dir)
        multi = homes is None or len(homes) > 1 or bool(pods)
        why = []
        if homes is None:
            why.append("the node's interfaces could not be read")
        elif len(homes) > 1:
            why.append(f"this node has several uplinks ({', '.join(homes)}): traffic to pods from one of them may "
                       "be answered through another")
        if pods:
            why.append(f"pod{'s' if len(pods) > 1 else ''} {', '.join(pods[:3])}{' ...' if len(pods) > 3 else ''} "
                       "on several routed networks: replies from the second network's address leave through the "
                       "first one's veth")
        findings.append(Finding(
            "warning" if multi else "note", "rp-filter-strict",
            "strict reverse-path filtering where pod traffic passes",
            f"{'; '.join(strict)} (the kernel applies the larger of all and the interface). ptp's own traffic "
            f"passes it: each pod address of {names} has its own route through its own veth. Dropped silently: "
            "packets that arrive on one interface and whose reply would leave by another; "
            + ("; ".join(why) if multi else f"this node has one uplink ({', '.join(homes) or 'none'}) and no "
               "cached pod is on several routed networks, so none is expected (policy routing aside)"),
            "sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.default.rp_filter=2 (loose) and persist it "
            "in /etc/sysctl.d/" if multi else "nothing, unless the node gets another uplink, pods join a second "
            "routed network, or policy routing sends replies elsewhere"))


def _uplinks():
    """Names of the node's interfaces that are up and hold a global IPv4 address, but lo, bridges with no
    port but pods' veths (the node's own container networks) and veths into another netns holding only /32
    addresses (ptp's host ends); None when they cannot be read."""
    try:
        with RtNetlink(label="the node") as nl:
            links = {link.index: link for link in nl.link_list()}
            addrs = [a for a in nl.addr_list(family=2) if a.scope == 0]
    except CNIError:
        return None
    out = set()
    for a in addrs:
        link = links.get(a.index)
        if link is None or not link.up or link.name == "lo":
            continue
        if link.kind == "bridge" and not any(p.master == link.index and not _pod_end(p) for p in links.values()):
            continue     # (a bridge with pods' veths only, or none: the node's container network)
        if _pod_end(link) and all(x.prefixlen == 32 for x in addrs if x.index == a.index):
            continue
        out.add(link.name)
    return sorted(out)


def _pod_end(link):
    return link.kind == "veth" and link.link_netnsid is not None    # (its peer in another netns)


def _pods_on_several_networks(routed, cache_dir):
    """Container ids with cached attachments in more than one of the routed networks that hand out IPv4
    addresses (or whose IPAM is not known): rp_filter is IPv4's only."""
    names = {n.name for n in routed if not _subnets(n) or any(":" not in s for s in _subnets(n))}
    seen = {}
    for _path, rec in cached_records(cache_dir):
        cid, net = rec.get("containerId"), rec.get("networkName")
        if isinstance(cid, str) and cid and net in names:
            seen.setdefault(cid, set()).add(net)
    return sorted(cid for cid, nets in seen.items() if len(nets) > 1)


def _subnets(netconf):
    out = []
    for p in netconf.plugins:
        ipam = p.raw.get("ipam") if isinstance(p.raw.get("ipam"), dict) else {}
        out.append(ipam.get("subnet"))
        out += [r.get("subnet") for rs in ipam.get("ranges") or [] if isinstance(rs, list)
                for r in rs if isinstance(r, dict)]
    return [s for s in out if isinstance(s, str)]


def _host_side_interfaces(networks, cache_dir):
    """Host-side interface names (no sandbox) in the cached results of these networks."""
    names = {n.name for n in networks}
    out = []
    for _path, rec in cached_records(cache_dir):
        if rec.get("networkName") not in names:
            continue
        result = rec.get("result") if isinstance(rec.get("result"), dict) else {}
        ifaces = result.get("interfaces") if isinstance(result.get("interfaces"), list) else []
        for iface in ifaces:
            if isinstance(iface, dict) and isinstance(iface.get("name"), str) and not iface.get("sandbox") \
                    and _ifname_ok(iface["name"]) and iface["name"] not in out:
                out.append(iface["name"])
    return out


def _ifname_ok(name):
    """A name the kernel could have given an interface (so it is safe in a /proc/sys path)."""
    return 0 < len(name.encode()) <= 15 and name not in (".", "..") and not any(c in name for c in "/: \t\n\0")
