"""Where the runtimes look: containerd's config.toml and CRI-O's crio.conf (+ crio.conf.d)."""
import os
import glob
import tomllib

from skb.tool.doctor.findings import Finding, View, DEFAULT_BIN_DIR, _norm
from skb.tool.doctor.files import BadFile, read_regular

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CRIO_CONFIG = "/etc/crio/crio.conf"
CRIO_CONFIG_DIR = "/etc/crio/crio.conf.d"


MAX_FILES = 64          # runtime config files followed (imports, drop-ins)
BROKEN = object()       # a runtime whose configuration does not parse: it does not start, nothing else to check

# containerd: the table holding [.cni] by config version (1.x reads v1 and v2; 2.x reads v2 and v3, migrating v2)
_CONTAINERD_CRI = {3: ("io.containerd.cri.v1.runtime",), 2: ("io.containerd.grpc.v1.cri",),
                   1: ("cri", "io.containerd.grpc.v1.cri")}


def _toml(path):
    """A TOML file as a dict; BadFile or ValueError with a one-line reason."""
    data = read_regular(path)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise ValueError("arrays or tables nested too deep") from None


def _exists(path):
    try:
        return bool(path) and os.path.lexists(path)
    except (ValueError, TypeError):
        return False


def _merge(into, data):
    """containerd's merge of an imported file: tables merge key by key, other values replace."""
    for k, v in data.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def _strings(v):
    return [x for x in v if isinstance(x, str) and x] if isinstance(v, list) else []


def _containerd_data(path, findings, sources=None):
    """config.toml with its ``imports`` merged in, or None (a finding says why). ``sources``, a list: gets
    (file, the CNI sections it holds) of each file read, in merge order (a later one's keys win)."""
    try:
        data = _toml(path)
        if sources is not None:
            sources.append((path, _cni_sections(data)))
    except (BadFile, ValueError) as e:
        findings.append(Finding("error", "runtime-config-invalid", f"containerd's config {path} does not parse",
                                f"{e}; containerd does not start with it, so no pod starts on this node",
                                f"fix {path} (containerd config dump prints the configuration it would use)", path))
        return BROKEN
    seen = 1
    for pattern in _strings(data.get("imports")):
        pattern = pattern if os.path.isabs(pattern) else os.path.join(os.path.dirname(path), pattern)
        for imp in sorted(glob.glob(pattern)):
            seen += 1
            if seen > MAX_FILES:
                break
            try:
                imported = _toml(imp)
                if sources is not None:
                    sources.append((imp, _cni_sections(imported)))
                _merge(data, imported)
            except (BadFile, ValueError) as e:
                findings.append(Finding("error", "runtime-config-invalid",
                                        f"containerd's imported config {imp} does not parse",
                                        f"{e}; {path} imports it, and containerd does not start with it",
                                        f"fix {imp}", imp))
                return BROKEN
    return data


def _cni_sections(data):
    """{table: set of the keys its cni section sets} of one file."""
    plugins = data.get("plugins") if isinstance(data.get("plugins"), dict) else {}
    return {t: set(v["cni"]) for t, v in plugins.items() if isinstance(v, dict) and isinstance(v.get("cni"), dict)}


def _set_in(sources, table, keys, default):
    """The last file of ``sources`` whose [table.cni] sets one of ``keys`` (what containerd uses), else
    ``default``: where a fix must change it."""
    found = default
    for path, sections in sources:
        if sections.get(table, set()) & set(keys):
            found = path
    return found


