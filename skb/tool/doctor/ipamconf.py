"""The networks' IPAM settings, checked without running anything (no ``--probe``).

What fails every ADD, found from the configuration and the node's files alone: a ptp without an IPAM
plugin; host-local ranges host-local refuses (a subnet that does not parse, has host bits set, or leaves
no address to hand out; a gateway, rangeStart or rangeEnd outside its subnet); a ``dataDir`` on a
read-only mount; a range set whose every address is reserved (the leaked ones named, as
``reservations`` finds them). The range rules are host-local's (plugins/hostlocal_ipam/config.py,
which the skb command may not import), written again here over ``skb.cni.addr``.
"""
import os

from skb.cni.addr import IP, Net
from skb.install.conflist import smallest_pod_prefix
from skb.tool.doctor.findings import Finding
from skb.tool.doctor.reservations import HOST_LOCAL_DATA_DIR, field, gc_fix, leaked_reservations, reservations

NEEDS_IPAM = ("ptp",)          # plugins whose ADD cannot work without an IPAM plugin


class RangeSet:
    """One range set of a host-local config: ``where`` (ipam.ranges[i]), its ranges as (start, end,
    gateway, subnet) values, and how many addresses they hand out."""

    __slots__ = ("where", "ranges")

    def __init__(self, where, ranges):
        self.where = where
        self.ranges = ranges

    def __contains__(self, ip):
        return any(start.family == ip.family and start.value <= ip.value <= end.value for start, end, _g, _s in self.ranges)

    @property
    def size(self):
        return sum(end.value - start.value + 1 - (gw is not None and start.value <= gw.value <= end.value)
                   for start, end, gw, _subnet in self.ranges)

    def __str__(self):
        return ",".join(f"{start}-{end}" for start, end, _gw, _subnet in self.ranges)


def _range(obj, where):
    """(start, end, gateway) of one range object, or the reason host-local refuses it."""
    if not isinstance(obj, dict):
        return f"{where} is not an object with a subnet"
    text = field(obj, "subnet")
    subnet = Net.parse(text) if isinstance(text, str) else None
    if subnet is None:
        return f"{where}.subnet {text!r} is not a network in CIDR notation (e.g. 10.244.1.0/24)"
    if subnet.has_host_bits():
        return f"{where}.subnet {text} has host bits set: the network is {subnet.network}/{subnet.prefixlen}"
    if subnet.prefixlen > smallest_pod_prefix(subnet.ip.bits):
        return (f"{where}.subnet {text} is too small: a /{subnet.prefixlen} leaves no address to hand out besides "
                f"the gateway (use at most /{smallest_pod_prefix(subnet.ip.bits)})")
    values = {}
    for key in ("rangeStart", "rangeEnd", "gateway"):
        raw = field(obj, key)
        if raw in (None, ""):
            continue
        ip = IP.parse(raw) if isinstance(raw, str) else None
        if ip is None:
            return f"{where}.{key} {raw!r} is not an IP address"
        if ip not in subnet:
            return f"{where}.{key} {ip} is outside its subnet {subnet}"
        values[key] = ip
    start = values.get("rangeStart", subnet.network + 1)
    end = values.get("rangeEnd", subnet.last - 1 if subnet.family == 4 else subnet.last)
    if start.value > end.value:
        return f"{where}.rangeStart {start} is after its rangeEnd {end}"
    return start, end, values.get("gateway", subnet.network + 1), subnet


def range_sets(ipam):
    """([RangeSet], [reason host-local refuses the config]) of a host-local IPAM section."""
    sets, problems = [], []
    legacy = field(ipam, "subnet")
    groups = []
    if legacy not in (None, ""):
        groups.append(("ipam", [ipam]))
    ranges = field(ipam, "ranges")
    if isinstance(ranges, list):
        groups += [(f"ipam.ranges[{i}]", rs) for i, rs in enumerate(ranges)]
    elif ranges is not None:
        problems.append("ipam.ranges is not a list of range sets")
    if not groups and not problems:
        problems.append("ipam has neither ranges nor subnet: host-local answers \"no IP ranges specified\"")
    for where, group in groups:
        if not isinstance(group, list) or not group:
            problems.append(f"{where} is not a non-empty list of ranges")
            continue
        parsed = []
        for j, obj in enumerate(group):
            r = _range(obj, where if where == "ipam" else f"{where}[{j}]")
            if isinstance(r, str):
                problems.append(r)
            else:
                parsed.append(r)
        if parsed and len(parsed) == len(group):
            sets.append(RangeSet(where, parsed))
    return sets, problems


