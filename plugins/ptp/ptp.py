"""ptp: a veth pair per attachment, routed point-to-point through the host.

Compatible with the reference ptp (docs/REFERENCE.md#ptp): same config keys, same kernel state, same
result. The container end is ``CNI_IFNAME``; the host end is ``veth`` + 8 hex digits. The host end
carries each gateway as a /32 (/128) and a ``scope host`` route to each container address; the
container keeps its address with the IPAM prefix, but its connected route is replaced by
``<gw>/32 scope link`` plus ``<subnet> via <gw>``. The pair is created in one request with the
container end made directly inside the container's netns (moving a device costs ~15 ms).

Where it is better than the reference:
- A failed ADD leaves nothing behind: each side effect registers its undo as soon as it succeeds
  (``skb.plugin.undo``), and any failure unwinds them all, the IPAM reservation included. The netns is opened
  (and checked by the host-netns guard) before the IPAM plugin runs, so a bad CNI_NETNS costs no address,
  and IP forwarding is switched on last, once nothing can fail any more: a failed ADD never changes it.
- DEL works without the netns. The host end's name is derived from (network, container ID, ifname), so
  DEL finds and removes it, with its host routes, even when CNI_NETNS is empty (ctr, CRI after a crash)
  or gone; masquerade rules are removed by name, not by the addresses read from a link that may be
  gone. The IPAM reservation is released last, once nothing routes to the address any more: a new pod
  given the same address cannot have its host route shadowed by the old veth.
- DEL deletes only what it can prove is this attachment's (network, container ID, ifname), never a name
  taken from its input alone. ADD gives the host veth an alias (``ip link ... alias``) holding a hash of
  the attachment: a host veth is ours when it carries that alias (whatever its name: a renamed one, or
  the random name ADD falls back to on a clash), or when it has the derived name and no other
  attachment's alias (made before aliases). CNI_IFNAME in the container is deleted only when it is one
  end of a pair whose host end is proven ours that way, the pairing checked by ifindex *and* netns id
  (ifindexes are per netns: a bare index match proves nothing). A DEL for a network whose ADD failed
  ("already exists") therefore leaves the other network's interface alone, and a ``prevResult`` naming
  some other host veth changes nothing. A pair made by another implementation (Go's ptp: random name,
  no alias) is deleted only when the runtime's cached result names its host end and the kernel shows
  it is CNI_IFNAME's peer in CNI_NETNS; without a cached result it is left to the netns's deletion.
- The host-netns guard (``skb.linux.guard``): ADD and CHECK refuse the node's own netns; DEL never touches
  CNI_IFNAME there but still removes its own host veth and releases the reservation.
- CHECK verifies both ends: container link, addresses and routes, the host veth, its gateway addresses
  and host routes, masquerade rules, MTU and forwarding.
- STATUS asks the IPAM plugin; GC asks the IPAM plugin and removes masquerade rules (both backends) of
  attachments no longer in ``cni.dev/valid-attachments``.
- IPv6 without DAD: addresses are added with IFA_F_NODAD on both ends and the host veth gets
  ``accept_dad=0`` (for its link-local address). A point-to-point link has nobody to clash with; the
  container's routes need a non-tentative source address (the reference waits for DAD, about a second)
  and the node solicits forwarded traffic's next hop from its link-local address, so pod-to-pod IPv6
  would otherwise fail for the first seconds.

rp_filter: strict reverse-path filtering (``net.ipv4.conf.all.rp_filter=1``) on the node needs nothing
from ptp: every container address has its own ``scope host`` route through its own host veth, so the
reverse path of anything arriving from a container is the interface it arrived on, and the node
answers the container from the gateway address on that same veth. No sysctl is set and there is no
config key for it; tests/integration/test_ptp.py proves kubelet-style probes, pings and pod-to-pod
traffic under strict rp_filter on the node and in the pods.
"""
from skb.cni import jsonio
from skb.cni import netconf as config
from skb.linux import guard
from skb.plugin import delegate as ipam
from skb.linux import netns
from skb.plugin import skel
from skb.linux import sysctl
from skb.cni.addr import Net
from skb.cni.digest import sha512_hex
from skb.cni.errors import CNIError, INTERNAL, INVALID_CONFIG
from skb.linux.netlink_codec import IFA_F_NODAD, RT_SCOPE_HOST, RT_SCOPE_LINK, RT_SCOPE_UNIVERSE
from skb.linux.netlink import Exists, NotFound, RtNetlink
from skb.cni.result import DNS, Interface, Result, parse_prev_result
from skb.plugin.undo import UndoStack

