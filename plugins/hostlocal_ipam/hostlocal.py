"""host-local: hand out addresses from local ranges, one per range set, recorded on disk.

A drop-in for the reference plugin (same keys, same files, same round-robin order) that
- returns the addresses an attachment already holds when ADD comes again (no "duplicate allocation");
- rejects gateways outside their subnet and overlapping ranges, naming the range;
- on DEL removes only that attachment's reservation files, and needs only ``ipam.dataDir`` to do it;
- implements GC (CNI 1.1): releases every reservation whose attachment is not valid any more;
- implements STATUS: code 50 when a range set has no free address or the store is unusable;
- changes nothing when ADD fails, and survives being killed at any point (see store.py).
"""
import sys

from skb.plugin import skel
from skb.cni import netconf as cfg
from skb.cni.errors import CNIError, NOT_AVAILABLE

from skb_plugins.hostlocal_ipam import config as hcfg
from skb_plugins.hostlocal_ipam.allocator import UNAVAILABLE, allocate, candidates
from skb_plugins.hostlocal_ipam.store import Store

# What a host-local call imports only on the paths that need it (an ADD that places a requested or held
# address; resolvConf, and any plugin's skbDebugLog): a warm server imports these before its first call,
# so that no warm call reads a module file (see ptp.py).
LATE_IMPORTS = ("bisect", "skb.linux.files")


def cmd_add(call):
    conf, args = call.conf, call.args
    requested = conf.requested(args.args)
    dns = hcfg.read_resolv_conf(conf.ipam.resolv_conf) if conf.ipam.resolv_conf else None
    stray = [ip for ip in requested if conf.range_set_for(ip) is None]
    if stray:
        raise CNIError(UNAVAILABLE, f"failed to allocate all requested IPs: {', '.join(str(ip) for ip in stray)}",
                       f"requested addresses must lie in a range: {'; '.join(str(rs) for rs in conf.range_sets)}")
    per_set = {}
    for ip in requested:
        rset = conf.range_set_for(ip)
        per_set.setdefault(rset.index, (rset, []))[1].append(ip)
    crowded = [(rset, ips) for rset, ips in per_set.values() if len(ips) > 1]
    if crowded:   # (the reference takes one of them, reserves every set, then fails and releases it all)
        rset, ips = crowded[0]
        raise CNIError(UNAVAILABLE, f"failed to allocate all requested IPs: {', '.join(str(ip) for ip in ips[1:])}",
                       f"host-local gives one address per range set, and {', '.join(str(ip) for ip in ips)} all "
                       f"lie in range set {rset.where} ({rset}): request one address per range set, or add a "
                       "range set for each")
    owner = (args.container_id, args.ifname)
    got = []
    made, released = [], []     # reservations this ADD made, and those it gave up: its undo reverses both
    call.undo.push("release the reservations this ADD made", _undo_add, conf.ipam.store_dir, conf.name, owner,
                   made, released)
    with Store(conf.ipam.store_dir, conf.name) as store:
        try:
            held = {}   # range set index -> what the owner holds there (one pass, not one per set)
            for ip in store.owned(owner):
                rset = conf.range_set_for(ip)
                if rset is not None:
                    held.setdefault(rset.index, []).append(ip)
            replaced = []
            for rset in conf.range_sets:
                ip, new, superseded = allocate(store, rset, owner, requested, held.get(rset.index, []))
                got.append((rset, ip, new))
                if new:
                    made.append(ip)
                replaced += superseded
            # Only now that every range set succeeded: where the next search starts, what a request replaced.
            for rset, ip, new in got:
                if new:
                    store.set_last_reserved(rset.index, ip)
            for ip in replaced:
                store.release(ip, owner)
                released.append(ip)
        finally:
            store.commit()      # what was done is on record, for the next call and for the undo
    return _result(conf, got, dns)


def _undo_add(data_dir, network, owner, made, released):
    """Give back what a failed (or undelivered) ADD reserved, and take back what it released."""
    if not made and not released:
        return
    with Store(data_dir, network) as store:
        for ip in made:
            store.release(ip, owner)
        for ip in released:
            store.reserve(ip, owner)
        store.commit()


def _result(conf, got, dns):
    from skb.cni.result import DNS, IPConfig, Result, Route  # only ADD builds a result
    ips = []
    for rset, ip, _new in got:
        r = rset.range_for(ip)
        ips.append(IPConfig(f"{ip}/{r.subnet.prefixlen}", gateway=str(r.gateway) if r.gateway else None))
    routes = [Route(r.dst, r.gw or None, r.mtu, r.advmss, r.priority, r.table, r.scope) for r in conf.ipam.routes]
    return Result(conf.cni_version, ips=ips, routes=routes,
                  dns=DNS(dns["nameservers"], dns["domain"] or None, dns["search"], dns["options"]) if dns else None)


