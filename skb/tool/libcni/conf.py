"""Network configurations as libcni loads them: plugin objects, configuration lists, the conf dir
(docs/REFERENCE.md#loading-configurations)."""
import os
from dataclasses import dataclass, field

from skb.cni import result as cniresult
from skb.cni.errors import CNIError
from skb.tool.libcni.errors import LibcniError, NoConfigsFound, NotFound
from skb.tool.libcni.gojson import (_decode, _field, _json_kind, _map_field, _spellings, _struct_field, go_marshal,
                                    go_type)
from skb.cni import jsonio
from skb.cni.netconf import fold
from skb.linux.files import read_regular

CURRENT_VERSION = "1.1.0"        # the spec version this library implements (libcni's version.Current())
DEFAULT_CONF_DIR = "/etc/cni/net.d"


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
        self.capabilities = _map_field(raw, "capabilities") or {}
        self.ipam_type = _struct_field(raw, "ipam", "type") or ""

    def description(self):
        """libcni's pluginDescription: ``type="ptp"``, plus the object's own name when it has one."""
        out = f'type="{self.type}"'
        return out + (f' name="{self.name}"' if self.name else "")

    def __repr__(self):
        return f"PluginConfig(type={self.type!r})"


@dataclass(slots=True)
class NetworkConfigList:
    """A network (a conflist, or a single config up-converted to one)."""

    name: str
    cni_version: str
    disable_check: bool
    disable_gc: bool
    load_only_inlined: bool
    plugins: list
    bytes: bytes = field(repr=False)
    raw: dict = field(repr=False)
    source: str = ""



# The fields of types.PluginConf that libcni reads or that must have their type: (JSON type, Go type).
_PLUGIN_FIELDS = {"cniVersion": (str, "string"), "name": (str, "string"), "type": (str, "string"),
                  "capabilities": (dict, "map[string]bool"), "ipam": (dict, "types.IPAM"), "dns": (dict, "types.DNS"),
                  "prevResult": (dict, "map[string]interface {}")}
_PLUGIN_FOLDED = {fold(k): k for k in _PLUGIN_FIELDS}


def _check_plugin_fields(raw):
    """The type error Go's decoder reports when it reads a plugin object into types.PluginConf: the first
    one in document order, in any spelling of a field (null is never one)."""
    if not isinstance(raw, dict):
        return f"json: cannot unmarshal {_json_kind(raw)} into Go value of type types.PluginConf"
    for k, v in raw.items():
        key = _PLUGIN_FOLDED.get(fold(k))
        if key is None or v is None:
            continue
        kind, gotype = _PLUGIN_FIELDS[key]
        if not isinstance(v, kind):
            return f"json: cannot unmarshal {_json_kind(v)} into Go struct field PluginConf.{key} of type {gotype}"
        if key == "capabilities":
            for on in v.values():
                if on is not None and not isinstance(on, bool):
                    return (f"json: cannot unmarshal {_json_kind(on)} into Go struct field PluginConf.capabilities "
                            f"of type bool")
        elif key == "ipam":
            for ipam_type in _spellings(v, "type"):
                if ipam_type is not None and not isinstance(ipam_type, str):
                    return (f"json: cannot unmarshal {_json_kind(ipam_type)} into Go struct field IPAM.ipam.type "
                            f"of type string")
    return None


def plugin_conf_from_bytes(data, source=""):
    """libcni's NetworkPluginConfFromBytes: one plugin object, which must have a ``type``."""
    raw = _decode(data, "error parsing configuration")
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


def speaks_1_1(version):
    """Whether a network of this cniVersion gets GC and STATUS (1.1.0 and later); unset or unparseable: no."""
    try:
        return version_ge(version or "0.1.0", "1.1.0")
    except LibcniError:
        return False


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
    The selected ``cni_version`` follows docs/REFERENCE.md#loading-configurations (``cniVersions``: the highest not newer than 1.1.0)."""
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


# A configuration or a cached result larger than this is not one (and /dev/zero never ends).
MAX_FILE_BYTES = 16 << 20


def _read(path):
    """The bytes of a configuration or cache file, never blocking and bounded: a FIFO, a device or a
    directory is refused, not opened or read (``skb.linux.files.read_regular``)."""
    try:
        return read_regular(os.path.abspath(path), "file", MAX_FILE_BYTES)
    except CNIError as e:
        raise LibcniError(f"error reading {path}: {e.msg}") from None


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
    """The files containerd's CRI considers, in the order it loads them (docs/REFERENCE.md#loading-configurations): ``.conf``,
    ``.conflist`` and ``.json`` together, by file name. The first is the pod network."""
    return sorted(conf_files(conf_dir, (".conf", ".conflist", ".json")))


def load_any(path):
    """A file as containerd's CRI loads it: ``.conflist`` as a list, others as a single config
    up-converted to a list."""
    if go_ext(os.path.basename(path)) == ".conflist":
        return conflist_from_file(path)
    return conflist_from_conf(conf_from_file(path))


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