_VETH_TRIES = 10


class PtpConf:
    """The ptp keys of the configuration, checked (code 7 naming the field) before anything is done."""

    __slots__ = ("ip_masq", "masq_backend", "mtu", "dns")

    def __init__(self, ip_masq=False, masq_backend=None, mtu=0, dns=None):
        self.ip_masq = ip_masq
        self.masq_backend = masq_backend
        self.mtu = mtu
        self.dns = dns


def parse_conf(conf, command="ADD"):
    raw = conf.raw
    ipam.plugin_type(conf)  # type-checks ipam and ipam.type
    if command in ("DEL", "GC"):
        # Cleaning up needs only the IPAM plugin and whether rules may exist: a config edited into an
        # invalid mtu or dns since ADD must not make DEL fail forever and leak the veth and the address.
        return PtpConf(raw.get("ipMasq") is True)
    ip_masq = config.get(raw, "ipMasq", bool, "", default=False)
    backend = config.get(raw, "ipMasqBackend", str, "", default=None)
    if ip_masq and command != "DEL":   # DEL tears down both backends whatever the configuration says
        from skb.linux import masq
        backend = masq.backend_from_config(backend)
    mtu = config.get(raw, "mtu", int, "", default=0)
    if mtu and not 68 <= mtu <= 65535:
        raise CNIError(INVALID_CONFIG, f"invalid field mtu: {mtu} is out of range",
                       "mtu is the veth MTU in bytes (68 to 65535), or 0 for the kernel default (1500)")
    return PtpConf(ip_masq, backend, mtu, _parse_dns(raw))


def _parse_dns(raw):
    """The ``dns`` of the config when any of its fields is set (it then replaces the IPAM result's DNS
    wholesale, as in the reference), else None."""
    obj = config.get(raw, "dns", dict, "", default=None)
    if obj is None:
        return None
    fields = {}
    for key, kind in (("nameservers", list), ("domain", str), ("search", list), ("options", list)):
        value = config.get(obj, key, kind, "dns", default=None)
        if kind is list and value is not None:
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise CNIError(INVALID_CONFIG, f"invalid field dns.{key}[{i}]: expected a string",
                                   f"fix dns.{key} in the network configuration")
        fields[key] = value
    lists_unset = all(fields[k] is None for k in ("nameservers", "search", "options"))
    if lists_unset and not fields["domain"]:
        return None
    return DNS(fields["nameservers"], fields["domain"], fields["search"], fields["options"])


def host_veth_name(network, container_id, ifname):
    """``veth`` + 8 hex digits of a hash of the attachment: DEL can find the host end without the netns."""
    return "veth" + sha512_hex(f"{network}\0{container_id}\0{ifname}")[:8]


TAG_PREFIX = "skb-cni ptp "


def attachment_tag(network, container_id, ifname):
    """The alias ADD gives the host veth: which attachment it belongs to, whatever its name becomes."""
    return TAG_PREFIX + sha512_hex(f"{network}\0{container_id}\0{ifname}")[:32]


def _random_veth_name():
    import os
    return "veth" + os.urandom(4).hex()


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
    return out


def build_result(conf, ipam_result, host, cont, sandbox, dns):
    """The ADD result as the reference writes it: host veth first (no sandbox), container second, every
    address on interface 1, the IPAM routes verbatim, dns from the config when it sets any field."""
    return Result(conf.cni_version,
                  interfaces=[Interface(host.name, mac=host.mac), Interface(cont.name, mac=cont.mac, sandbox=sandbox)],
                  ips=[ipc.replace(interface=1) for ipc in ipam_result.ips],
                  routes=ipam_result.routes,
                  dns=dns if dns is not None else ipam_result.dns)


# --------------------------------------------------------------------------------------------------
# ADD


def cmd_add(args, conf):
    pc = parse_conf(conf)
    stdin = ipam.stdin_of(conf)
    ns = guard.open_target(args)          # before IPAM: a bad netns costs no address
    with ns:
        undo = UndoStack()
        try:
            result = _add(args, conf, pc, stdin, ns, undo)
            # A result the config's version cannot hold, or that cannot be written, fails here, undone.
            jsonio.dumps(result.to_dict(conf.cni_version)).encode()
            return result
        except BaseException as e:
            undo.unwind(e)
            raise