def containerd_view(path, findings):
    """containerd's CNI dirs from its config.toml; None when there is no such file, BROKEN when containerd
    would not start with it (the finding says why)."""
    if not _exists(path):
        return None
    sources = []
    data = _containerd_data(path, findings, sources)
    if data is BROKEN:
        return BROKEN
    version = data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version not in _CONTAINERD_CRI:
        findings.append(Finding("error", "runtime-config-invalid", f"containerd's config {path} has version = "
                                f"{version!r}", "containerd 1.x reads version 1 and 2, containerd 2.x version 2 and 3, "
                                "as a number; containerd does not start with any other",
                                "set version = 2 (containerd 1.7) or 3 (containerd 2.x)", path))
        return BROKEN
    plugins = data.get("plugins") if isinstance(data.get("plugins"), dict) else {}
    cni, name, used = {}, f'plugins."{_CONTAINERD_CRI[version][0]}".cni', _CONTAINERD_CRI[version][0]
    for table in _CONTAINERD_CRI[version]:
        section = plugins.get(table)
        if isinstance(section, dict) and isinstance(section.get("cni"), dict):
            cni, name = section["cni"], f'plugins."{table}".cni' if "." in table else f"plugins.{table}.cni"
            used = table
            break
    for other, tables in _CONTAINERD_CRI.items():   # the section of another version: silently ignored
        for table in tables:
            section = plugins.get(table)
            if other != version and table not in _CONTAINERD_CRI[version] and isinstance(section, dict) \
                    and isinstance(section.get("cni"), dict):
                findings.append(Finding(
                    "warning", "runtime-config-ignored",
                    f'containerd ignores [plugins."{table}".cni] in {path}',
                    f"the file says version = {version}; that table is read only in version {other} files, so "
                    f"containerd uses [{name}]" + ("" if cni else " (absent: its defaults)"),
                    f"move the settings to [{name}]", path))
    conf_dir = cni.get("conf_dir") if isinstance(cni.get("conf_dir"), str) and cni.get("conf_dir") else "/etc/cni/net.d"
    bins, key = _strings(cni.get("bin_dirs")), "bin_dirs"
    if not bins:
        bin_dir = cni.get("bin_dir")
        bins, key = ([bin_dir], "bin_dir") if isinstance(bin_dir, str) and bin_dir else ([DEFAULT_BIN_DIR], "")
    if not key:
        key = "bin_dirs" if version >= 3 else "bin_dir"
    max_conf = cni.get("max_conf_num", 1)
    max_conf = max_conf if isinstance(max_conf, int) and not isinstance(max_conf, bool) else 1
    origin = f"{path} [{name}]" if cni else f"{path} (no [{name}] section: containerd's defaults)"
    # (an imported file that sets the key is where it must change: review 16)
    bin_file = _set_in(sources, used, ("bin_dirs", "bin_dir"), path)
    conf_file = _set_in(sources, used, ("conf_dir",), path)
    return View("containerd", conf_dir, bins, "", origin, f"{key} in [{name}] of {bin_file}", max_conf,
                f"conf_dir in [{name}] of {conf_file}")


def _crio_files(path, drop_in_dir):
    """crio.conf, then every file under the drop-in dir in lexical order, depth first (CRI-O walks it)."""
    files = [path] if _exists(path) else []
    if not drop_in_dir:
        return files
    for root, dirs, names in os.walk(drop_in_dir):
        dirs.sort()
        files += [os.path.join(root, n) for n in sorted(names)]
        if len(files) > MAX_FILES:
            break
    return files[:MAX_FILES]


def crio_view(path, drop_in_dir, findings):
    """CRI-O's CNI dirs from crio.conf and its drop-in directory (later files override); None without
    them, BROKEN when one does not parse (CRI-O would not start)."""
    files = _crio_files(path, drop_in_dir)
    if not files:
        return None
    network, set_in = {}, {}
    for f in files:
        try:
            data = _toml(f)
        except (BadFile, ValueError) as e:
            findings.append(Finding("error", "runtime-config-invalid", f"CRI-O's config {f} does not parse",
                                    f"{e}; CRI-O does not start with it, so no pod starts on this node", f"fix {f}", f))
            return BROKEN
        section = data.get("crio", {}).get("network", {}) if isinstance(data.get("crio"), dict) else {}
        if isinstance(section, dict):
            network.update(section)
            set_in.update((k, f) for k in section)
    conf_dir = network.get("network_dir") if isinstance(network.get("network_dir"), str) else ""
    bins = _strings(network.get("plugin_dirs"))
    default = network.get("cni_default_network") if isinstance(network.get("cni_default_network"), str) else ""
    key = f"plugin_dirs in [crio.network] of {set_in.get('plugin_dirs', files[0])}"
    return View("CRI-O", conf_dir or "/etc/cni/net.d/", bins or ["/opt/cni/bin/"], default,
                ", ".join(files) + " [crio.network]", key,
                conf_key=f"network_dir in [crio.network] of {set_in.get('network_dir', files[0])}")


def views_from(opts, findings):
    """The directory sets to check, and a finding for every disagreement between them."""
    found = [containerd_view(opts.containerd_config, findings),
             crio_view(opts.crio_config, opts.crio_config_dir, findings)]
    runtimes = [v for v in found if v and v is not BROKEN]
    bin_flags = [d for arg in opts.bin_dir or () for d in arg.split(":") if d]
    if opts.conf_dir or bin_flags:
        flags = View("flags", opts.conf_dir or (runtimes[0].conf_dir if runtimes else "/etc/cni/net.d"),
                     bin_flags or (runtimes[0].bin_dirs if runtimes else [DEFAULT_BIN_DIR]), "",
                     "--conf-dir/--bin-dir")
        views = [flags]
    elif runtimes or BROKEN not in found:
        views = list(runtimes) or [View("defaults", "/etc/cni/net.d", [DEFAULT_BIN_DIR], "", "no runtime config found")]
    else:
        views = []          # the node's runtime does not start: its configuration is the one finding
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
