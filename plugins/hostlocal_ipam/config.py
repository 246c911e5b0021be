"""host-local's configuration: the reference plugin's keys, declared once and decoded with Go's rules
(skb.cni.netconf), then made into ranges and range sets.

Range sets, in the reference's order: ``runtimeConfig.ipRanges`` first, then the legacy single range
(``ipam.subnet`` with ``rangeStart``/``rangeEnd``/``gateway``), then ``ipam.ranges``. One address is
allocated per range set, and a set's index in that list names its ``last_reserved_ip.<index>`` file.

Stricter than the reference, with messages naming the range: a gateway outside its subnet or of the
other family, ranges that overlap, a rangeStart after its rangeEnd. Requested addresses come from
``CNI_ARGS`` ``IP=``, ``args.cni.ips`` and ``runtimeConfig.ips`` (all honoured, prefixes dropped).
DEL and GC read only ``ipam.dataDir``: a configuration whose ranges became invalid must not block them.
"""
from skb.cni import netconf as cfg
from skb.cni.addr import IP, Net
from skb.cni.env import parse_cni_args
from skb.cni.errors import CNIError, INVALID_CONFIG
from skb.cni.netconf import INT, PATH, RAW, STR, Key, list_of, obj

DEFAULT_DATA_DIR = "/var/lib/cni/networks"
# The commands that read the ranges (and every other key ADD reads: CHECK and STATUS check the
# configuration ADD would use); DEL and GC read only the store's location.
_RANGES = ("ADD", "CHECK", "STATUS")


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


def _bad(where, what, fix=""):
    return CNIError(INVALID_CONFIG, f"invalid range {where}: {what}", fix)


def _addr_field(text, key, where):
    if not text:
        return None
    ip = IP.parse(text)
    if ip is None:
        raise _bad(where, f"{key} {text!r} is not an IP address",
                   'write an address alone, e.g. "10.1.0.1" or "fd00::1" (no prefix length, spaces or zone)')
    return ip


def parse_range(rc, where):
    """The Range of a decoded ``RangeConf`` found at path ``where``."""
    text = rc.subnet
    subnet = Net.parse(text)
    if subnet is None:
        raise _bad(where, f"subnet {text!r} is not a network in CIDR notation", 'e.g. "10.1.0.0/24" or "fd00::/64"')
    if subnet.family == 4 and ":" in text:   # the reference fails: "IPNet IP and Mask version mismatch"
        raise _bad(where, f"subnet {text!r} is an IPv4 network written as IPv6 (IPv4-mapped)",
                   f'write "{subnet.network}/{subnet.prefixlen}"')
    if subnet.prefixlen == 0:   # the reference finds no address to hand out in one
        raise _bad(where, f"subnet {subnet} holds every address",
                   'a pod range is a block of its own, e.g. "10.1.0.0/16" or "fd00::/64"')
    if subnet.has_host_bits():
        raise _bad(where, f"Network has host bits set. For a subnet mask of length {subnet.prefixlen} the "
                          f"network address is {subnet.network}", f'write "{subnet.network}/{subnet.prefixlen}"')
    if subnet.prefixlen > subnet.ip.bits - 2:
        raise _bad(where, f"Network {subnet} too small to allocate from",
                   f"use at most /{subnet.ip.bits - 2} (a /{subnet.prefixlen} leaves no address to hand out)")
    start = _addr_field(rc.range_start, "rangeStart", where)
    end = _addr_field(rc.range_end, "rangeEnd", where)
    gateway = _addr_field(rc.gateway, "gateway", where)
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


def _parse_range_set(confs, index, where):
    if not confs:
        raise CNIError(INVALID_CONFIG, f"invalid range set {where}: empty range set", "give it at least one range")
    # The legacy single range's keys sit on the ipam object itself: name it "ipam", not "ipam[0]".
    ranges = [parse_range(rc, where if where == "ipam" else f"{where}[{i}]") for i, rc in enumerate(confs)]
    for r in ranges[1:]:
        if r.subnet.family != ranges[0].subnet.family:
            raise CNIError(INVALID_CONFIG, f"invalid range set {where}: mixed address families",
                           f"{ranges[0].where} is IPv{ranges[0].subnet.family} and {r.where} IPv{r.subnet.family}; "
                           "put IPv4 and IPv6 in separate range sets to get one address of each")
    _no_overlap(ranges)
    rset = RangeSet(ranges, index, where)
    if not any(r.size for r in ranges):   # the reference fails every ADD, and STATUS could not tell
        raise CNIError(INVALID_CONFIG, f"invalid range set {where} ({rset}): it has no address to hand out: its "
                                       "only address is its gateway",
                       "widen rangeStart-rangeEnd, or give the range another gateway")
    return rset