def _add(args, conf, pc, stdin, ns, undo):
    hnl = RtNetlink()
    cnl = RtNetlink.for_netns(ns)
    with hnl, cnl:
        # Before IPAM: a repeated ADD of a live attachment must fail here. Our host-local answers it with
        # the attachment's current address, and undoing that reservation would take it from the live pod.
        _ifname_free(args, cnl)
        _attachment_free(args, conf, hnl)
        ipam_result = ipam.add(args, conf, stdin)
        undo.push("release the IPAM reservation", ipam.delete, args, conf, stdin)
        addrs = plan_addresses(ipam_result)
        if 0 < pc.mtu < 1280 and any(a.family == 6 for a in addrs):
            raise CNIError(INVALID_CONFIG, f"invalid field mtu: {pc.mtu} is below IPv6's minimum of 1280",
                           "the IPAM result holds IPv6 addresses; raise mtu to 1280 or more")
        # Refuse a gateway or pod address the node already uses (ADD only; bench/hostclash.py has the cost)
        from skb.linux import hostclash
        hostclash.refuse(hnl, [(a.ip, a.gateway, a.subnet) for a in addrs])
        host, cont = _make_veth(args, conf, pc, ns, hnl, cnl, undo, any(a.family == 6 for a in addrs))
        _configure_container(args, ns, cnl, cont, addrs, ipam_result, undo)
        _configure_host(hnl, host, addrs)
    if pc.ip_masq:
        from skb.linux import masq
        m = masq.Masq(conf.name, args.ifname, args.container_id, [(a.ip, a.subnet, a.family) for a in addrs])
        undo_masq = masq.setup(m, masq.choose(pc.masq_backend))
        if undo_masq is not None:
            undo.push("remove the masquerade rules", undo_masq)
    _enable_forwarding(addrs)             # last: a failed ADD never changes it
    return build_result(conf, ipam_result, host, cont, args.netns, pc.dns)


def _ifname_exists_error(args):
    return CNIError(INTERNAL, f"container veth name provided ({args.ifname}) already exists",
                    f"netns {args.netns} already has an interface {args.ifname!r}: another attachment uses that "
                    "CNI_IFNAME, or this one was added before without a DEL")


def _ifname_free(args, cnl):
    try:
        cnl.link_get(args.ifname)
    except NotFound:
        return
    raise _ifname_exists_error(args)


def _attachment_free(args, conf, hnl):
    """The attachment's host veth must not exist yet: if it does, the attachment is live (in another
    netns, or never DELeted), and our host-local would hand back its address, which undoing this ADD
    would then take from the live pod."""
    name = host_veth_name(conf.name, args.container_id, args.ifname)
    try:
        link = hnl.link_get(name)
    except NotFound:
        return
    clash = link.alias.startswith(TAG_PREFIX) and link.alias != attachment_tag(conf.name, args.container_id, args.ifname)
    if link.kind == "veth" and link.link_netnsid is not None and not clash:   # (a clash: ADD picks another name)
        raise CNIError(INTERNAL, f"attachment {args.container_id}/{args.ifname} of network {conf.name} already exists",
                       f"its host veth {name} is still there: DEL the attachment before adding it again")


def _make_veth(args, conf, pc, ns, hnl, cnl, undo, v6):
    """Create the pair from the host with the container end made inside the container netns; host end
    up. Returns (host Link, container Link)."""
    name = host_veth_name(conf.name, args.container_id, args.ifname)
    for _ in range(_VETH_TRIES):
        try:
            hnl.veth_add(name, args.ifname, peer_netns=ns, mtu=pc.mtu or None, up=not v6, peer_label=args.netns)
            break
        except Exists as e:
            if e.subject != name:
                raise _ifname_exists_error(args) from None
            name = _random_veth_name()   # our derived name is taken (a hash clash, or a leftover): any name
    else:
        raise CNIError(INTERNAL, f"could not find a free host veth name after {_VETH_TRIES} tries")
    undo.push(f"delete the veth pair {name}/{args.ifname}", _delete_host_link, name)
    try:
        sysctl.write(f"net/ipv6/conf/{name}/accept_ra", "0")   # the reference does it; dies with the veth
    except sysctl.SysctlError:
        pass
    if v6:
        # The node solicits a forwarded packet's next hop from its link-local address, which is
        # unusable while DAD runs (1-2 s after the link comes up): pod-to-pod IPv6 would fail meanwhile.
        # Nothing else is on this link to clash with, so no DAD here; set before the link goes up.
        sysctl.write(f"net/ipv6/conf/{name}/accept_dad", "0")
    # The alias is DEL's proof that this veth is the attachment's (the kernel ignores it at creation).
    hnl.link_set(name, up=True if v6 else None, alias=attachment_tag(conf.name, args.container_id, args.ifname))
    return hnl.link_get(name), cnl.link_get(args.ifname)


