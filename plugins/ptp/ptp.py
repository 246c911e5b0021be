"""ptp: a veth pair per attachment, routed point-to-point through the host.

Compatible with the reference ptp (docs/REFERENCE.md#ptp): same config keys, same kernel state, same
result. The container end is ``CNI_IFNAME``; the host end is ``veth`` + 8 hex digits (ownership.py). The
host end carries each gateway as a /32 (/128) and a ``scope host`` route to each container address; the
container keeps its address with the IPAM prefix, but its connected route is replaced by
``<gw>/32 scope link`` plus ``<subnet> via <gw>``. This file holds ADD, DEL, STATUS and GC; the keys are
in config.py, the proof of which links are this attachment's in ownership.py, CHECK in check.py. Where
ptp differs from the reference, and why, is in docs/PTP.md.
"""
import os

from skb.linux import guard
from skb.linux import netns
from skb.plugin import delegate
from skb.plugin import skel
from skb.cni.errors import CNIError, INTERNAL, INVALID_CONFIG, INVALID_ENV
from skb.cni.result import Interface, Result, parse_prev_result
from skb.linux.netlink import Exists, NotFound, RtNetlink
from skb.linux.netlink_codec import IFA_F_NODAD, RT_SCOPE_HOST, RT_SCOPE_LINK, RT_SCOPE_UNIVERSE

from skb_plugins.ptp.config import PtpConf, plan_addresses
from skb_plugins.ptp.ownership import (TAG_PREFIX, Ownership, attachment_digest, attachment_tag, host_veth_name,
                                       host_veth_names, verified_peer)

_VETH_TRIES = 10
# What a ptp call imports only on the paths that need it (ADD's checks and sysctls, CHECK), so that an
# exec'd call of another kind does without: a warm server imports these before its first call, so that
# no warm call reads a module file (tests/warm/test_warm.py::test_a_warm_call_reads_no_module_file).
# Not skb.linux.masq: it costs the server about 100 KB for ipMasq calls, which run iptables anyway.
LATE_IMPORTS = ("skb.linux.hostclash", "skb.linux.sysctl", "skb_plugins.ptp.check", "skb_plugins.ptp.lock")


def build_result(conf, ipam_result, host, cont, sandbox):
    """The ADD result as the reference writes it: host veth first (no sandbox), container second, every
    address on interface 1, the IPAM routes verbatim, dns from the config when it sets any field."""
    dns = conf.result_dns()
    return Result(conf.cni_version,
                  interfaces=[Interface(host.name, mac=host.mac), Interface(cont.name, mac=cont.mac, sandbox=sandbox)],
                  ips=[ipc.replace(interface=1) for ipc in ipam_result.ips],
                  routes=ipam_result.routes,
                  dns=dns if dns is not None else ipam_result.dns)


# --------------------------------------------------------------------------------------------------
# ADD: each step registers its undo with the call's transaction as soon as it succeeds


def cmd_add(call):
    args, conf = call.args, call.conf
    backend = None
    if conf.ip_masq:                      # before anything: a backend that cannot record the rules whole
        from skb.linux import masq        # (see config.py)
        backend = masq.choose(conf.masq_backend)
        masq.check_fits(conf.name, args.container_id, backend)
    # Under the attachment's lock, its undo included, so that an ADD or DEL of it running beside this one
    # cannot pass the checks below or undo anything meanwhile (lock.py).
    from skb_plugins.ptp.lock import attachment_locked   # (ADD and DEL only: STATUS, CHECK, GC do without)
    with attachment_locked(attachment_digest(conf.name, args.container_id, args.ifname), _attachment(call),
                           call.undo):
        return _add(call, backend)


def _attachment(call):
    a = call.args
    return f"{a.command} of attachment {a.container_id}/{a.ifname} of network {call.conf.name}"


