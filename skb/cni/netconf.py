"""The network configuration on stdin, decoded once into a typed value before any command runs.

A plugin declares its keys once, as ``Key``s of a ``Conf`` subclass (``NetConf`` holds the keys every
plugin shares). ``parse`` reads the JSON and the shared keys; ``Conf.decode`` then the plugin's own for one
command, each into its attribute, checked, with a code-7 error naming the field (as a path:
``ipam.ranges[0][1].subnet``), what was found and what was expected. Commands read the attributes, never
the JSON. Keys are matched as Go's decoder matches them (docs/REFERENCE.md#decoding-a-configuration):
case-insensitively with Unicode's simple folding, the last of several spellings winning, null leaving a
value as it was (a list, an object map or a raw value is reset by it), and a key repeated with an object
merged into the first.
"""
from skb.cni import jsonio
from skb.cni.errors import CNIError, DECODE, INCOMPATIBLE_VERSION, INVALID_CONFIG, UNSUPPORTED_FIELD, describe
from skb.cni.env import valid_name

from skb.cni.versions import LATEST, SUPPORTED_VERSIONS, check_version_string  # noqa: F401 (re-exported)

# Go's decoder compares keys with Unicode simple case folding: besides ASCII case, the Kelvin sign
# (U+212A) folds to "k" and the long s (U+017F) to "s"; no other character folds to an ASCII letter.
_GO_FOLD = {"\u212a": "k", "\u017f": "s"}
_MISSING = object()
_set = object.__setattr__
set_attr = _set     # for a Conf's check() that derives attributes from the keys it decoded


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


# --------------------------------------------------------------------------------------------------
# kinds: how one key's value is decoded


class Kind:
    """How a value is decoded: ``fn(value, where, decoding, old)`` returns it checked (``old``: what an
    earlier spelling of the key decoded to, for objects to merge into) or raises CNIError. ``resets``: a
    null resets the key to its default (Go's pointers, slices and maps); otherwise null changes nothing
    (Go's strings, numbers, booleans and structs)."""

    __slots__ = ("fn", "resets")

    def __init__(self, fn, resets=False):
        self.fn = fn
        self.resets = resets


def wrong(where, expected, value):
    return CNIError(INVALID_CONFIG, f"invalid field {where}: expected {expected}, found {describe(value)}",
                    f"fix {where} in the network configuration")


def _str(v, where, _d, _old):
    if isinstance(v, str):
        return v
    raise wrong(where, "a string", v)


def _bool(v, where, _d, _old):
    if isinstance(v, bool):
        return v
    raise wrong(where, "a boolean", v)


def _int(v, where, _d, _old):
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise wrong(where, "an integer", v)


def _raw(v, _where, _d, _old):
    return v


def _object(v, where, _d, _old):
    if isinstance(v, dict):
        return v
    raise wrong(where, "an object", v)


def _strings(v, where, _d, _old):
    if not isinstance(v, list):
        raise wrong(where, "a list of strings", v)
    for i, item in enumerate(v):
        if not isinstance(item, str):
            raise wrong(f"{where}[{i}]", "a string", item)
    return tuple(v)


def check_path(path, key, where=""):
    """A path-valued key's value: a non-empty absolute path without NUL bytes, else code 7 naming the key.
    A relative path would be resolved against whatever directory the runtime runs in."""
    name = f"{where}.{key}" if where else key
    if not isinstance(path, str) or not path:
        raise CNIError(INVALID_CONFIG, f"invalid field {name}: expected a file path, found {describe(path)}",
                       f"set {name} to an absolute path such as /var/log/x, or remove it")
    if "\0" in path:
        raise CNIError(INVALID_CONFIG, f"invalid field {name}: the path contains a NUL byte",
                       f"remove the \\u0000 from {name}")
    if path[0] != "/":
        raise CNIError(INVALID_CONFIG, f"invalid field {name}: {jsonio.dumps(path)} is a relative path",
                       f"make {name} absolute (starting with /): a relative path would be resolved against "
                       "the runtime's working directory")
    return path


