"""host-local reservations nothing will release."""
import os
import shlex
import socket

from skb.cni import jsonio
from skb.tool import libcni
from skb.tool.doctor.findings import Finding
from skb.tool.style import shell_word
from skb.tool.doctor.files import BadFile, read_regular
from skb.linux import netns

HOST_LOCAL_DATA_DIR = "/var/lib/cni/networks"
MAX_CACHED = 100000      # cache records read at most


def _is_ip(name):
    for fam in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(fam, name)
            return True
        except OSError:
            pass
    return False


def reservations(store):
    """(ip, containerID, ifname or None, path) for each reservation file of a host-local store. An entry
    named like an address that cannot be read as one (a FIFO, a link to a device) has containerID None:
    host-local takes its address as used, by nobody it knows."""
    try:
        names = sorted(os.listdir(store))
    except OSError:
        return []
    out = []
    for name in names:
        if not _is_ip(name):
            continue
        path = os.path.join(store, name)
        try:
            content = read_regular(path, 4096).decode("utf-8", "replace")   # bytes: keep the "\r\n"
        except BadFile:
            if os.path.lexists(path):
                out.append((name, None, None, path))
            continue
        cid, sep, ifname = content.partition("\r\n")
        out.append((name, cid.strip(), ifname.strip() if sep else None, path))
    return out


def field(obj, key):
    """A key as Go's decoder matches a struct field: exact, else case-insensitively."""
    if key in obj:
        return obj[key]
    return next((v for k, v in obj.items() if k.lower() == key.lower()), None)