def _delete_host_link(name):
    with RtNetlink() as nl:     # its own socket: the ADD's sockets are closed by the time undo runs
        _delete_quietly(nl, name)


def _delete_quietly(nl, name):
    try:
        nl.link_del(name)
    except NotFound:
        pass


def _configure_container(args, ns, cnl, cont, addrs, ipam_result, undo):
    if any(a.family == 6 for a in addrs):
        with netns.enter(ns):
            # IPv6 must be on for the addresses (a runtime may create namespaces with it off); lo is not
            # ours, so an ADD that fails puts its setting back.
            if sysctl.write("net/ipv6/conf/lo/disable_ipv6", "0"):
                undo.push("restore disable_ipv6 on the container's lo", _in_ns, ns, sysctl.write,
                          "net/ipv6/conf/lo/disable_ipv6", "1")
            sysctl.write(f"net/ipv6/conf/{args.ifname}/disable_ipv6", "0")
            sysctl.write(f"net/ipv6/conf/{args.ifname}/keep_addr_on_down", "1")
    cnl.link_set_up(cont.index)
    gateways = {}
    for a in addrs:
        cnl.addr_add(cont.index, a.prefix, flags=IFA_F_NODAD if a.family == 6 else 0)
        gateways.setdefault(a.family, a.gateway)
        # Replace the kernel's connected route by "gw/32 scope link" + "subnet via gw": all traffic,
        # the subnet's included, goes through the host, which routes it (a veth cannot be IFF_POINTOPOINT).
        try:
            cnl.route_del(a.subnet, oif=cont.index)
        except NotFound:
            pass    # a /32 (/128) address has no connected route
        cnl.route_add(f"{a.gateway}/{a.host_bits}", oif=cont.index, scope=RT_SCOPE_LINK, prefsrc=a.ip)
        if a.subnet != f"{a.gateway}/{a.host_bits}":
            cnl.route_add(a.subnet, gateway=a.gateway, oif=cont.index, prefsrc=a.ip)
    for r in ipam_result.routes:
        gw = r.gw or gateways.get(r.family)
        try:
            cnl.route_add(r.dst, gateway=gw, oif=cont.index, priority=r.priority,
                          table=r.table if r.table else 254,
                          scope=r.scope if r.scope is not None else RT_SCOPE_UNIVERSE, exclusive=False)
        except Exists:
            pass    # the same route is already there (the reference's "ECMP add" tolerates it too)


def _in_ns(ns, fn, *args):
    with netns.enter(ns):
        fn(*args)


def _configure_host(hnl, host, addrs):
    for a in addrs:
        try:
            hnl.addr_add(host.index, f"{a.gateway}/{a.host_bits}", flags=IFA_F_NODAD if a.family == 6 else 0)
        except Exists:
            pass    # two addresses sharing a gateway
        try:
            hnl.route_add(f"{a.ip}/{a.host_bits}", oif=host.index, scope=RT_SCOPE_HOST)
        except Exists:
            # The reference ignores this and leaves a pod whose traffic the node sends elsewhere.
            raise CNIError(INTERNAL, f"address {a.ip} is already in use on the host",
                           f"the host already routes {a.ip}/{a.host_bits} to another interface (another network "
                           "with an overlapping range, or a leftover of an attachment that was never deleted)"
                           ) from None


def _enable_forwarding(addrs):
    families = {a.family for a in addrs}
    try:
        if 4 in families:
            sysctl.write("net/ipv4/ip_forward", "1")
        if 6 in families:
            sysctl.write("net/ipv6/conf/all/forwarding", "1")
    except sysctl.SysctlError as e:
        raise CNIError(INTERNAL, f"Could not enable IP forwarding: {e.msg}", e.details) from None


