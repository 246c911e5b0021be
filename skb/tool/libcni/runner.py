"""libcni's CNIConfig: running a network's plugins (ADD, CHECK, DEL, STATUS, GC, VERSION) and the
result cache (docs/REFERENCE.md#the-result-cache)."""
import base64
import json
import os
from dataclasses import dataclass, field

from skb.cni import env as cnienv
from skb.cni import invoke
from skb.cni import jsonio
from skb.cni import result as cniresult
from skb.cni.errors import CNIError, INVALID_CONFIG, UNKNOWN_CONTAINER
from skb.tool.libcni.conf import _read, inject_conf, speaks_1_1, version_ge
from skb.tool.libcni.errors import LibcniError, describe
from skb.tool.libcni.gojson import _json_kind, go_marshal
from skb.tool.libcni.rawexec import RawExec
from skb.tool.libcni.results import parse_plugin_result, result_dict

DEFAULT_CACHE_DIR = "/var/lib/cni"
CACHE_KIND = "cniCacheV1"
VERSION_PROBE_STDIN = b'{"cniVersion":"1.1.0"}'


@dataclass(slots=True)
class RuntimeConf:
    """What a runtime supplies for one attachment (libcni's RuntimeConf). ``args`` are (key, value) pairs."""

    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: list = field(default_factory=list)
    capability_args: dict = field(default_factory=dict)

    def __post_init__(self):
        self.args = [tuple(kv) for kv in self.args]
        self.capability_args = dict(self.capability_args or {})

    def args_string(self):
        return ";".join(f"{k}={v}" for k, v in self.args)


@dataclass(slots=True)
class Attachment:
    """A cached attachment (libcni's NetworkAttachment)."""

    container_id: str
    network: str
    ifname: str
    config: bytes = field(repr=False)
    netns: str
    cni_args: list = field(repr=False)
    capability_args: dict = field(repr=False)
    path: str = field(repr=False)


def _record_types_ok(rec):
    """A cache record Go's libcni could unmarshal: strings where it has strings, cniArgs pairs of strings,
    capabilityArgs an object (null anywhere is Go's zero value). Any other record is skipped, as libcni
    skips one it cannot read, and never stops a gc."""
    for key in ("containerId", "ifName", "networkName", "netns", "config"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            return False
    args = rec.get("cniArgs")
    if args is not None and not (isinstance(args, list) and all(
            isinstance(kv, list) and all(isinstance(x, str) for x in kv) for kv in args)):
        return False
    return rec.get("capabilityArgs") is None or isinstance(rec["capabilityArgs"], dict)


class CNIConfig:
    """libcni's CNIConfig: plugin directories, the cache directory and an executor."""

    def __init__(self, path, cache_dir=DEFAULT_CACHE_DIR, exec_=None):
        self.path = [p for p in path]
        self.cache_dir = cache_dir or DEFAULT_CACHE_DIR
        self.exec = exec_ if exec_ is not None else RawExec()

    # -- environment of a call
    def _env(self, command, rt):
        return invoke.environ(os.environ, command, rt.container_id, rt.netns, rt.ifname, rt.args_string(),
                              ":".join(self.path))

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
            if not isinstance(rec, dict) or rec.get("kind") != CACHE_KIND or not _record_types_ok(rec):
                continue
            if container_id and rec.get("containerId") != container_id:
                continue
            if not rec.get("ifName") or not rec.get("networkName"):
                continue
            try:
                config = base64.b64decode(rec.get("config") or "")
            except ValueError:
                config = b""
            out.append(Attachment(rec.get("containerId") or "", rec["networkName"], rec["ifName"], config,
                                  rec.get("netns") or "", [tuple((kv + ["", ""])[:2]) for kv in rec.get("cniArgs") or []],
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
        if speaks_1_1(netconf.cni_version):
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
