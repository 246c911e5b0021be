"""ipMasq: masquerade what a container sends beyond its own subnet, with iptables or nftables.

Rules are named and commented exactly as the reference plugins name them (docs/REFERENCE.md#masquerade-names), so a node can move between Go's ptp and ours in either direction and each cleans up the other's:

- iptables (``ipMasqBackend: "iptables"``, the default): per attachment a chain ``CNI-<24 hex of
  sha512(network + containerID)>`` in table nat of iptables (IPv4) and ip6tables (IPv6), holding
  ``-d <subnet> -j ACCEPT`` per address and ``! -d <multicast> -j MASQUERADE``, reached from POSTROUTING
  by ``-s <ip>/32 -j <chain>``; every rule carries the comment ``name: "<network>" id: "<containerID>"``.
- nftables (``"nftables"``): table ``inet cni_plugins_masquerade``, base chain ``postrouting`` (multicast
  returns, then ``goto masq_checks``), and per address in ``masq_checks`` the rule
  ``ip saddr <ip> ip daddr != <subnet> masquerade`` commented ``<h16(network)>-<h16(ifname:id)>, net: ...``.

Each change is one atomic transaction (``iptables-restore --noflush``, ``nft -f -``), so a failure
leaves nothing half-written. Unlike the reference, teardown needs no addresses (DEL works without the
netns: the chain name, or the comment's hash prefix, identifies the attachment), and GC works for both
backends (iptables chains are matched by their comment's network name and container ID).

Programs are found on PATH and then in /usr/sbin, /sbin ...; they run in the calling thread's netns.
"""
import os

from skb.cni import jsonio
from skb.linux import proc
from skb.cni.digest import sha512_hex
from skb.cni.errors import CNIError, INTERNAL, INVALID_CONFIG, INVALID_ENV, go_quote

IPTABLES, NFTABLES = "iptables", "nftables"
BACKENDS = (IPTABLES, NFTABLES)
NFT_TABLE = "cni_plugins_masquerade"
NFT_CHAIN = "masq_checks"
_NFT_COMMENT_MAX = 128
_MCAST = {4: "224.0.0.0/4", 6: "ff00::/8"}


def chain_name(network, container_id):
    """``CNI-`` + 24 hex digits: Go's utils.FormatChainName (28 characters, iptables allows 28)."""
    return "CNI-" + sha512_hex(network + container_id)[:24]


def iptables_comment(network, container_id):
    """``name: "<network>" id: "<containerID>"`` (Go's %q)."""
    return f"name: {go_quote(network)} id: {go_quote(container_id)}"


# iptables keeps at most 255 characters of a comment and cuts the rest silently: CHECK and GC, which read
# the comment back, would then no longer recognise the attachment's rules.
IPTABLES_COMMENT_MAX = 255


def check_fits(network, container_id, backend):
    """Refuse (code 4, before anything is applied) an attachment whose rules the backend cannot record
    whole: with iptables, the comment naming the network and the container id."""
    if backend != IPTABLES:
        return
    n = len(iptables_comment(network, container_id))
    if n > IPTABLES_COMMENT_MAX:
        raise CNIError(INVALID_ENV, f"CNI_CONTAINERID is too long for ipMasq with iptables: the rules' comment "
                                    f"would be {n} characters, iptables keeps {IPTABLES_COMMENT_MAX}",
                       f'the comment is name: "<network>" id: "<container id>" ({len(network)} and '
                       f"{len(container_id)} characters); set ipMasqBackend to \"nftables\", or use a shorter "
                       "network name")


def nft_network_hash(network):
    return sha512_hex(network)[:16]


def nft_instance_hash(network, ifname, container_id):
    return nft_network_hash(network) + "-" + sha512_hex(f"{ifname}:{container_id}")[:16]


def nft_comment(network, ifname, container_id):
    strip = lambda s: s.replace('"', "")  # noqa: E731
    text = (f"{nft_instance_hash(network, ifname, container_id)}, net: {strip(network)}, "
            f"if: {strip(ifname)}, id: {strip(container_id)}")
    return text[:_NFT_COMMENT_MAX]


class Masq:
    """One attachment's masquerading: ``addrs`` are (ip text, subnet text "10.22.0.0/24", family 4|6)."""

    __slots__ = ("network", "ifname", "container_id", "addrs")

    def __init__(self, network, ifname, container_id, addrs=()):
        self.network = network
        self.ifname = ifname
        self.container_id = container_id
        self.addrs = tuple(addrs)