# --------------------------------------------------------------------------------------------------
# DEL


def cmd_del(args, conf):
    pc = parse_conf(conf, "DEL")
    stdin = ipam.stdin_of(conf)
    mine = Ownership(conf.name, args, _prev_result_quietly(conf))
    ns = guard.open_target(args)
    if ns is not None:
        with ns:
            _delete_container_end(args, ns, mine)
    _delete_host_end(mine)
    if pc.ip_masq:
        from skb.linux import masq
        masq.teardown(conf.name, args.ifname, args.container_id)
    # Last: only once nothing routes to the address may it be handed to another pod.
    ipam.delete(args, conf, stdin)


def _prev_result_quietly(conf):
    try:
        return parse_prev_result(conf.cni_version, conf.prev_result)
    except CNIError:
        return None   # DEL must not fail on a cached result it cannot read


class Ownership:
    """Which host veth is this attachment's (see the module docstring): ``owns(link, paired)``, where
    ``paired`` says the kernel showed ``link`` to be CNI_IFNAME's peer in CNI_NETNS."""

    __slots__ = ("derived", "tag", "cached", "cached_pair")

    def __init__(self, network, args, prev):
        self.derived = host_veth_name(network, args.container_id, args.ifname)
        self.tag = attachment_tag(network, args.container_id, args.ifname)
        self.cached = [i.name for i in prev.interfaces if not i.sandbox and i.name != self.derived] if prev else []
        # For a pair without our alias, the cached result counts only when it records this very pair.
        self.cached_pair = bool(prev and args.netns and any(i.name == args.ifname and i.sandbox == args.netns
                                                             for i in prev.interfaces))

    def candidates(self):
        return list(dict.fromkeys([self.derived] + self.cached))

    def owns(self, link, paired=False):
        if link.kind != "veth" or link.link_netnsid is None:
            return False                         # a ptp host end is a veth whose peer is in another netns
        if link.alias.startswith(TAG_PREFIX):
            return link.alias == self.tag        # made by our ADD: for this attachment, or for another
        if link.name == self.derived:
            return True                          # the name only this attachment gets (made before aliases)
        # another implementation's pair, as the runtime recorded it and the kernel shows it
        return paired and self.cached_pair and link.name in self.cached


def verified_peer(hnl, ns, cont):
    """The host link that is the container link ``cont``'s veth peer, or None. Proven from the host side:
    its peer is ifindex ``cont.index`` in the netns whose id (as the host numbers it) is ``ns``'s. An
    ifindex alone proves nothing: ifindexes are per netns, so every pod's eth0 may be number 2."""
    if cont.kind != "veth" or not cont.link_index or cont.link_netnsid is None:
        return None
    try:
        host = hnl.link_get(cont.link_index)
    except NotFound:
        return None
    if host.kind != "veth" or host.link_index != cont.index or host.link_netnsid is None:
        return None
    return host if host.link_netnsid == hnl.nsid_of(ns) else None


def _delete_container_end(args, ns, mine):
    """Delete CNI_IFNAME in the container only if it is one end of a pair whose host end is proven this
    attachment's: after a failed ADD (the name was taken) the runtime's DEL must not destroy another
    network's interface."""
    with RtNetlink.for_netns(ns) as cnl, RtNetlink() as hnl:
        try:
            cont = cnl.link_get(args.ifname)
        except NotFound:
            return
        host = verified_peer(hnl, ns, cont)
        if host is not None and mine.owns(host, paired=True):
            _delete_quietly(cnl, cont.index)
            return
        guard.note(f"DEL: {args.ifname} in {args.netns} is not the container end of this attachment's ptp pair: "
                   "left alone")


def _delete_host_end(mine):
    """Delete our host veth (and with it the pair and its host routes) when the container end could not
    be reached: by its derived name, or by the cached result's name when it carries our alias."""
    with RtNetlink() as hnl:
        for name in mine.candidates():
            try:
                link = hnl.link_get(name)
            except NotFound:
                continue
            if mine.owns(link):
                _delete_quietly(hnl, link.index)


# --------------------------------------------------------------------------------------------------
# CHECK


