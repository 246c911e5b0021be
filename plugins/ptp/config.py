"""ptp's configuration: the reference's keys (docs/REFERENCE.md#ptp), declared once, each read only by the
commands that need it, and checked before anything is done; and what the IPAM plugin's addresses mean
for ptp (``Addressing``), which ADD and CHECK both derive.

CHECK and STATUS read every key ADD reads. A DEL reads only ``ipam.type`` and ``ipMasq`` (an invalid
``ipMasq`` is then taken as false, with a remark): a configuration edited into an invalid ``mtu`` or ``dns`` since ADD must not make DEL fail
forever and leak the veth and the address. GC reads only ``ipam.type``: it removes the masquerade rules
of every attachment that is no longer valid, whatever ``ipMasq`` says now.
"""
from skb.cni import netconf as config
from skb.cni.addr import IP, Net
from skb.cni.errors import CNIError, INTERNAL, INVALID_CONFIG
from skb.cni.netconf import BOOL, INT, STR, STRINGS, Key, obj
from skb.cni.result import DNS
from skb.plugin.delegate import IPAM_KEY

# ADD's keys are read by CHECK and STATUS too: they check the configuration ADD would use.
_ADD_CHECK_STATUS = ("ADD", "CHECK", "STATUS")


class DNSConf(config.Conf):
    """``dns``: when any of its fields is set, it replaces the IPAM result's DNS wholesale."""
    KEYS = (Key("nameservers", "nameservers", STRINGS), Key("domain", "domain", STR, default=""),
            Key("search", "search", STRINGS), Key("options", "options", STRINGS))
    __slots__ = tuple(k.attr for k in KEYS)

    def is_set(self):
        return bool(self.domain) or any(v is not None for v in (self.nameservers, self.search, self.options))


class PtpConf(config.NetConf):
    KEYS = (
        IPAM_KEY,
        Key("ipMasq", "ip_masq", BOOL, default=False, commands=_ADD_CHECK_STATUS + ("DEL",), lenient=("DEL",)),
        Key("ipMasqBackend", "masq_backend", STR, commands=_ADD_CHECK_STATUS),
        Key("mtu", "mtu", INT, default=0, commands=_ADD_CHECK_STATUS),
        Key("dns", "dns", obj(DNSConf), commands=_ADD_CHECK_STATUS),
    )
    __slots__ = tuple(k.attr for k in KEYS)

    def check(self, decoding, where):
        command = decoding.command
        if command in _ADD_CHECK_STATUS:
            if -(1 << 63) <= self.mtu < 0:  # the reference leaves a negative mtu to the kernel, as it does 0
                config.set_attr(self, "mtu", 0)     # (one its 64-bit int cannot hold, it refuses)
            if self.mtu and not 68 <= self.mtu <= 65535:
                raise CNIError(INVALID_CONFIG, f"invalid field mtu: {self.mtu} is out of range",
                               "mtu is the veth MTU in bytes (68 to 65535), or 0 (or, as in the reference, any "
                               "negative number) for the kernel default (1500)")
            if self.ip_masq:   # (read only then, as in the reference)
                # Local import: masquerading is set up by ADD and checked by CHECK only with ipMasq;
                # skb.linux.masq (and skb.linux.proc, which runs its programs) is not loaded otherwise.
                from skb.linux import masq
                masq.backend_from_config(self.masq_backend)
        if command in _ADD_CHECK_STATUS and self.dns is not None and not self.dns.is_set():
            config.set_attr(self, "dns", None)

    def result_dns(self):
        """The DNS of the result when the configuration sets any of its fields, else None."""
        d = self.dns
        return None if d is None else DNS(d.nameservers, d.domain or None, d.search, d.options)


class Addressing:
    """What one IPAM address means for ptp: ``ip``, ``prefix`` ("10.22.0.2/24"), ``subnet``
    ("10.22.0.0/24"), ``gateway``, ``host_bits`` (32 or 128), ``family`` (4 or 6)."""

    __slots__ = ("ip", "prefix", "subnet", "gateway", "host_bits", "family")

    def __init__(self, ipc):
        net = Net.parse(ipc.address)
        self.ip = ipc.ip
        self.prefix = ipc.address
        self.subnet = f"{net.network}/{net.prefixlen}"
        self.gateway = ipc.gateway
        self.family = ipc.family
        self.host_bits = 32 if ipc.family == 4 else 128


def plan_addresses(result):
    """The IPAM result's addresses as Addressing values; ptp needs at least one, each with a gateway."""
    if not result.ips:
        raise CNIError(INTERNAL, "IPAM plugin returned missing IP config",
                       "the IPAM plugin's result holds no address; check its ranges")
    out = []
    for ipc in result.ips:
        if ipc.gateway is None:
            raise CNIError(INVALID_CONFIG, f"IPAM result address {ipc.address} has no gateway",
                           "ptp routes each address through its gateway, which the host veth carries: give "
                           "the IPAM range a gateway")
        out.append(Addressing(ipc))
    for r in result.routes:
        if r.gw and IP.parse(r.gw).family != r.family:
            raise CNIError(INVALID_CONFIG, f"IPAM result route {r.dst} has gateway {r.gw}, of the other IP version",
                           "a route's gw must be of the IP version of its dst: fix the route in ipam.routes")
    _check_routes(result.routes, out)
    return out


def _check_routes(routes, addrs):
    """Refuse, before anything is made (code 7), the IPAM routes the pod could not have (review 16): one
    through a next hop other than its gateway (ptp's pods reach only their gateway: the kernel refused it
    late, code 999, while the reference installs a route that leads nowhere), one that is ptp's own (to the
    pod's subnet or its gateway), one twice (the reference fails on both with "file exists")."""
    gateways = {}
    own = {}
    for a in addrs:
        gateways.setdefault(a.family, []).append(IP.parse(a.gateway))
        own[(a.family, str(Net.parse(a.subnet).network), Net.parse(a.subnet).prefixlen, 254)] = "the pod's subnet"
        own[(a.family, str(IP.parse(a.gateway)), a.host_bits, 254)] = "the pod's gateway"
    seen = {}
    for i, r in enumerate(routes):
        gw = IP.parse(r.gw) if r.gw else None
        mine = gateways.get(r.family, [])
        if gw is not None and gw not in mine:
            raise CNIError(INVALID_CONFIG, f"IPAM result route {r.dst} via {r.gw}: the pod cannot reach {r.gw}",
                           (f"a ptp pod reaches only its gateway ({', '.join(str(g) for g in mine)}), which routes "
                            "everything else: leave gw out of the route in ipam.routes (it then goes through the "
                            "gateway) or set it to the gateway") if mine else
                           f"the pod has no address of IPv{r.family}: remove the route from ipam.routes, or give the "
                           "IPAM a range of that version")
        net = Net.parse(r.dst)
        key = (r.family, str(net.network), net.prefixlen, r.table or 254)
        if key in own:
            raise CNIError(INVALID_CONFIG, f"IPAM result route {r.dst} is ptp's own route to {own[key]}",
                           "ptp routes the pod's subnet and its gateway itself: remove the route from ipam.routes")
        if (key, r.priority or 0) in seen:
            raise CNIError(INVALID_CONFIG, f"IPAM result route {r.dst} is there twice (routes[{seen[(key, r.priority or 0)]}] "
                           f"and routes[{i}])", "remove one of them from ipam.routes")
        seen[(key, r.priority or 0)] = i