def _no_overlap(ranges):
    """No two ranges of a set share an address. Sorted by start, a range overlaps an earlier one exactly
    when it starts before the furthest end seen so far: n log n (1,500 ranges took seconds pairwise)."""
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i].start.family, ranges[i].start.value))
    far = None
    for i in order:
        r = ranges[i]
        if far is not None and far.start.family == r.start.family and r.start.value <= far.end.value:
            a, b = (far, r) if ranges.index(far) < i else (r, far)
            raise CNIError(INVALID_CONFIG, f"ranges {a.where} ({a}) and {b.where} ({b}) overlap",
                           "an address must belong to one range only")
        if far is None or far.start.family != r.start.family or r.end.value > far.end.value:
            far = r


def _sets_disjoint(range_sets):
    """No two range sets share an address (their subnets are compared, as in the reference). Subnets are
    nested or disjoint, so after sorting by (start, widest first) the subnets still open at a subnet's
    start all contain it: a stack of at most 129 of them replaces the pairwise loop."""
    items = sorted(((r.subnet.family, r.subnet.network.value, -r.subnet.last.value, rs.index, r)
                    for rs in range_sets for r in rs.ranges), key=lambda t: t[:4])
    stack = []      # (family, last value, set index, range), each containing the next one
    for family, first, neg_last, index, r in items:
        while stack and (stack[-1][0] != family or stack[-1][1] < first):
            stack.pop()
        for _fam, _last, other, ro in stack:
            if other != index:
                a, b = sorted((other, index))
                ra, rb = (ro, r) if other < index else (r, ro)
                raise CNIError(INVALID_CONFIG, f"range set {range_sets[a].where} overlaps with {range_sets[b].where}",
                               f"{ra.subnet} and {rb.subnet} share addresses; each range set must be disjoint")
        stack.append((family, -neg_last, index, r))


def _requested_ip(text, source, ips):
    # An address, or an address with a prefix length that must be valid (Go parses it as a CIDR).
    if not isinstance(text, str):
        ip = None
    elif "/" in text:
        net = Net.parse(text)
        ip = None if net is None else net.ip
    else:
        ip = IP.parse(text)
    if ip is None:
        raise CNIError(INVALID_CONFIG, f"invalid requested IP {text!r} in {source}",
                       "requested addresses are IP addresses, optionally with a /prefix")
    if ip not in ips:
        ips.append(ip)


# --------------------------------------------------------------------------------------------------
# the keys, as the reference declares them

_U32, _U8 = 0xFFFFFFFF, 0xFF


class RangeConf(cfg.Conf):
    """One range: ``{"subnet": ..., "rangeStart": ..., "rangeEnd": ..., "gateway": ...}``."""
    KEYS = (Key("subnet", "subnet", STR, required=True), Key("rangeStart", "range_start", STR, default=""),
            Key("rangeEnd", "range_end", STR, default=""), Key("gateway", "gateway", STR, default=""))
    __slots__ = tuple(k.attr for k in KEYS)


_RANGE_SETS = list_of(list_of(obj(RangeConf), "a list of ranges"))