def cmd_check(args, conf):
    pc = parse_conf(conf, "CHECK")
    stdin = ipam.stdin_of(conf)
    ns = guard.open_target(args)
    with ns:
        ipam.check(args, conf, stdin)
        if conf.prev_result is None:
            raise CNIError(INTERNAL, "ptp: Required prevResult missing",
                           "CHECK needs the ADD result as prevResult (the runtime's cached result)")
        prev = parse_prev_result(conf.cni_version, conf.prev_result)
        cont_if = next((i for i in prev.interfaces if i.name == args.ifname and i.sandbox == args.netns), None)
        if cont_if is None:
            raise CNIError(INTERNAL, f"Sandbox in prevResult  doesn't match configured netns: {args.netns}",
                           f"prevResult has no interface {args.ifname!r} with sandbox {args.netns!r}")
        host_if = next((i for i in prev.interfaces if i.sandbox is None), None)
        addrs = [Addressing(ipc) for ipc in prev.ips if ipc.gateway is not None]
        with RtNetlink.for_netns(ns) as cnl:
            cont = _check_container(args, pc, cnl, cont_if, prev, addrs)
        with RtNetlink() as hnl:
            _check_host(hnl, ns, pc, cont, host_if, addrs)
    if pc.ip_masq and addrs:
        from skb.linux import masq
        backend = pc.masq_backend or masq.choose(None)
        masq.check(masq.Masq(conf.name, args.ifname, args.container_id,
                             [(a.ip, a.subnet, a.family) for a in addrs]), backend)
    for fam, name in ((4, "net/ipv4/ip_forward"), (6, "net/ipv6/conf/all/forwarding")):
        if any(a.family == fam for a in addrs) and sysctl.read(name) != "1":
            raise CNIError(INTERNAL, f"IP forwarding is off ({name.replace('/', '.')} = 0)",
                           "ptp's pods reach nothing beyond the node without it")


def _check_container(args, pc, cnl, cont_if, prev, addrs):
    from skb.linux.netlink_codec import parse_prefix
    name = args.ifname
    try:
        link = cnl.link_get(name)
    except NotFound:
        raise CNIError(INTERNAL, f"ptp: Container Interface name in prevResult: {name} not found") from None
    if link.kind != "veth":
        raise CNIError(INTERNAL, f"Error: Container interface {name} not of type veth/p2p")
    if cont_if.mac and cont_if.mac != link.mac:
        raise CNIError(INTERNAL, f"ptp: Interface {name} Mac {cont_if.mac} doesn't match container Mac: {link.mac}")
    if pc.mtu and link.mtu != pc.mtu:
        raise CNIError(INTERNAL, f"ptp: Interface {name} MTU {link.mtu} doesn't match the configured mtu {pc.mtu}")
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
    for r in prev.routes:
        is_default = r.dst in ("0.0.0.0/0", "::/0")
        want = parse_prefix(r.dst)
        ok = any(x.prefix == want and (is_default or r.gw is None or x.gw_packed == parse_prefix(r.gw)[1])
                 for x in routes)
        if not ok:
            via = f" via {r.gw}" if r.gw else ""
            raise CNIError(INTERNAL, f"Expected Route {r.dst}{via} not found in routing table")
    return link


def _check_host(hnl, ns, pc, cont, host_if, addrs):
    from skb.linux.netlink_codec import parse_prefix
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


# --------------------------------------------------------------------------------------------------
# STATUS, GC


def cmd_status(args, conf):
    parse_conf(conf, "STATUS")
    ipam.status(args, conf, ipam.stdin_of(conf))


def cmd_gc(args, conf):
    parse_conf(conf, "GC")
    errors = []
    try:
        ipam.gc(args, conf, ipam.stdin_of(conf))
    except CNIError as e:
        errors.append(e)
    valid = config.valid_attachments(conf)
    if valid is not None:   # no list (cnitool's gc): say nothing about masquerading, as host-local does
        from skb.linux import masq
        try:
            masq.gc(conf.name, [(ifname, cid) for cid, ifname in valid])
        except CNIError as e:
            errors.append(e)
    if errors:
        raise errors[0]


PLUGIN = skel.Plugin("ptp", "a veth pair per container, routed point-to-point through the host",
                     add=cmd_add, delete=cmd_del, check=cmd_check, status=cmd_status, gc=cmd_gc)


def main(argv=None):
    skel.main(PLUGIN)
