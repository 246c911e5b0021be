"""``skb doctor``: find what is wrong with a node's CNI set-up, one line per problem.

Each finding says what is wrong, the evidence, and the fix. Severities: ``error`` (pods will not get a
working network), ``warning`` (something will bite: a shadowed file, a leaked address, runtimes that
disagree), ``note`` (worth knowing, not a problem: which file wins). Errors and warnings make the exit
status 1.

Where it looks. The conf dir and bin dirs come from ``--conf-dir``/``--bin-dir``; from containerd's
``config.toml`` (``[plugins."io.containerd.grpc.v1.cri".cni] conf_dir, bin_dir``; containerd 2's
``[plugins."io.containerd.cri.v1.runtime".cni] conf_dir, bin_dirs``); and from CRI-O's ``crio.conf`` and
``crio.conf.d/*`` (``[crio.network] network_dir, plugin_dirs, cni_default_network``). Every distinct
set of directories is checked; a runtime whose directories differ from another's (or from the flags) is
reported. With no flag and no runtime configuration the defaults ``/etc/cni/net.d`` and
``/opt/cni/bin`` are used.

What it checks, with the finding codes:

- ``no-config``: the conf dir is missing, or holds no ``.conf``/``.conflist``/``.json`` file (containerd:
  "cni config uninitialized", kubelet: "cni plugin not initialized").
- ``wrong-extension``: a CNI configuration under an extension libcni ignores (``10-net.conflist.bak``,
  ``net.yaml``), or a conflist in a ``.conf``/``.json`` file (read as a single plugin: "missing 'type'").
- ``no-plugins``: a ``.conflist`` without ``plugins`` ("no 'plugins' key" before libcni 1.3, "no plugin
  configs found" since).
- ``invalid-json``: with line and column; ``load-error``: any other reason libcni rejects a file. Either
  breaks every network lookup in the directory, not only that file's.
- ``shadowed``: the same network name in several files (libcni uses the first: ``.conflist`` before
  ``.conf``/``.json``, then by file name); a note names the file a runtime takes as the pod network (the
  first by name; CRI-O's ``cni_default_network`` by name) and those it never reads.
- ``plugin-missing`` / ``plugin-not-executable``: a ``type`` (or ``ipam.type``) with no regular file in
  any bin dir, or one that cannot be executed.
- ``version-failed`` / ``version-unsupported``: a plugin that fails VERSION, or whose ``supportedVersions``
  lacks the network's ``cniVersion`` (podman then drops the network; libcni's ``ValidateNetworkList``).
- ``host-lo-down``: the node's ``lo`` is DOWN (the reference loopback's DEL through a reused
  ``/proc/PID/ns/net`` did this).
- ``forwarding-off`` / ``rp-filter-strict``: for networks whose pods are routed through the node (``ptp``,
  ``bridge``): IPv4/IPv6 forwarding disabled, or strict reverse-path filtering (``rp_filter=1`` on
  ``all``/``default`` or on a pod's host-side interface), which drops pod traffic that arrives by an
  interface other than the one the reply route uses (health checks from another node address,
  multi-homed nodes, policy routing).
- ``leaked-reservation``: a host-local reservation (a file ``<dataDir>/<network>/<ip>`` holding
  ``<containerID>\\r\\n<ifname>``) is *leaked* when the runtime can no longer release it: its attachment
  has no cached result in ``<cache-dir>/results`` (no runtime will DEL it), or it has one whose recorded
  netns no longer exists (the container is gone and its DEL never completed). The fix is ``skb gc``:
  ``--keep-live`` DELs the cached attachments whose netns is gone and sends GC with the live ones as
  ``cni.dev/valid-attachments`` (cniVersion 1.1.0 and an IPAM that implements GC free the rest);
  otherwise the files named in the evidence can be removed by hand once the containers are confirmed gone.
- ``--probe``: ADD of the pod network (the first file) in a scratch netns with CRI's CNI_ARGS, then DEL.
  ``probe-failed`` when ADD or DEL fails; ``probe-no-ip`` when the result has no address on the interface
  the runtime looks up (``eth0``: containerd then fails the sandbox with "failed to find network info for
  sandbox"). Addresses are attributed as containerd's go-cni does: an IP without an ``interface`` index
  belongs to the default interface.
"""
import os
import sys
import json
import shutil
import socket
import tempfile
import tomllib

from skb.tool import libcni
from skb.cni.errors import CNIError
from skb.linux import scratch_netns
from skb.linux.netlink import RtNetlink
from skb.tool.style import Style

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CRIO_CONFIG = "/etc/crio/crio.conf"
CRIO_CONFIG_DIR = "/etc/crio/crio.conf.d"
DEFAULT_BIN_DIR = "/opt/cni/bin"
HOST_LOCAL_DATA_DIR = "/var/lib/cni/networks"
ROUTED_TYPES = ("ptp", "bridge")     # plugins whose pod traffic the node routes
BACKUP_SUFFIXES = (".bak", ".orig", ".old", ".disabled", ".save", ".swp", "~", ".dpkg-old", ".dpkg-dist",
                   ".rpmnew", ".rpmsave")