def _add(call, backend):
    args, conf = call.args, call.conf
    if "%" in args.ifname or args.ifname in ("all", "default"):
        # Names Go's check passes and the kernel does not take as they are: "%d" asks it to pick a free
        # number, and "all" and "default" are the names of the sysctl dirs of every interface (review 16)
        raise CNIError(INVALID_ENV, f"CNI_IFNAME {args.ifname!r} cannot be the pod's interface name",
                       "the kernel reads a '%' in a new link's name as a number to fill in, and keeps 'all' and "
                       "'default' for /proc/sys/net/*/conf; give another name, e.g. eth0")
    if conf.prev_result is not None:      # (as the reference's, and our loopback: a prevResult that is no
        parse_prev_result(conf.cni_version, conf.prev_result)    # result is refused, code 6; review 16)
    with guard.open_target(args) as ns:   # before IPAM: a bad netns costs no address
        with RtNetlink() as hnl, RtNetlink.for_netns(ns) as cnl:
            # Before IPAM: a repeated ADD of a live attachment must fail here. Our host-local answers it
            # with the attachment's current address, and undoing that reservation would take it from the
            # live pod.
            _ifname_free(args, cnl)
            _attachment_free(args, conf, hnl)
            ipam_result = call.ipam.add()
            call.undo.push("release the IPAM reservation", call.ipam.delete)
            addrs = plan_addresses(ipam_result)
            v6 = any(a.family == 6 for a in addrs)
            if 0 < conf.mtu < 1280 and v6:
                raise CNIError(INVALID_CONFIG, f"invalid field mtu: {conf.mtu} is below IPv6's minimum of 1280",
                               "the IPAM result holds IPv6 addresses; raise mtu to 1280 or more")
            # Refuse a gateway or pod address the node already uses (ADD only: the module is loaded by ADD
            # alone; bench/hostclash.py has the cost)
            from skb.linux import hostclash
            hostclash.refuse(hnl, [(a.ip, a.gateway, a.subnet) for a in addrs])
            host, cont = _make_veth(args, conf, ns, hnl, cnl, call.undo, v6)
            _configure_container(args, ns, cnl, cont, addrs, ipam_result, call.undo)
            _configure_host(hnl, host, addrs)
    if conf.ip_masq:
        from skb.linux import masq        # (see config.py)
        m = masq.Masq(conf.name, args.ifname, args.container_id, [(a.ip, a.subnet, a.family) for a in addrs])
        undo_masq = masq.setup(m, backend)
        if undo_masq is not None:
            call.undo.push("remove the masquerade rules", undo_masq)
    _enable_forwarding(addrs)             # last: a failed ADD never changes it
    return build_result(conf, ipam_result, host, cont, args.netns)


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
        if link.alias.startswith(TAG_PREFIX):
            fix = f"its host veth {name} is still there: DEL the attachment before adding it again"
        else:   # (no tag: ours from before tags, or another's veth under the same name; a DEL removes it)
            fix = (f"a host veth {name} is there, the name this attachment gets, without skb's tag (alias): a DEL "
                   f"of the attachment removes it, so first make sure it is not another pod's (ip -d link show "
                   f"{name}); if it is, rename it (ip link set {name} name <other>)")
        raise CNIError(INTERNAL, f"attachment {args.container_id}/{args.ifname} of network {conf.name} already exists",
                       fix)


def _make_veth(args, conf, ns, hnl, cnl, undo, v6):
    """Create the pair from the host with the container end made inside the container netns; host end
    up. Returns (host Link, container Link)."""
    # Local import (here and in the two other ADD steps that set sysctls): only ADD and CHECK touch
    # sysctls, so DEL, STATUS and GC do without loading skb.linux.sysctl.
    from skb.linux import sysctl
    for name in host_veth_names(conf.name, args.container_id, args.ifname, _VETH_TRIES):
        try:
            hnl.veth_add(name, args.ifname, peer_netns=ns, mtu=conf.mtu or None, up=not v6, peer_label=args.netns)
            break
        except Exists as e:
            if e.subject != name:
                raise _ifname_exists_error(args) from None
            # taken (a hash clash, or a leftover): the next name of the series, which DEL knows too
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
        from skb.linux import sysctl    # (see _make_veth)
        with netns.enter(ns):
            # IPv6 must be on for the addresses (a runtime may create namespaces with it off); lo is not
            # ours, so an ADD that fails puts its setting back. The undo holds its own descriptor of the
            # namespace: it may run after this verb returned (an answer that could not be delivered).
            if sysctl.write("net/ipv6/conf/lo/disable_ipv6", "0"):
                undo.push("restore disable_ipv6 on the container's lo", _in_ns, netns.NetNS(ns.path, os.dup(ns.fd)),
                          sysctl.write, "net/ipv6/conf/lo/disable_ipv6", "1")
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
            cnl.route_add(r.dst, gateway=gw, oif=cont.index, priority=r.priority, mtu=r.mtu, advmss=r.advmss,
                          table=r.table if r.table else 254,
                          scope=r.scope if r.scope is not None else RT_SCOPE_UNIVERSE, exclusive=False)
        except Exists:
            pass    # the same route is already there in the pod (the IPAM result cannot hold one twice: plan_addresses)


