"""The plugins a network runs: installed where the runtime looks, executable, speaking its cniVersion,
and ready (STATUS)."""
import os
import threading

from skb.cni import result as cniresult
from skb.cni.errors import CNIError
from skb.tool import libcni
from skb.tool.libcni.aside import AsideExec
from skb.tool.doctor.findings import Finding, DEFAULT_BIN_DIR

# Where plugins are commonly installed: searched only to say where a missing plugin is after all.
STANDARD_BIN_DIRS = ("/opt/cni/bin", "/usr/lib/cni", "/usr/libexec/cni", "/usr/local/lib/cni",
                     "/usr/local/libexec/cni")
EXEC_TIMEOUT = 10.0   # seconds a plugin may take to answer VERSION or STATUS
STATUS_CODES = {50: "the plugin is not available: it cannot ADD",
                51: "the plugin is not available, and existing containers may be affected"}


def _types_of(netconf):
    """(type, role) of each executable a network runs: its plugins and their IPAM delegates."""
    out = []
    for p in netconf.plugins:
        out.append((p.type, "plugin"))
        if p.ipam_type:
            out.append((p.ipam_type, f"IPAM of {p.type}"))
    return out


def _find(ptype, dirs):
    try:
        return libcni.find_in_path(ptype, dirs)
    except libcni.LibcniError:
        return None


def elsewhere(ptype, dirs, searched):
    """Paths of ``ptype`` in the ``dirs`` not among ``searched``."""
    seen = {os.path.normpath(d) for d in searched if d}
    out = []
    for d in dirs:
        if not d or os.path.normpath(d) in seen:
            continue
        seen.add(os.path.normpath(d))
        path = _find(ptype, [d])
        if path:
            out.append(path)
    return out


def _not_here(view, ptype, role, where, found, source):
    """The finding for a plugin the view's bin dirs lack: where it is instead, if anywhere."""
    if found:
        return _elsewhere(view, os.path.dirname(found[0]), [(ptype, role, where, found)], source)
    missing = [d for d in view.bin_dirs if not os.path.isdir(d)]
    return Finding(
        "error", "plugin-missing", f'plugin "{ptype}" ({role}) is not installed',
        f'failed to find plugin "{ptype}" in path [{" ".join(view.bin_dirs)}]; used by {where}'
        + (f"; missing dirs: {', '.join(missing)}" if missing else ""),
        f"install {ptype} into {view.bin_dirs[0] if view.bin_dirs else DEFAULT_BIN_DIR}, or fix the "
        "type in the configuration", source)


def _elsewhere(view, at, items, source, unfit=()):
    """One finding for the plugins (``items``: (type, role, used by, found paths)) that are all installed
    in the directory ``at`` the view does not search: one cause, one setting to change; unless some of
    them could not serve their network either (``unfit``: why), when the fix is to install them."""
    dirs = " ".join(view.bin_dirs)
    setting = view.bin_key or ("--bin-dir" if view.source == "flags" else "the bin dirs")
    names = [t for t, _r, _w, _f in items]
    if len(items) == 1:
        ptype, role, where, found = items[0]
        what = f'plugin "{ptype}" ({role}) is not where {view.source} looks: it is in {at}'
        evidence = (f'{view.source} looks in [{dirs}] ({view.origin}): failed to find plugin "{ptype}" in path '
                    f"[{dirs}]; found {', '.join(found)}; used by {where}")
    else:
        what = (f"plugins {', '.join(chr(34) + n + chr(34) for n in names)} are not where {view.source} looks: "
                f"they are in {at}")
        evidence = (f"{view.source} looks in [{dirs}] ({view.origin}), and finds none of them there; used by "
                    + "; ".join(sorted({w for _t, _r, w, _f in items})))
    if unfit:
        evidence += "; but " + "; ".join(dict.fromkeys(unfit))
        where_to = view.bin_dirs[0] if view.bin_dirs else f"a directory {view.source} searches"
        fix = (f"install {' '.join(names)} that speak{'s' if len(names) == 1 else ''} the network's cniVersion into "
               f"{where_to}; the ones in {at} would not do")
        return Finding("error", "plugin-elsewhere", what, evidence, fix, source)
    single = setting == "bin_dir" or setting.startswith("bin_dir ")     # (containerd 1.x: one directory)
    change = f"set {setting} to {at} (it holds one directory)" if single else f"add {at} to {setting}"
    fix = f"{change} and restart {view.source}" if view.is_runtime() else change
    fix += f", or install {' '.join(names)} into {view.bin_dirs[0]}" if view.bin_dirs else ""
    return Finding("error", "plugin-elsewhere", what, evidence, fix, source)