CRI_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=skb-doctor;K8S_POD_NAME=probe;K8S_POD_INFRA_CONTAINER_ID={cid}"
SEVERITIES = ("error", "warning", "note")


class Finding:
    __slots__ = ("severity", "code", "what", "evidence", "fix", "where")

    def __init__(self, severity, code, what, evidence="", fix="", where=""):
        self.severity = severity
        self.code = code
        self.what = what
        self.evidence = _one_line(evidence)
        self.fix = _one_line(fix)
        self.where = where

    def to_dict(self):
        return {"severity": self.severity, "code": self.code, "what": self.what, "evidence": self.evidence,
                "fix": self.fix, "where": self.where}

    def key(self):
        return (self.code, self.what)


def _one_line(s):
    return " ".join(str(s).split()) if s else ""


class View:
    """One runtime's idea of where CNI lives (or the flags', or the defaults)."""

    __slots__ = ("source", "conf_dir", "bin_dirs", "default_network", "origin")

    def __init__(self, source, conf_dir, bin_dirs, default_network="", origin=""):
        self.source = source
        self.conf_dir = conf_dir
        self.bin_dirs = list(bin_dirs)
        self.default_network = default_network
        self.origin = origin

    def key(self):
        return (_norm(self.conf_dir), tuple(_norm(d) for d in self.bin_dirs), self.default_network)

    def to_dict(self):
        return {"source": self.source, "confDir": self.conf_dir, "binDirs": self.bin_dirs,
                "defaultNetwork": self.default_network, "origin": self.origin}


def _norm(path):
    return os.path.normpath(path) if path else path


# ---------------------------------------------------------------------------------------------------
# where runtimes look

def _toml(path):
    with open(path, "rb") as f:
        return tomllib.load(f)


def containerd_view(path, findings):
    """containerd's CNI dirs from its config.toml, or None when there is no such file."""
    if not path or not os.path.isfile(path):
        return None
    try:
        data = _toml(path)
    except (OSError, ValueError) as e:
        findings.append(Finding("warning", "runtime-config-invalid", f"containerd's config {path} does not parse",
                                str(e), "fix the TOML; containerd refuses to start with it"))
        return None
    plugins = data.get("plugins", {}) if isinstance(data.get("plugins"), dict) else {}
    version = data.get("version", 1)
    if version >= 3:
        section, name = plugins.get("io.containerd.cri.v1.runtime", {}), 'plugins."io.containerd.cri.v1.runtime".cni'
    elif version == 2:
        section, name = plugins.get("io.containerd.grpc.v1.cri", {}), 'plugins."io.containerd.grpc.v1.cri".cni'
    else:
        section, name = plugins.get("cri", {}), "plugins.cri.cni"
    cni = section.get("cni", {}) if isinstance(section, dict) else {}
    cni = cni if isinstance(cni, dict) else {}
    conf_dir = cni.get("conf_dir") or "/etc/cni/net.d"
    bins = cni.get("bin_dirs") or ([cni["bin_dir"]] if cni.get("bin_dir") else [DEFAULT_BIN_DIR])
    origin = f"{path} [{name}]" if cni else f"{path} (no [{name}] section: containerd's defaults)"
    return View("containerd", conf_dir, [b for b in bins if isinstance(b, str)], "", origin)


def crio_view(path, drop_in_dir, findings):
    """CRI-O's CNI dirs from crio.conf and its drop-in directory (later files override), or None."""
    files = [path] if path and os.path.isfile(path) else []
    if drop_in_dir and os.path.isdir(drop_in_dir):
        files += [os.path.join(drop_in_dir, f) for f in sorted(os.listdir(drop_in_dir))
                  if os.path.isfile(os.path.join(drop_in_dir, f))]
    if not files:
        return None
    network = {}
    for f in files:
        try:
            data = _toml(f)
        except (OSError, ValueError) as e:
            findings.append(Finding("warning", "runtime-config-invalid", f"CRI-O's config {f} does not parse",
                                    str(e), "fix the TOML; CRI-O refuses to start with it"))
            continue
        section = data.get("crio", {}).get("network", {}) if isinstance(data.get("crio"), dict) else {}
        if isinstance(section, dict):
            network.update(section)
    conf_dir = network.get("network_dir") or "/etc/cni/net.d/"
    bins = network.get("plugin_dirs") or ["/opt/cni/bin/"]
    return View("CRI-O", conf_dir, [b for b in bins if isinstance(b, str)],
                network.get("cni_default_network") or "", ", ".join(files) + " [crio.network]")


