"""The node's network configuration: rendered from a template with the pod CIDRs, checked to be a
conflist, and written atomically where libcni will load it first (see ``skb.install``)."""
import ipaddress
import json
import os
import re
import stat

from skb.install.files import (CONF_TMP_INFIX, InstallError, DirLock, read_regular, say,
                               write_file_atomically)

CONF_EXTENSIONS = (".conf", ".conflist", ".json")  # what libcni loads from a conf dir
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CONF_NAME = "10-skb.conflist"
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MTU_MIN, MTU_MAX = 68, 65535   # IPv4's minimum; the largest a link takes
# Addresses no pod can have: a pod CIDR overlapping one of these cannot work.
RESERVED = {net: why for why, nets in (
    ("the 'this network' block", ("0.0.0.0/8", "::/128")), ("loopback", ("127.0.0.0/8", "::1/128")),
    ("multicast", ("224.0.0.0/4", "ff00::/8")), ("reserved (class E)", ("240.0.0.0/4",)))
    for net in map(ipaddress.ip_network, nets)}


def smallest_pod_prefix(bits):
    """The longest prefix host-local allocates from: a /30 (a /126) holds the gateway and one pod once the
    network and broadcast addresses are left out. host-local (plugins/hostlocal_ipam/config.py, parse_range)
    refuses anything longer; the doctor's config-invalid and the installer apply this same rule."""
    return bits - 2


def check_mtu(text, source):
    """The MTU ``text`` (from ``source``: --mtu, SKB_MTU, --set MTU=...) as a string, or InstallError."""
    text = str(text).strip()
    if not text.isdigit() or not MTU_MIN <= int(text) <= MTU_MAX:
        raise InstallError(f"{source} {text!r}: expected a number from {MTU_MIN} to {MTU_MAX}, e.g. 1450")
    return str(int(text))


def check_conf_name(name, source="--conf-name", writing=True):
    """A plain file name in the conf dir; one we write must end in .conflist, the only extension the
    runtimes read a network list from (libcni skips other names and reads .conf/.json as one plugin)."""
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise InstallError(f"{source} {name!r}: expected a plain file name in the conf dir, e.g. 10-skb.conflist")
    if writing and not name.endswith(".conflist"):
        raise InstallError(f"{source} {name!r}: the runtime reads a network list only from a name ending in "
                           ".conflist (libcni skips other names, and reads .conf/.json as a single plugin), "
                           "e.g. 10-skb.conflist")


def parse_pod_cidrs(text, source="the pod CIDR"):
    """``10.244.1.0/24`` or several, separated by commas or blanks (as ``kubectl get node -o
    jsonpath={.spec.podCIDRs[*]}`` prints them). Returns ``ip_network`` values, at most one per family."""
    nets = []
    for item in re.split(r"[\s,]+", text.strip().strip("[]")):
        item = item.strip().strip('"')
        if not item:
            continue
        if "/" not in item:
            raise InstallError(f"{source}: {item!r} has no prefix length: a pod CIDR is a network, "
                               "e.g. 10.244.1.0/24")
        try:
            net = ipaddress.ip_network(item, strict=True)
        except ValueError as e:
            raise InstallError(f"{source}: {item!r} is not a network in CIDR notation ({e}), "
                               "e.g. 10.244.1.0/24") from None
        _check_pod_cidr(net, source)
        if any(n.version == net.version for n in nets):
            raise InstallError(f"{source}: two IPv{net.version} networks ({nets[0]}, {net}); "
                               "a node has at most one pod CIDR per address family")
        nets.append(net)
    if not nets:
        raise InstallError(f"{source} is empty")
    return nets


def _check_pod_cidr(net, source):
    if net.prefixlen > smallest_pod_prefix(net.max_prefixlen):
        raise InstallError(f"{source}: {net} is too small: host-local needs a gateway and at least one pod "
                           f"address, so at most a /{smallest_pod_prefix(net.max_prefixlen)}, e.g. 10.244.1.0/24")
    if net.prefixlen == 0:
        raise InstallError(f"{source}: {net} is every address: give this node's pod CIDR, e.g. 10.244.1.0/24")
    for reserved, why in RESERVED.items():
        if net.version == reserved.version and net.overlaps(reserved):
            raise InstallError(f"{source}: {net} overlaps {reserved}, {why}: no pod can have such an address; "
                               "give this node's pod CIDR, e.g. 10.244.1.0/24")


