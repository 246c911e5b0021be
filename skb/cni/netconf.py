"""The network configuration on stdin, parsed once at the edge into a typed object.

Every field error is a code-7 CNIError that names the field (as a path: ``ipam.ranges[0][1].subnet``),
what was found and what was expected. Go's decoder matches keys case-insensitively (``DataDir`` works),
so ``get`` falls back to a case-insensitive match to stay drop-in compatible with existing configs.
"""
from skb.cni import jsonio
from skb.cni.errors import CNIError, DECODE, INCOMPATIBLE_VERSION, INVALID_CONFIG, describe as _describe
from skb.cni.env import valid_name

from skb.cni.versions import LATEST, SUPPORTED_VERSIONS  # noqa: F401 (re-exported)

_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", dict: "an object",
               list: "a list"}


# Go's decoder compares keys with Unicode simple case folding: besides ASCII case, the Kelvin sign
# (U+212A) folds to "k" and the long s (U+017F) to "s"; no other character folds to an ASCII letter.
_GO_FOLD = {"\u212a": "k", "\u017f": "s"}
_MISSING = object()


def fold(key):
    """``key`` folded as Go's decoder folds object keys to match a field (for our ASCII field names)."""
    if key.isascii():
        return key.lower()
    return "".join(_GO_FOLD.get(c) or (c.lower() if c.isascii() else c) for c in key)


def lookup(obj, key):
    """The value of the key of ``obj`` that Go's decoder would read for the field ``key``: keys are matched
    with case folding, and of several spellings the last one wins. KeyError when none matches."""
    if key in obj and len(obj) == 1:
        return obj[key]
    want = fold(key)
    found = _MISSING
    for k, v in obj.items():
        if isinstance(k, str) and fold(k) == want:
            found = v
    if found is _MISSING:
        raise KeyError(key)
    return found


def lookup_default(obj, key, default=None):
    try:
        return lookup(obj, key)
    except KeyError:
        return default


def get(obj, key, kind, where, default=None, required=False):
    """A typed field of the JSON object ``obj`` found at path ``where``.

    ``kind`` is str, bool, int, float, dict or list. Absent (or null) -> ``default``, or a code-7 error if
    ``required``. A JSON number with a fractional part is not an int; bool is never a number.
    """
    path = f"{where}.{key}" if where else key
    try:
        value = lookup(obj, key)
    except KeyError:
        value = None
    if value is None:
        if required:
            raise CNIError(INVALID_CONFIG, f"missing field {path}",
                           f"add {path} ({_TYPE_NAMES[kind]}) to the network configuration")
        return default
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        ok, value = True, int(value)
    if not ok:
        raise CNIError(INVALID_CONFIG, f"invalid field {path}: expected {_TYPE_NAMES[kind]}, found {_describe(value)}",
                       f"fix {path} in the network configuration")
    return value


def check_path(path, key, where=""):
    """A path-valued key's value: a non-empty absolute path without NUL bytes, else code 7 naming the key.
    A relative path would be resolved against whatever directory the runtime runs in."""
    name = f"{where}.{key}" if where else key
    if not isinstance(path, str) or not path:
        raise CNIError(INVALID_CONFIG, f"invalid field {name}: expected a file path, found {_describe(path)}",
                       f"set {name} to an absolute path such as /var/log/x, or remove it")
    if "\0" in path:
        raise CNIError(INVALID_CONFIG, f"invalid field {name}: the path contains a NUL byte",
                       f"remove the \\u0000 from {name}")
    if path[0] != "/":
        raise CNIError(INVALID_CONFIG, f"invalid field {name}: {jsonio.dumps(path)} is a relative path",
                       f"make {name} absolute (starting with /): a relative path would be resolved against "
                       "the runtime's working directory")
    return path


def get_path(obj, key, where, default=""):
    """A path-valued field (see check_path); absent, null or "" -> ``default``."""
    value = get(obj, key, str, where)
    return check_path(value, key, where) if value else default


def check_version_string(v, where="cniVersion"):
    """A version string is one to three dot-separated decimal numbers ("1.1.0"; Go also reads "1.1").
    Anything else is not a version at all: code 6, as the spec's error table says."""
    parts = v.split(".")
    if len(parts) > 3 or not all(p and p.isascii() and p.isdigit() for p in parts):
        raise CNIError(DECODE, f"invalid {where}: {jsonio.dumps(v)} is not a version string",
                       'a CNI version is written like "1.1.0"')


def parse_json_stdin(data, what="network configuration on stdin"):
    """Decode stdin; invalid JSON is code 6 with the line, the column and the offending text."""
    try:
        return jsonio.loads(data)
    except jsonio.JSONSyntaxError as e:
        raise CNIError(DECODE, f"invalid JSON in the {what}: {e}", e.describe()) from None


