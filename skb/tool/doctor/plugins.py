"""The plugins a network runs: installed, executable, and speaking its cniVersion."""
import os

from skb.tool import libcni
from skb.tool.doctor.findings import Finding, DEFAULT_BIN_DIR


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
