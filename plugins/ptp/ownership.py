"""Which host veth is an attachment's: the names and the alias ptp derives from (network, container id,
ifname), and the proof DEL and CHECK require before they touch a link (docs/PTP.md#ownership).

ADD names the host end ``veth`` + 8 hex digits of a hash of the attachment, so DEL finds it without the
netns, and gives it an alias holding a longer hash of the attachment, which is DEL's proof: a host veth is
this attachment's when it carries that alias, whatever its name, or when it has the derived name and no
other attachment's alias (made before aliases existed). A pair made by another implementation is this
attachment's only when the runtime's cached result names its host end and the kernel shows it paired with
CNI_IFNAME in CNI_NETNS.
"""
from skb.cni.digest import sha512_hex
from skb.linux.netlink import NotFound

TAG_PREFIX = "skb-cni ptp "


def attachment_digest(network, container_id, ifname):
    """The hash (hex) the attachment's host veth name, alias and lock (lock.py) are derived from."""
    return sha512_hex(f"{network}\0{container_id}\0{ifname}")


def host_veth_name(network, container_id, ifname):
    """``veth`` + 8 hex digits of a hash of the attachment: DEL can find the host end without the netns."""
    return "veth" + attachment_digest(network, container_id, ifname)[:8]


def host_veth_names(network, container_id, ifname, count):
    """The names ADD tries for the host end, in order: the derived name, then the next 8 hex digits of the
    same hash, and so on (at most 16). Never random: an ADD killed before it tagged the veth under one of
    them leaves a pair that DEL, finding it paired with CNI_IFNAME, can still prove the attachment's."""
    digest = attachment_digest(network, container_id, ifname)
    return ["veth" + digest[i:i + 8] for i in range(0, min(count, 16) * 8, 8)]


def attachment_tag(network, container_id, ifname):
    """The alias ADD gives the host veth: which attachment it belongs to, whatever its name becomes."""
    return TAG_PREFIX + attachment_digest(network, container_id, ifname)[:32]


class Ownership:
    """Which host veth is this attachment's: ``owns(link, paired)``, where ``paired`` says the kernel
    showed ``link`` to be CNI_IFNAME's peer in CNI_NETNS; ``prev`` is the runtime's cached result (or None)."""

    __slots__ = ("derived", "fallbacks", "tag", "cached", "cached_pair")

    def __init__(self, network, args, prev, tries=10):
        self.derived, *fallbacks = host_veth_names(network, args.container_id, args.ifname, tries)
        self.fallbacks = frozenset(fallbacks)
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
        if paired and link.name in self.fallbacks:
            return True                          # ADD's next name, killed before it set the alias
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