def _before(dirs, path):
    """The dirs searched before the one ``path`` was found in (all of them when it was not found)."""
    if path is None:
        return list(dirs)
    at = os.path.normpath(os.path.dirname(path))
    for i, d in enumerate(dirs):
        if os.path.normpath(d) == at:
            return list(dirs[:i])
    return list(dirs)


def _dangling(ptype, dirs):
    """(link, its target) of each dangling symbolic link named ``ptype`` in ``dirs`` (libcni skips them
    as it looks for a regular file)."""
    out = []
    for d in dirs:
        path = os.path.join(d, ptype)
        try:
            if os.path.islink(path) and not os.path.exists(path):
                out.append((path, os.readlink(path)))
        except (OSError, ValueError):
            continue
    return out


def _dangling_finding(view, ptype, role, where, links, found, source):
    """A plugin whose file in the runtime's bin dir is a dangling link: the runtime skips it and runs
    ``found`` (a later bin dir's, another implementation), or fails to find the plugin at all."""
    shown = ", ".join(f"{link} -> {target}" for link, target in links)
    if found:
        return Finding("warning", "plugin-dangling", f'plugin "{ptype}" ({role}): {links[0][0]} is a dangling '
                       f"symbolic link, and {view.source} runs {found} instead",
                       f"{shown} (the target does not exist); libcni skips it and takes the next bin dir's; used by "
                       f"{where}", f"repair the link (or remove it to use {found} on purpose)", source)
    return Finding("error", "plugin-dangling", f'plugin "{ptype}" ({role}) is a dangling symbolic link',
                   f"{shown} (the target does not exist): {view.source} cannot run it, 'failed to find plugin "
                   f'"{ptype}" in path [{" ".join(view.bin_dirs)}]\'; used by {where}',
                   f"repair the link to point at the installed plugin, or reinstall {ptype} into "
                   f"{os.path.dirname(links[0][0])}", source)


def _wants_status(netconf):
    return libcni.speaks_1_1(netconf.cni_version)


def _version_job(view, path):
    try:
        return _version_info(path, view.bin_dirs), None
    except (libcni.LibcniError, CNIError) as e:
        return None, libcni.describe(e)


def _status_job(view, netconf):
    """None, or (the plugin path that failed, the error) of STATUS through the chain. A diagnostic's call
    appends to none of the runtime's call logs (the debug log, a debug plugin's captureFile and cniOutput)."""
    exec_ = AsideExec(stderr=False, timeout=EXEC_TIMEOUT)
    cni = libcni.CNIConfig(view.bin_dirs, exec_=exec_)
    try:
        cni.status_list(netconf)
    except (libcni.LibcniError, CNIError) as e:
        return exec_.calls[-1]["path"] if exec_.calls else "", e
    return None