def cached_records(cache_dir):
    """(path, record) of each readable cniCacheV1 record in ``<cache_dir>/results``, by file name; entries
    that are not regular files are skipped, never opened blocking."""
    d = os.path.join(cache_dir, "results")
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    out = []
    for name in names[:MAX_CACHED]:
        path = os.path.join(d, name)
        try:
            rec = jsonio.loads(read_regular(path))
        except (BadFile, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("kind") == libcni.CACHE_KIND:
            out.append((path, rec))
    return out


def cached_attachments(cache_dir):
    """libcni's GetCachedAttachments over ``cached_records`` (fields checked for type)."""
    out = []
    for path, rec in cached_records(cache_dir):
        cid, net, ifname, netns = (rec.get(k) for k in ("containerId", "networkName", "ifName", "netns"))
        if not (isinstance(net, str) and net and isinstance(ifname, str) and ifname):
            continue
        out.append(libcni.Attachment(cid if isinstance(cid, str) else "", net, ifname, b"",
                                     netns if isinstance(netns, str) else "", [], {}, path))
    return out


def leaked_reservations(network, store, cache_dir):
    """The reservations of ``network`` in ``store`` that nothing will release, with the reason: no cached
    result for the attachment, or a cached result whose netns is gone."""
    cached = {}
    for att in cached_attachments(cache_dir):
        if att.network == network:
            cached.setdefault((att.container_id, att.ifname), att)
            cached.setdefault((att.container_id, None), att)   # legacy reservations carry no ifname
    out = []
    for ip, cid, ifname, path in reservations(store):
        if cid is None:
            out.append((ip, "(none)", None, path, "not a reservation file the doctor can read (not a regular "
                        "file, or unreadable), which host-local takes as used and no DEL or GC ever releases", None))
            continue
        att = cached.get((cid, ifname))
        if att is None:
            out.append((ip, cid, ifname, path, "no cached result", None))
        elif att.netns and netns.gone(att.netns):
            out.append((ip, cid, ifname, path, f"netns {att.netns} is gone", att))
    return out


def host_local_stores(networks):
    """(network, dataDir store path, plugin) of every host-local IPAM in these networks."""
    out = []
    seen = set()
    for n in networks:
        for p in n.plugins:
            ipam = p.raw.get("ipam") if isinstance(p.raw.get("ipam"), dict) else None
            if not ipam or p.ipam_type != "host-local":
                continue
            data_dir = field(ipam, "dataDir")
            data_dir = data_dir if isinstance(data_dir, str) and data_dir else HOST_LOCAL_DATA_DIR
            store = os.path.join(data_dir, n.name)
            if (n.name, store) not in seen:
                seen.add((n.name, store))
                out.append((n, store))
    return out


def check_leaks(networks, cache_dir, findings, reported=(), bins=None):
    """``reported``: (network, store) pairs whose leaks a range-exhausted finding names already; ``bins``:
    {a network's source: the plugin dirs of the runtime that loads it}."""
    for netconf, store in host_local_stores(networks):
        if (netconf.name, store) in reported:
            continue
        leaked = leaked_reservations(netconf.name, store, cache_dir)
        if not leaked:
            continue
        shown = "; ".join(f"{ip} (container {cid}, {ifname or 'no ifname'}: {why})"
                          for ip, cid, ifname, _p, why, _a in leaked[:5])
        more = f"; and {len(leaked) - 5} more" if len(leaked) > 5 else ""
        fix = gc_fix(netconf, leaked, cache_dir, (bins or {}).get(netconf.source, ()))
        findings.append(Finding(
            "warning", "leaked-reservation",
            f'{len(leaked)} leaked host-local reservation{"s" if len(leaked) > 1 else ""} in network "{netconf.name}"',
            f"{shown}{more}; store {store}, cache {os.path.join(cache_dir, 'results')}", fix, store))


def gc_fix(netconf, leaked, cache_dir=libcni.DEFAULT_CACHE_DIR, bin_dirs=()):
    """How to free ``leaked`` (leaked_reservations' entries): skb gc --keep-live reaches the plugins only
    at cniVersion 1.1.0 or later; before, it DELs the cached attachments, and the rest is removed by hand.
    The command names the conf dir, the plugin dirs and the cache dir the doctor read (the cache dir where
    it is not skb gc's default): run with others (NETCONFPATH, CNI_PATH), it would find no network, other
    plugins, or no live attachment, and so free the live pods' too."""
    gc_can = libcni.speaks_1_1(netconf.cni_version)
    uncached = [p for _ip, _c, _i, p, why, att in leaked if att is None]
    # every file, each quoted so that a pasted line removes exactly it (review 16: "..." past five, and a
    # tab in a path printed as a space); they are in one store dir, named by address: short
    dirs = sorted({os.path.dirname(p) for p in uncached})
    files = (f"cd {shell_word(dirs[0])} && rm -- {' '.join(shell_word(os.path.basename(p)) for p in uncached)}"
             if len(dirs) == 1 else f"rm -- {' '.join(shell_word(p) for p in uncached)}")
    gc = f"skb gc {shlex.quote(netconf.name)} --keep-live"
    conf_dir = os.path.dirname(netconf.source) if netconf.source else ""
    if conf_dir:
        gc += f" --conf-dir {shlex.quote(conf_dir)}"
    if bin_dirs:
        gc += f" --cni-path {shlex.quote(':'.join(bin_dirs))}"
    if cache_dir and os.path.normpath(cache_dir) != os.path.normpath(libcni.DEFAULT_CACHE_DIR):
        gc += f" --cache-dir {shlex.quote(cache_dir)}"
    if not cached_attachments(cache_dir):
        # skb gc --keep-live refuses an empty cache (it would free every reservation, live pods' too):
        # nothing here says which pods live (review 16)
        results = os.path.join(cache_dir, "results")
        return (f"{results} holds no cached attachment, so nothing here tells live pods from dead ones: if the "
                f"runtime keeps its libcni cache elsewhere, run skb doctor --cache-dir DIR; if not, once the "
                f"containers are confirmed gone: {files}")
    if gc_can:
        return f"{gc} (DELs the dead attachments, then GC frees the rest)"
    if len(uncached) < len(leaked):
        return (f"{gc} DELs those with a gone netns; GC of the others needs "
                f"cniVersion 1.1.0: remove their files by hand once the containers are confirmed gone: {files}")
    return (f"GC needs cniVersion 1.1.0 (the network has {netconf.cni_version or '0.1.0'}); once the "
            f"containers are confirmed gone: {files}")

