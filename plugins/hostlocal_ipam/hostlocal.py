"""host-local: hand out addresses from local ranges, one per range set, recorded on disk.

A drop-in for the reference plugin (same keys, same files, same round-robin order) that
- returns the addresses an attachment already holds when ADD comes again (no "duplicate allocation");
- rejects gateways outside their subnet and overlapping ranges, naming the range;
- on DEL removes only that attachment's reservation files, and needs only ``ipam.dataDir`` to do it;
- implements GC (CNI 1.1): releases every reservation whose attachment is not valid any more;
- implements STATUS: code 50 when a range set has no free address or the store is unusable;
- changes nothing when ADD fails, and survives being killed at any point (see store.py).
"""
from skb.plugin import skel
from skb.cni import jsonio
from skb.cni import netconf as cfg
from skb.cni.errors import CNIError, INVALID_CONFIG, NOT_AVAILABLE

from skb_plugins.hostlocal_ipam import config as hcfg
from skb_plugins.hostlocal_ipam.allocator import UNAVAILABLE, allocate, candidates
from skb_plugins.hostlocal_ipam.store import Store


def cmd_add(args, conf):
    ipc = hcfg.parse(conf, args.args, "ADD")
    dns = hcfg.read_resolv_conf(ipc.resolv_conf) if ipc.resolv_conf else None
    stray = [ip for ip in ipc.requested if ipc.range_set_for(ip) is None]
    if stray:
        raise CNIError(UNAVAILABLE, f"failed to allocate all requested IPs: {', '.join(str(ip) for ip in stray)}",
                       f"requested addresses must lie in a range: {'; '.join(str(rs) for rs in ipc.range_sets)}")
    owner = (args.container_id, args.ifname)
    got = []
    replaced = []
    with Store(ipc.data_dir, ipc.name) as store:
        try:
            held = {}   # range set index -> what the owner holds there (one pass, not one per set)
            for ip in store.owned(owner):
                rset = ipc.range_set_for(ip)
                if rset is not None:
                    held.setdefault(rset.index, []).append(ip)
            for rset in ipc.range_sets:
                ip, new, superseded = allocate(store, rset, owner, ipc.requested, held.get(rset.index, []))
                got.append((rset, ip, new))
                replaced += superseded
            for rset, ip, new in got:
                if new:
                    store.set_last_reserved(rset.index, ip)
            # Built (and checked against the config's version) before anything is final: a result that
            # cannot be written fails the ADD here, with its reservations undone, not after the commit.
            result = _result(conf, ipc, got, dns)
            jsonio.dumps(result.to_dict(conf.cni_version)).encode()
            for ip in replaced:  # only now that every range set succeeded
                store.release(ip, owner)
        except BaseException:
            for rset, ip, new in got:  # a failed ADD leaves the store as it found it
                if new:
                    store.release(ip, owner)
            store.commit()
            raise
        store.commit()
    return result


def _result(conf, ipc, got, dns):
    from skb.cni.result import DNS, IPConfig, parse_result, Result  # only ADD builds a result
    ips = []
    for rset, ip, new in got:
        r = rset.range_for(ip)
        ips.append(IPConfig(f"{ip}/{r.subnet.prefixlen}", gateway=str(r.gateway) if r.gateway else None))
    routes = parse_result({"cniVersion": "1.1.0", "routes": ipc.routes}, where="ipam").routes
    return Result(conf.cni_version, ips=ips, routes=routes,
                  dns=DNS(dns["nameservers"], dns["domain"] or None, dns["search"], dns["options"]) if dns else None)


def _data_dir(conf):
    """DEL needs only the store's location: a config whose ranges became invalid must not block it."""
    try:
        ipam = cfg.lookup(conf.raw, "ipam")
    except KeyError:
        ipam = None
    if not isinstance(ipam, dict):
        raise CNIError(INVALID_CONFIG, "IPAM config missing 'ipam' key", "host-local reads dataDir from \"ipam\"")
    return cfg.get_path(ipam, "dataDir", "ipam", hcfg.DEFAULT_DATA_DIR)


def cmd_del(args, conf):
    if len(conf.name) > cfg.MAX_NAME:   # no ADD could make a directory of that name: nothing to release
        return
    cid, ifname = args.container_id, args.ifname
    with Store(_data_dir(conf), conf.name) as store:
        owner = (cid, ifname)
        held = store.owned(owner)
        if not held:  # files written by old versions hold only the container id
            owner = (cid, "")
            held = store.owned(owner)
        for ip in held:
            store.release(ip, owner)
        store.commit()


def cmd_check(args, conf):
    hcfg.parse(conf, args.args, "CHECK")
    cid = args.container_id
    with Store(_data_dir(conf), conf.name) as store:
        if not store.owned((cid, args.ifname)) and not store.owned((cid, "")):
            raise CNIError(UNAVAILABLE, f"host-local: Failed to find address added by container {cid}",
                           f"no reservation for container {cid!r} ifname {args.ifname!r} in {store.dir}")


def cmd_status(args, conf):
    ipc = hcfg.parse(conf, "", "STATUS")
    try:
        store = Store(ipc.data_dir, ipc.name).__enter__()
    except CNIError as e:
        raise CNIError(NOT_AVAILABLE, e.msg, e.details) from None
    try:
        for rset in ipc.range_sets:
            last = store.last_reserved(rset.index)
            if not any(store.is_free(ip) for ip in candidates(rset, last)):
                size = sum(r.size for r in rset.ranges)
                raise CNIError(NOT_AVAILABLE, f"range set {rset.where} ({rset}) has no free address",
                               f"all {size} addresses are reserved, so ADD would fail; GC reclaims reservations "
                               "of containers that no longer exist")
    finally:
        store.__exit__(None, None, None)


def cmd_gc(args, conf):
    valid = cfg.valid_attachments(conf)
    if valid is None:  # no list is not "nothing is valid": releasing everything would be a disaster
        return
    if len(conf.name) > cfg.MAX_NAME:   # (see cmd_del)
        return
    valid_ids = {cid for cid, _ in valid}
    with Store(_data_dir(conf), conf.name) as store:
        released = 0
        for ip, owner in store.scan().items():
            cid, ifname = owner
            keep = cid in valid_ids if ifname == "" else owner in valid
            if not keep:
                store.release(ip, owner)
                released += 1
        store.commit()
    if released:
        import sys
        sys.stderr.write(f"host-local: GC released {released} reservation(s) of network {conf.name}\n")


PLUGIN = skel.Plugin("host-local", "IP address management from local ranges (drop-in for the reference)",
                     add=cmd_add, delete=cmd_del, check=cmd_check, status=cmd_status, gc=cmd_gc)


def main(argv=None):
    skel.main(PLUGIN)
