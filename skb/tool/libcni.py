"""libcni, the runtime side of CNI: load network configurations and run them the way runtimes do.

What ``skb add|check|del|status|gc`` and ``skb doctor`` stand on. It follows Go's libcni (main, after
v1.3.0; cni-spec.md §2.4-2.5, §3.9-3.11, §4.3, §5) because that is what containerd, CRI-O and podman
run, so a configuration behaves here as it will on a node:

- loading: ``.conflist`` files first, then the deprecated single configs (``.conf``, ``.json``), each set
  in byte order of the file name; extensions match exactly (``foo.conflist.bak`` is ignored); the first
  file with the wanted ``name`` wins; any file that fails to parse aborts the whole lookup; a single
  config is up-converted to a list; plugin objects from ``<dir>/<network name>/*.conf`` are appended
  unless ``loadOnlyInlinedPlugins``. Error strings are libcni's (§5.1), except that invalid JSON is
  located by line and column instead of Go's decoder text.
- running: each plugin's stdin is its object with ``name``, ``cniVersion``, ``prevResult`` and matching
  ``runtimeConfig`` injected, keys sorted as Go's map encoding writes them; ADD chains results, DEL runs
  in reverse with the cached result as prevResult (0.4.0 and later), CHECK honours ``disableCheck``,
  STATUS stops at the first error, GC DELs stale cached attachments and then sends GC to every plugin
  (``cni.dev/valid-attachments`` and the older ``cni.dev/attachments`` when a list is given).
- the result cache: ``<cacheDir>/results/<network>-<containerID>-<ifname>``, a ``cniCacheV1`` record
  (config as base64, CNI args, capability args, result), written after a successful ADD and removed
  after DEL, exactly as libcni writes it so runtimes and this tool can read each other's.

Results are held as ``skb.cni.result.Result`` values; the CLI is not on a plugin's call path, so this module
imports what it likes.
"""
import base64
import errno
import json
import os
import subprocess
import sys
import time
import hashlib
import signal

from skb.cni import env as cnienv
from skb.cni import jsonio
from skb.cni import result as cniresult
from skb.cni.errors import CNIError, INVALID_CONFIG, UNKNOWN_CONTAINER

CURRENT_VERSION = "1.1.0"        # the spec version this library implements (libcni's version.Current())
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CACHE_DIR = "/var/lib/cni"
CACHE_KIND = "cniCacheV1"
VERSION_PROBE_STDIN = b'{"cniVersion":"1.1.0"}'


class LibcniError(Exception):
    """A runtime-side failure, worded as libcni words it. ``cause`` is the wrapped error (a plugin's
    CNIError or another LibcniError), as Go's ``%w``."""

    def __init__(self, msg, cause=None):
        Exception.__init__(self, msg)
        self.msg = msg
        self.cause = cause

    def __str__(self):
        return f"{self.msg}: {describe(self.cause)}" if self.cause is not None else self.msg

    def cni_error(self):
        """The plugin error at the bottom of the chain, if any (to report its code)."""
        cause = self.cause
        while isinstance(cause, LibcniError):
            cause = cause.cause
        return cause if isinstance(cause, CNIError) else None


class NoConfigsFound(LibcniError):
    def __init__(self, conf_dir):
        LibcniError.__init__(self, f"no net configurations found in {conf_dir}")


class NotFound(LibcniError):
    def __init__(self, conf_dir, name):
        LibcniError.__init__(self, f'no net configuration with name "{name}" in {conf_dir}')


def describe(err):
    """An error as Go prints it: a plugin's CNI error is ``msg; details``."""
    if isinstance(err, CNIError):
        return f"{err.msg}; {err.details}" if err.details else err.msg
    return str(err)


# ---------------------------------------------------------------------------------------------------
# Go's JSON encoding, so the bytes we hand to plugins and write to the cache match libcni's