def views_from(opts, findings):
    """The directory sets to check, and a finding for every disagreement between them."""
    runtimes = [v for v in (containerd_view(opts.containerd_config, findings),
                            crio_view(opts.crio_config, opts.crio_config_dir, findings)) if v]
    bin_flags = [d for arg in opts.bin_dir or () for d in arg.split(":") if d]
    if opts.conf_dir or bin_flags:
        flags = View("flags", opts.conf_dir or (runtimes[0].conf_dir if runtimes else "/etc/cni/net.d"),
                     bin_flags or (runtimes[0].bin_dirs if runtimes else [DEFAULT_BIN_DIR]), "",
                     "--conf-dir/--bin-dir")
        views = [flags]
    else:
        views = list(runtimes) or [View("defaults", "/etc/cni/net.d", [DEFAULT_BIN_DIR], "", "no runtime config found")]
    compared = views + [r for r in runtimes if views[0] is not r and views[0].source == "flags"]
    for i, a in enumerate(compared):
        for b in compared[i + 1:]:
            if _norm(a.conf_dir) != _norm(b.conf_dir):
                findings.append(Finding(
                    "warning", "runtime-dirs-disagree",
                    f"{a.source} reads CNI configs from {a.conf_dir} but {b.source} from {b.conf_dir}",
                    f"{a.source}: {a.origin}; {b.source}: {b.origin}",
                    "point them at the same directory (containerd: conf_dir; CRI-O: network_dir), or make sure "
                    "you are checking the one the node's runtime uses"))
            if [_norm(d) for d in a.bin_dirs] != [_norm(d) for d in b.bin_dirs]:
                findings.append(Finding(
                    "warning", "runtime-dirs-disagree",
                    f"{a.source} runs plugins from {':'.join(a.bin_dirs)} but {b.source} from {':'.join(b.bin_dirs)}",
                    f"{a.source}: {a.origin}; {b.source}: {b.origin}",
                    "install the plugins where the runtime looks, or align the settings (containerd: bin_dir / "
                    "bin_dirs; CRI-O: plugin_dirs)"))
    unique = []
    for v in views:
        if v.key() not in [u.key() for u in unique]:
            unique.append(v)
    return unique, runtimes


# ---------------------------------------------------------------------------------------------------
# the conf dir

class Loaded:
    """A configuration file and what became of it."""

    __slots__ = ("path", "netconf", "error")

    def __init__(self, path, netconf=None, error=None):
        self.path = path
        self.netconf = netconf
        self.error = error


def _looks_like_cni(path):
    """The decoded JSON object of a file that reads like a CNI config, else None."""
    try:
        if os.path.getsize(path) > 1 << 20:
            return None
        with open(path, "rb") as f:
            obj = libcni.jsonio.loads(f.read())
    except (OSError, ValueError):
        return None
    if isinstance(obj, dict) and ("plugins" in obj or "type" in obj) and ("name" in obj or "cniVersion" in obj):
        return obj
    return None


def check_conf_dir(view, findings):
    """Findings about the files of ``view.conf_dir``; returns the files in containerd's order with their
    loaded networks."""
    d = view.conf_dir
    if not os.path.isdir(d):
        findings.append(Finding("error", "no-config", f"the CNI conf dir {d} does not exist",
                                f"{view.source} reads it ({view.origin})",
                                f"create {d} and write the pod network into it as a .conflist "
                                "(containerd reports 'cni config uninitialized' until then)", d))
        return []
    try:
        entries = sorted(e for e in os.listdir(d) if not os.path.isdir(os.path.join(d, e)))
    except OSError as e:
        findings.append(Finding("error", "no-config", f"cannot list the CNI conf dir {d}", e.strerror,
                                "make it readable by the runtime (root)", d))
        return []
    candidates = [e for e in entries if libcni.go_ext(e) in (".conf", ".conflist", ".json")]
    for name in entries:
        if name in candidates:
            continue
        obj = _looks_like_cni(os.path.join(d, name))
        if obj is None:
            continue
        right = ".conflist" if "plugins" in obj else ".conf"
        stem = name
        for suffix in BACKUP_SUFFIXES:
            if stem.endswith(suffix):
                findings.append(Finding("note", "wrong-extension", f"{name} is ignored (a CNI config kept under a "
                                        f"backup name)", f"extension {libcni.go_ext(name) or '(none)'}",
                                        f"nothing to do if it is a backup; rename it to *{right} to use it",
                                        os.path.join(d, name)))
                break
        else:
            findings.append(Finding("warning", "wrong-extension", f"{name} looks like a CNI config but is ignored",
                                    f"its extension is {libcni.go_ext(name) or '(none)'}; libcni and containerd read "
                                    "only .conflist, .conf and .json",
                                    f"rename it to {os.path.splitext(name)[0] if libcni.go_ext(name) else name}{right}",
                                    os.path.join(d, name)))
    if not candidates:
        listing = ", ".join(entries[:8]) + (" ..." if len(entries) > 8 else "") if entries else "the directory is empty"
        findings.append(Finding("error", "no-config", f"no network configuration in {d}",
                                f"no .conflist, .conf or .json file ({listing}); containerd: 'cni config "
                                "uninitialized', kubelet: 'cni plugin not initialized'",
                                f"write the pod network to {d}/10-<name>.conflist", d))
        return []
    loaded = []
    for name in candidates:
        path = os.path.join(d, name)
        loaded.append(_load_file(path, findings))
    return loaded


