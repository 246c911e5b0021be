"""host-local's configuration: the reference plugin's keys, parsed into ranges and range sets.

Range sets, in the reference's order: ``runtimeConfig.ipRanges`` first, then the legacy single range
(``ipam.subnet`` with ``rangeStart``/``rangeEnd``/``gateway``), then ``ipam.ranges``. One address is
allocated per range set, and a set's index in that list names its ``last_reserved_ip.<index>`` file.

Stricter than the reference, with messages naming the range: a gateway outside its subnet or of the
other family, ranges that overlap, a rangeStart after its rangeEnd. Requested addresses come from
``CNI_ARGS`` ``IP=``, ``args.cni.ips`` and ``runtimeConfig.ips`` (all honoured, prefixes dropped).
"""
from skb.cni import netconf as cfg
from skb.cni.addr import IP, Net
from skb.cni.env import parse_cni_args
from skb.cni.errors import CNIError, INVALID_CONFIG

DEFAULT_DATA_DIR = "/var/lib/cni/networks"


class Range:
    """One contiguous block: ``start``..``end`` inclusive inside ``subnet``, with a ``gateway`` that is
    never handed out."""

    __slots__ = ("subnet", "start", "end", "gateway", "where")

    def __init__(self, subnet, start, end, gateway, where):
        self.subnet = subnet
        self.start = start
        self.end = end
        self.gateway = gateway
        self.where = where

    def __contains__(self, ip):
        return ip.family == self.start.family and self.start.value <= ip.value <= self.end.value

    @property
    def size(self):
        return self.end.value - self.start.value + 1 - (self.gateway is not None and self.gateway in self)

    def __str__(self):
        return f"{self.start}-{self.end}"

    def __repr__(self):
        return f"Range({self.subnet}, {self.start}-{self.end}, gw={self.gateway})"


class RangeSet:
    __slots__ = ("ranges", "index", "where")

    def __init__(self, ranges, index, where):
        self.ranges = ranges
        self.index = index
        self.where = where

    @property
    def family(self):
        return self.ranges[0].start.family

    def range_for(self, ip):
        for r in self.ranges:
            if ip in r:
                return r
        return None

    def __str__(self):
        return ",".join(str(r) for r in self.ranges)


class IPAMConfig:
    __slots__ = ("name", "range_sets", "routes", "data_dir", "resolv_conf", "requested")

    def __init__(self, name, range_sets, routes, data_dir, resolv_conf, requested):
        self.name = name
        self.range_sets = range_sets
        self.routes = routes
        self.data_dir = data_dir
        self.resolv_conf = resolv_conf
        self.requested = requested


def _bad(where, what, fix=""):
    return CNIError(INVALID_CONFIG, f"invalid range {where}: {what}", fix)


def _addr_field(obj, key, where):
    s = cfg.get(obj, key, str, where)
    if not s:
        return None
    ip = IP.parse(s)
    if ip is None:
        raise _bad(where, f"{key} {s!r} is not an IP address")
    return ip


def parse_range(obj, where):
    if not isinstance(obj, dict):
        raise CNIError(INVALID_CONFIG, f"invalid field {where}: expected an object with a subnet",
                       'e.g. {"subnet": "10.1.0.0/24"}')
    text = cfg.get(obj, "subnet", str, where, required=True)
    subnet = Net.parse(text)
    if subnet is None:
        raise _bad(where, f"subnet {text!r} is not a network in CIDR notation", 'e.g. "10.1.0.0/24" or "fd00::/64"')
    if subnet.has_host_bits():
        raise _bad(where, f"Network has host bits set. For a subnet mask of length {subnet.prefixlen} the "
                          f"network address is {subnet.network}", f'write "{subnet.network}/{subnet.prefixlen}"')
    if subnet.prefixlen > subnet.ip.bits - 2:
        raise _bad(where, f"Network {subnet} too small to allocate from",
                   f"use at most /{subnet.ip.bits - 2} (a /{subnet.prefixlen} leaves no address to hand out)")
    start = _addr_field(obj, "rangeStart", where)
    end = _addr_field(obj, "rangeEnd", where)
    gateway = _addr_field(obj, "gateway", where)
    for key, ip in (("rangeStart", start), ("rangeEnd", end)):
        if ip is not None and ip not in subnet:
            raise _bad(where, f"{key} {ip} not in network {subnet}")
    if gateway is not None and gateway not in subnet:
        fam = "an IPv%d address in an IPv%d subnet" % (gateway.family, subnet.family) \
            if gateway.family != subnet.family else f"outside the subnet {subnet}"
        raise _bad(where, f"gateway {gateway} is {fam}",
                   "the gateway must be an address of the range's own subnet (or leave it out: it "
                   "defaults to the subnet's first address)")
    network = subnet.network
    if start is None:
        start = network + 1
    if end is None:  # IPv4: the broadcast address is excluded; IPv6 has none
        end = subnet.last - 1 if subnet.family == 4 else subnet.last
    if gateway is None:
        gateway = network + 1
    if start.value > end.value:
        raise _bad(where, f"rangeStart {start} is after rangeEnd {end}")
    return Range(subnet, start, end, gateway, where)