def _path(v, where, _d, _old):
    if v == "":
        return ""       # absent, as Go's empty string
    return check_path(v, where)


STR = Kind(_str)
BOOL = Kind(_bool)
INT = Kind(_int)
RAW = Kind(_raw, resets=True)           # any JSON value, kept as decoded (prevResult)
OBJECT = Kind(_object, resets=True)     # a JSON object kept as a dict (Go's map[string]interface{})
STRINGS = Kind(_strings, resets=True)   # a list of strings, as a tuple
PATH = Kind(_path)                      # an absolute file path, or "" (absent)


def obj(cls, resets=False):
    """The kind of a key whose value is an object with ``cls``'s keys (a Go struct; ``resets``: a pointer
    to one). A second spelling of the key is decoded into the first one's value, as Go does."""
    def fn(v, where, d, old):
        if not isinstance(v, dict):
            raise wrong(where, "an object", v)
        return cls.decode_object(v, where, d, old)
    return Kind(fn, resets)


def list_of(kind, expected="a list"):
    """The kind of a list whose items are of ``kind`` (a Go slice: a later spelling replaces it)."""
    item = kind.fn

    def fn(v, where, d, _old):
        if not isinstance(v, list):
            raise wrong(where, expected, v)
        return [item(x, f"{where}[{i}]", d, None) for i, x in enumerate(v)]
    return Kind(fn, resets=True)


# --------------------------------------------------------------------------------------------------
# keys and the objects they make


class Key:
    """One key of a configuration object: its JSON ``name`` (matched as Go matches it), the ``attr`` that
    holds its value, its ``kind``, the ``default`` when absent, the ``commands`` that read it (None: all;
    for any other command it is not decoded and its attribute is not set), whether it is ``required``,
    and the commands in which an invalid value is only remarked on and ignored (``lenient``: a DEL must
    not fail on a key it can do without)."""

    __slots__ = ("name", "attr", "kind", "default", "commands", "required", "lenient")

    def __init__(self, name, attr, kind, default=None, commands=None, required=False, lenient=()):
        self.name = name
        self.attr = attr
        self.kind = kind
        self.default = default
        self.commands = commands
        self.required = required
        self.lenient = lenient

    def __repr__(self):
        return f"Key({self.name!r})"


class Decoding:
    """One decode: the command it is for, and the remarks on lenient keys that were ignored."""

    __slots__ = ("command", "notes")

    def __init__(self, command, notes):
        self.command = command
        self.notes = notes


class Conf:
    """A decoded configuration object. A subclass lists its ``KEYS`` (its own; those of its bases are
    inherited) and their attributes as ``__slots__``; ``check(decoding, where)`` runs after its keys are decoded,
    for rules between keys. ``STRICT``: an unknown key is an error (code 2) rather than ignored as Go
    ignores it. Values are read-only once decoded."""

    __slots__ = ()
    KEYS = ()
    STRICT = False
    _TABLE = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        table = {}
        for base in reversed(cls.__mro__):
            for key in base.__dict__.get("KEYS", ()):
                table[fold(key.name)] = key
        cls._TABLE = table

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is a decoded configuration: read-only")

    def check(self, decoding, where):
        """Rules between keys, checked once they are decoded (CNIError, code 7 naming the fields at path
        ``where``); it may set derived attributes (``set_attr``)."""

    @classmethod
    def decode_object(cls, raw, where, decoding, into=None):
        """An instance with the keys of the JSON object ``raw`` found at path ``where`` (into ``into``, an
        instance decoded from an earlier spelling of the same key, when there is one)."""
        if into is None:
            into = cls.__new__(cls)
            _defaults(into, cls._TABLE.values(), decoding.command)
        _decode_keys(into, raw, where, decoding, cls._TABLE)
        _required(into, cls._TABLE.values(), where, decoding.command)
        into.check(decoding, where)
        return into

    def __repr__(self):
        shown = ", ".join(f"{k.attr}={getattr(self, k.attr)!r}" for k in self._TABLE.values()
                          if getattr(self, k.attr, None) not in (None, "", (), []))
        return f"{type(self).__name__}({shown})"