def _parallel(calls, width=8):
    """The results of ``calls`` (no-argument functions), run in up to ``width`` threads, in order."""
    results = [None] * len(calls)
    todo = list(enumerate(calls))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i, call = todo.pop(0)
            results[i] = call()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(width, len(calls)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def prefetch(view, networks, run_version=True, run_status=True):
    """VERSION of every plugin found and STATUS of every network whose plugins are all there, run in
    parallel (each is a process start): ({path: (supportedVersions, error)}, {network source: outcome})."""
    paths, status_nets = [], []
    for netconf in networks:
        complete = True
        for ptype, _role in _types_of(netconf):
            path = _find(ptype, view.bin_dirs)
            if path is None or not os.access(path, os.X_OK):
                complete = False
            elif path not in paths:
                paths.append(path)
        if complete and run_status and _wants_status(netconf):
            status_nets.append(netconf)
    jobs = ([(_version_job, path) for path in paths] if run_version else []) + \
        [(_status_job, netconf) for netconf in status_nets]
    if not jobs:
        return {}, {}
    results = _parallel([lambda job=job: job[0](view, job[1]) for job in jobs])
    versions = {path: r for (fn, path), r in zip(jobs, results) if fn is _version_job}
    statuses = {n.source: r for (fn, n), r in zip(jobs, results) if fn is _status_job}
    return versions, statuses


def check_plugins(view, networks, findings, run_version=True, search=(), versions=None):
    """Each plugin of each network: found, executable, VERSION (``versions``: from ``prefetch``).
    Returns {path: supportedVersions or None} and {network source: [paths]} (only when every plugin of
    the network was found)."""
    versions = dict(versions or {})
    found_all = {}
    away = {}          # plugin-elsewhere, grouped by the directory they are in: one setting to change
    for netconf in networks:
        paths = []
        for ptype, role in _types_of(netconf):
            where = f'network "{netconf.name}" ({os.path.basename(netconf.source)})'
            path = _find(ptype, view.bin_dirs)
            links = _dangling(ptype, _before(view.bin_dirs, path))
            if links:
                findings.append(_dangling_finding(view, ptype, role, where, links, path, netconf.source))
            if path is None:
                paths = None
                if links:
                    continue
                found = elsewhere(ptype, list(search) + list(STANDARD_BIN_DIRS), view.bin_dirs)
                if found:
                    unfit = _unfit(view, found[0], netconf, versions) if run_version else None
                    away.setdefault(os.path.dirname(found[0]), []).append((ptype, role, where, found, netconf.source,
                                                                           unfit))
                else:
                    findings.append(_not_here(view, ptype, role, where, [], netconf.source))
                continue
            if paths is not None:
                paths.append(path)
            if not os.access(path, os.X_OK):
                try:
                    mode = oct(os.stat(path).st_mode & 0o7777)
                except OSError:
                    mode = "unknown"
                findings.append(Finding("error", "plugin-not-executable", f"plugin {path} is not executable",
                                        f"mode {mode}; used by {where}; libcni finds it and "
                                        "then fails with 'permission denied'", f"chmod 755 {path}", path))
                paths = None
                continue
            if not run_version:
                continue
            if path not in versions:
                versions[path] = _version_job(view, path)
            supported, err = versions[path]
            if err is not None:
                findings.append(Finding("error", "version-failed", f"plugin {path} fails VERSION",
                                        f"{err}{_interpreter(path, err)}; podman and CRI-O (which validate "
                                        f"every plugin with VERSION) drop every network using it; used by {where}",
                                        f"run CNI_COMMAND=VERSION {path} </dev/null to see why; reinstall it", path))
                versions[path] = (None, None)   # once
                continue
            if supported is None:
                continue
            wanted = netconf.cni_version or "0.1.0"
            if wanted not in supported:
                common = [v for v in supported if v in cniresult.SUPPORTED_VERSIONS]
                findings.append(Finding(
                    "error", "version-unsupported",
                    f'plugin {ptype} does not support config version "{wanted}" ({where})',
                    f"{path} answers VERSION with supportedVersions {supported}",
                    f'set "cniVersion" to one it supports ({common[-1] if common else supported[-1]}), or install '
                    f"a {ptype} that speaks {wanted}", netconf.source))
        if paths is not None:
            found_all[netconf.source] = paths
    for at, items in away.items():
        findings.append(_elsewhere(view, at, [i[:4] for i in items], items[0][4], [i[5] for i in items if i[5]]))
    return {p: v[0] for p, v in versions.items()}, found_all


def _interpreter(path, err):
    """Why exec said "no such file or directory" of a file that is there: its #! line names an interpreter
    that is not (a missing one, or a script written with CRLF line ends)."""
    if "no such file or directory" not in str(err):
        return ""
    try:
        with open(path, "rb") as f:
            first = f.read(256).split(b"\n", 1)[0]
    except OSError:
        return ""
    if not first.startswith(b"#!"):
        return ""
    words = first[2:].strip(b" \t").split(None, 1)
    interp = words[0].decode(errors="backslashreplace") if words else ""
    if interp.endswith("\r"):
        return " (its #! line ends in a carriage return: the file has CRLF line ends; convert it with dos2unix)"
    if interp and not os.path.exists(interp):
        return f" (its #! line asks for {interp}, which does not exist here)"
    return ""


def _unfit(view, path, netconf, versions):
    """Why the plugin found at ``path``, outside the bin dirs, could not serve ``netconf`` either (its
    VERSION fails, or does not list the network's cniVersion), or None: pointing the runtime at it would
    trade one error for another (review 16)."""
    if path not in versions:
        versions[path] = _version_job(view, path)
    supported, err = versions[path]
    if err is not None:
        return f"{path} fails VERSION ({err})"
    wanted = netconf.cni_version or "0.1.0"
    if supported is not None and wanted not in supported:
        return f'{path} does not speak cniVersion "{wanted}" of network "{netconf.name}" (it speaks {", ".join(supported)})'
    return None


def check_runtime_bins(checked, runtimes, default, findings, search=()):
    """The pod network's plugins in the bin dirs of each runtime whose directories were not the ones
    checked (flags given): a runtime that would not find them is an error, saying where they are."""
    if default is None:
        return
    checked_keys = {v.key() for v in checked}
    where = f'pod network "{default.name}" ({os.path.basename(default.source)})'
    dirs = list(search) + [d for v in checked for d in v.bin_dirs] + list(STANDARD_BIN_DIRS)
    for rt in runtimes:
        if rt.key() in checked_keys:
            continue
        away = {}
        for ptype, role in _types_of(default):
            if _find(ptype, rt.bin_dirs):
                continue
            found = elsewhere(ptype, dirs, rt.bin_dirs)
            if found:
                away.setdefault(os.path.dirname(found[0]), []).append((ptype, role, where, found))
            else:
                findings.append(_not_here(rt, ptype, role, where, [], default.source))
        for at, items in away.items():
            findings.append(_elsewhere(rt, at, items, default.source))


def check_declared_versions(networks, versions, found_all, findings):
    """A network without cniVersion is read as 0.1.0: no CHECK, STATUS or GC, lossy chained results."""
    for netconf in networks:
        if netconf.cni_version:
            continue
        lists = [versions.get(p) for p in found_all.get(netconf.source, [])]
        common = None
        if lists and all(lists):
            shared = set(lists[0]).intersection(*lists[1:]) & set(cniresult.SUPPORTED_VERSIONS)
            common = max(shared, key=cniresult.parse_version) if shared else None
        name = os.path.basename(netconf.source)
        findings.append(Finding(
            "warning", "no-cniversion", f'{name} has no "cniVersion": network "{netconf.name}" is read as 0.1.0',
            "0.1.0 has no CHECK, STATUS or GC (containerd 2 cannot ask the plugins whether they are ready, nor "
            "collect leaked addresses), and each plugin of a chain gets the previous result in the 0.1.0 form "
            "(no interfaces, one address per family): chained results are lossy",
            f'add "cniVersion": "{common or "1.0.0"}" to {netconf.source}'
            + (" (the newest version every plugin of the chain supports)" if common else ""), netconf.source))


def check_status(view, networks, default, found_all, findings, statuses=None):
    """STATUS through each network's chain as libcni does (cniVersion 1.1.0 and later; containerd 2
    asks every few seconds; ``statuses``: from ``prefetch``). A failure of the pod network makes kubelet
    mark the node NotReady."""
    statuses = statuses or {}
    for netconf in networks:
        if netconf.source not in found_all or not _wants_status(netconf):
            continue          # a plugin is missing (reported already), or the version has no STATUS
        outcome = statuses[netconf.source] if netconf.source in statuses else _status_job(view, netconf)
        if outcome is not None:
            failed, e = outcome
            inner = e if isinstance(e, CNIError) else e.cni_error()
            code = inner.code if inner is not None else None
            msg = libcni.describe(e)
            meaning = STATUS_CODES.get(code, "")
            pod = default is not None and netconf.source == default.source
            findings.append(Finding(
                "error" if pod else "warning", "status-failed",
                f'plugin {os.path.basename(failed) or "?"} fails STATUS (network "{netconf.name}", '
                f"{os.path.basename(netconf.source)})",
                f"code {code if code is not None else '?'}{' (' + meaning + ')' if meaning else ''}: {msg}"
                + ("; containerd 2 asks every few seconds and kubelet then marks the node NotReady: \"container "
                   "runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network "
                   f"plugin returns error: {msg}\"" if pod else ""),
                "fix what the plugin reports (often its daemon or its datastore is down); reproduce with: skb "
                f"status {netconf.name} --conf-dir {os.path.dirname(netconf.source)} --cni-path "
                f"{':'.join(view.bin_dirs)}", failed or netconf.source, network=netconf.source, cni_code=code))


def _version_info(path, dirs):
    cni = libcni.CNIConfig(dirs, exec_=_PathExec(path))
    return cni.version_info(os.path.basename(path))


class _PathExec(AsideExec):
    """Runs exactly the file found (the lookup was already made), stderr kept out of the report, its record
    (SKB_DEBUG_LOG) nowhere."""

    def __init__(self, path):
        AsideExec.__init__(self, stderr=False, timeout=EXEC_TIMEOUT)
        self.path = path

    def find_in_path(self, plugin, paths):
        return self.path
