"""The conf dir: which files a runtime reads, which it skips, which break every lookup."""
import os
import stat

from skb.cni import env as cnienv
from skb.cni import jsonio
from skb.tool import libcni
from skb.tool.style import shell_word
from skb.tool.doctor.findings import Finding, plural
from skb.linux.files import kind_name
from skb.tool.doctor.files import BadFile, read_regular, open_regular, lstat_kind

BACKUP_SUFFIXES = (".bak", ".orig", ".old", ".disabled", ".save", ".swp", "~", ".dpkg-old", ".dpkg-dist",
                   ".rpmnew", ".rpmsave")


CONFIG_EXTS = (".conf", ".conflist", ".json")


class Loaded:
    """A configuration file and what became of it."""

    __slots__ = ("path", "netconf", "error")

    def __init__(self, path, netconf=None, error=None):
        self.path = path
        self.netconf = netconf
        self.error = error


def _decode(path):
    """The decoded JSON of a regular file (BadFile, or jsonio's JSONSyntaxError / ValueError)."""
    data = read_regular(path)
    return jsonio.loads(data)


def _looks_like_cni(path):
    """The decoded JSON object of a file that reads like a CNI config, else None."""
    try:
        obj = _decode(path)
    except (BadFile, ValueError):
        return None
    if isinstance(obj, dict) and ("plugins" in obj or "type" in obj) and ("name" in obj or "cniVersion" in obj):
        return obj
    return None


def _entries(d):
    """(name, own mode, resolved mode or None, error) of each entry of ``d``, by name."""
    return [(name, *lstat_kind(os.path.join(d, name))) for name in sorted(os.listdir(d))]


def _shown(name, own, target):
    if own is None:
        return name
    if stat.S_ISLNK(own):
        return f"{name} -> ({kind_name(target) if target is not None else 'dangling'})"
    if stat.S_ISDIR(own):
        return name + "/"
    return name if stat.S_ISREG(own) else f"{name} ({kind_name(own)})"


def _unusable(path, own, target, err, findings, reader):
    """A finding for an entry with a config extension that is not a readable regular file; the reason
    (for the Loaded entry), or None when the runtime simply skips it."""
    name = os.path.basename(path)
    if own is not None and stat.S_ISDIR(own):
        findings.append(Finding(
            "warning", "skipped-entry", f"{name} is a directory: {reader} skips it",
            "libcni reads only non-directory entries; a directory with a config name is often a hostPath or "
            "ConfigMap mount made before its file existed", f"remove the directory {path} and write the config "
            "as a file", path))
        return None
    if target is None:
        why = "a dangling symbolic link" if own is not None and stat.S_ISLNK(own) else \
            f"unreadable ({(err.strerror or str(err)).lower() if err else 'unknown error'})"
        consequence = "reading it fails, and that failure aborts every network lookup in this directory"
    elif stat.S_ISFIFO(target):
        why, consequence = kind_name(target), "reading it blocks until something writes to it: the runtime hangs loading its configuration"
    elif stat.S_ISDIR(target):
        why, consequence = "a symbolic link to a directory", "libcni does not skip it (the link is not a directory): reading it fails and aborts every lookup in this directory"
    elif stat.S_ISREG(target):
        try:
            os.close(open_regular(path))
            return None
        except BadFile as e:
            why, consequence = f"unreadable ({e.reason})", "reading it fails, and that failure aborts every network lookup in this directory"
    else:
        why = kind_name(target)
        consequence = ("reading it fails or never ends (a device like /dev/zero): every network lookup in this "
                       "directory fails or hangs")
    findings.append(Finding("error", "unreadable-entry", f"{name} is {why}",
                            f"{reader} reads every non-directory entry named *.conf, *.conflist or *.json: "
                            f"{consequence}", f"remove {path}, or replace it by the configuration file itself", path))
    return why