def _go_numbers(obj):
    # Go decodes every JSON number into float64 and writes integral values without a fraction.
    if isinstance(obj, float) and obj.is_integer() and abs(obj) < 1e21:
        return int(obj)
    if isinstance(obj, dict):
        return {k: _go_numbers(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_go_numbers(v) for v in obj]
    return obj


def go_marshal(obj, sort_keys=True):
    """JSON bytes as Go's ``json.Marshal`` of decoded JSON writes them: compact, map keys sorted,
    ``<``, ``>``, ``&``, U+2028 and U+2029 escaped, other text as UTF-8."""
    text = json.dumps(_go_numbers(obj), sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                   ("\u2029", "\\u2029")):
        text = text.replace(c, esc)
    return text.encode()


def go_type(v):
    """Go's %T of a value decoded into interface{}."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "[]interface {}"
    return "map[string]interface {}"


def _json_kind(v):
    return {"<nil>": "null", "bool": "bool", "float64": "number", "string": "string",
            "[]interface {}": "array"}.get(go_type(v), "object")


def _decode(data, where):
    try:
        return jsonio.loads(data)
    except jsonio.JSONSyntaxError as e:
        raise LibcniError(f"{where}: {e}") from None


# ---------------------------------------------------------------------------------------------------
# configuration objects

class PluginConfig:
    """One plugin object: ``raw`` (decoded), ``bytes`` (what libcni keeps: the object re-encoded), and the
    fields libcni reads from it."""

    __slots__ = ("raw", "bytes", "type", "name", "cni_version", "capabilities", "ipam_type", "source")

    def __init__(self, raw, data, source=""):
        self.raw = raw
        self.bytes = data
        self.source = source
        self.type = _field(raw, "type") or ""
        self.name = _field(raw, "name") or ""
        self.cni_version = _field(raw, "cniVersion") or ""
        self.capabilities = _field(raw, "capabilities") or {}
        ipam = _field(raw, "ipam") or {}
        self.ipam_type = _field(ipam, "type") or ""

    def description(self):
        """libcni's pluginDescription: ``type="ptp"``, plus the object's own name when it has one."""
        out = f'type="{self.type}"'
        return out + (f' name="{self.name}"' if self.name else "")

    def __repr__(self):
        return f"PluginConfig(type={self.type!r})"


class NetworkConfigList:
    """A network (a conflist, or a single config up-converted to one)."""

    __slots__ = ("name", "cni_version", "disable_check", "disable_gc", "load_only_inlined", "plugins",
                 "bytes", "raw", "source")

    def __init__(self, name, cni_version, disable_check, disable_gc, load_only_inlined, plugins, data, raw,
                 source=""):
        self.name = name
        self.cni_version = cni_version
        self.disable_check = disable_check
        self.disable_gc = disable_gc
        self.load_only_inlined = load_only_inlined
        self.plugins = plugins
        self.bytes = data
        self.raw = raw
        self.source = source

    def __repr__(self):
        return (f"NetworkConfigList(name={self.name!r}, cniVersion={self.cni_version!r}, "
                f"plugins={[p.type for p in self.plugins]!r}, source={self.source!r})")


def _field(obj, key):
    """A struct field as Go's decoder finds it: exact key first, else a case-insensitive match."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    low = key.lower()
    for k, v in obj.items():
        if k.lower() == low:
            return v
    return None


def _check_plugin_fields(raw):
    """The type errors Go's decoder reports when it reads a plugin object into types.PluginConf."""
    if not isinstance(raw, dict):
        return f"json: cannot unmarshal {_json_kind(raw)} into Go value of type types.PluginConf"
    for key, kind, gotype in (("cniVersion", str, "string"), ("name", str, "string"), ("type", str, "string"),
                              ("capabilities", dict, "map[string]bool"), ("ipam", dict, "types.IPAM"),
                              ("dns", dict, "types.DNS"), ("prevResult", dict, "map[string]interface {}")):
        v = _field(raw, key)
        if v is not None and not isinstance(v, kind):
            return f"json: cannot unmarshal {_json_kind(v)} into Go struct field PluginConf.{key} of type {gotype}"
    for cap, v in (_field(raw, "capabilities") or {}).items():
        if v is not None and not isinstance(v, bool):
            return (f"json: cannot unmarshal {_json_kind(v)} into Go struct field PluginConf.capabilities "
                    f"of type bool")
    ipam_type = _field(_field(raw, "ipam") or {}, "type")
    if ipam_type is not None and not isinstance(ipam_type, str):
        return f"json: cannot unmarshal {_json_kind(ipam_type)} into Go struct field IPAM.ipam.type of type string"
    return None


def plugin_conf_from_bytes(data, source=""):
    """libcni's NetworkPluginConfFromBytes: one plugin object, which must have a ``type``."""
    try:
        raw = jsonio.loads(data)
    except jsonio.JSONSyntaxError as e:
        raise LibcniError(f"error parsing configuration: {e}") from None
    problem = _check_plugin_fields(raw)
    if problem:
        raise LibcniError(f"error parsing configuration: {problem}")
    conf = PluginConfig(raw, bytes(data) if not isinstance(data, str) else data.encode(), source)
    if not conf.type:
        raise LibcniError("error parsing configuration: missing 'type'")
    return conf


def _version_gt(a, b, what):
    try:
        return cniresult.parse_version(a) > cniresult.parse_version(b)
    except CNIError as e:
        raise LibcniError(f"error parsing configuration list: {what}: {e.msg}") from None


def version_ge(a, b):
    """Go's version.GreaterThanOrEqualTo; an unparseable version is a LibcniError."""
    try:
        return cniresult.parse_version(a) >= cniresult.parse_version(b)
    except CNIError as e:
        raise LibcniError(e.msg) from None


def _read_bool(raw, key):
    v = raw.get(key)
    if v is None and key not in raw:
        return False
    if isinstance(v, bool):
        return v
    if not isinstance(v, str):
        raise LibcniError(f"error parsing configuration list: invalid type {go_type(v)} for {key}")
    s = v.lower()
    if s in ("true", "false"):
        return s == "true"
    raise LibcniError(f'error parsing configuration list: invalid value "{s}" for {key}')


def conflist_from_bytes(data, source=""):
    """libcni's NetworkConfFromBytes: a conflist, without the plugin objects from the sub-directory.
    The selected ``cni_version`` follows §2.4 (``cniVersions``: the highest not newer than 1.1.0)."""
    data = data.encode() if isinstance(data, str) else bytes(data)
    raw = _decode(data, "error parsing configuration list")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise LibcniError(f"error parsing configuration list: json: cannot unmarshal {_json_kind(raw)} into Go "
                          "value of type map[string]interface {}")
    if "name" not in raw:
        raise LibcniError("error parsing configuration list: no name")
    name = raw["name"]
    if not isinstance(name, str):
        raise LibcniError(f"error parsing configuration list: invalid name type {go_type(name)}")
    version = ""
    if "cniVersion" in raw:
        version = raw["cniVersion"]
        if not isinstance(version, str):
            raise LibcniError(f"error parsing configuration list: invalid cniVersion type {go_type(version)}")
    if "cniVersions" in raw:
        listed = raw["cniVersions"]
        if not isinstance(listed, list):
            raise LibcniError(f"error parsing configuration list: invalid type for cniVersions: {go_type(listed)}")
        keep = []
        for i, v in enumerate(listed):
            if not isinstance(v, str):
                raise LibcniError(f"error parsing configuration list: invalid type for cniVersions index {i}: "
                                  f"{go_type(v)}")
            if not _version_gt(v, CURRENT_VERSION, f"invalid cniVersions entry {v} at index {i}"):
                keep.append(v)
        if version and not _version_gt(version, CURRENT_VERSION, f"invalid cniVersion {version}"):
            keep.append(version)
        if keep:
            version = max(keep, key=cniresult.parse_version)
    disable_check = _read_bool(raw, "disableCheck")
    disable_gc = _read_bool(raw, "disableGC")
    inlined_only = _read_bool(raw, "loadOnlyInlinedPlugins")
    conf = NetworkConfigList(name, version, disable_check, disable_gc, inlined_only, [], data, raw, source)
    if "plugins" not in raw:
        if inlined_only:
            raise LibcniError("error parsing configuration list: `loadOnlyInlinedPlugins` is true, and no "
                              "'plugins' key")
        return conf
    plugins = raw["plugins"]
    if not isinstance(plugins, list):
        raise LibcniError(f"error parsing configuration list: invalid 'plugins' type {go_type(plugins)}")
    if not plugins:
        raise LibcniError("error parsing configuration list: no plugins in list")
    for i, obj in enumerate(plugins):
        try:
            conf.plugins.append(plugin_conf_from_bytes(go_marshal(obj), source))
        except LibcniError as e:
            raise LibcniError(f"failed to parse plugin config {i}", e) from None
    return conf


def go_ext(name):
    """filepath.Ext: from the last dot of the name (``.conflist`` of a file named ``.conflist``)."""
    i = name.rfind(".")
    return name[i:] if i >= 0 else ""


def _join(a, b):
    return os.path.normpath(a + "/" + b)  # filepath.Join: b never restarts from the root


def conf_files(conf_dir, extensions):
    """libcni's ConfFiles: non-directory entries whose extension is exactly one of ``extensions``,
    sorted; a missing directory has none."""
    try:
        entries = sorted(os.scandir(conf_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise LibcniError(f"open {conf_dir}: {os.strerror(e.errno).lower()}") from None
    return [_join(conf_dir, e.name) for e in entries
            if not e.is_dir(follow_symlinks=False) and go_ext(e.name) in extensions]


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise LibcniError(f"error reading {path}: {os.strerror(e.errno).lower()}") from None


def plugin_confs_from_dir(conf_dir, network):
    """Plugin objects from ``<conf_dir>/<network>/*.conf`` (libcni >= 1.3), in file-name order."""
    sub = _join(conf_dir, network)
    try:
        files = conf_files(sub, (".conf",))
    except LibcniError as e:
        raise LibcniError(f"failed to read plugin config files in {sub}", e) from None
    return [plugin_conf_from_bytes(_read(f), f) for f in files]


def conflist_from_file(path):
    """libcni's NetworkConfFromFile: the conflist plus the plugins of its sub-directory."""
    conf = conflist_from_bytes(_read(path), path)
    if not conf.load_only_inlined:
        conf.plugins.extend(plugin_confs_from_dir(os.path.dirname(path) or ".", conf.name))
    if not conf.plugins:
        raise LibcniError("no plugin configs found")
    return conf


def conf_from_file(path):
    """A deprecated single-plugin config (``.conf``/``.json``)."""
    return plugin_conf_from_bytes(_read(path), path)


def conflist_from_conf(single):
    """libcni's ConfListFromConf: ``{"cniVersion", "name", "plugins": [the object]}``, re-encoded (that
    encoding, not the file, is what gets cached)."""
    wrapped = {"name": single.name, "cniVersion": single.cni_version, "plugins": [single.raw]}
    conf = conflist_from_bytes(go_marshal(wrapped), single.source)
    return conf


def load_conf(conf_dir, name):
    """libcni's LoadConf: the first single config (``.conf``, ``.json``) named ``name``."""
    files = conf_files(conf_dir, (".conf", ".json"))
    if not files:
        raise NoConfigsFound(conf_dir)
    for path in sorted(files):
        conf = conf_from_file(path)
        if conf.name == name:
            return conf
    raise NotFound(conf_dir, name)


def load_network(conf_dir, name):
    """libcni's LoadNetworkConf (what cnitool and ``skb add`` use): the network called ``name``."""
    lists = sorted(conf_files(conf_dir, (".conflist",)))
    for path in lists:
        conf = conflist_from_file(path)
        if conf.name == name:
            return conf
    try:
        single = load_conf(conf_dir, name)
    except NoConfigsFound:
        if lists:
            raise NotFound(conf_dir, name) from None
        raise
    return conflist_from_conf(single)


def default_network_files(conf_dir):
    """The files containerd's CRI considers, in the order it loads them (§5.7): ``.conf``,
    ``.conflist`` and ``.json`` together, by file name. The first is the pod network."""
    return sorted(conf_files(conf_dir, (".conf", ".conflist", ".json")))


def load_any(path):
    """A file as containerd's CRI loads it: ``.conflist`` as a list, others as a single config
    up-converted to a list."""
    if go_ext(os.path.basename(path)) == ".conflist":
        return conflist_from_file(path)
    return conflist_from_conf(conf_from_file(path))


# ---------------------------------------------------------------------------------------------------
# finding and running plugins

def find_in_path(plugin, paths):
    """libcni's FindInPath: the first ``<dir>/<plugin>`` that is a regular file (the execute bit is not
    checked: a non-executable file is found, and then fails to run)."""
    if not plugin:
        raise LibcniError("no plugin name provided")
    if "/" in plugin:
        raise LibcniError(f"invalid plugin name: {plugin}")
    if not paths:
        raise LibcniError("no paths provided")
    for d in paths:
        full = _join(d, plugin) if d else plugin
        try:
            if os.path.isfile(full):
                return full
        except OSError:
            continue
    return _not_found(plugin, paths)


def _not_found(plugin, paths):
    raise LibcniError(f'failed to find plugin "{plugin}" in path [{" ".join(paths)}]')


def go_quote(s):
    """Go's %q of a string, close enough for messages."""
    return json.dumps(s, ensure_ascii=False)


def _exit_text(rc):
    if rc < 0:
        try:
            return f"signal: {signal.Signals(-rc).name[3:].lower()}"
        except ValueError:
            return f"signal: {-rc}"
    return f"exit status {rc}"


def parse_plugin_error(stdout, stderr, status):
    """libcni's RawExec.pluginErr: the CNIError a failed plugin reported, or one describing its output.
    ``status`` is Go's text for how it ended (``exit status 1``)."""
    if not stdout:
        if not stderr:
            return CNIError(0, f"netplugin failed with no error message: {status}")
        return CNIError(0, f"netplugin failed: {go_quote(stderr.decode(errors='replace'))}: {status}")
    try:
        obj = jsonio.loads(stdout)
        if obj is None:
            obj = {}
        if not isinstance(obj, dict):
            raise ValueError(f"json: cannot unmarshal {_json_kind(obj)} into Go value of type types.Error")
        code, msg, details = (_field(obj, k) for k in ("code", "msg", "details"))
        if code is not None and (isinstance(code, bool) or not isinstance(code, int) or code < 0):
            raise ValueError(f"json: cannot unmarshal {_json_kind(code)} into Go struct field Error.code of type uint")
        for k, v in (("msg", msg), ("details", details)):
            if v is not None and not isinstance(v, str):
                raise ValueError(f"json: cannot unmarshal {_json_kind(v)} into Go struct field Error.{k} of type string")
    except ValueError as e:
        return CNIError(0, f"netplugin failed but error parsing its diagnostic message "
                           f"{go_quote(stdout.decode(errors='replace'))}: {e}")
    return CNIError(code or 0, msg or "", details or "")


class RawExec:
    """Runs plugin executables: libcni's RawExec (stderr passed through on success; "text file busy"
    retried, as when a plugin binary is being replaced). ``timeout`` (seconds) kills a plugin that hangs;
    libcni has none of its own, runtimes supply theirs."""

    def __init__(self, stderr=None, timeout=None):
        self.stderr = stderr if stderr is not None else sys.stderr
        self.timeout = timeout
        self.calls = []   # (path, env CNI_* subset, stdin, rc, stdout, stderr): for --verbose and tests

    def exec_plugin(self, path, stdin, environ):
        for attempt in range(6):
            try:
                p = subprocess.run([path], input=stdin, env=environ, capture_output=True, timeout=self.timeout)
            except subprocess.TimeoutExpired as e:
                self._record(path, environ, stdin, -9, e.stdout or b"", e.stderr or b"")
                raise parse_plugin_error(e.stdout or b"", e.stderr or b"",
                                         f"signal: killed (no answer within {self.timeout:g} s)") from None
            except OSError as e:
                if e.errno == errno.ETXTBSY and attempt < 5:
                    time.sleep(1)
                    continue
                self._record(path, environ, stdin, None, b"", b"")
                raise CNIError(0, f"netplugin failed with no error message: fork/exec {path}: "
                                  f"{os.strerror(e.errno).lower()}") from None
            break
        self._record(path, environ, stdin, p.returncode, p.stdout, p.stderr)
        if p.returncode != 0:
            raise parse_plugin_error(p.stdout, p.stderr, _exit_text(p.returncode))
        if p.stderr and self.stderr:
            self.stderr.write(p.stderr.decode(errors="replace"))
        return p.stdout

    def _record(self, path, environ, stdin, rc, stdout, stderr):
        self.calls.append({"path": path, "env": {k: v for k, v in environ.items() if k.startswith("CNI_")},
                           "stdin": stdin, "exitCode": rc, "stdout": stdout, "stderr": stderr})

    def find_in_path(self, plugin, paths):
        return find_in_path(plugin, paths)


class RuntimeConf:
    """What a runtime supplies for one attachment (libcni's RuntimeConf)."""

    __slots__ = ("container_id", "netns", "ifname", "args", "capability_args")

    def __init__(self, container_id="", netns="", ifname="", args=(), capability_args=None):
        self.container_id = container_id
        self.netns = netns
        self.ifname = ifname
        self.args = [tuple(kv) for kv in args]
        self.capability_args = dict(capability_args or {})

    def args_string(self):
        return ";".join(f"{k}={v}" for k, v in self.args)


class Attachment:
    """A cached attachment (libcni's NetworkAttachment)."""

    __slots__ = ("container_id", "network", "ifname", "config", "netns", "cni_args", "capability_args", "path")

    def __init__(self, container_id, network, ifname, config, netns, cni_args, capability_args, path):
        self.container_id = container_id
        self.network = network
        self.ifname = ifname
        self.config = config
        self.netns = netns
        self.cni_args = cni_args
        self.capability_args = capability_args
        self.path = path

    def __repr__(self):
        return f"Attachment({self.network!r}, {self.container_id!r}, {self.ifname!r}, netns={self.netns!r})"


# ---------------------------------------------------------------------------------------------------
# results: skb.cni.result values, with the one shape it refuses to write (a 0.1/0.2 result without an
# address, which Go's 0.2 type holds and writes) handled here

def result_dict(res, version=None):
    """``res`` as JSON-ready dicts in ``version`` (default: its own)."""
    version = version if version is not None else (res.cni_version or CURRENT_VERSION)
    try:
        return res.to_dict(version)
    except CNIError:
        if cniresult.version_family(version) == "020" and not res.ips and \
                cniresult.version_family(res.cni_version or "0.1.0") == "020":
            return {"cniVersion": version or "0.1.0", "dns": {} if res.dns is None else res.dns._dict0x()}
        raise


def parse_plugin_result(netconf_version, stdout):
    """libcni's ExecPluginWithResult after the plugin ran: a missing cniVersion is the configuration's,
    then the result is read with its own version's parser."""
    if not stdout.strip():
        raise LibcniError("failed to unmarshal raw result: unexpected end of JSON input")
    try:
        raw = jsonio.loads(stdout)
    except jsonio.JSONSyntaxError as e:
        raise LibcniError(f"failed to unmarshal raw result: {e}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise LibcniError(f"failed to unmarshal raw result: json: cannot unmarshal {_json_kind(raw)} into Go "
                          "value of type map[string]interface {}")
    version = raw.get("cniVersion")
    if not (isinstance(version, str) and version):
        version = netconf_version or "0.1.0"
        raw = dict(raw, cniVersion=version)
    return _create(version, raw)


def _create(version, raw):
    try:
        cniresult.version_family(version)
    except CNIError:
        raise LibcniError(f'unsupported CNI result version "{version}"') from None
    return cniresult.parse_result(raw, version)


# ---------------------------------------------------------------------------------------------------
# the runner

class CNIConfig:
    """libcni's CNIConfig: plugin directories, the cache directory and an executor."""

    def __init__(self, path, cache_dir=DEFAULT_CACHE_DIR, exec_=None):
        self.path = [p for p in path]
        self.cache_dir = cache_dir or DEFAULT_CACHE_DIR
        self.exec = exec_ if exec_ is not None else RawExec()

    # -- environment of a call
    def _env(self, command, rt):
        environ = dict(os.environ)
        environ.update({"CNI_COMMAND": command, "CNI_CONTAINERID": rt.container_id, "CNI_NETNS": rt.netns,
                        "CNI_ARGS": rt.args_string(), "CNI_IFNAME": rt.ifname, "CNI_PATH": ":".join(self.path)})
        return environ

    # -- stdin of a call
    def build_one_config(self, name, version, plugin, prev_result, rt):
        """libcni's buildOneConfig: inject name, cniVersion, prevResult, then runtimeConfig."""
        inject = {"name": name, "cniVersion": version}
        if prev_result is not None:
            inject["prevResult"] = result_dict(prev_result)
        conf = inject_conf(plugin, inject)
        if rt is not None:
            rc = {cap: rt.capability_args[cap] for cap, on in (conf.capabilities or {}).items()
                  if on is True and cap in rt.capability_args}
            if rc:
                conf = inject_conf(conf, {"runtimeConfig": rc})
        return conf

    # -- the cache
    def cache_path(self, network, rt):
        if not network or not rt.container_id or not rt.ifname:
            raise LibcniError(f'cache file path requires network name ("{network}"), container ID '
                              f'("{rt.container_id}"), and interface name ("{rt.ifname}")')
        return os.path.join(self.cache_dir, "results", f"{network}-{rt.container_id}-{rt.ifname}")

    def cache_add(self, res, config_bytes, network, rt):
        record = {"kind": CACHE_KIND, "containerId": rt.container_id,
                  "config": base64.b64encode(config_bytes).decode(), "ifName": rt.ifname, "networkName": network}
        if rt.netns:
            record["netns"] = rt.netns
        if rt.args:
            record["cniArgs"] = [list(kv) for kv in rt.args]
        if rt.capability_args:
            record["capabilityArgs"] = json.loads(go_marshal(rt.capability_args))  # Go writes maps sorted
        raw = result_dict(res) if res is not None else {}
        if raw:
            record["result"] = json.loads(go_marshal(raw))
        path = self.cache_path(network, rt)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, go_marshal(record, sort_keys=False))
        finally:
            os.close(fd)
        os.replace(tmp, path)  # a runtime reading the cache never sees half a record
        return path

    def cache_del(self, network, rt):
        try:
            os.unlink(self.cache_path(network, rt))
        except (LibcniError, OSError):
            pass

    def cached_record(self, network, rt):
        """The cniCacheV1 record of an attachment: a dict, None when there is none; a LibcniError when
        it is unreadable or of another kind."""
        try:
            data = _read(self.cache_path(network, rt))
        except LibcniError:
            return None
        try:
            rec = jsonio.loads(data)
        except ValueError as e:
            raise LibcniError(f'failed to unmarshal cached network "{network}" config: {e}') from None
        if not isinstance(rec, dict) or rec.get("kind") != CACHE_KIND:
            kind = rec.get("kind", "") if isinstance(rec, dict) else ""
            raise LibcniError(f'read cached network "{network}" config has wrong kind: {kind}')
        return rec

    def cached_result(self, network, version, rt):
        """libcni's getCachedResult: the cached result converted to ``version``, or None."""
        try:
            data = _read(self.cache_path(network, rt))
        except LibcniError:
            return None
        try:
            rec = jsonio.loads(data)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and rec.get("kind") == CACHE_KIND:
            raw = rec.get("result")
        else:                      # a legacy cache file: the bare result
            try:
                raw = jsonio.loads(data)
            except ValueError as e:
                raise LibcniError(f"failed to parse the cached result: {e}") from None
        version = version or "0.1.0"
        try:
            res = cniresult.parse_result(raw if raw is not None else {}, None, "cached result")
            return cniresult.parse_result(result_dict(res, version), version)
        except CNIError as e:
            raise LibcniError(f'failed to convert cached result to config version "{version}"', e) from None

    def cached_attachments(self, container_id=""):
        """libcni's GetCachedAttachments: valid cniCacheV1 records, in file-name order."""
        d = os.path.join(self.cache_dir, "results")
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            return []
        out = []
        for fname in names:
            if container_id:
                part = f"-{container_id}-"
                pos = fname.find(part)
                if pos <= 0 or pos + len(part) >= len(fname):
                    continue
            try:
                rec = jsonio.loads(_read(os.path.join(d, fname)))
            except (LibcniError, ValueError):
                continue
            if not isinstance(rec, dict) or rec.get("kind") != CACHE_KIND:
                continue
            if container_id and rec.get("containerId") != container_id:
                continue
            if not rec.get("ifName") or not rec.get("networkName"):
                continue
            try:
                config = base64.b64decode(rec.get("config") or "")
            except ValueError:
                config = b""
            out.append(Attachment(rec.get("containerId", ""), rec["networkName"], rec["ifName"], config,
                                  rec.get("netns", ""), [tuple(kv) for kv in rec.get("cniArgs") or []],
                                  rec.get("capabilityArgs") or {}, os.path.join(d, fname)))
        return out

    # -- one plugin
    def _add_one(self, name, version, plugin, prev, rt):
        path = self.exec.find_in_path(plugin.type, self.path)
        validate_container_id(rt.container_id)
        validate_network_name(name)
        cnienv.check_ifname(rt.ifname)
        conf = self.build_one_config(name, version, plugin, prev, rt)
        stdout = self.exec.exec_plugin(path, conf.bytes, self._env("ADD", rt))
        return parse_plugin_result(version, stdout)

    def _run_one(self, command, name, version, plugin, prev, rt):
        path = self.exec.find_in_path(plugin.type, self.path)
        conf = self.build_one_config(name, version, plugin, prev, rt)
        self.exec.exec_plugin(path, conf.bytes, self._env(command, rt))

    # -- whole networks
    def add_list(self, netconf, rt):
        """ADD every plugin in order, each given the previous result; cache the last one."""
        res = None
        for plugin in netconf.plugins:
            try:
                res = self._add_one(netconf.name, netconf.cni_version, plugin, res, rt)
            except (LibcniError, CNIError) as e:
                raise LibcniError(f"plugin {plugin.description()} failed (add)", e) from None
        try:
            self.cache_add(res, netconf.bytes, netconf.name, rt)
        except (LibcniError, OSError) as e:
            raise LibcniError(f'failed to set network "{netconf.name}" cached result', e) from None
        return res

    def check_list(self, netconf, rt):
        if not version_ge(netconf.cni_version, "0.4.0"):
            raise LibcniError(f'configuration version "{netconf.cni_version}" does not support the CHECK command')
        if netconf.disable_check:
            return
        try:
            cached = self.cached_result(netconf.name, netconf.cni_version, rt)
        except LibcniError as e:
            raise LibcniError(f'failed to get network "{netconf.name}" cached result', e) from None
        for plugin in netconf.plugins:
            self._run_one("CHECK", netconf.name, netconf.cni_version, plugin, cached, rt)

    def del_list(self, netconf, rt):
        """DEL every plugin in reverse order, each given the cached result (0.4.0 and later)."""
        cached = None
        if version_ge(netconf.cni_version, "0.4.0"):
            try:
                cached = self.cached_result(netconf.name, netconf.cni_version, rt)
            except LibcniError:
                self.cache_del(netconf.name, rt)
                cached = None
        for plugin in reversed(netconf.plugins):
            try:
                self._run_one("DEL", netconf.name, netconf.cni_version, plugin, cached, rt)
            except (LibcniError, CNIError) as e:
                raise LibcniError(f"plugin {plugin.description()} failed (delete)", e) from None
        self.cache_del(netconf.name, rt)

    def status_list(self, netconf):
        """STATUS every plugin in order (1.1.0 and later), stopping at the first error."""
        try:
            if not version_ge(netconf.cni_version, "1.1.0"):
                return
        except LibcniError:
            return
        inject = {"name": netconf.name, "cniVersion": netconf.cni_version}
        for plugin in netconf.plugins:
            try:
                conf = inject_conf(plugin, inject)
            except LibcniError as e:
                raise LibcniError(f"failed to generate configuration to get plugin STATUS {plugin.type}", e) from None
            path = self.exec.find_in_path(conf.type, self.path)
            self.exec.exec_plugin(path, conf.bytes, self._env("STATUS", RuntimeConf()))

    def gc_list(self, netconf, valid=None):
        """libcni's GCNetworkList. ``valid`` is the list of (containerID, ifname) still in use, or None
        (cnitool's ``gc``: nothing is valid, and plugins get no attachment keys). Returns the list of
        errors (it keeps going after each)."""
        if netconf.disable_gc:
            return []
        try:
            cached = self.cached_attachments()
        except OSError:
            return []
        keep = set(tuple(v) for v in valid) if valid is not None else set()
        errors = []
        for att in cached:
            if att.network != netconf.name or (att.container_id, att.ifname) in keep:
                continue
            rt = RuntimeConf(att.container_id, att.netns, att.ifname, att.cni_args, att.capability_args)
            try:
                self.del_list(netconf, rt)
            except (LibcniError, CNIError) as e:
                errors.append(LibcniError(f"failed to delete stale attachment {rt.container_id} {rt.ifname}", e))
        try:
            new_enough = version_ge(netconf.cni_version, "1.1.0")
        except LibcniError:
            new_enough = False
        if new_enough:
            inject = {"name": netconf.name, "cniVersion": netconf.cni_version}
            if valid is not None:
                attachments = [{"containerID": c, "ifname": i} for c, i in valid]
                inject["cni.dev/valid-attachments"] = attachments
                inject["cni.dev/attachments"] = attachments  # the spec-v1.1.0 tag's name (libcni sends both)
            for plugin in netconf.plugins:
                try:
                    conf = inject_conf(plugin, inject)
                    path = self.exec.find_in_path(conf.type, self.path)
                    self.exec.exec_plugin(path, conf.bytes, self._env("GC", RuntimeConf()))
                except (LibcniError, CNIError) as e:
                    errors.append(LibcniError(f"failed to GC plugin {plugin.type}", e))
        return errors

    # -- VERSION
    def version_info(self, plugin_type):
        """libcni's GetVersionInfo: the plugin's supportedVersions (VERSION with dummy parameters)."""
        path = self.exec.find_in_path(plugin_type, self.path)
        environ = self._env("VERSION", RuntimeConf("", "dummy", "dummy"))
        environ["CNI_PATH"] = "dummy"
        try:
            stdout = self.exec.exec_plugin(path, VERSION_PROBE_STDIN, environ)
        except CNIError as e:
            if describe(e) == "unknown CNI_COMMAND: VERSION":
                return ["0.1.0"]
            raise
        return decode_version_info(stdout)

    def validate_plugin(self, plugin_type, expected):
        expected = expected or "0.1.0"
        if expected not in self.version_info(plugin_type):
            raise LibcniError(f'plugin {plugin_type} does not support config version "{expected}"')


def decode_version_info(stdout):
    """libcni's PluginDecoder: supportedVersions from a VERSION reply."""
    try:
        info = jsonio.loads(stdout)
    except ValueError as e:
        raise LibcniError(f"decoding version info: {e}") from None
    if not isinstance(info, dict):
        raise LibcniError(f"decoding version info: json: cannot unmarshal {_json_kind(info)} into Go value of type "
                          "version.pluginInfo")
    version = info.get("cniVersion") or ""
    versions = info.get("supportedVersions") or []
    if not isinstance(version, str) or not isinstance(versions, list) or \
            not all(isinstance(v, str) for v in versions):
        raise LibcniError("decoding version info: cniVersion must be a string and supportedVersions a list of strings")
    if not version:
        raise LibcniError("decoding version info: missing field cniVersion")
    if not versions:
        if version == "0.2.0":
            return ["0.1.0", "0.2.0"]
        raise LibcniError("decoding version info: missing field supportedVersions")
    return versions


def inject_conf(plugin, values):
    """libcni's InjectConf: set top-level keys of a plugin object; the result is re-encoded (sorted)."""
    try:
        raw = jsonio.loads(plugin.bytes)
    except ValueError as e:
        raise LibcniError(f"unmarshal existing network bytes: {e}") from None
    for key, value in values.items():
        if not key:
            raise LibcniError("keys cannot be empty")
        if value is None:
            raise LibcniError(f"key '{key}' value must not be nil")
        raw[key] = value
    conf = plugin_conf_from_bytes(go_marshal(raw), plugin.source)
    return conf


def validate_container_id(cid):
    """Go's utils.ValidateContainerID, as libcni applies it before ADD."""
    if not cid:
        raise CNIError(UNKNOWN_CONTAINER, "missing containerID")
    if not cnienv.valid_name(cid):
        raise CNIError(4, "invalid characters in containerID", cid)


def validate_network_name(name):
    if not name:
        raise CNIError(INVALID_CONFIG, "missing network name")
    if not cnienv.valid_name(name):
        raise CNIError(INVALID_CONFIG, "invalid characters found in network name", name)


# ---------------------------------------------------------------------------------------------------
# cnitool's conventions

def parse_cnitool_args(s):
    """cnitool's strict CNI_ARGS parser: every ``K=V`` pair needs a non-empty key and value."""
    out = []
    for pair in s.split(";"):
        kv = pair.split("=")
        if len(kv) != 2 or not kv[0] or not kv[1]:
            raise LibcniError(f"invalid CNI_ARGS pair {go_quote(pair)}")
        out.append((kv[0], kv[1]))
    return out


def go_abs(path):
    """filepath.Abs: absolute and cleaned (also collapses a leading ``//``)."""
    p = os.path.normpath(os.path.join(os.getcwd(), path))
    return "/" + p.lstrip("/") if p.startswith("//") else p


def cnitool_container_id(netns_path):
    """``cnitool-`` + the first 10 bytes of SHA-512 of the absolute netns path, in hex (so ADD and DEL
    with the same path name the same attachment)."""
    return "cnitool-" + hashlib.sha512(go_abs(netns_path).encode()).hexdigest()[:20]
