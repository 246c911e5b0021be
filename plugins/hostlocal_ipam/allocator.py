"""Which address to hand out: the reference's round-robin, over any store with the Store methods used
here (``owned``, ``is_free``, ``reserve``, ``release``, ``last_reserved``), so it is tested with a fake.

Round-robin (as the reference): start just after the range set's last reserved address, walk every
range of the set in order, wrap around, skip each range's gateway, and try the last reserved address
last. A crash-looping container therefore does not get the same address back until the set wrapped.
"""
from skb.cni.addr import IP
from skb.cni.errors import CNIError

NO_ADDRESS = 100        # host-local: every address of a range set is reserved
UNAVAILABLE = 101       # host-local: a requested address cannot be given


def candidates(rset, last):
    """Every allocatable address of ``rset`` once, in round-robin order after ``last``."""
    ranges = rset.ranges
    fam = ranges[0].start.family
    ri, v = 0, ranges[0].start.value
    if last is not None:
        for i, r in enumerate(ranges):
            if last in r:
                if last.value >= r.end.value:
                    ri = (i + 1) % len(ranges)
                    v = ranges[ri].start.value
                else:
                    ri, v = i, last.value + 1
                break
    first = (ri, v)
    while True:
        r = ranges[ri]
        if r.gateway is None or v != r.gateway.value:
            yield IP(fam, v)
        if v >= r.end.value:
            ri = (ri + 1) % len(ranges)
            v = ranges[ri].start.value
        else:
            v += 1
        if (ri, v) == first:
            return


def allocate(store, rset, owner, requested, held=None):
    """The address ``owner`` gets from ``rset``: ``(ip, new, replaced)``; ``new`` is False when it already
    held it; ``replaced`` lists addresses it held in the set that a request supersedes (the caller
    releases them once the whole ADD succeeded). ``held``: the addresses the owner holds in this set, when
    the caller already knows them.

    - an address requested for this set is reserved (or kept, if the owner holds it already);
    - otherwise an address the owner already holds in this set is returned (a restarted container gets
      its address back instead of the reference's "duplicate allocation is not allowed");
    - otherwise the next free address in round-robin order.
    """
    if held is None:   # the caller may pass what the owner holds in this set (one lookup for all sets)
        held = [ip for ip in store.owned(owner) if rset.range_for(ip) is not None]
    want = next((ip for ip in requested if rset.range_for(ip) is not None), None)
    if want is not None:
        r = rset.range_for(want)
        if r.gateway == want:
            raise CNIError(UNAVAILABLE, f"failed to allocate for range {rset.index}: requested ip {want} is subnet's gateway",
                           f"{want} is the gateway of {r.where}; request another address")
        if want in held:
            return want, False, [ip for ip in held if ip != want]
        if not store.reserve(want, owner):
            holder = store.holder(want)
            raise CNIError(UNAVAILABLE, f"failed to allocate for range {rset.index}: requested IP address {want} is "
                                        f"not available in range set {rset}",
                           f"{want} is reserved by container {holder[0]!r} ifname {holder[1]!r}" if holder else
                           f"{want} is taken")
        return want, True, held  # the request replaces what the owner held in this set
    if held:
        return held[0], False, []
    for ip in candidates(rset, store.last_reserved(rset.index)):
        if store.is_free(ip) and store.reserve(ip, owner):
            return ip, True, []
    size = sum(r.size for r in rset.ranges)
    raise CNIError(NO_ADDRESS, f"failed to allocate for range {rset.index}: no IP addresses available in range set: {rset}",
                   f"all {size} addresses of {rset.where} are reserved. Reservations of containers that no longer "
                   "exist are reclaimed by GC (CNI 1.1: the runtime's GC, or `skb gc NETWORK --keep-live`); add a range to grow it")