def data_dir(ipam):
    d = field(ipam, "dataDir")
    return d if isinstance(d, str) and d else HOST_LOCAL_DATA_DIR


def _read_only(path):
    """The nearest existing directory at or above ``path`` when it is on a read-only mount, else None."""
    at = os.path.abspath(path)
    while not os.path.isdir(at) and at != "/":
        at = os.path.dirname(at)
    try:
        return at if os.statvfs(at).f_flag & os.ST_RDONLY else None
    except OSError:
        return None


def check_ipam(networks, cache_dir, findings, stores=True, bin_dirs=()):
    """Static findings about each network's plugins and IPAM (``stores``: also the read-only and exhausted
    stores); returns the (network name, store) pairs whose exhaustion was reported (their leaks are part
    of that finding)."""
    exhausted = set()
    for n in networks:
        where = f'network "{n.name}" ({os.path.basename(n.source)})'
        for p in n.plugins:
            ipam = p.raw.get("ipam")
            if p.type in NEEDS_IPAM and not (isinstance(ipam, dict) and isinstance(ipam.get("type"), str)
                                              and ipam.get("type")):
                what = "no \"ipam\" section" if not isinstance(ipam, dict) else "an \"ipam\" without \"type\""
                findings.append(Finding(
                    "error", "config-invalid", f"{p.type} in {where} has {what}",
                    f"{p.type} takes the pod's address from an IPAM plugin; without one every ADD fails (the "
                    "reference: \"no plugin name provided\")",
                    f'add "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "<pod CIDR>"}}]]}} to the {p.type} '
                    f"plugin in {n.source}", n.source))
                continue
            if not isinstance(ipam, dict) or p.ipam_type != "host-local":
                continue
            sets, problems = range_sets(ipam)
            if problems:
                findings.append(Finding(
                    "error", "config-invalid", f"host-local (IPAM of {p.type}) in {where} refuses its ranges",
                    "; ".join(problems) + "; every ADD fails with host-local's config error",
                    f"fix the ipam section of {p.type} in {n.source}", n.source))
            if not stores:
                continue
            store = os.path.join(data_dir(ipam), n.name)
            ro = _read_only(store)
            if ro is not None:
                findings.append(Finding(
                    "error", "config-invalid", f"host-local's dataDir for {where} is on a read-only mount",
                    f"{store} (the mount of {ro} is read-only): host-local writes a file per address there, so every "
                    "ADD fails", f"give ipam.dataDir a writable directory in {n.source}, or make {ro} writable",
                    n.source))
            for rs in sets:
                if _exhausted(n, rs, store, cache_dir, where, findings, bin_dirs):
                    exhausted.add((n.name, store))
    return exhausted


def _exhausted(netconf, rs, store, cache_dir, where, findings, bin_dirs=()):
    size = rs.size
    taken = [r for r in reservations(store) if (IP.parse(r[0]) or IP(0, -1)) in rs]
    if size <= 0 or len(taken) < size:
        return False
    leaked = [x for x in leaked_reservations(netconf.name, store, cache_dir) if (IP.parse(x[0]) or IP(0, -1)) in rs]
    if leaked:
        evidence = (f"{len(leaked)} of them leaked (no runtime will release them): "
                    + "; ".join(f"{ip} (container {cid}: {why})" for ip, cid, _i, _p, why, _a in leaked[:5])
                    + ("; ..." if len(leaked) > 5 else ""))
        fix = gc_fix(netconf, leaked, cache_dir, bin_dirs)
    else:
        evidence = "none of them is leaked: every reservation has a live attachment"
        fix = f"give {rs.where} more addresses, or run fewer pods on this node"
    findings.append(Finding(
        "error", "range-exhausted", f"host-local's range set {rs.where} ({rs}) of {where} is exhausted",
        f"all {size} addresses are reserved in {store}; {evidence}; every ADD fails with \"no IP addresses "
        "available in range set\"", fix, netconf.source))
    return True