def _reads(key, command):
    return key.commands is None or command in key.commands


def _defaults(inst, keys, command):
    for key in keys:
        if _reads(key, command):
            _set(inst, key.attr, key.default)


def _required(inst, keys, where, command):
    for key in keys:
        if key.required and _reads(key, command) and getattr(inst, key.attr) is None:
            path = f"{where}.{key.name}" if where else key.name
            raise CNIError(INVALID_CONFIG, f"missing field {path}", f"add {path} to the network configuration")


def _decode_keys(inst, raw, where, decoding, table, only=None):
    """Decode the keys of ``raw`` that ``table`` (folded name -> Key) knows into ``inst``; with ``only``
    (a set of folded names), those alone."""
    command = decoding.command
    for k, v in raw.items():          # in document order, a repeated spelling at its last place (jsonio)
        folded = k.lower() if k.isascii() else fold(k)
        if only is not None and folded not in only:
            continue
        key = table.get(folded)
        if key is None:
            if type(inst).STRICT:
                path = f"{where}.{k}" if where else k
                raise CNIError(UNSUPPORTED_FIELD, f"{path}: unsupported field (value {jsonio.dumps(v)})",
                               f"{where or 'the configuration'} may hold {', '.join(x.name for x in table.values())}")
            continue
        if not _reads(key, command):
            continue
        if v is None:
            if key.kind.resets:
                _set(inst, key.attr, key.default)
            continue
        path = f"{where}.{key.name}" if where else key.name
        old = getattr(inst, key.attr)
        try:
            value = key.kind.fn(v, path, decoding, None if old is key.default else old)
        except CNIError as e:
            if command not in key.lenient:
                raise
            decoding.notes.append(f"ignoring {path}: {e.msg}")
            continue
        _set(inst, key.attr, value)


# --------------------------------------------------------------------------------------------------
# the keys every plugin shares


def _version(v, where, _d, _old):
    if not isinstance(v, str):  # Go: "decoding version from network config"
        raise CNIError(DECODE, f"invalid field {where}: expected a string, found {describe(v)}",
                       'a CNI version is a string such as "1.1.0"')
    if v:
        check_version_string(v, where)
    return v or "0.1.0"     # a missing cniVersion means 0.1.0 (spec)


def _name(v, where, _d, _old):
    v = _str(v, where, _d, _old)
    if v and not valid_name(v):
        raise CNIError(INVALID_CONFIG, "invalid characters found in network name",
                       f"name {v!r}: use letters, digits, '_', '.' and '-', starting with a letter or digit")
    return v


class Attachment(Conf):
    """One entry of a GC's list of valid attachments."""
    KEYS = (Key("containerID", "container_id", STR, required=True), Key("ifname", "ifname", STR, required=True))
    __slots__ = tuple(k.attr for k in KEYS)


_ATTACHMENTS = list_of(obj(Attachment))

# A network's name is host-local's directory (<dataDir>/<name>: at most 255 bytes on Linux) and part of
# ptp's masquerade comments: ADD and CHECK refuse a longer one before anything is applied, the other
# commands take it (a DEL must never block cleanup; nothing can have been made under such a name).
MAX_NAME = 255