def _no_directory(conf):
    """No ADD could make a directory of this network's name (it is refused at ADD): nothing to do."""
    return len(conf.name) > cfg.MAX_NAME


def cmd_del(call):
    conf, args = call.conf, call.args
    if _no_directory(conf):
        return
    cid, ifname = args.container_id, args.ifname
    with Store(conf.ipam.store_dir, conf.name) as store:
        owner = (cid, ifname)
        held = store.owned(owner)
        if not held:  # files written by old versions hold only the container id
            legacy = store.owned((cid, ""))
            held = store.owned(owner)   # again: the legacy lookup may have found the index stale
            if not held:
                owner, held = (cid, ""), legacy
        for ip in held:
            store.release(ip, owner)
        store.commit()


def cmd_check(call):
    conf, cid = call.conf, call.args.container_id
    conf.requested(call.args.args)       # checked as ADD checks them
    with Store(conf.ipam.store_dir, conf.name) as store:
        if not store.owned((cid, call.args.ifname)) and not store.owned((cid, "")):
            raise CNIError(UNAVAILABLE, f"host-local: Failed to find address added by container {cid}",
                           f"no reservation for container {cid!r} ifname {call.args.ifname!r} in {store.dir}")


def cmd_status(call):
    conf = call.conf
    if _no_store_yet(conf):     # (raises when the first ADD could not make it: nothing is created here)
        return
    try:
        store = Store(conf.ipam.store_dir, conf.name).__enter__()
    except CNIError as e:
        raise CNIError(NOT_AVAILABLE, e.msg, e.details) from None
    try:
        for rset in conf.range_sets:
            last = store.last_reserved(rset.index)
            if not any(store.is_free(ip) for ip in candidates(rset, last)):
                size = sum(r.size for r in rset.ranges)
                raise CNIError(NOT_AVAILABLE, f"range set {rset.where} ({rset}) has no free address",
                               f"all {size} addresses are reserved, so ADD would fail; GC reclaims reservations "
                               "of containers that no longer exist")
    finally:
        store.__exit__(None, None, None)


def _no_store_yet(conf):
    """STATUS of a network no ADD has reserved in yet changes nothing on the node (``skb doctor`` asks it):
    True (ready: every address is free) when its directory does not exist and the nearest directory above
    it that does is one the first ADD can create it in (writable, on a filesystem with room), CNIError
    (not available) when it could not; False when the directory exists (the store answers)."""
    import os    # (already loaded by the interpreter's start-up)
    path = os.path.join(conf.ipam.store_dir, conf.name)
    if os.path.lexists(path):
        return False
    while path != os.path.dirname(path) and not os.path.lexists(path):
        path = os.path.dirname(path)
    try:   # (root: access() refuses only an immutable or read-only directory; a full filesystem, statvfs)
        st = os.statvfs(path)
        why = ("is not a directory (ENOTDIR)" if not os.path.isdir(path) else "is on a read-only filesystem (EROFS)"
               if st.f_flag & os.ST_RDONLY else "is not writable, immutable say (EPERM)" if not os.access(path, os.W_OK)
               else "is on a full filesystem (ENOSPC)" if st.f_bfree == 0 or (st.f_files and st.f_ffree == 0)
               else None)
    except OSError as e:
        why = f"cannot be read: {e.strerror}"
    if why is None:
        return True
    raise CNIError(NOT_AVAILABLE, f"host-local store {os.path.join(conf.ipam.store_dir, conf.name)} cannot be "
                                  f"created: {path} {why}", "ADD creates it there: fix that directory, or point "
                                  "ipam.dataDir elsewhere")


def cmd_gc(call):
    conf = call.conf
    valid = conf.valid_attachments()
    if valid is None:  # no list is not "nothing is valid": releasing everything would be a disaster
        return
    if _no_directory(conf):
        return
    valid_ids = {cid for cid, _ in valid}
    with Store(conf.ipam.store_dir, conf.name) as store:
        released = 0
        for ip, owner in store.scan().items():
            cid, ifname = owner
            keep = cid in valid_ids if ifname == "" else owner in valid
            if not keep:
                store.release(ip, owner)
                released += 1
        store.commit()
    if released:
        sys.stderr.write(f"host-local: GC released {released} reservation(s) of network {conf.name}\n")


PLUGIN = skel.Plugin("host-local", "IP address management from local ranges (drop-in for the reference)",
                     add=cmd_add, delete=cmd_del, check=cmd_check, status=cmd_status, gc=cmd_gc,
                     config=hcfg.HostLocalConf)


def main(argv=None):
    skel.main(PLUGIN)
