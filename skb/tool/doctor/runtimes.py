"""Where the runtimes look: containerd's config.toml and CRI-O's crio.conf (+ crio.conf.d)."""
import os
import tomllib

from skb.tool.doctor.findings import Finding, View, DEFAULT_BIN_DIR, _norm

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CRIO_CONFIG = "/etc/crio/crio.conf"
CRIO_CONFIG_DIR = "/etc/crio/crio.conf.d"


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