def _load_file(path, findings):
    name = os.path.basename(path)
    ext = libcni.go_ext(name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        findings.append(Finding("error", "load-error", f"cannot read {name}", e.strerror, "make it readable", path))
        return Loaded(path, error=e.strerror)
    try:
        obj = libcni.jsonio.loads(data)
    except libcni.jsonio.JSONSyntaxError as e:
        findings.append(Finding(
            "error", "invalid-json", f"{name} is not valid JSON",
            f"line {e.line}, column {e.col}: {e.problem}: {e.snippet.strip()!r}; a file that does not parse makes "
            "every network lookup in this directory fail (containerd: 'cni config load failed', then 'cni plugin "
            "not initialized')", f"fix line {e.line} of {path}", path))
        return Loaded(path, error=str(e))
    if isinstance(obj, dict) and ext in (".conf", ".json") and "plugins" in obj and "type" not in obj:
        findings.append(Finding(
            "error", "wrong-extension", f"{name} holds a conflist but its extension makes it a single plugin config",
            "it has a 'plugins' list and no 'type'; libcni: \"error parsing configuration: missing 'type'\", which "
            "aborts every lookup in the directory", f"rename it to {name[:-len(ext)]}.conflist", path))
        return Loaded(path, error="missing 'type'")
    if isinstance(obj, dict) and ext == ".conflist" and "plugins" not in obj:
        if "type" in obj:
            evidence = ("it has a 'type' and no 'plugins': it is a single plugin config. libcni before 1.3: "
                        "\"no 'plugins' key\"; 1.3 and later: \"no plugin configs found\"")
            fix = f"rename it to {name[:-len(ext)]}.conf, or wrap the object: {{\"plugins\": [ ... ]}}"
        else:
            evidence = "libcni before 1.3: \"no 'plugins' key\"; 1.3 and later: \"no plugin configs found\""
            fix = 'add "plugins": [ {"type": ...} ] to it'
        sub = os.path.join(os.path.dirname(path), str(obj.get("name", "")))
        if not (obj.get("name") and os.path.isdir(sub) and any(f.endswith(".conf") for f in os.listdir(sub))):
            findings.append(Finding("error", "no-plugins", f"{name} is a conflist without plugins", evidence, fix, path))
            return Loaded(path, error="no plugins")
    try:
        netconf = libcni.load_any(path)
    except libcni.LibcniError as e:
        findings.append(Finding("error", "load-error", f"libcni rejects {name}", str(e),
                                f"fix {path}; while it fails, every network lookup in this directory fails", path))
        return Loaded(path, error=str(e))
    return Loaded(path, netconf)


def check_shadowing(view, loaded, findings):
    """Which file a runtime takes as the pod network, which are never read, and duplicated names."""
    good = [entry for entry in loaded if entry.netconf]
    if not loaded:
        return None
    if view.default_network:
        chosen = next((e for e in good if e.netconf.name == view.default_network), None)
        if chosen is None:
            findings.append(Finding("error", "no-config",
                                    f'{view.source} wants the network "{view.default_network}" and no file defines it',
                                    f"cni_default_network in {view.origin}; networks found: "
                                    f"{', '.join(e.netconf.name for e in good) or 'none'}",
                                    "fix cni_default_network or the network's name", view.conf_dir))
            return None
    else:
        chosen = loaded[0]
        if not chosen.netconf:
            findings.append(Finding("error", "no-config", f"the pod network file {os.path.basename(chosen.path)} "
                                    "does not load", "it is the first file by name, the one containerd uses",
                                    "fix it (see the finding above)", chosen.path))
            return None
    findings.append(Finding("note", "default-network",
                            f'pod network: "{chosen.netconf.name}" from {os.path.basename(chosen.path)}',
                            f"{view.source}'s cni_default_network" if view.default_network else
                            "the first configuration file by name, as containerd's CRI picks it", "",
                            chosen.path))
    # libcni's lookup by name: .conflist files first, then .conf/.json, each by name
    order = sorted(good, key=lambda e: (libcni.go_ext(e.path) != ".conflist", os.path.basename(e.path)))
    first_by_name = {}
    for e in order:
        first = first_by_name.setdefault(e.netconf.name, e)
        if first is not e:
            findings.append(Finding(
                "warning", "shadowed", f'{os.path.basename(e.path)} is shadowed: network "{e.netconf.name}" is '
                f"also defined by {os.path.basename(first.path)}, which libcni finds first",
                ".conflist files are searched before .conf/.json, each in file-name order; the first match wins",
                f"remove {os.path.basename(e.path)} or give it another name", e.path))
    unused = [os.path.basename(e.path) for e in loaded if e is not chosen]
    if unused and not view.default_network:
        findings.append(Finding("note", "shadowed", f"containerd's CRI never reads {', '.join(unused)}",
                                "it uses only the first file by name (max_conf_num = 1)",
                                "nothing to do unless you expected one of them to be the pod network", view.conf_dir))
    return chosen.netconf


# ---------------------------------------------------------------------------------------------------
# plugins

def _types_of(netconf):
    """(type, role) of each executable a network runs: its plugins and their IPAM delegates."""
    out = []
    for p in netconf.plugins:
        out.append((p.type, "plugin"))
        if p.ipam_type:
            out.append((p.ipam_type, f"IPAM of {p.type}"))
    return out


def check_plugins(view, networks, findings, run_version=True):
    versions = {}
    for netconf in networks:
        for ptype, role in _types_of(netconf):
            where = f'network "{netconf.name}" ({os.path.basename(netconf.source)})'
            path = _find(ptype, view.bin_dirs)
            if path is None:
                missing = [d for d in view.bin_dirs if not os.path.isdir(d)]
                findings.append(Finding(
                    "error", "plugin-missing", f'plugin "{ptype}" ({role}) is not installed',
                    f'failed to find plugin "{ptype}" in path [{" ".join(view.bin_dirs)}]; used by {where}'
                    + (f"; missing dirs: {', '.join(missing)}" if missing else ""),
                    f"install {ptype} into {view.bin_dirs[0] if view.bin_dirs else DEFAULT_BIN_DIR}, or fix the "
                    "type in the configuration", netconf.source))
                continue
            if not os.access(path, os.X_OK):
                findings.append(Finding("error", "plugin-not-executable", f"plugin {path} is not executable",
                                        f"mode {oct(os.stat(path).st_mode & 0o7777)}; used by {where}; libcni finds it and "
                                        "then fails with 'permission denied'", f"chmod 755 {path}", path))
                continue
            if not run_version:
                continue
            if path not in versions:
                try:
                    versions[path] = (_version_info(path, view.bin_dirs), None)
                except (libcni.LibcniError, libcni.CNIError) as e:
                    versions[path] = (None, libcni.describe(e))
            supported, err = versions[path]
            if err is not None:
                findings.append(Finding("error", "version-failed", f"plugin {path} fails VERSION",
                                        f"{err}; podman drops every network using it; used by {where}",
                                        f"run CNI_COMMAND=VERSION {path} </dev/null to see why; reinstall it", path))
                versions[path] = (None, None)   # once
                continue
            if supported is None:
                continue
            wanted = netconf.cni_version or "0.1.0"
            if wanted not in supported:
                common = [v for v in supported if v in libcni.cniresult.SUPPORTED_VERSIONS]
                findings.append(Finding(
                    "error", "version-unsupported",
                    f'plugin {ptype} does not support config version "{wanted}" ({where})',
                    f"{path} answers VERSION with supportedVersions {supported}",
                    f'set "cniVersion" to one it supports ({common[-1] if common else supported[-1]}), or install '
                    f"a {ptype} that speaks {wanted}", netconf.source))


def _find(ptype, dirs):
    try:
        return libcni.find_in_path(ptype, dirs)
    except libcni.LibcniError:
        return None


def _version_info(path, dirs):
    cni = libcni.CNIConfig(dirs, exec_=_PathExec(path))
    return cni.version_info(os.path.basename(path))


class _PathExec(libcni.RawExec):
    """Runs exactly the file found (the lookup was already made), stderr kept out of the report."""

    def __init__(self, path):
        libcni.RawExec.__init__(self, stderr=False, timeout=10)
        self.path = path

    def find_in_path(self, plugin, paths):
        return self.path


# ---------------------------------------------------------------------------------------------------
# the node: lo, forwarding, rp_filter

def _sysctl(name):
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            return f.read().strip()
    except OSError:
        return None


def check_host_lo(findings):
    try:
        with RtNetlink(label="the node") as nl:
            lo = nl.link_get("lo")
    except CNIError as e:
        findings.append(Finding("warning", "host-lo-down", "cannot read the node's lo", str(e),
                                "run skb doctor as root on the node"))
        return
    if not lo.flags & 0x1:
        findings.append(Finding(
            "error", "host-lo-down", "the node's loopback interface lo is DOWN",
            f"lo (index {lo.index}) has no UP flag; everything that talks to localhost on the node fails "
            "(kubelet, the runtime's own sockets). A DEL of the reference loopback plugin aimed at a reused "
            "/proc/PID/ns/net does exactly this",
            "ip link set lo up; then find the runtime call that did it (skb log of the debug capture)"))


def check_routing(networks, cache_dir, findings):
    routed = [n for n in networks if any(p.type in ROUTED_TYPES for p in n.plugins)]
    if not routed:
        return
    names = ", ".join(f'"{n.name}"' for n in routed)
    subnets = [s for n in routed for s in _subnets(n)]
    v4 = not subnets or any(":" not in s for s in subnets)   # no subnet given (another IPAM): assume IPv4
    v6 = any(":" in s for s in subnets)
    if v4 and _sysctl("net.ipv4.ip_forward") == "0":
        findings.append(Finding(
            "error", "forwarding-off", "IPv4 forwarding is off on the node",
            f"net.ipv4.ip_forward = 0; pods of {names} are routed through the node and cannot reach anything "
            "beyond it (ptp turns it on at ADD: something turned it off again, e.g. a sysctl.d file or "
            "systemd-networkd's IPForward=no)",
            "sysctl -w net.ipv4.ip_forward=1 and persist it in /etc/sysctl.d/"))
    if v6 and _sysctl("net.ipv6.conf.all.forwarding") == "0":
        findings.append(Finding(
            "error", "forwarding-off", "IPv6 forwarding is off on the node",
            f"net.ipv6.conf.all.forwarding = 0 and {names} hand out IPv6 addresses",
            "sysctl -w net.ipv6.conf.all.forwarding=1 and persist it in /etc/sysctl.d/"))
    if not v4:
        return
    strict = [f"net.ipv4.conf.{k}.rp_filter = 1" for k in ("all", "default") if _sysctl(f"net.ipv4.conf.{k}.rp_filter") == "1"]
    for ifname in _host_side_interfaces(routed, cache_dir):
        if _sysctl(f"net.ipv4.conf.{ifname}.rp_filter") == "1":
            strict.append(f"net.ipv4.conf.{ifname}.rp_filter = 1 (host side of a pod)")
    if strict:
        findings.append(Finding(
            "warning", "rp-filter-strict", "strict reverse-path filtering where pod traffic passes",
            f"{'; '.join(strict)} (the kernel applies the larger of all and the interface); pods of {names} are "
            "routed through the node, and packets whose reply would leave by another interface are dropped "
            "silently: health checks from another node address, multi-homed nodes, policy routing",
            "sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.default.rp_filter=2 (loose) and persist it "
            "in /etc/sysctl.d/"))


def _subnets(netconf):
    out = []
    for p in netconf.plugins:
        ipam = p.raw.get("ipam") if isinstance(p.raw.get("ipam"), dict) else {}
        out.append(ipam.get("subnet"))
        out += [r.get("subnet") for rs in ipam.get("ranges") or [] if isinstance(rs, list)
                for r in rs if isinstance(r, dict)]
    return [s for s in out if isinstance(s, str)]


def _host_side_interfaces(networks, cache_dir):
    """Host-side interface names (no sandbox) in the cached results of these networks."""
    names = {n.name for n in networks}
    out = []
    for att in libcni.CNIConfig([], cache_dir).cached_attachments():
        if att.network not in names:
            continue
        try:
            with open(att.path, "rb") as f:
                rec = libcni.jsonio.loads(f.read())
        except (OSError, ValueError):
            continue
        for iface in (rec.get("result") or {}).get("interfaces") or []:
            if isinstance(iface, dict) and iface.get("name") and not iface.get("sandbox"):
                out.append(iface["name"])
    return out


# ---------------------------------------------------------------------------------------------------
# host-local reservations

def _is_ip(name):
    for fam in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(fam, name)
            return True
        except OSError:
            pass
    return False


def reservations(store):
    """(ip, containerID, ifname or None, path) for each reservation file of a host-local store."""
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
            with open(path, "rb") as f:   # binary: text mode would fold the "\r\n" separator
                content = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        cid, sep, ifname = content.partition("\r\n")
        out.append((name, cid.strip(), ifname.strip() if sep else None, path))
    return out


def leaked_reservations(network, store, cache_dir):
    """The reservations of ``network`` in ``store`` that nothing will release, with the reason: no cached
    result for the attachment, or a cached result whose netns is gone."""
    cni = libcni.CNIConfig([], cache_dir)
    cached = {}
    for att in cni.cached_attachments():
        if att.network == network:
            cached.setdefault((att.container_id, att.ifname), att)
            cached.setdefault((att.container_id, None), att)   # legacy reservations carry no ifname
    out = []
    for ip, cid, ifname, path in reservations(store):
        att = cached.get((cid, ifname))
        if att is None:
            out.append((ip, cid, ifname, path, "no cached result", None))
        elif att.netns and not os.path.exists(att.netns):
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
            data_dir = libcni._field(ipam, "dataDir") or HOST_LOCAL_DATA_DIR
            store = os.path.join(data_dir, n.name)
            if (n.name, store) not in seen:
                seen.add((n.name, store))
                out.append((n, store))
    return out


def check_leaks(networks, cache_dir, findings):
    for netconf, store in host_local_stores(networks):
        leaked = leaked_reservations(netconf.name, store, cache_dir)
        if not leaked:
            continue
        shown = "; ".join(f"{ip} (container {cid}, {ifname or 'no ifname'}: {why})"
                          for ip, cid, ifname, _p, why, _a in leaked[:5])
        more = f"; and {len(leaked) - 5} more" if len(leaked) > 5 else ""
        gc_can = libcni.version_ge(netconf.cni_version or "0.1.0", "1.1.0") if _parses(netconf.cni_version) else False
        uncached = [p for _ip, _c, _i, p, why, att in leaked if att is None]
        if gc_can:
            fix = f"skb gc {netconf.name} --keep-live (DELs the dead attachments, then GC frees the rest)"
        elif len(uncached) < len(leaked):
            fix = (f"skb gc {netconf.name} --keep-live DELs those with a gone netns; GC of the others needs "
                   f"cniVersion 1.1.0: remove their files by hand once the containers are confirmed gone: "
                   f"rm {' '.join(uncached[:5])}{' ...' if len(uncached) > 5 else ''}")
        else:
            fix = (f"GC needs cniVersion 1.1.0 (the network has {netconf.cni_version or '0.1.0'}); once the "
                   f"containers are confirmed gone: rm {' '.join(uncached[:5])}{' ...' if len(uncached) > 5 else ''}")
        results = os.path.join(cache_dir, "results")
        if not (os.path.isdir(results) and os.listdir(results)):
            more += (f"; {results} holds no cached result at all: if the runtime keeps its libcni cache elsewhere, "
                     "run skb doctor --cache-dir DIR")
        findings.append(Finding(
            "warning", "leaked-reservation",
            f'{len(leaked)} leaked host-local reservation{"s" if len(leaked) > 1 else ""} in network "{netconf.name}"',
            f"{shown}{more}; store {store}, cache {os.path.join(cache_dir, 'results')}", fix, store))


def _parses(v):
    try:
        libcni.version_ge(v or "0.1.0", "0.1.0")
        return True
    except libcni.LibcniError:
        return False


# ---------------------------------------------------------------------------------------------------
# --probe

def ips_on(res, ifname):
    """The addresses containerd's go-cni attributes to ``ifname`` in a result (any version, held in the
    1.1.0 shape): an IP with an ``interface`` index belongs to that interface (an index out of range
    makes the result invalid); one without, to the default interface. Returns (addresses, problem)."""
    found = []
    for ip in res.ips:
        if ip.interface is None:
            name = ifname
        elif ip.interface >= len(res.interfaces):
            return [], (f"ips entry {ip.address} names interface index {ip.interface} but there are only "
                        f"{len(res.interfaces)} interfaces (go-cni: invalid result)")
        else:
            name = res.interfaces[ip.interface].name
        if name == ifname:
            found.append(ip.address)
    return found, None


def probe(view, netconf, opts, findings):
    name = scratch_netns.unique_name("skb-probe")
    try:
        path = scratch_netns.add(name, opts.netns_dir)
    except scratch_netns.NetnsAdminError as e:
        findings.append(Finding("warning", "probe-failed", "cannot make a scratch netns for the probe", str(e),
                                "run skb doctor --probe as root"))
        return
    cache = tempfile.mkdtemp(prefix="skb-probe-cache-")
    cid = f"skb-probe-{os.urandom(8).hex()}"
    rt = libcni.RuntimeConf(cid, path, opts.probe_ifname, libcni.parse_cnitool_args(CRI_ARGS.format(cid=cid)))
    cni = libcni.CNIConfig(view.bin_dirs, cache, libcni.RawExec(stderr=False, timeout=opts.probe_timeout))
    where = f'network "{netconf.name}" ({os.path.basename(netconf.source)})'
    try:
        try:
            res = cni.add_list(netconf, rt)
        except (libcni.LibcniError, libcni.CNIError) as e:
            findings.append(Finding("error", "probe-failed", f"ADD of the pod network fails ({where})",
                                    libcni.describe(e), "fix the plugin error above; skb add "
                                    f"{netconf.name} <netns> -v --conf-dir {view.conf_dir} reproduces it",
                                    netconf.source))
        else:
            addrs, problem = ips_on(res, opts.probe_ifname)
            shown = libcni.go_marshal(libcni.result_dict(res)).decode()
            if problem or not addrs:
                findings.append(Finding(
                    "error", "probe-no-ip",
                    f"the pod network's result has no IP address on {opts.probe_ifname} ({where})",
                    f"{problem + '; ' if problem else ''}result: {shown[:600]}; containerd looks up "
                    f"{opts.probe_ifname} and fails the sandbox: 'failed to find network info for sandbox'",
                    "the chain must end with a result whose ips point (by interface index) at the container "
                    f"interface {opts.probe_ifname}: check the main plugin's ipam section, and that later plugins "
                    "pass prevResult through", netconf.source))
            else:
                findings.append(Finding("note", "probe", f"probe ADD ok: {opts.probe_ifname} got {', '.join(addrs)}",
                                        f"result: {shown[:300]}", "", netconf.source))
        try:
            cni.del_list(netconf, rt)
        except (libcni.LibcniError, libcni.CNIError) as e:
            findings.append(Finding("error", "probe-failed", f"DEL of the pod network fails ({where})",
                                    libcni.describe(e), "a runtime retries DEL until it succeeds; fix the plugin",
                                    netconf.source))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        try:
            scratch_netns.delete(name, opts.netns_dir)
        except scratch_netns.NetnsAdminError:
            pass


# ---------------------------------------------------------------------------------------------------
# the command

def run(opts):
    """All findings, in report order, and the views checked."""
    findings = []
    views, runtimes = views_from(opts, findings)
    networks_seen = []
    for view in views:
        before = len(findings)
        loaded = check_conf_dir(view, findings)
        default = check_shadowing(view, loaded, findings)
        networks = [e.netconf for e in loaded if e.netconf]
        check_plugins(view, networks, findings, run_version=not opts.no_version)
        for n in networks:
            if all(n.source != m.source for m in networks_seen):
                networks_seen.append(n)
        if len(views) > 1:
            for f in findings[before:]:
                f.what = f"[{view.source}] {f.what}"
        if opts.probe:
            if default is None:
                findings.append(Finding("error", "probe-failed", "no pod network to probe",
                                        f"nothing loads in {view.conf_dir}", "fix the findings above"))
            else:
                probe(view, default, opts, findings)
    check_host_lo(findings)
    check_routing(networks_seen, opts.cache_dir, findings)
    check_leaks(networks_seen, opts.cache_dir, findings)
    unique, keys = [], set()
    for f in findings:
        if f.key() not in keys:
            keys.add(f.key())
            unique.append(f)
    return unique, views


def report(findings, views, style, out):
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}
    label = {"error": style.red("error  "), "warning": style.yellow("warning"), "note": style.dim("note   ")}
    for f in sorted(findings, key=lambda f: SEVERITIES.index(f.severity)):
        line = f"{label[f.severity]} {style.bold(f.code)}: {f.what}"
        if f.evidence:
            line += f" {style.dim('| evidence:')} {f.evidence}"
        if f.fix:
            line += f" {style.dim('| fix:')} {f.fix}"
        print(line, file=out)
    where = "; ".join(f"{v.source}: conf dir {v.conf_dir}, bin dirs {':'.join(v.bin_dirs)}" for v in views)
    problems = counts["error"] + counts["warning"]
    verdict = style.green("no problems found") if not problems else \
        style.red(f"{counts['error']} error{'s' if counts['error'] != 1 else ''}") + \
        f", {counts['warning']} warning{'s' if counts['warning'] != 1 else ''}"
    print(f"skb doctor: {verdict} ({counts['note']} note{'s' if counts['note'] != 1 else ''}); checked {where}",
          file=out)