class RouteConf(cfg.Conf):
    """One of ``ipam.routes``, as Go's types.Route reads it."""
    KEYS = (Key("dst", "dst", STR, required=True), Key("gw", "gw", STR, default=""),
            Key("mtu", "mtu", INT, default=0), Key("advmss", "advmss", INT, default=0),
            Key("priority", "priority", INT, default=0), Key("table", "table", INT),
            Key("scope", "scope", INT))
    __slots__ = tuple(k.attr for k in KEYS)

    def check(self, decoding, where):
        if Net.parse(self.dst) is None:
            raise CNIError(INVALID_CONFIG, f"invalid field {where}.dst: {self.dst!r} is not a network in CIDR notation",
                           'e.g. "0.0.0.0/0", "10.96.0.0/12" or "::/0" (no zone)')
        if self.gw and IP.parse(self.gw) is None:
            raise CNIError(INVALID_CONFIG, f"invalid field {where}.gw: {self.gw!r} is not an IP address",
                           'write an address alone, e.g. "10.1.0.1", or leave gw out for the range\'s gateway')
        if self.gw and IP.parse(self.gw).family != Net.parse(self.dst).family:
            raise CNIError(INVALID_CONFIG, f"invalid field {where}.gw: {self.gw} is not of the IP version of "
                                           f"dst {self.dst}", "give the route a gateway of its own IP version")
        for key, top in (("mtu", _U32), ("advmss", _U32), ("priority", _U32), ("table", _U32), ("scope", _U8)):
            value = getattr(self, key)
            if value is not None and not 0 <= value <= top:
                raise CNIError(INVALID_CONFIG, f"invalid field {where}.{key}: {value} is out of range (0 to {top})")
        # A route's mtu and advmss are applied (ptp, 1.1.0): the kernel clamps what is too large and a pod
        # cannot use a route below its IP version's minimum MTU. 0 is unset.
        low = 1280 if Net.parse(self.dst).family == 6 else 68
        if self.mtu and not low <= self.mtu <= 65535:
            raise CNIError(INVALID_CONFIG, f"invalid field {where}.mtu: {self.mtu} is out of range ({low} to 65535 "
                                           f"for IPv{Net.parse(self.dst).family}, or 0 for the link's)")
        if self.advmss and not self.advmss <= 65535:
            raise CNIError(INVALID_CONFIG, f"invalid field {where}.advmss: {self.advmss} is out of range (0 to 65535)")


class IPAMConf(cfg.Conf):
    """The ``ipam`` object: the store's location for every command, the ranges for those that read them."""
    KEYS = (Key("type", "type", STR, default=""),
            Key("dataDir", "data_dir", PATH, default=""),
            Key("resolvConf", "resolv_conf", PATH, default="", commands=_RANGES),
            Key("routes", "routes", list_of(obj(RouteConf)), default=(), commands=_RANGES),
            Key("ranges", "ranges", _RANGE_SETS, default=(), commands=_RANGES),
            Key("subnet", "subnet", STR, default="", commands=_RANGES),
            Key("rangeStart", "range_start", STR, default="", commands=_RANGES),
            Key("rangeEnd", "range_end", STR, default="", commands=_RANGES),
            Key("gateway", "gateway", STR, default="", commands=_RANGES))
    __slots__ = tuple(k.attr for k in KEYS)

    @property
    def store_dir(self):
        """``dataDir``, or its default when absent or empty."""
        return self.data_dir or DEFAULT_DATA_DIR

    def legacy_range(self):
        """The single range written on the ipam object itself (``subnet`` ...), as a RangeConf; None without."""
        if not self.subnet:
            return None
        rc = RangeConf.__new__(RangeConf)
        for attr in RangeConf.__slots__:
            cfg.set_attr(rc, attr, getattr(self, attr))
        return rc


class RuntimeConf(cfg.Conf):
    """``runtimeConfig``: the ``ipRanges`` and ``ips`` capabilities."""
    KEYS = (Key("ipRanges", "ip_ranges", _RANGE_SETS, default=(), commands=_RANGES),
            Key("ips", "ips", list_of(RAW), default=(), commands=("ADD", "CHECK")))
    __slots__ = tuple(k.attr for k in KEYS)


class CNIArgs(cfg.Conf):
    KEYS = (Key("ips", "ips", list_of(RAW), default=(), commands=("ADD", "CHECK")),)
    __slots__ = ("ips",)


class ArgsConf(cfg.Conf):
    """``args``: host-local reads ``args.cni.ips``."""
    KEYS = (Key("cni", "cni", obj(CNIArgs, resets=True)),)
    __slots__ = ("cni",)