def template_values(pod_cidrs=(), extra=None):
    """The variables a template may use. From the pod CIDRs:

    - ``POD_CIDR``: the first pod CIDR, e.g. ``10.244.1.0/24``;
    - ``POD_RANGES``: host-local's ``ranges`` as JSON, one range set per CIDR;
    - ``POD_ROUTES``: a default route per family, as JSON (host-local's ``routes``).

    ``MTU`` (the pods' MTU) is the caller's: ``skb install`` reads it from the node (``skb.install.node``).

    ``extra`` (``--set NAME=VALUE``) adds or overrides variables.
    """
    values = {}
    if pod_cidrs:
        values["POD_CIDR"] = str(pod_cidrs[0])
        values["POD_RANGES"] = json.dumps([[{"subnet": str(n)}] for n in pod_cidrs])
        values["POD_ROUTES"] = json.dumps([{"dst": "0.0.0.0/0" if n.version == 4 else "::/0"} for n in pod_cidrs])
    values.update(extra or {})
    return values


def render(template, values, source="the template"):
    """Substitute every ``${NAME}``; return the conflist as a dict, checked. A variable without a value,
    text that is not JSON afterwards, or a conflist a runtime would reject is an ``InstallError``."""
    missing = sorted({m.group(1) for m in VAR_RE.finditer(template)} - set(values))
    if missing:
        first = next((m for m in missing if m.startswith("POD_")), missing[0])
        hint = " (give the node's pod CIDR: --pod-cidr, --pod-cidr-file, SKB_POD_CIDR or --pod-cidr-from-api)" \
            if first.startswith("POD_") else " (give it with --mtu or SKB_MTU)" if first == "MTU" \
            else " (give it with --set NAME=VALUE)"
        raise InstallError(f"{source} uses ${{{first}}}, which has no value{hint}")
    text = VAR_RE.sub(lambda m: values[m.group(1)], template)
    try:
        conf = json.loads(text)
    except ValueError as e:
        raise InstallError(f"{source} is not JSON once filled in: {e}") from None
    check_conflist(conf, source)
    return conf


def check_conflist(conf, source):
    if not isinstance(conf, dict):
        raise InstallError(f"{source}: a conflist is a JSON object")
    for key in ("cniVersion", "name"):
        if not isinstance(conf.get(key), str) or not conf[key]:
            raise InstallError(f"{source}: field {key} must be a non-empty string")
    plugins = conf.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        raise InstallError(f"{source}: field plugins must be a non-empty list (this writes a .conflist)")
    for i, p in enumerate(plugins):
        if not isinstance(p, dict) or not isinstance(p.get("type"), str) or not p["type"]:
            raise InstallError(f"{source}: plugins[{i}] needs a string field type")


def conf_bytes(conf):
    return (json.dumps(conf, indent=2) + "\n").encode()


def read_network(path):
    """(the ``name`` of the network configured in ``path``, None) or (None, why it is not one): what the
    doctor would say of it (a directory, a dangling symbolic link, invalid JSON at a line and column)."""
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return None, "a dangling symbolic link" if os.path.islink(path) else "missing"
    except IsADirectoryError:
        return None, "a directory"
    except OSError as e:
        return None, f"unreadable ({e.strerror})"
    if data is None:
        return None, "not a regular file"   # a FIFO would block the read, as it blocks the runtime's
    try:
        conf = json.loads(data)
    except json.JSONDecodeError as e:
        return None, f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
    except ValueError:
        return None, "not UTF-8 text"
    name = conf.get("name") if isinstance(conf, dict) else None
    if not isinstance(name, str) or not name:
        return None, "a JSON file without a network name" if isinstance(conf, dict) else "not a JSON object"
    return name, None


def check_conf_dir(conf_dir, option="--conf-dir"):
    """InstallError when ``conf_dir`` exists but is no directory (a file, a dangling symbolic link)."""
    if os.path.isdir(conf_dir) or not os.path.lexists(conf_dir):
        return
    what = "a dangling symbolic link" if os.path.islink(conf_dir) else \
        "a regular file" if os.path.isfile(conf_dir) else "not a directory"
    raise InstallError(f"{option} {conf_dir} is {what}, not a directory: replace it by a directory or give "
                       f"another {option}")


def conf_files(conf_dir):
    """The files libcni would load from conf_dir, in its order (by name)."""
    try:
        names = os.listdir(conf_dir)
    except FileNotFoundError:
        return []
    # libcni filters by extension only (a dotfile is loaded too); our temporary names end in .<pid>.
    # It passes over directories only, as libcni does (by the entry's own type: a symbolic link to a
    # directory, a dangling link or a FIFO is a file it tries to load, and fails on).
    return sorted(n for n in names if n.endswith(CONF_EXTENSIONS) and not _lstat_dir(os.path.join(conf_dir, n)))


def _lstat_dir(path):
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return True     # gone meanwhile: nothing the runtime will load