def command(opts):
    findings, views = run(opts)
    problems = [f for f in findings if f.severity != "note"]
    if opts.json:
        print(json.dumps({"problems": [f.to_dict() for f in problems],
                          "notes": [f.to_dict() for f in findings if f.severity == "note"],
                          "summary": {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES},
                          "checked": [v.to_dict() for v in views]}, indent=2))
    else:
        report(findings, views, Style.for_stream(sys.stdout, opts.color), sys.stdout)
    return 1 if problems else 0


EPILOG = """\
Prints one line per problem: severity, code, what is wrong | evidence | fix; then a summary. Exit status 1
when there are errors or warnings. Codes: no-config, wrong-extension, no-plugins, invalid-json, load-error,
shadowed, plugin-missing, plugin-not-executable, version-failed, version-unsupported, host-lo-down,
forwarding-off, rp-filter-strict, leaked-reservation, runtime-dirs-disagree, runtime-config-invalid,
probe-failed, probe-no-ip. A leaked host-local reservation is one whose attachment has no cached result in
<cache-dir>/results, or whose cached netns is gone.

Without --conf-dir/--bin-dir the directories come from containerd's and CRI-O's configurations (and
their disagreements are reported), else /etc/cni/net.d and /opt/cni/bin.

examples:
  skb doctor
  skb doctor --json | jq '.problems[].code'
  skb doctor --conf-dir /etc/cni/net.d --bin-dir /opt/cni/bin:/usr/lib/cni
  skb doctor --probe                      # ADD + DEL of the pod network in a scratch netns (root)
  skb doctor --containerd-config /etc/containerd/config.toml --crio-config ''"""