def _in_ns(ns, fn, *args):
    with ns, netns.enter(ns):
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
            # (A unicast route in the main table is refused before anything is made: hostclash; this is
            # one of another type, e.g. blackhole, or one added meanwhile.)
            raise CNIError(INVALID_CONFIG, f"pod address {a.ip} is already in use on the node: the host "
                                           f"already has a route to {a.ip}/{a.host_bits}",
                           "another network with an overlapping range, or a leftover of an attachment that was "
                           "never deleted; the ADD is undone. `ip route show table all` names the route") from None


def _enable_forwarding(addrs):
    from skb.linux import sysctl    # (see _make_veth)
    families = {a.family for a in addrs}
    try:   # (both opened before either is written: a dual-stack ADD that fails here changed neither)
        sysctl.write_together([(name, "1") for family, name in ((4, "net/ipv4/ip_forward"),
                                                                (6, "net/ipv6/conf/all/forwarding"))
                               if family in families])
    except sysctl.SysctlError as e:
        raise CNIError(INTERNAL, f"Could not enable IP forwarding: {e.msg}", e.details) from None


# --------------------------------------------------------------------------------------------------
# DEL


def cmd_del(call):
    args, conf = call.args, call.conf
    from skb_plugins.ptp.lock import attachment_locked   # (see cmd_add)
    with attachment_locked(attachment_digest(conf.name, args.container_id, args.ifname), _attachment(call)):
        _delete(call)


def _delete(call):
    args, conf = call.args, call.conf
    mine = Ownership(conf.name, args, _prev_result_quietly(conf), _VETH_TRIES)
    ns = guard.open_target(args)
    if ns is not None:
        with ns:
            _delete_container_end(args, ns, mine)
    _delete_host_end(mine)
    if conf.ip_masq:
        from skb.linux import masq        # (see config.py)
        masq.teardown(conf.name, args.ifname, args.container_id)
    # Last: only once nothing routes to the address may it be handed to another pod.
    call.ipam.delete()


def _prev_result_quietly(conf):
    try:
        return parse_prev_result(conf.cni_version, conf.prev_result)
    except CNIError:
        return None   # DEL must not fail on a cached result it cannot read


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
# CHECK, STATUS, GC


def cmd_check(call):
    # Local import: CHECK's code (check.py) is loaded only for CHECK, never on ADD's and DEL's path.
    from skb_plugins.ptp.check import check
    check(call)


def cmd_status(call):
    call.ipam.status()


def cmd_gc(call):
    errors = []
    try:
        call.ipam.gc()
    except CNIError as e:
        errors.append(e)
    valid = call.conf.valid_attachments()
    if valid is not None:   # no list (cnitool's gc): say nothing about masquerading, as host-local does
        # Local import: GC removes masquerade rules whatever ipMasq says now (see config.py).
        from skb.linux import masq
        try:
            masq.gc(call.conf.name, [(ifname, cid) for cid, ifname in valid])
        except CNIError as e:
            errors.append(e)
    if errors:
        raise errors[0]


PLUGIN = skel.Plugin("ptp", "a veth pair per container, routed point-to-point through the host",
                     add=cmd_add, delete=cmd_del, check=cmd_check, status=cmd_status, gc=cmd_gc,
                     config=PtpConf, ipam=delegate.Delegate)


def main(argv=None):
    skel.main(PLUGIN)