class NetConf(Conf):
    """The keys every plugin shares. ``notes``: remarks on keys a lenient command ignored."""

    KEYS = (
        Key("cniVersion", "cni_version", Kind(_version), default="0.1.0"),
        Key("name", "name", Kind(_name), default=""),
        Key("type", "type", STR, default=""),
        Key("prevResult", "prev_result", RAW),
        Key("skbDebugLog", "debug_log", STR, default=""),
        Key("cni.dev/valid-attachments", "valid", _ATTACHMENTS, commands=("GC",)),
        Key("cni.dev/attachments", "attachments", _ATTACHMENTS, commands=("GC",)),
    )
    __slots__ = tuple(k.attr for k in KEYS) + ("notes", "_raw")

    def decode(self, command):
        """Decode the plugin's own keys (those of its class beyond NetConf's) for ``command``."""
        decoding = Decoding(command, self.notes)
        cls = type(self)
        own = cls.__dict__.get("_OWN")
        if own is None:
            own = {f for f in cls._TABLE if f not in NetConf._TABLE}
            type.__setattr__(cls, "_OWN", own)
        if own:
            keys = [cls._TABLE[f] for f in own]
            _defaults(self, keys, command)
            _decode_keys(self, self._raw, "", decoding, cls._TABLE, own)
            _required(self, keys, "", command)
        if len(self.name) > MAX_NAME and command in ("ADD", "CHECK"):
            raise CNIError(INVALID_CONFIG, f"invalid field name: longer than {MAX_NAME} characters",
                           f"it has {len(self.name)}; a network name names a directory, so it is at most {MAX_NAME} "
                           "characters")
        self.check(decoding, "")
        return self

    def valid_attachments(self):
        """GC's attachments that are still valid, as {(containerID, ifname)}, or None when the call carries
        no list at all (cnitool's gc): None means "say nothing", never "nothing is valid".
        ``cni.dev/valid-attachments`` is the spec's key, ``cni.dev/attachments`` the spec-v1.1.0 tag's (libcni
        sends both, equal); what either lists is valid: a GC never frees what its own request names. A key
        that is there but null is an empty list: libcni writes Go's empty slice as null, for a network none
        of whose attachments is valid any more."""
        lists = [found for found in (self.valid, self.attachments) if found is not None]
        if lists:
            return {(a.container_id, a.ifname) for found in lists for a in found}
        if any(lookup_default(self._raw, key, _MISSING) is None
               for key in ("cni.dev/valid-attachments", "cni.dev/attachments")):
            return set()
        return None

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r}, cniVersion={self.cni_version!r}, type={self.type!r})"


def parse_json_stdin(data, what="network configuration on stdin"):
    """Decode stdin; invalid JSON is code 6 with the line, the column and the offending text."""
    try:
        return jsonio.loads(data)
    except jsonio.JSONSyntaxError as e:
        raise CNIError(DECODE, f"invalid JSON in the {what}: {e}", e.describe()) from None


def parse(data, cls=NetConf, command=None):
    """The JSON of a plugin's stdin (bytes, str, or an already decoded dict) and the keys every plugin
    shares, checked (not for VERSION): an instance of ``cls`` whose own keys ``decode(command)`` reads."""
    raw = data if isinstance(data, dict) else parse_json_stdin(data)
    if not isinstance(raw, dict):
        raise CNIError(DECODE, f"the network configuration must be a JSON object, found {describe(raw)}",
                       'e.g. {"cniVersion": "1.0.0", "name": "mynet", "type": "loopback"}')
    conf = cls.__new__(cls)
    _set(conf, "_raw", raw)
    _set(conf, "notes", [])
    decoding = Decoding(command, conf.notes)
    _defaults(conf, NetConf.KEYS, command)
    _decode_keys(conf, raw, "", decoding, NetConf._TABLE, _NAME)     # the name first, as Go's skel checks it
    if not conf.name:
        raise CNIError(INVALID_CONFIG, "missing network name", 'set "name" in the network configuration')
    _decode_keys(conf, raw, "", decoding, NetConf._TABLE, _SHARED_BUT_NAME)
    return conf


_NAME = {"name"}
_SHARED_BUT_NAME = set(NetConf._TABLE) - _NAME


def load(data, cls=NetConf, command="ADD"):
    """``parse`` and ``decode`` at once (what the dispatcher does, without its version gates)."""
    return parse(data, cls, command).decode(command)


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
