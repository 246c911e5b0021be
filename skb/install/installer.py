"""Install the frozen suite and the node's network configuration: what ``skb install``/``skb uninstall``,
``make install`` (build/bundle.py) and the DaemonSet's container all run.

Two things are written, and a runtime must never see either half-done:

- **The suite** (``install_suite``): the versioned bundle dir ``.skb-<version>-<hash>`` is copied under a
  temporary name, checked against its MANIFEST and only then renamed into place; the ``.skb`` symlink is
  switched by renaming a new link over it; each launcher is written to a temporary file and renamed. So a
  runtime execs the old suite or the new one, never a mix or a half-copied file. A bundle already in
  place and matching its MANIFEST is reused: a rerun is a no-op. One install at a time per bin dir (flock
  on the dir). Leftovers of an install killed half-way all carry ``TMP_PREFIX`` and are removed by the
  next run, which then completes.
- **The network configuration** (``install_config``): rendered from a template (``render``), checked to be
  a conflist, written to a temporary file beside it (a name libcni never loads: it does not end in
  .conf/.conflist/.json) and renamed over the target. Writing the same bytes again changes nothing (no
  spurious inotify event for the runtime). A file of another network at the target path, or another
  network's config that libcni would load before ours (CRI uses the first file by name), is a refusal
  unless ``force``.

``uninstall_config`` removes our config only: the runtime then reports the node's network as not ready
and kubelet marks the node NotReady, rather than starting pods with no network. ``uninstall_suite``
(``--purge``) removes the launchers and bundles too; pods still running then cannot be torn down, so it
is for a drained node.

Errors are ``InstallError`` with a message that names the file and the fix. Standard library only, and
no import of the rest of skb: build/bundle.py runs this module on the build host's /usr/bin/python3.
"""
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import stat
import time

LINK = ".skb"
BUNDLE_RE = re.compile(r"^\.skb-\d[^/]*-[0-9a-f]{12}$")
TMP_PREFIX = ".skb-tmp."  # every temporary name an install makes in a bin dir starts with this
CONF_TMP_INFIX = ".skb-tmp."  # temporary config files: .<conf name>.skb-tmp.<pid>
CONF_EXTENSIONS = (".conf", ".conflist", ".json")  # what libcni loads from a conf dir
DEFAULT_BIN_DIR = "/opt/cni/bin"
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CONF_NAME = "10-skb.conflist"
LAUNCHER_MAX_SIZE = 1 << 20  # our launchers are ~30 KB static binaries
LAUNCHER_MARK = b"skb-cni launcher"  # a string compiled into build/launcher.c's messages

# Crash points for tests (tests/integration/test_installer.py): SKB_INSTALL_CRASH_AT=<point> makes the
# installer SIGKILL itself there, exactly like a node reboot or an OOM kill at that instant.
CRASH_ENV = "SKB_INSTALL_CRASH_AT"


class InstallError(Exception):
    pass


def _crash_point(name):
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), 9)


def _say(log, msg):
    if log:
        log(msg)


# ------------------------------------------------------------------------------------ the bundle's files

def tree_files(top):
    """(relative path, absolute path) of every file and symlink under top, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))):
            path = os.path.join(dirpath, name)
            out.append((os.path.relpath(path, top), path))
    return sorted(out)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_lines(top):
    lines = []
    for rel, path in tree_files(top):
        if rel == "MANIFEST":
            continue
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            lines.append(f"link {os.readlink(path)} {rel}")
        else:
            lines.append(f"{sha256_file(path)} {stat.S_IMODE(st.st_mode):o} {rel}")
    return lines


def verify(bundle_dir):
    """True when bundle_dir holds exactly what its MANIFEST lists (a copy may have been cut)."""
    try:
        with open(os.path.join(bundle_dir, "MANIFEST")) as f:
            want = f.read().splitlines()
    except OSError:
        return False
    return want == manifest_lines(bundle_dir)


def staged_bundle(src):
    """The bundle dir name a staged (or installed) bin dir's .skb link names."""
    link = os.path.join(src, LINK)
    if not os.path.islink(link) or not BUNDLE_RE.match(os.readlink(link)):
        raise InstallError(f"{src} holds no skb-cni suite ({link} should link to .skb-<version>-<hash>): "
                           "run make build, or pass the dir the suite was installed or staged in")
    return os.readlink(link)


def launchers(src):
    return sorted(n for n in os.listdir(src) if not n.startswith(".") and os.path.isfile(os.path.join(src, n)))