def _parse_range_set(obj, index, where):
    if not isinstance(obj, list):
        raise CNIError(INVALID_CONFIG, f"invalid field {where}: expected a list of ranges",
                       'each range set is a list, e.g. "ranges": [[{"subnet": "10.1.0.0/24"}]]')
    if not obj:
        raise CNIError(INVALID_CONFIG, f"invalid range set {where}: empty range set", "give it at least one range")
    # The legacy single range's keys sit on the ipam object itself: name it "ipam", not "ipam[0]".
    ranges = [parse_range(r, where if where == "ipam" else f"{where}[{i}]") for i, r in enumerate(obj)]
    for r in ranges[1:]:
        if r.subnet.family != ranges[0].subnet.family:
            raise CNIError(INVALID_CONFIG, f"invalid range set {where}: mixed address families",
                           f"{ranges[0].where} is IPv{ranges[0].subnet.family} and {r.where} IPv{r.subnet.family}; "
                           "put IPv4 and IPv6 in separate range sets to get one address of each")
    _no_overlap(ranges)
    return RangeSet(ranges, index, where)


def _no_overlap(ranges):
    for i, a in enumerate(ranges):
        for b in ranges[i + 1:]:
            if a.start.family == b.start.family and a.start.value <= b.end.value and b.start.value <= a.end.value:
                raise CNIError(INVALID_CONFIG, f"ranges {a.where} ({a}) and {b.where} ({b}) overlap",
                               "an address must belong to one range only")


def _requested(conf, args_raw, where_ipam):
    ips = []

    def add(text, source):
        ip = IP.parse(text.split("/", 1)[0]) if isinstance(text, str) else None
        if ip is None:
            raise CNIError(INVALID_CONFIG, f"invalid requested IP {text!r} in {source}",
                           "requested addresses are IP addresses, optionally with a /prefix")
        if ip not in ips:
            ips.append(ip)

    env_args = parse_cni_args(args_raw, {"IP": str})
    if env_args.get("IP"):
        add(env_args["IP"], "CNI_ARGS IP=")
    cni_args = conf.args.get("cni") if isinstance(conf.args, dict) else None
    if isinstance(cni_args, dict):
        for i, ip in enumerate(cfg.get(cni_args, "ips", list, "args.cni", default=[])):
            add(ip, f"args.cni.ips[{i}]")
    for i, ip in enumerate(cfg.get(conf.runtime_config, "ips", list, "runtimeConfig", default=[])):
        add(ip, f"runtimeConfig.ips[{i}]")
    return ips


def _routes(ipam):
    out = []
    for i, r in enumerate(cfg.get(ipam, "routes", list, "ipam", default=[])):
        where = f"ipam.routes[{i}]"
        if not isinstance(r, dict):
            raise CNIError(INVALID_CONFIG, f"invalid field {where}: expected an object", 'e.g. {"dst": "0.0.0.0/0"}')
        dst = cfg.get(r, "dst", str, where, required=True)
        if Net.parse(dst) is None:
            raise CNIError(INVALID_CONFIG, f"invalid field {where}.dst: {dst!r} is not a network in CIDR notation")
        gw = cfg.get(r, "gw", str, where)
        if gw and IP.parse(gw) is None:
            raise CNIError(INVALID_CONFIG, f"invalid field {where}.gw: {gw!r} is not an IP address")
        out.append(r)
    return out