class NetConf:
    """The fields every plugin shares; ``raw`` keeps the whole object for plugin-specific keys."""

    __slots__ = ("raw", "data", "name", "cni_version", "type", "prev_result", "runtime_config", "args",
                 "debug_log")

    def __init__(self, raw, data=b""):
        self.raw = raw
        self.data = data  # stdin exactly as received: a delegated plugin (IPAM) gets these bytes
        self.name = raw["name"]
        self.cni_version = raw.get("cniVersion") or "0.1.0"
        self.type = raw.get("type", "")
        self.prev_result = raw.get("prevResult")
        self.runtime_config = raw.get("runtimeConfig") or {}
        self.args = raw.get("args") or {}
        self.debug_log = raw.get("skbDebugLog") or ""

    def __repr__(self):
        return f"NetConf(name={self.name!r}, cniVersion={self.cni_version!r}, type={self.type!r})"


def parse(data):
    """Parse and validate the common part of a plugin's stdin (not for VERSION)."""
    raw = parse_json_stdin(data)
    if not isinstance(raw, dict):
        raise CNIError(DECODE, f"the network configuration must be a JSON object, found {_describe(raw)}",
                       'e.g. {"cniVersion": "1.0.0", "name": "mynet", "type": "loopback"}')
    name = get(raw, "name", str, "")
    if not name:
        raise CNIError(INVALID_CONFIG, "missing network name", 'set "name" in the network configuration')
    if not valid_name(name):
        raise CNIError(INVALID_CONFIG, "invalid characters found in network name",
                       f"name {name!r}: use letters, digits, '_', '.' and '-', starting with a letter or digit")
    version = lookup_default(raw, "cniVersion")
    if version is not None and not isinstance(version, str):  # Go: "decoding version from network config"
        raise CNIError(DECODE, f"invalid field cniVersion: expected a string, found {_describe(version)}",
                       'a CNI version is a string such as "1.1.0"')
    if version:
        check_version_string(version)
    for key, kind in (("type", str), ("runtimeConfig", dict), ("args", dict), ("skbDebugLog", str)):
        get(raw, key, kind, "")
    conf = NetConf(raw, data if isinstance(data, bytes) else data.encode())
    conf.cni_version = version or "0.1.0"  # a missing cniVersion means 0.1.0 (spec)
    return conf


def check_version(conf, command):
    """Refuse a cniVersion we cannot speak (code 1) and commands the version does not have."""
    v = conf.cni_version
    if v not in SUPPORTED_VERSIONS:
        raise CNIError(INCOMPATIBLE_VERSION, "incompatible CNI versions",
                       f'config is "{v}", plugin supports [{" ".join(jsonio.dumps(s) for s in SUPPORTED_VERSIONS)}]')
    needs = {"CHECK": "0.4.0", "STATUS": "1.1.0", "GC": "1.1.0"}.get(command)
    if needs and SUPPORTED_VERSIONS.index(v) < SUPPORTED_VERSIONS.index(needs):
        raise CNIError(INCOMPATIBLE_VERSION, f"config version does not allow {command}",
                       f'{command} needs cniVersion "{needs}" or later; the config has "{v}"')


# A network's name is host-local's directory (<dataDir>/<name>: at most 255 bytes on Linux) and part of
# ptp's masquerade comments: ADD and CHECK refuse a longer one before anything is applied, the other
# commands take it (a DEL must never block cleanup; nothing can have been made under such a name).
MAX_NAME = 255


def check_name_length(conf, command):
    if len(conf.name) > MAX_NAME and command in ("ADD", "CHECK"):
        raise CNIError(INVALID_CONFIG, f"invalid field name: longer than {MAX_NAME} characters",
                       f"it has {len(conf.name)}; a network name names a directory, so it is at most {MAX_NAME} "
                       "characters")


def valid_attachments(conf):
    """The attachments a GC call says are still valid, as {(containerID, ifname)}, or None when the call
    carries no list at all (cnitool's gc): None means "say nothing", never "nothing is valid".
    ``cni.dev/valid-attachments`` is the spec's key; ``cni.dev/attachments`` the spec-v1.1.0 tag's."""
    for key in ("cni.dev/valid-attachments", "cni.dev/attachments"):
        if key in conf.raw:
            valid = set()
            for i, a in enumerate(get(conf.raw, key, list, "", default=[])):
                where = f"{key}[{i}]"
                if not isinstance(a, dict):
                    raise CNIError(INVALID_CONFIG, f"invalid field {where}: expected an object",
                                   '{"containerID": "...", "ifname": "..."}')
                valid.add((get(a, "containerID", str, where, required=True), get(a, "ifname", str, where, required=True)))
            return valid
    return None
