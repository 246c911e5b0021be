"""The conf dir: which files a runtime reads, which it skips, which break every lookup."""
import os

from skb.tool import libcni
from skb.tool.doctor.findings import Finding

BACKUP_SUFFIXES = (".bak", ".orig", ".old", ".disabled", ".save", ".swp", "~", ".dpkg-old", ".dpkg-dist",
                   ".rpmnew", ".rpmsave")


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
