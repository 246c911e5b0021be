"""loopback: bring ``lo`` up in the container's network namespace.

ADD sets ``lo`` up and reports it with its loopback addresses (or passes a chained prevResult through).
CHECK verifies ``lo`` is up, as the reference's does: an address a later plugin or the pod put on ``lo``
(a service address, say) is not loopback's to judge. DEL sets ``lo`` down like the reference
plugin, but only in a namespace that is provably the container's (see ``skb.linux.guard``): never in the node's
own, whatever path names it. CNI_IFNAME is validated but ignored (CRI sends ``lo``, podman ``eth0``).
"""
import os

from skb.linux import guard
from skb.linux import netns
from skb.plugin import skel
from skb.cni.errors import CNIError, INTERNAL
from skb.linux.netlink import RtNetlink
from skb.linux.netlink_codec import AF_INET
from skb.cni.result import IPConfig, Interface, Result, parse_prev_result

_IFF_UP = 0x1


def _lo_addresses(nl, lo, where):
    """lo's IPv4 then IPv6 addresses as "ip/prefix"; a non-loopback address is an error."""
    found = []
    for a in nl.addr_list(index=lo.index):
        ip = a.address
        if not (ip.startswith("127.") or ip == "::1"):
            raise CNIError(INTERNAL, f'loopback interface found with non-loopback address "{ip}"',
                           f"lo in netns {where} carries {ip}/{a.prefixlen}; only 127.0.0.0/8 and ::1 belong there")
        found.append((a.family, f"{ip}/{a.prefixlen}"))
    found.sort(key=lambda fa: fa[0] != AF_INET)  # IPv4 first, as the reference reports them
    return found


def cmd_add(call):
    args, conf = call.args, call.conf
    prev = parse_prev_result(conf.cni_version, conf.prev_result) if conf.prev_result is not None else None
    ns = guard.open_target(args)
    with ns, netns.enter(ns):
        nl = RtNetlink(label=args.netns)
        with nl:
            lo = nl.link_get("lo")
            if not lo.flags & _IFF_UP:
                nl.link_set_up(lo.index)
                # Undone if the answer cannot be delivered: lo as it was found. The undo holds its own
                # descriptor of the namespace (this one is closed when the verb returns).
                call.undo.push("set lo down again", _set_lo_down, netns.NetNS(args.netns, os.dup(ns.fd)))
            addrs = _lo_addresses(nl, lo, args.netns)
    if prev is not None:
        return prev
    first = {}
    for family, addr in addrs:
        first.setdefault(family, addr)
    return Result(conf.cni_version,
                  interfaces=[Interface("lo", mac="00:00:00:00:00:00", sandbox=args.netns)],
                  ips=[IPConfig(addr, interface=0) for addr in first.values()])


def _set_lo_down(ns):
    """lo DOWN in ``ns`` (closed afterwards), as DEL leaves it; nothing when it is down already."""
    with ns, netns.enter(ns):
        with RtNetlink(label=ns.path) as nl:
            lo = nl.link_get("lo")
            if lo.flags & _IFF_UP:
                nl.link_set_down(lo.index)


def cmd_check(call):
    args = call.args
    ns = guard.open_target(args)
    with ns, netns.enter(ns):
        with RtNetlink(label=args.netns) as nl:
            lo = nl.link_get("lo")
            if not lo.flags & _IFF_UP:
                raise CNIError(INTERNAL, "loopback interface is down",
                               f"lo in netns {args.netns} is not up; the container has no working loopback")


def cmd_del(call):
    args = call.args
    ns = guard.open_target(args)
    if ns is not None:
        _set_lo_down(ns)


def _nothing(call):
    return None


PLUGIN = skel.Plugin("loopback", "brings lo up in the container's network namespace",
                     add=cmd_add, delete=cmd_del, check=cmd_check, status=_nothing, gc=_nothing)


def main(argv=None):
    skel.main(PLUGIN)