def config_conflicts(conf_dir, conf_name, network, data=None):
    """Why writing ``network`` as ``conf_dir/conf_name`` would break another network: a list of messages.

    - the target holds another network's configuration (or something that is not one);
    - a config file sorting before ours: the runtime (containerd's CRI, CRI-O) uses the first file by
      name, so the node would keep using it. That holds for an earlier file of our own network name too:
      the runtime would run its plugins, not ours. Only a byte-for-byte copy of ``data`` (what we write)
      is harmless there: the runtime gets our configuration either way.
    """
    problems = []
    target = os.path.join(conf_dir, conf_name)
    if os.path.lexists(target):
        other, why = read_network(target)
        if other != network:
            what = f"holds network {other!r}, not {network!r}" if other else \
                f"is {why}, not a configuration of network {network!r}"
            problems.append(f"{target} {what}: refusing to overwrite it")
    for name in conf_files(conf_dir):
        if name >= conf_name:
            break
        path = os.path.join(conf_dir, name)
        other, why = read_network(path)
        if other is None:
            problems.append(f"{path} is {why}; it comes before {conf_name}: the runtime fails on it (or keeps "
                            "using it); fix or remove it, or name ours to sort first (--conf-name)")
        elif other != network:
            problems.append(f"{path} (network {other!r}) comes before {conf_name}: the "
                            "runtime would keep using it; remove it, or name ours to sort first (--conf-name)")
        elif data is None or _read_bytes(path) != data:
            problems.append(f"{path} also defines network {network!r}, with other contents, and comes before "
                            f"{conf_name}: the runtime would use it, not ours; remove it, or name ours to sort "
                            "first (--conf-name)")
    return problems


def _read_bytes(path):
    try:
        return read_regular(path)
    except OSError:
        return None


def clean_conf_temps(conf_dir, conf_name):
    prefix = f".{conf_name}{CONF_TMP_INFIX}"
    for entry in os.listdir(conf_dir):
        if entry.startswith(prefix):
            os.unlink(os.path.join(conf_dir, entry))


def install_config(conf_dir, conf_name, conf, force=False, log=print):
    """Write ``conf`` (a checked conflist dict) as ``conf_dir/conf_name``, atomically. Returns True when the
    file changed. Refuses (InstallError) to overwrite or be shadowed by another network unless ``force``."""
    check_conf_dir(conf_dir)
    os.makedirs(conf_dir, exist_ok=True)
    target = os.path.join(conf_dir, conf_name)
    with DirLock(conf_dir):
        clean_conf_temps(conf_dir, conf_name)
        data = conf_bytes(conf)
        problems = config_conflicts(conf_dir, conf_name, conf["name"], data)
        if problems and not force:
            raise InstallError("; ".join(problems) + " (--force to write it anyway)")
        for p in problems:
            say(log, f"install: warning: {p} (--force)")
        if _read_bytes(target) == data:
            say(log, f"install: {target} up to date")
            return False
        write_file_atomically(target, data)
        say(log, f"install: {target} (network {conf['name']!r})")
        return True


def uninstall_config(conf_dir, conf_name, network=None, force=False, log=print):
    """Remove ``conf_dir/conf_name`` when it is ours (its network is ``network``, when given). Another
    network's file is kept unless ``force``. Returns True when a file was removed."""
    target = os.path.join(conf_dir, conf_name)
    check_conf_dir(conf_dir)
    if not os.path.isdir(conf_dir):
        return False
    with DirLock(conf_dir) as dfd:
        clean_conf_temps(conf_dir, conf_name)
        if not os.path.lexists(target):
            say(log, f"uninstall: {target} already gone")
            return False
        other, why = read_network(target)
        if network is not None and other != network and not force:
            held = f"holds network {other!r}" if other else f"is {why}"
            raise InstallError(f"{target} {held}, not {network!r}: refusing to remove it "
                               "(--force to remove it anyway)")
        os.unlink(target)
        os.fsync(dfd)
        say(log, f"uninstall: removed {target}: the runtime now reports this node's network as not ready")
        return True


# ------------------------------------------------------------------------------------ skb install / uninstall

DEFAULT_NETWORK = "skb"
# The conflist written when no --template is given; deploy/10-skb.conflist.template is the same text
# (tests/unit/test_installer.py keeps them equal). cniVersions offers 1.1.0 (STATUS, GC) to a libcni that
# knows it (v1.2 on: containerd 2, CRI-O); older ones (containerd 1.6/1.7, podman 4) ignore the key and
# use cniVersion, 1.0.0: they reject a 1.1.0 result ("unsupported CNI result version").
DEFAULT_TEMPLATE = """\
{
  "cniVersion": "1.0.0",
  "cniVersions": ["1.0.0", "1.1.0"],
  "name": "skb",
  "plugins": [
    {
      "type": "ptp",
      "mtu": ${MTU},
      "ipam": {
        "type": "host-local",
        "ranges": ${POD_RANGES},
        "routes": ${POD_ROUTES},
        "dataDir": "/var/lib/cni/networks"
      }
    },
    {
      "type": "loopback"
    }
  ]
}
"""