def parse(conf, args_raw, command):
    """Parse ``conf`` (skb.cni.netconf.NetConf) for ``command``. STATUS and GC have no CNI_ARGS to honour."""
    try:
        ipam = cfg.lookup(conf.raw, "ipam")
    except KeyError:
        ipam = None
    if not isinstance(ipam, dict):
        raise CNIError(INVALID_CONFIG, "IPAM config missing 'ipam' key",
                       'host-local reads its settings from the "ipam" object, e.g. "ipam": {"type": "host-local", '
                       '"ranges": [[{"subnet": "10.1.0.0/24"}]]}')
    sets = []
    for i, rs in enumerate(cfg.get(conf.runtime_config, "ipRanges", list, "runtimeConfig", default=[])):
        sets.append((rs, f"runtimeConfig.ipRanges[{i}]"))
    if cfg.get(ipam, "subnet", str, "ipam"):
        legacy = {k: ipam[k] for k in ("subnet", "rangeStart", "rangeEnd", "gateway") if k in ipam}
        sets.append(([legacy], "ipam"))
    for i, rs in enumerate(cfg.get(ipam, "ranges", list, "ipam", default=[])):
        sets.append((rs, f"ipam.ranges[{i}]"))
    if not sets:
        raise CNIError(INVALID_CONFIG, "no IP ranges specified",
                       'add "ranges": [[{"subnet": "10.1.0.0/24"}]] (or "subnet") to the ipam object')
    range_sets = [_parse_range_set(rs, i, where) for i, (rs, where) in enumerate(sets)]
    for i, a in enumerate(range_sets):
        for b in range_sets[i + 1:]:
            for ra in a.ranges:
                for rb in b.ranges:
                    if ra.subnet.overlaps(rb.subnet):
                        raise CNIError(INVALID_CONFIG, f"range set {a.where} overlaps with {b.where}",
                                       f"{ra.subnet} and {rb.subnet} share addresses; each range set must be disjoint")
    if conf.cni_version in ("0.1.0", "0.2.0"):
        fams = [rs.family for rs in range_sets]
        if fams.count(4) > 1 or fams.count(6) > 1:
            raise CNIError(INVALID_CONFIG,
                           f"CNI version {conf.cni_version} does not support more than 1 address per family",
                           "use cniVersion 0.3.0 or later for several range sets of one family")
    requested = _requested(conf, args_raw, "ipam") if command in ("ADD", "DEL", "CHECK") else []
    data_dir = cfg.get_path(ipam, "dataDir", "ipam", DEFAULT_DATA_DIR)
    return IPAMConfig(conf.name, range_sets, _routes(ipam), data_dir,
                      cfg.get_path(ipam, "resolvConf", "ipam"), requested)


# resolv.conf is a few lines (glibc reads at most 3 nameservers, 6 search domains); the bound keeps a
# resolvConf naming a huge file harmless.
RESOLV_CONF_LIMIT = 1 << 20


def read_resolv_conf(path):
    """The reference's resolv.conf reading: nameserver, domain, search, options lines; comments skipped.
    The file is opened safely (a regular file only, never a FIFO or a device) and read with a bound."""
    from skb.linux import files
    data = files.read_regular(path, "ipam.resolvConf", RESOLV_CONF_LIMIT,
                              "point resolvConf at a readable resolv.conf file, or remove it")
    lines = data.decode("utf-8", "replace").splitlines()
    dns = {"nameservers": [], "domain": "", "search": [], "options": []}
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        fields = line.split()
        if len(fields) < 2:
            continue
        key = fields[0]
        if key == "nameserver":
            dns["nameservers"].append(fields[1])
        elif key == "domain":
            dns["domain"] = fields[1]
        elif key == "search":
            dns["search"].extend(fields[1:])
        elif key == "options":
            dns["options"].extend(fields[1:])
    return dns