def backend_from_config(value):
    """The ``ipMasqBackend`` value checked: None (choose), "iptables" or "nftables"."""
    if value is None or value in BACKENDS:
        return value
    raise CNIError(INVALID_CONFIG, f"unknown ipmasq backend {go_quote(value)}",
                   'set ipMasqBackend to "iptables" or "nftables", or leave it out')


# --------------------------------------------------------------------------------------------------
# running the tools

class ToolMissing(CNIError):
    """The backend's program is not installed."""


def _tool(name):
    path = proc.which(name)
    if path is None:
        raise ToolMissing(INTERNAL, f"ipMasq: {name} not found",
                          f"install {name} (PATH and /usr/sbin, /sbin were searched), or choose the other "
                          "ipMasqBackend")
    return path


def _env():
    return {"PATH": os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def _run(name, args, stdin=b"", what=""):
    path = _tool(name)
    try:
        code, out, err = proc.run(path, [name] + list(args), _env(), stdin)
    except proc.SpawnError as e:
        raise CNIError(INTERNAL, f"ipMasq: cannot run {path}: {e.strerror}") from None
    if code != 0:
        raise ToolFailed(name, args, code, out, err, what)
    return out.decode(errors="replace")


class ToolFailed(CNIError):
    def __init__(self, name, args, code, out, err, what):
        text = (err or out).decode(errors="replace").strip()
        first = text.splitlines()[0] if text else f"exit status {code}"
        CNIError.__init__(self, INTERNAL, f"ipMasq: {what or name + ' failed'}: {first}",
                          f"{name} {' '.join(args)} exited with status {code}" + (f"; output: {text}" if text else ""))
        self.text = text


# --------------------------------------------------------------------------------------------------
# iptables


def _ipt(family, tool):
    return ("ip6" if family == 6 else "ip") + tool


def _ipt_save(family):
    return _run(_ipt(family, "tables-save"), ["-t", "nat"], what=f"reading the nat table ({_ipt(family, 'tables')})")


def _ipt_restore(family, lines):
    script = "*nat\n" + "".join(line + "\n" for line in lines) + "COMMIT\n"
    _run(_ipt(family, "tables-restore"), ["--noflush", "-w", "5"], script.encode(),
         what=f"changing the nat table ({_ipt(family, 'tables')})")


def _host_prefix(ip, family):
    return f"{ip}/{32 if family == 4 else 128}"


def iptables_rules(m, family):
    """(chain rules, POSTROUTING rules) as ``iptables-save`` writes them, for the addresses of a family.
    ACCEPT rules for every subnet come before the MASQUERADE rule (the reference appends them in address
    order, so a second subnet's ACCEPT lands after MASQUERADE and never matches)."""
    chain = chain_name(m.network, m.container_id)
    c = "--comment " + go_quote(iptables_comment(m.network, m.container_id))
    addrs = [a for a in m.addrs if a[2] == family]
    body, seen = [], set()
    for _ip, subnet, _f in addrs:
        if subnet not in seen:
            seen.add(subnet)
            body.append(f"-A {chain} -d {subnet} -m comment {c} -j ACCEPT")
    body.append(f"-A {chain} ! -d {_MCAST[family]} -m comment {c} -j MASQUERADE")
    jumps = []
    for ip, _subnet, _f in addrs:
        rule = f"-A POSTROUTING -s {_host_prefix(ip, family)} -m comment {c} -j {chain}"
        if rule not in jumps:
            jumps.append(rule)
    return body, jumps


def _ipt_setup(m, family):
    chain = chain_name(m.network, m.container_id)
    body, jumps = iptables_rules(m, family)
    present = set(_ipt_save(family).splitlines())
    # Declaring the chain creates it, or (with --noflush) empties it: its content is rewritten whole.
    lines = [f":{chain} - [0:0]"] + body + [j for j in jumps if j not in present]
    _ipt_restore(family, lines)


def _ipt_teardown(network, container_id, family, saved=None):
    """Remove the attachment's chain and every POSTROUTING jump to it (any source form, so also the
    legacy ``-s ip/prefix`` jumps). True when something was removed."""
    chain = chain_name(network, container_id)
    if saved is None:
        try:
            saved = _ipt_save(family)
        except ToolFailed:      # a table we cannot read holds none of our rules (e.g. IPv6 disabled)
            return False
    lines = saved.splitlines()
    jump = f" -j {chain}"
    deletes = ["-D" + line[2:] for line in lines if line.startswith("-A POSTROUTING ") and line.endswith(jump)]
    exists = any(line.startswith(f":{chain} ") for line in lines)
    if not deletes and not exists:
        return False
    _ipt_restore(family, deletes + ([f"-F {chain}", f"-X {chain}"] if exists else []))
    return True


def _ipt_check(m, family):
    body, jumps = iptables_rules(m, family)
    present = set(_ipt_save(family).splitlines())
    missing = [r for r in body + jumps if r not in present]
    if missing:
        raise CNIError(INTERNAL, f"ipMasq: {len(missing)} iptables rule(s) of this attachment are missing "
                                 f"from {_ipt(family, 'tables')} table nat", "missing: " + "; ".join(missing))


def _ipt_gc(network, valid_ids, family):
    """Remove chains (and their jumps) whose rules carry this network's comment with a container ID that
    is no longer valid."""
    try:
        saved = _ipt_save(family)
    except ToolFailed:
        return []
    prefix = f'--comment "name: \\"{network}\\" id: \\"'
    stale = set()
    for line in saved.splitlines():
        i = line.find(prefix)
        if i < 0 or not line.startswith("-A CNI-"):
            continue
        rest = line[i + len(prefix):]
        end = rest.find('\\""')
        if end < 0:
            continue
        cid = rest[:end]
        if cid not in valid_ids and line.split()[1] == chain_name(network, cid):
            stale.add(cid)
    for cid in sorted(stale):
        _ipt_teardown(network, cid, family)
    return sorted(stale)


# --------------------------------------------------------------------------------------------------
# nftables


def _nft(args, stdin=b"", what="nft"):
    return _run("nft", args, stdin, what=what)


def _nft_rules(strict=True):
    """[(handle, comment, expr list)] of the rules in our masq_checks chain ([] when it does not exist)."""
    try:
        out = _nft(["-j", "list", "chain", "inet", NFT_TABLE, NFT_CHAIN], what="listing nftables rules")
    except ToolFailed as e:
        if "No such file or directory" in e.text or not strict:
            return []       # no table yet; or (not strict) nftables unusable here, so none of our rules
        raise
    rules = []
    for item in jsonio.loads(out).get("nftables", []):
        rule = item.get("rule") if isinstance(item, dict) else None
        if rule:
            rules.append((rule.get("handle"), rule.get("comment") or "", rule.get("expr") or []))
    return rules


def _nft_delete_lines(handles):
    return [f"delete rule inet {NFT_TABLE} {NFT_CHAIN} handle {h}" for h in handles]


def nft_rule(m, ip, subnet, family):
    fam = "ip6" if family == 6 else "ip"
    return (f"add rule inet {NFT_TABLE} {NFT_CHAIN} {fam} saddr {ip} {fam} daddr != {subnet} masquerade "
            f'comment "{nft_comment(m.network, m.ifname, m.container_id)}"')


def _nft_setup(m):
    prefix = nft_instance_hash(m.network, m.ifname, m.container_id)
    stale = [h for h, comment, _ in _nft_rules() if comment.startswith(prefix)]
    t = f"inet {NFT_TABLE}"
    lines = [
        f'add table {t} {{ comment "Masquerading for plugins from github.com/containernetworking/plugins" ; }}',
        f'add chain {t} {NFT_CHAIN} {{ comment "Masquerade traffic from certain IPs to any (non-multicast) IP '
        'outside their subnet" ; }',
        f"add chain {t} postrouting {{ type nat hook postrouting priority srcnat ; }}",
        f"flush chain {t} postrouting",
        f"add rule {t} postrouting ip daddr 224.0.0.0/4 return",
        f"add rule {t} postrouting ip6 daddr ff00::/8 return",
        f"add rule {t} postrouting goto {NFT_CHAIN}",
    ] + _nft_delete_lines(stale) + [nft_rule(m, ip, subnet, fam) for ip, subnet, fam in m.addrs]
    _nft(["-f", "-"], ("\n".join(lines) + "\n").encode(), what="adding nftables masquerade rules")


def _nft_teardown(network, ifname, container_id):
    prefix = nft_instance_hash(network, ifname, container_id)
    handles = [h for h, comment, _ in _nft_rules(strict=False) if comment.startswith(prefix)]
    if handles:
        _nft(["-f", "-"], ("\n".join(_nft_delete_lines(handles)) + "\n").encode(),
             what="deleting nftables masquerade rules")
    return bool(handles)


def _nft_saddr(expr):
    for e in expr:
        match = e.get("match") if isinstance(e, dict) else None
        if match and match.get("op") == "==" and isinstance(match.get("left"), dict):
            payload = match["left"].get("payload") or {}
            if payload.get("field") == "saddr":
                return match.get("right")
    return None


def _nft_check(m):
    comment = nft_comment(m.network, m.ifname, m.container_id)
    have = {_nft_saddr(expr) for _h, c, expr in _nft_rules() if c == comment}
    missing = [ip for ip, _s, _f in m.addrs if ip not in have]
    if missing:
        raise CNIError(INTERNAL, f"ipMasq: nftables masquerade rule missing for {', '.join(missing)}",
                       f"expected a rule commented {comment!r} in chain inet {NFT_TABLE} {NFT_CHAIN}")


def _nft_gc(network, valid):
    """``valid``: (ifname, containerID) pairs. Removes this network's rules of every other attachment."""
    prefix = nft_network_hash(network)
    keep = {nft_comment(network, ifname, cid) for ifname, cid in valid}
    handles = [h for h, c, _ in _nft_rules(strict=False) if c.startswith(prefix) and c not in keep]
    if handles:
        _nft(["-f", "-"], ("\n".join(_nft_delete_lines(handles)) + "\n").encode(),
             what="deleting stale nftables masquerade rules")
    return len(handles)


# --------------------------------------------------------------------------------------------------
# the interface ptp uses


def _families(m):
    return sorted({f for _ip, _s, f in m.addrs})


def usable(backend):
    """Whether a backend can be used here: its program exists and can read the ruleset."""
    try:
        if backend == IPTABLES:
            _ipt_save(4)
        else:
            _nft(["list", "tables"])
        return True
    except CNIError:
        return False


def choose(backend):
    """The backend to set up with: the configured one, else iptables unless only nftables is usable
    (the reference's rule)."""
    if backend is not None:
        return backend
    if usable(IPTABLES) or not usable(NFTABLES):
        return IPTABLES
    return NFTABLES


def setup(m, backend):
    """Install the rules; returns an undo callable (None when there was nothing to do). On failure
    nothing of this attachment's rules is left in place."""
    if not m.addrs:
        return None
    if backend == NFTABLES:
        _nft_setup(m)
        return lambda: _nft_teardown(m.network, m.ifname, m.container_id)
    done = []
    try:
        for family in _families(m):
            _ipt_setup(m, family)
            done.append(family)
    except CNIError:
        for family in done:
            _safe(_ipt_teardown, m.network, m.container_id, family)
        raise
    return lambda: [_ipt_teardown(m.network, m.container_id, f) for f in done]


def _safe(fn, *args):
    try:
        fn(*args)
    except CNIError:
        pass


def _in_every_backend(ipt, nft):
    """``ipt(family)`` for IPv4 and IPv6, then ``nft()``; a backend whose program is not installed is
    skipped. Everything is tried; the first error is raised at the end."""
    errors = []
    for call in (lambda: ipt(4), lambda: ipt(6), nft):
        try:
            call()
        except ToolMissing:
            pass
        except CNIError as e:
            errors.append(e)
    if errors:
        raise errors[0]


def teardown(network, ifname, container_id):
    """Remove the attachment's rules from both backends (it may have been added by another version or
    configuration). Errors are reported only for a backend whose program is installed."""
    _in_every_backend(lambda family: _ipt_teardown(network, container_id, family),
                      lambda: _nft_teardown(network, ifname, container_id))


def check(m, backend):
    if backend == NFTABLES:
        _nft_check(m)
    else:
        for family in _families(m):
            _ipt_check(m, family)


def gc(network, valid):
    """Remove masquerading of this network's attachments not in ``valid`` ((ifname, containerID) pairs),
    in both backends. Returns the first error after trying everything."""
    valid_ids = {cid for _ifname, cid in valid}
    _in_every_backend(lambda family: _ipt_gc(network, valid_ids, family), lambda: _nft_gc(network, valid))