def add_parser(sub, formatter, parents=()):
    d = sub.add_parser("doctor", help="find what is wrong with this node's CNI set-up", parents=list(parents),
                       description="Inspect the node's CNI configuration, plugins and state; print each "
                                   "problem with its evidence and fix.", epilog=EPILOG, formatter_class=formatter)
    d.add_argument("--conf-dir", help="the CNI conf dir to check (default: the runtimes', else /etc/cni/net.d)")
    d.add_argument("--bin-dir", action="append", metavar="DIR[:DIR]",
                   help="plugin dir (repeatable or ':'-separated; default: the runtimes', else /opt/cni/bin)")
    d.add_argument("--containerd-config", default=CONTAINERD_CONFIG,
                   help=f"containerd's config.toml (default: {CONTAINERD_CONFIG}; '' to ignore)")
    d.add_argument("--crio-config", default=CRIO_CONFIG, help=f"CRI-O's crio.conf (default: {CRIO_CONFIG}; '' to ignore)")
    d.add_argument("--crio-config-dir", default=CRIO_CONFIG_DIR,
                   help=f"CRI-O's drop-in dir (default: {CRIO_CONFIG_DIR}; '' to ignore)")
    d.add_argument("--cache-dir", default="/var/lib/cni", help="libcni's cache dir (default: /var/lib/cni)")
    d.add_argument("--no-version", action="store_true", help="do not run the plugins with VERSION")
    d.add_argument("--probe", action="store_true", help="ADD and DEL the pod network in a scratch netns")
    d.add_argument("--probe-ifname", default="eth0", help="the interface a runtime looks up (default: eth0)")
    d.add_argument("--probe-timeout", type=float, default=60.0, help="seconds a plugin may take in the probe")
    d.add_argument("--netns-dir", default="/run/netns", help="where the probe's scratch netns goes")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=command)
    return d