def check_conf_dir(view, findings):
    """Findings about the files of ``view.conf_dir``; returns the files in containerd's order with their
    loaded networks."""
    d = view.conf_dir
    own, target, err = lstat_kind(d)
    elsewhere, fix_elsewhere = _default_holds(view)
    if own is None:
        findings.append(Finding("error", "no-config", f"the CNI conf dir {d} does not exist",
                                f"{view.source} reads it ({view.origin}){elsewhere}",
                                fix_elsewhere or f"create {d} and write the pod network into it as a .conflist "
                                "(containerd reports 'cni config uninitialized' until then)", d))
        return []
    if target is None or not stat.S_ISDIR(target):
        what = kind_name(target) if target is not None else "a dangling symbolic link"
        findings.append(Finding("error", "no-config", f"the CNI conf dir {d} is {what}, not a directory",
                                f"{view.source} reads it ({view.origin})",
                                f"replace it by a directory holding the pod network's .conflist", d))
        return []
    try:
        entries = _entries(d)
    except OSError as e:
        findings.append(Finding("error", "no-config", f"cannot list the CNI conf dir {d}", e.strerror,
                                "make it readable by the runtime (root)", d))
        return []
    loaded = []          # every entry libcni would read, in its order: good ones and those it chokes on
    renames = []         # (name, the name libcni would read it under) of configs ignored for their extension
    for name, own, target, err in entries:
        path = os.path.join(d, name)
        if libcni.go_ext(name) in CONFIG_EXTS:
            why = _unusable(path, own, target, err, findings, "libcni")
            if why:
                loaded.append(Loaded(path, error=why))
            elif own is not None and not stat.S_ISDIR(own):
                loaded.append(_load_file(path, findings))
            continue
        if target is None or not stat.S_ISREG(target):
            continue
        obj = _looks_like_cni(path)
        if obj is None:
            continue
        right = ".conflist" if "plugins" in obj else ".conf"
        for suffix in BACKUP_SUFFIXES:
            if name.endswith(suffix):
                findings.append(Finding("note", "wrong-extension", f"{name} is ignored (a CNI config kept under a "
                                        f"backup name)", f"extension {libcni.go_ext(name) or '(none)'}",
                                        f"nothing to do if it is a backup; rename it to *{right} to use it", path))
                break
        else:
            stem = os.path.splitext(name)[0] if libcni.go_ext(name) else name
            if libcni.go_ext(stem) in CONFIG_EXTS:           # 10-pods.conflist.yaml: 10-pods.conflist
                stem = os.path.splitext(stem)[0]
            renames.append((name, f"{stem}{right}"))
            findings.append(Finding("warning", "wrong-extension", f"{name} looks like a CNI config but is ignored",
                                    f"its extension is {libcni.go_ext(name) or '(none)'}; libcni and containerd read "
                                    "only .conflist, .conf and .json", f"rename it to {stem}{right}", path))
    targets = [r for _n, r in renames]
    if not loaded and renames and len(set(targets)) == len(targets) and \
            not any(os.path.lexists(os.path.join(d, r)) for r in targets):
        # One cause, one finding: the runtime has no configuration because of those names; a fix of `mv`s
        # only where each lands on a free name of its own (review 16)
        ignored = {os.path.join(d, n) for n, _r in renames}
        findings[:] = [f for f in findings if not (f.code == "wrong-extension" and f.where in ignored)]
        findings.append(Finding("error", "no-config", f"no network configuration in {d}: "
                                f"{', '.join(n for n, _r in renames)} is ignored for its extension",
                                "libcni and containerd read only .conflist, .conf and .json; containerd: 'cni config "
                                f"uninitialized', kubelet: 'cni plugin not initialized'{elsewhere}",
                                "; ".join(f"mv -n -- {shell_word(os.path.join(d, n))} {shell_word(os.path.join(d, r))}"
                                          for n, r in renames) + (f" (or {fix_elsewhere})" if fix_elsewhere else ""), d))
        return loaded
    if not loaded:
        shown = [_shown(n, o, t) for n, o, t, _e in entries]
        listing = (f"it holds {', '.join(shown[:8])}{' ...' if len(shown) > 8 else ''}" if shown
                   else "the directory is empty")
        findings.append(Finding("error", "no-config", f"no network configuration in {d}",
                                f"no .conflist, .conf or .json file ({listing}); containerd: 'cni config "
                                f"uninitialized', kubelet: 'cni plugin not initialized'{elsewhere}",
                                fix_elsewhere or f"write the pod network to {d}/10-<name>.conflist", d))
    return loaded


def _default_holds(view):
    """(evidence, fix) when the runtime's conf dir is not /etc/cni/net.d and that directory holds
    configurations: the add-on and the runtime disagree on where they live. Else ("", "")."""
    default = libcni.DEFAULT_CONF_DIR
    if os.path.normpath(view.conf_dir) == os.path.normpath(default):
        return "", ""
    try:
        names = sorted(n for n in os.listdir(default) if libcni.go_ext(n) in CONFIG_EXTS)
    except OSError:
        return "", ""
    if not names:
        return "", ""
    setting = view.conf_key or ("--conf-dir" if view.source == "flags" else "the runtime's conf dir")
    return (f"; {default} holds {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}, but {view.source} reads "
            f"{view.conf_dir}",
            f"point {setting} at {default}" + (f" and restart {view.source}" if view.is_runtime() else "") +
            f", or move the pod network's file into {view.conf_dir}")


def _check_subdir(path, name, findings):
    """The plugin objects libcni appends from ``<conf dir>/<network name>/*.conf``: a reason when one of
    them would hang or break the load, else None."""
    sub = os.path.join(os.path.dirname(path), name)
    own, target, _err = lstat_kind(sub)
    if target is None or not stat.S_ISDIR(target):
        return None
    try:
        entries = _entries(sub)
    except OSError:
        return None
    for entry, own, target, err in entries:
        if libcni.go_ext(entry) != ".conf":
            continue
        if own is not None and stat.S_ISDIR(own):
            continue
        why = _unusable(os.path.join(sub, entry), own, target, err, findings, f"libcni (for network \"{name}\")")
        if why:
            return why
    return None