class HostLocalConf(cfg.NetConf):
    """host-local's configuration; ``range_sets`` (for ADD, CHECK and STATUS) are made from its ranges."""
    KEYS = (Key("ipam", "ipam", obj(IPAMConf, resets=True)),
            Key("runtimeConfig", "runtime_config", obj(RuntimeConf)),
            Key("args", "args", obj(ArgsConf, resets=True)))
    __slots__ = ("ipam", "runtime_config", "args", "range_sets", "_spans")

    def check(self, decoding, where):
        if self.ipam is None:
            raise CNIError(INVALID_CONFIG, "IPAM config missing 'ipam' key",
                           'host-local reads its settings from the "ipam" object, e.g. "ipam": {"type": '
                           '"host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}')
        cfg.set_attr(self, "_spans", None)
        if decoding.command in _RANGES:
            cfg.set_attr(self, "range_sets", self._range_sets())

    def _range_sets(self):
        ipam, runtime = self.ipam, self.runtime_config
        sets = []
        for i, rs in enumerate(runtime.ip_ranges if runtime is not None else ()):
            sets.append((rs, f"runtimeConfig.ipRanges[{i}]"))
        legacy = ipam.legacy_range()
        if legacy is not None:
            sets.append(([legacy], "ipam"))
        for i, rs in enumerate(ipam.ranges):
            sets.append((rs, f"ipam.ranges[{i}]"))
        if not sets:
            raise CNIError(INVALID_CONFIG, "no IP ranges specified",
                           'add "ranges": [[{"subnet": "10.1.0.0/24"}]] (or "subnet") to the ipam object')
        range_sets = [_parse_range_set(rs, i, where) for i, (rs, where) in enumerate(sets)]
        _sets_disjoint(range_sets)
        if self.cni_version in ("0.1.0", "0.2.0"):
            fams = [rs.family for rs in range_sets]
            if fams.count(4) > 1 or fams.count(6) > 1:
                raise CNIError(INVALID_CONFIG,
                               f"CNI version {self.cni_version} does not support more than 1 address per family",
                               "use cniVersion 0.3.0 or later for several range sets of one family")
        return range_sets

    def requested(self, cni_args):
        """The addresses asked for (ADD, CHECK): CNI_ARGS ``IP=``, ``args.cni.ips``, ``runtimeConfig.ips``."""
        ips = []
        env_args = parse_cni_args(cni_args, {"IP": str})
        if env_args.get("IP"):
            _requested_ip(env_args["IP"], "CNI_ARGS IP=", ips)
        cni = self.args.cni if self.args is not None else None
        for i, ip in enumerate(cni.ips if cni is not None else ()):
            _requested_ip(ip, f"args.cni.ips[{i}]", ips)
        for i, ip in enumerate(self.runtime_config.ips if self.runtime_config is not None else ()):
            _requested_ip(ip, f"runtimeConfig.ips[{i}]", ips)
        return ips

    def range_set_for(self, ip):
        """The range set with a range holding ``ip``, or None: a bisection over every range (ranges of
        different sets, and of one set, are disjoint), not a walk over every set."""
        # Local import: bisect (and _bisect) only for an ADD that places a requested or held address.
        import bisect
        if self._spans is None:
            spans = sorted((r.start.family, r.start.value, r.end.value, rs) for rs in self.range_sets
                           for r in rs.ranges)
            cfg.set_attr(self, "_spans", (spans, [(f, v) for f, v, _e, _rs in spans]))
        spans, starts = self._spans
        i = bisect.bisect_right(starts, (ip.family, ip.value)) - 1
        if i >= 0:
            family, _start, end, rs = spans[i]
            if family == ip.family and ip.value <= end:
                return rs
        return None


# resolv.conf is a few lines (glibc reads at most 3 nameservers, 6 search domains); the bound keeps a
# resolvConf naming a huge file harmless.
RESOLV_CONF_LIMIT = 1 << 20


def read_resolv_conf(path):
    """The reference's resolv.conf reading: nameserver, domain, search, options lines; comments skipped.
    The file is opened safely (a regular file only, never a FIFO or a device) and read with a bound."""
    from skb.linux import files     # only for a configuration with resolvConf
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