def is_our_launcher(path):
    """A regular file that is one of our static launchers (not a Go plugin of the same name)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > LAUNCHER_MAX_SIZE:
            return False
        with open(path, "rb") as f:
            return LAUNCHER_MARK in f.read()
    except OSError:
        return False


# ------------------------------------------------------------------------------------ durable writes

def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_tree_durably(src, dst):
    shutil.copytree(src, dst, symlinks=True)
    for _, path in tree_files(dst):
        if not os.path.islink(path):
            fsync_path(path)
    for dirpath, _, _ in os.walk(dst):
        fsync_path(dirpath)


def replace_file(src, dest_dir, name):
    """Put a copy of src at dest_dir/name by rename(2): a runtime sees the old file or the new one."""
    tmp = os.path.join(dest_dir, f"{TMP_PREFIX}{os.getpid()}.{name}")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o755)
    fsync_path(tmp)
    _crash_point("launcher-written")
    os.rename(tmp, os.path.join(dest_dir, name))


def write_file_atomically(path, data, mode=0o644):
    """Write ``data`` (bytes) to ``path`` through a temporary file in the same dir, fsync'd, then renamed."""
    d, name = os.path.split(path)
    tmp = os.path.join(d, f".{name}{CONF_TMP_INFIX}{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        first = len(data) // 2   # written first, so that a test can kill us right after it
        while first:
            n = os.write(fd, view[:first])
            view, first = view[n:], first - n
        _crash_point("config-half-written")
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    fsync_path(d)


def remove_dir(dest, name):
    """Rename away first, so a crash never leaves a half-deleted dir under a bundle's name."""
    trash = os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.trash-{name.lstrip('.')}")
    os.rename(os.path.join(dest, name), trash)
    shutil.rmtree(trash)


def _remove_any(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def mapped_by_someone(path):
    """True when a process (that we can see) has a file of ``path`` mapped: a plugin still running from it."""
    prefix = os.path.realpath(path).rstrip("/") + "/"  # maps name files by their resolved paths
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                if prefix in f.read():
                    return True
        except OSError:
            continue
    return False


class _DirLock:
    """flock on the directory itself: one installer at a time per dir, and no lock file left behind."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)

    def __enter__(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self.fd

    def __exit__(self, *exc):
        os.close(self.fd)


# ------------------------------------------------------------------------------------ the suite

def install_suite(src, dest, log=print, old_bundle_wait=5.0):
    """Install the staged or installed suite in ``src`` into the bin dir ``dest``; returns True when
    anything changed. Atomic per file, idempotent, and a rerun completes what a killed run left."""
    src, dest = os.path.abspath(src), os.path.abspath(dest)
    name = staged_bundle(src)
    if not os.path.isdir(os.path.join(src, name)):
        raise InstallError(f"{os.path.join(src, name)} is missing: {src} holds a dangling {LINK} link")
    os.makedirs(dest, exist_ok=True)
    changed = False
    with _DirLock(dest) as dfd:
        # Leftovers of an install that was killed (we hold the lock: nobody else is using them).
        for entry in os.listdir(dest):
            if entry.startswith(TMP_PREFIX):
                _remove_any(os.path.join(dest, entry))

        # 1. The bundle, under its versioned name, made complete before it gets that name.
        final = os.path.join(dest, name)
        if os.path.isdir(final) and verify(final):
            _say(log, f"install: {final} already installed")
        else:
            tmp = os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.{name.lstrip('.')}")
            copy_tree_durably(os.path.join(src, name), tmp)
            if not verify(tmp):
                raise InstallError(f"{tmp}: the copy does not match its MANIFEST (is {src} being replaced?)")
            _crash_point("bundle-copied")
            if os.path.lexists(final):
                # Incomplete or altered, and maybe what .skb points at: moved aside only now that its
                # replacement is complete, so .skb dangles for two renames, not for a whole copy.
                os.rename(final, os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.trash-{name.lstrip('.')}"))
            os.rename(tmp, final)
            changed = True
            _say(log, f"install: {final}")

        # 2. Point .skb at it: a new symlink renamed over the old one is atomic.
        link = os.path.join(dest, LINK)
        previous = os.readlink(link) if os.path.islink(link) else None
        if not (os.path.islink(link) and os.readlink(link) == name):
            if os.path.isdir(link) and not os.path.islink(link):
                os.rename(link, os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.olddir"))
            tmp = os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.link")
            os.symlink(name, tmp)  # relative: the bin dir stays relocatable
            _crash_point("link-made")
            os.rename(tmp, link)
            changed = True
            _say(log, f"install: {link} -> {name}")

        # 3. The launchers, after the bundle they start (a new applet never appears before its code).
        for applet in launchers(src):
            path = os.path.join(dest, applet)
            new = os.path.join(src, applet)
            if os.path.isfile(path) and not os.path.islink(path) and _same_bytes(path, new) \
                    and os.access(path, os.X_OK):
                continue
            replace_file(new, dest, applet)
            changed = True
            _say(log, f"install: {path}")
        os.fsync(dfd)

        # 4. Older bundles. The one .skb pointed at until now stays until the next upgrade: a plugin
        # started from it a moment ago still loads modules from it, and an installer in a container
        # cannot see the node's processes to know. Older ones go once no visible process maps them.
        for entry in sorted(os.listdir(dest)):
            path = os.path.join(dest, entry)
            if entry in (name, previous) or not BUNDLE_RE.match(entry) or os.path.islink(path) \
                    or not os.path.isdir(path):
                continue
            deadline = time.monotonic() + old_bundle_wait
            while mapped_by_someone(path) and time.monotonic() < deadline:
                time.sleep(0.05)
            remove_dir(dest, entry)
            changed = True
            _say(log, f"install: removed {path}")
        for entry in os.listdir(dest):
            if entry.startswith(TMP_PREFIX):
                _remove_any(os.path.join(dest, entry))
        os.fsync(dfd)
    return changed


def suite_installed(src, dest):
    """True when ``dest`` holds exactly the suite of ``src`` (cheap: no MANIFEST check of the bundle)."""
    try:
        name = staged_bundle(dest)
        return name == staged_bundle(src) and os.path.isdir(os.path.join(dest, name)) and all(
            os.path.isfile(os.path.join(dest, a)) and _same_bytes(os.path.join(dest, a), os.path.join(src, a))
            for a in launchers(src))
    except (InstallError, OSError):
        return False


def uninstall_suite(dest, applets, log=print):
    """Remove our launchers (only files that are ours: a Go plugin of the same name stays), the .skb link
    and every bundle dir. Launchers go first, so nothing is left that could exec a missing bundle."""
    dest = os.path.abspath(dest)
    if not os.path.isdir(dest):
        return False
    changed = False
    with _DirLock(dest) as dfd:
        for applet in sorted(applets):
            path = os.path.join(dest, applet)
            if is_our_launcher(path):
                os.unlink(path)
                changed = True
                _say(log, f"uninstall: removed {path}")
            elif os.path.lexists(path):
                _say(log, f"uninstall: kept {path}: not an skb-cni launcher")
        os.fsync(dfd)
        link = os.path.join(dest, LINK)
        if os.path.islink(link):
            os.unlink(link)
            changed = True
        for entry in sorted(os.listdir(dest)):
            path = os.path.join(dest, entry)
            if (BUNDLE_RE.match(entry) or entry.startswith(TMP_PREFIX)) and os.path.lexists(path):
                _remove_any(path)
                changed = True
                _say(log, f"uninstall: removed {path}")
        os.fsync(dfd)
    return changed


def _same_bytes(a, b):
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


# ------------------------------------------------------------------------------------ the configuration

_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
        if any(n.version == net.version for n in nets):
            raise InstallError(f"{source}: two IPv{net.version} networks ({nets[0]}, {net}); "
                               "a node has at most one pod CIDR per address family")
        nets.append(net)
    if not nets:
        raise InstallError(f"{source} is empty")
    return nets


def template_values(pod_cidrs=(), extra=None):
    """The variables a template may use. From the pod CIDRs:

    - ``POD_CIDR``: the first pod CIDR, e.g. ``10.244.1.0/24``;
    - ``POD_RANGES``: host-local's ``ranges`` as JSON, one range set per CIDR;
    - ``POD_ROUTES``: a default route per family, as JSON (host-local's ``routes``).

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
    missing = sorted({m.group(1) for m in _VAR_RE.finditer(template)} - set(values))
    if missing:
        hint = " (give the node's pod CIDR: --pod-cidr, --pod-cidr-file or SKB_POD_CIDR)" \
            if any(m.startswith("POD_") for m in missing) else " (give it with --set NAME=VALUE)"
        raise InstallError(f"{source} uses ${{{missing[0]}}}, which has no value{hint}")
    text = _VAR_RE.sub(lambda m: values[m.group(1)], template)
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


def network_name_of(path):
    """The ``name`` of the network configured in ``path``, or None when it cannot be read as one."""
    try:
        with open(path, "rb") as f:
            conf = json.loads(f.read())
    except (OSError, ValueError):
        return None
    name = conf.get("name") if isinstance(conf, dict) else None
    return name if isinstance(name, str) else None


def conf_files(conf_dir):
    """The files libcni would load from conf_dir, in its order (by name)."""
    try:
        names = os.listdir(conf_dir)
    except FileNotFoundError:
        return []
    # libcni filters by extension only (a dotfile is loaded too); our temporary names end in .<pid>.
    return sorted(n for n in names if n.endswith(CONF_EXTENSIONS) and os.path.isfile(os.path.join(conf_dir, n)))


def config_conflicts(conf_dir, conf_name, network):
    """Why writing ``network`` as ``conf_dir/conf_name`` would break another network: a list of messages.

    - the target holds another network's configuration (or something that is not one);
    - a config file sorting before ours: libcni's first file wins, so the node would keep using it.
    """
    problems = []
    target = os.path.join(conf_dir, conf_name)
    if os.path.lexists(target):
        other = network_name_of(target)
        if other != network:
            what = f"network {other!r}" if other else "a file that is not a network configuration"
            problems.append(f"{target} holds {what}, not {network!r}: refusing to overwrite it")
    for name in conf_files(conf_dir):
        if name >= conf_name:
            break
        other = network_name_of(os.path.join(conf_dir, name))
        if other != network:
            problems.append(f"{os.path.join(conf_dir, name)} (network {other!r}) comes before {conf_name}: the "
                            "runtime would keep using it; remove it, or name ours to sort first (--conf-name)")
    return problems


def clean_conf_temps(conf_dir, conf_name):
    prefix = f".{conf_name}{CONF_TMP_INFIX}"
    for entry in os.listdir(conf_dir):
        if entry.startswith(prefix):
            os.unlink(os.path.join(conf_dir, entry))


def install_config(conf_dir, conf_name, conf, force=False, log=print):
    """Write ``conf`` (a checked conflist dict) as ``conf_dir/conf_name``, atomically. Returns True when the
    file changed. Refuses (InstallError) to overwrite or be shadowed by another network unless ``force``."""
    os.makedirs(conf_dir, exist_ok=True)
    target = os.path.join(conf_dir, conf_name)
    with _DirLock(conf_dir):
        clean_conf_temps(conf_dir, conf_name)
        problems = config_conflicts(conf_dir, conf_name, conf["name"])
        if problems and not force:
            raise InstallError("; ".join(problems) + " (--force to write it anyway)")
        for p in problems:
            _say(log, f"install: warning: {p} (--force)")
        data = conf_bytes(conf)
        try:
            with open(target, "rb") as f:
                if f.read() == data:
                    _say(log, f"install: {target} up to date")
                    return False
        except OSError:
            pass
        write_file_atomically(target, data)
        _say(log, f"install: {target} (network {conf['name']!r})")
        return True


def uninstall_config(conf_dir, conf_name, network=None, force=False, log=print):
    """Remove ``conf_dir/conf_name`` when it is ours (its network is ``network``, when given). Another
    network's file is kept unless ``force``. Returns True when a file was removed."""
    target = os.path.join(conf_dir, conf_name)
    if not os.path.isdir(conf_dir):
        return False
    with _DirLock(conf_dir) as dfd:
        clean_conf_temps(conf_dir, conf_name)
        if not os.path.lexists(target):
            _say(log, f"uninstall: {target} already gone")
            return False
        other = network_name_of(target)
        if network is not None and other != network and not force:
            raise InstallError(f"{target} holds network {other!r}, not {network!r}: refusing to remove it "
                               "(--force to remove it anyway)")
        os.unlink(target)
        os.fsync(dfd)
        _say(log, f"uninstall: removed {target}: the runtime now reports this node's network as not ready")
        return True


# ------------------------------------------------------------------------------------ skb install / uninstall

DEFAULT_NETWORK = "skb"
# The conflist written when no --template is given; deploy/10-skb.conflist.template is the same text
# (tests/unit/test_installer.py keeps them equal).
DEFAULT_TEMPLATE = """\
{
  "cniVersion": "1.0.0",
  "name": "skb",
  "plugins": [
    {
      "type": "ptp",
      "mtu": 1500,
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