def _load_file(path, findings):
    name = os.path.basename(path)
    ext = libcni.go_ext(name)
    try:
        obj = _decode(path)
    except BadFile as e:
        findings.append(Finding("error", "load-error", f"cannot read {name}", e.reason, "make it readable", path))
        return Loaded(path, error=e.reason)
    except jsonio.JSONSyntaxError as e:
        findings.append(Finding(
            "error", "invalid-json", f"{name} is not valid JSON",
            f"line {e.line}, column {e.col}: {e.problem}: {e.snippet.strip()!r}; a file that does not parse makes "
            "every network lookup in this directory fail (containerd: 'cni config load failed', then 'cni plugin "
            "not initialized')", f"fix line {e.line} of {path}", path))
        return Loaded(path, error=str(e))
    except ValueError as e:
        findings.append(Finding("error", "invalid-json", f"{name} is not valid JSON", str(e), f"fix {path}", path))
        return Loaded(path, error=str(e))
    if isinstance(obj, dict) and ext in (".conf", ".json") and "plugins" in obj and "type" not in obj:
        findings.append(Finding(
            "error", "wrong-extension", f"{name} holds a conflist but its extension makes it a single plugin config",
            "it has a 'plugins' list and no 'type'; libcni: \"error parsing configuration: missing 'type'\", which "
            "aborts every lookup in the directory", f"rename it to {name[:-len(ext)]}.conflist", path))
        return Loaded(path, error="missing 'type'")
    net_name = obj.get("name") if isinstance(obj, dict) and isinstance(obj.get("name"), str) else ""
    if isinstance(obj, dict) and ext == ".conflist" and "plugins" not in obj:
        if "type" in obj:
            evidence = ("it has a 'type' and no 'plugins': it is a single plugin config. libcni before 1.3: "
                        "\"no 'plugins' key\"; 1.3 and later: \"no plugin configs found\"")
            fix = f"rename it to {name[:-len(ext)]}.conf, or wrap the object: {{\"plugins\": [ ... ]}}"
        else:
            evidence = "libcni before 1.3: \"no 'plugins' key\"; 1.3 and later: \"no plugin configs found\""
            fix = 'add "plugins": [ {"type": ...} ] to it'
        sub = os.path.join(os.path.dirname(path), net_name)
        has_sub = False
        if net_name and cnienv.valid_name(net_name):
            try:
                has_sub = os.path.isdir(sub) and any(f.endswith(".conf") for f in os.listdir(sub))
            except OSError:
                has_sub = False
        if not has_sub:
            findings.append(Finding("error", "no-plugins", f"{name} is a conflist without plugins", evidence, fix, path))
            return Loaded(path, error="no plugins")
    if ext == ".conflist" and net_name and not (isinstance(obj, dict) and obj.get("loadOnlyInlinedPlugins") is True):
        why = _check_subdir(path, net_name, findings)
        if why:
            return Loaded(path, error=why)
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
                                    "does not load", "it is the first file by name, the one the runtime uses",
                                    "fix it (see the finding above)", chosen.path))
            return None
    findings.append(Finding("note", "default-network",
                            f'pod network: "{chosen.netconf.name}" from {os.path.basename(chosen.path)}',
                            f"{view.source}'s cni_default_network" if view.default_network else
                            "the first configuration file by name, as "
                            + (f"{view.source} picks it" if view.is_runtime() else "containerd and CRI-O pick it"), "",
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
    others = [e for e in good if e is not chosen and e.netconf.name != chosen.netconf.name]
    if not others:
        return chosen.netconf
    ignored = ", ".join(f'{os.path.basename(e.path)} ("{e.netconf.name}")' for e in others)
    count = plural(len({e.netconf.name for e in good}), "networks are", "networks are")
    if view.default_network:
        findings.append(Finding("note", "several-networks", f"{view.source} never uses {ignored} for pods",
                                f"its cni_default_network is \"{view.default_network}\"; podman reads every file",
                                "nothing to do unless you expected one of them to be the pod network", view.conf_dir))
    elif view.source == "containerd" and view.max_conf_num != 1:
        findings.append(Finding("note", "several-networks", f"containerd attaches every pod to "
                                f"{'all' if view.max_conf_num <= 0 else f'the first {view.max_conf_num}'} of the "
                                f"networks in {view.conf_dir}", f"max_conf_num = {view.max_conf_num} in {view.origin}; "
                                f"besides the first: {ignored}", "", view.conf_dir))
    else:
        findings.append(Finding(
            "warning", "several-networks",
            f'{len(others) + 1} networks are configured in {view.conf_dir}: pods get only "{chosen.netconf.name}" '
            f"({os.path.basename(chosen.path)}), the others are ignored",
            "containerd's CRI loads only the first file in lexical order (max_conf_num = 1) and CRI-O takes the "
            f"first too unless cni_default_network names another; ignored: {ignored}; podman reads all of them "
            "(each is a network for podman run --network NAME)",
            "remove the files not meant for pods (podman's own networks belong in its network_config_dir), or "
            "rename the pod network's file so it sorts first (e.g. 00-<name>.conflist); with CRI-O, "
            "cni_default_network can name it", view.conf_dir))
    return chosen.netconf
