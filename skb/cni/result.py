"""CNI results: read any version's result JSON, hold it in the 1.1.0 shape, write it in any version.

Objects in, plain dicts and lists out: ``parse_result`` takes what a JSON decoder produced, ``to_dict``
returns what a JSON encoder takes, its keys in the order Go writes them (the tables ``_ORDER``). Loaded
on every plugin call, so it imports only ``_socket`` (to check and canonicalise addresses) and the
protocol's own modules. The conversion rules are Go's, and where our strictness differs from Go is
written in docs/REFERENCE.md#result-conversion. Values are immutable and hashable; derive changed copies
with ``replace(field=...)``.
"""

from skb.cni.addr import parse_text as _ip
from skb.cni.netconf import fold
from skb.cni.errors import CNIError, DECODE, INCOMPATIBLE_VERSION, INVALID_CONFIG
from skb.cni.errors import describe as _describe, quote as _quote
# One list of versions for the suite; parse_version and version_family are re-exported for the skb command.
from skb.cni.versions import (FAMILY as _FAMILY, FAMILY_MEMBERS as _FAMILY_MEMBERS, LATEST,  # noqa: F401
                              SUPPORTED_TEXT as _SUPPORTED_TEXT, SUPPORTED_VERSIONS, parse_version,
                              version_family, version_tuple)

_U32 = 0xFFFFFFFF
_U8 = 0xFF
_CIDR_EXAMPLE = '(expected e.g. "10.1.0.5/24" or "fd00::5/64")'
_IP_EXAMPLE = '(expected e.g. "10.1.0.1" or "fd00::1")'


# ---------------------------------------------------------------------------------------------------
# field checks shared by the parser (JSON paths, code 6) and the constructors (Class.field, code 7)

def _wrong(path, expected, v, code):
    return CNIError(code, f"{path}: expected {expected}, found {_describe(v)}")


def _cidr(v, path, code):
    """``"192.168.1.3/24"`` (host bits kept) in canonical form; the prefix may have leading zeros (Go)."""
    if not isinstance(v, str):
        if v is None:
            raise CNIError(code, f"{path}: missing; expected an IP address with a prefix length {_CIDR_EXAMPLE}")
        raise _wrong(path, "a string", v, code)
    addr, slash, plen = v.partition("/")
    parsed = _ip(addr) if slash else None
    if parsed is None or not (plen.isascii() and plen.isdigit()):
        raise CNIError(code, f"{path}: {_quote(v)} is not an IP address with a prefix length {_CIDR_EXAMPLE}")
    text, family, mapped = parsed
    digits = plen.lstrip("0")
    n = int(digits or "0") if len(digits) <= 3 else 1000
    if n > (128 if mapped else 32 if family == 4 else 128):
        raise CNIError(code, f"{path}: {_quote(v)} has a prefix length longer than the address "
                             f"(at most /{32 if family == 4 and not mapped else 128})")
    if mapped:
        if n < 96:
            raise CNIError(code, f"{path}: {_quote(v)} is an IPv4-mapped IPv6 address with a prefix shorter "
                                 f"than /96; write it as an IPv4 address, e.g. \"{text}/24\"")
        n -= 96
    return f"{text}/{n}"


def _addr(v, path, code):
    """A bare IP address in canonical form; None or "" mean absent (Go reads "" as no address)."""
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise _wrong(path, "a string", v, code)
    parsed = _ip(v)
    if parsed is None:
        raise CNIError(code, f"{path}: {_quote(v)} is not an IP address {_IP_EXAMPLE}")
    return parsed[0]


def _uint(v, path, code, maximum=_U32):
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise _wrong(path, "an integer", v, code)
    if not 0 <= v <= maximum:
        raise CNIError(code, f"{path}: {_describe(v)} is out of range (expected 0 to {maximum})")
    return v


def _text(v, path, code):
    """An optional string; "" means absent (Go omits empty strings)."""
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise _wrong(path, "a string", v, code)
    return v


def _texts(v, path, code):
    """An optional list of strings as a tuple; empty means absent."""
    if v is None:
        return None
    if not isinstance(v, (list, tuple)):
        raise _wrong(path, "a list of strings", v, code)
    for i, item in enumerate(v):
        if not isinstance(item, str):
            raise _wrong(f"{path}[{i}]", "a string", item, code)
    return tuple(v) or None


def _items(v, path, cls, code):
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)):
        raise _wrong(path, "a list", v, code)
    for i, item in enumerate(v):
        if not isinstance(item, cls):
            raise _wrong(f"{path}[{i}]", f"a {cls.__name__}", item, code)
    return tuple(v)


# ---------------------------------------------------------------------------------------------------
# value types

_set = object.__setattr__


class _Value:
    """Immutable value: equality and hash over the fields (``__slots__``, in constructor order)."""

    __slots__ = ()

    def _fields(self):
        return tuple(getattr(self, f) for f in self.__slots__)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self):
        return hash((type(self).__name__,) + self._fields())

    def __repr__(self):
        args = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__slots__ if getattr(self, f) is not None)
        return f"{type(self).__name__}({args})"

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable: use .replace({name}=...)")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self):
        return type(self), self._fields()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def replace(self, **changes):
        """A copy with some fields changed (checked like the constructor's arguments)."""
        kw = {f: getattr(self, f) for f in self.__slots__}
        kw.update(changes)
        return type(self)(**kw)


class Interface(_Value):
    """``interfaces[]``: ``sandbox`` is the netns path for in-container interfaces, None on the host."""

    __slots__ = ("name", "mac", "sandbox", "mtu", "socket_path", "pci_id")

    def __init__(self, name, mac=None, sandbox=None, mtu=None, socket_path=None, pci_id=None):
        if not isinstance(name, str):
            raise _wrong("Interface.name", "a string", name, INVALID_CONFIG)
        _set(self, "name", name)
        _set(self, "mac", _text(mac, "Interface.mac", INVALID_CONFIG))
        _set(self, "sandbox", _text(sandbox, "Interface.sandbox", INVALID_CONFIG))
        _set(self, "mtu", _uint(mtu, "Interface.mtu", INVALID_CONFIG) or None)
        _set(self, "socket_path", _text(socket_path, "Interface.socket_path", INVALID_CONFIG))
        _set(self, "pci_id", _text(pci_id, "Interface.pci_id", INVALID_CONFIG))


class IPConfig(_Value):
    """``ips[]``: ``address`` is ``ip/prefix`` with host bits kept; ``interface`` indexes
    ``Result.interfaces`` (0 is a real index; None = not tied to an interface, as IPAM results are)."""

    __slots__ = ("address", "gateway", "interface")

    def __init__(self, address, gateway=None, interface=None):
        _set(self, "address", _cidr(address, "IPConfig.address", INVALID_CONFIG))
        _set(self, "gateway", _addr(gateway, "IPConfig.gateway", INVALID_CONFIG))
        _set(self, "interface", _uint(interface, "IPConfig.interface", INVALID_CONFIG))

    @property
    def family(self):
        """4 or 6."""
        return 6 if ":" in self.address else 4

    @property
    def ip(self):
        """The address without its prefix length."""
        return self.address.partition("/")[0]

    @property
    def prefixlen(self):
        return int(self.address.partition("/")[2])

    @property
    def version(self):
        """ "4" or "6", as a 0.3/0.4 result writes it."""
        return "6" if ":" in self.address else "4"


class Route(_Value):
    """``routes[]``. ``mtu``/``advmss``/``priority`` of 0 mean unset; ``table`` and ``scope`` keep an
    explicit 0 (0 = global scope; 253 link, 254 host)."""

    __slots__ = ("dst", "gw", "mtu", "advmss", "priority", "table", "scope")

    def __init__(self, dst, gw=None, mtu=None, advmss=None, priority=None, table=None, scope=None):
        _set(self, "dst", _cidr(dst, "Route.dst", INVALID_CONFIG))
        _set(self, "gw", _addr(gw, "Route.gw", INVALID_CONFIG))
        _set(self, "mtu", _uint(mtu, "Route.mtu", INVALID_CONFIG) or None)
        _set(self, "advmss", _uint(advmss, "Route.advmss", INVALID_CONFIG) or None)
        _set(self, "priority", _uint(priority, "Route.priority", INVALID_CONFIG) or None)
        _set(self, "table", _uint(table, "Route.table", INVALID_CONFIG))
        _set(self, "scope", _uint(scope, "Route.scope", INVALID_CONFIG, _U8))

    @property
    def family(self):
        """4 or 6: the family of ``dst``."""
        return 6 if ":" in self.dst else 4


class DNS(_Value):
    """``dns``: lists are kept as tuples; empty lists and "" are None."""

    __slots__ = ("nameservers", "domain", "search", "options")

    def __init__(self, nameservers=None, domain=None, search=None, options=None):
        _set(self, "nameservers", _texts(nameservers, "DNS.nameservers", INVALID_CONFIG))
        _set(self, "domain", _text(domain, "DNS.domain", INVALID_CONFIG))
        _set(self, "search", _texts(search, "DNS.search", INVALID_CONFIG))
        _set(self, "options", _texts(options, "DNS.options", INVALID_CONFIG))

    def is_empty(self):
        return self.nameservers is None and self.domain is None and self.search is None and self.options is None


# The keys each value is written with, per result family, in the order Go writes them (Go 1.x sorts an
# object's keys; 0.x writes its structs' field order): (JSON key, attribute). A field that is None is
# left out (Go's omitempty).
_ORDER = {
    Interface: {"100": (("mac", "mac"), ("mtu", "mtu"), ("name", "name"), ("pciID", "pci_id"),
                        ("sandbox", "sandbox"), ("socketPath", "socket_path")),
                "040": (("name", "name"), ("mac", "mac"), ("sandbox", "sandbox"))},
    IPConfig: {"100": (("address", "address"), ("gateway", "gateway"), ("interface", "interface")),
               "040": (("version", "version"), ("interface", "interface"), ("address", "address"),
                       ("gateway", "gateway"))},
    Route: {"100": (("advmss", "advmss"), ("dst", "dst"), ("gw", "gw"), ("mtu", "mtu"), ("priority", "priority"),
                    ("scope", "scope"), ("table", "table")),
            "040": (("dst", "dst"), ("gw", "gw"), ("mtu", "mtu"), ("advmss", "advmss"), ("priority", "priority"),
                    ("table", "table"), ("scope", "scope")),
            "020": (("dst", "dst"), ("gw", "gw"))},
    DNS: {"100": (("domain", "domain"), ("nameservers", "nameservers"), ("options", "options"),
                  ("search", "search")),
          "040": (("nameservers", "nameservers"), ("domain", "domain"), ("search", "search"),
                  ("options", "options"))},
}
_ORDER[DNS]["020"] = _ORDER[DNS]["040"]


def _json(value, family):
    """``value`` (Interface, IPConfig, Route or DNS) as the dict ``family`` writes."""
    out = {}
    for key, attr in _ORDER[type(value)][family]:
        v = getattr(value, attr)
        if v is not None:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


class Result(_Value):
    """An ADD result in the 1.1.0 shape. ``cni_version`` is the version it was read in or made for
    (None: not set; ``to_dict()`` then writes 1.1.0)."""

    __slots__ = ("cni_version", "interfaces", "ips", "routes", "dns")

    def __init__(self, cni_version=None, interfaces=(), ips=(), routes=(), dns=None):
        if cni_version == "":
            cni_version = None
        if cni_version is not None and (not isinstance(cni_version, str) or cni_version not in _FAMILY):
            raise CNIError(INVALID_CONFIG, f"Result.cni_version: unsupported CNI version {_describe(cni_version)}",
                           f"supported versions: {_SUPPORTED_TEXT}")
        if dns is not None and not isinstance(dns, DNS):
            raise _wrong("Result.dns", "a DNS", dns, INVALID_CONFIG)
        _set(self, "cni_version", cni_version)
        _set(self, "interfaces", _items(interfaces, "Result.interfaces", Interface, INVALID_CONFIG))
        _set(self, "ips", _items(ips, "Result.ips", IPConfig, INVALID_CONFIG))
        _set(self, "routes", _items(routes, "Result.routes", Route, INVALID_CONFIG))
        _set(self, "dns", None if dns is None or dns.is_empty() else dns)

    def to_dict(self, version=None):
        """The result as JSON-ready dicts and lists in ``version``'s format (default: ``cni_version``,
        else 1.1.0; ``""`` means 0.1.0 as in a config without cniVersion). Keys come in the order Go
        writes them, so an indent-4 encoding matches Go's output byte for byte."""
        if version is None:
            version = self.cni_version or LATEST
        family = _FAMILY.get(version or "0.1.0") if isinstance(version, str) else None
        if family is None:
            raise CNIError(INCOMPATIBLE_VERSION, f"cannot convert a result to CNI version {_describe(version)}",
                           f"supported versions: {_SUPPORTED_TEXT}")
        version = version or "0.1.0"
        if family == "020":
            return self._dict020(version)
        out = {"cniVersion": version}
        if family == "100" and self.dns is not None:
            out["dns"] = _json(self.dns, family)
        for key in ("interfaces", "ips", "routes"):
            items = getattr(self, key)
            if items:
                out[key] = [_json(x, family) for x in items]
        if family == "040":     # Go's 0.x struct writes dns always, after the rest
            out["dns"] = {} if self.dns is None else _json(self.dns, family)
        return out

    def _dict020(self, version):
        # 0.1/0.2 hold one address per family: the first of each is kept, and a route goes under the
        # family of its dst only if that family has an address.
        by_family = {}
        for ipc in self.ips:
            fam = ipc.family
            if fam not in by_family:
                by_family[fam] = {"ip": ipc.address} if ipc.gateway is None else \
                    {"ip": ipc.address, "gateway": ipc.gateway}
        if not by_family:
            raise CNIError(INCOMPATIBLE_VERSION, "cannot convert: no valid IP addresses",
                           f"a CNI {version} result holds at least one IP address and this result has none; "
                           "use cniVersion 0.3.0 or later for a result without addresses")
        for route in self.routes:
            ipc = by_family.get(route.family)
            if ipc is not None:
                ipc.setdefault("routes", []).append(_json(route, "020"))
        out = {"cniVersion": version}
        if 4 in by_family:
            out["ip4"] = by_family[4]
        if 6 in by_family:
            out["ip6"] = by_family[6]
        out["dns"] = {} if self.dns is None else _json(self.dns, "020")
        return out


# ---------------------------------------------------------------------------------------------------
# parsing

def _fields(obj, path):
    """The object's keys folded as Go's decoder folds them to match a field (the last matching key wins)."""
    if not isinstance(obj, dict):
        raise _wrong(path, "an object", obj, DECODE)
    return {k.lower() if k.isascii() else fold(k): v for k, v in obj.items() if isinstance(k, str)}


def _list(v, path):
    if v is None:
        return ()
    if not isinstance(v, list):
        raise _wrong(path, "a list", v, DECODE)
    return v


def _parse_interface(obj, path, extras):
    f = _fields(obj, path)
    name = f.get("name")
    if name is None:
        raise CNIError(DECODE, f"{path}.name: missing; every interface has a name")
    if not isinstance(name, str):
        raise _wrong(f"{path}.name", "a string", name, DECODE)
    mac = _text(f.get("mac"), f"{path}.mac", DECODE)
    sandbox = _text(f.get("sandbox"), f"{path}.sandbox", DECODE)
    if not extras:  # 0.3/0.4 interfaces have no mtu, socketPath, pciID: Go drops them as unknown keys
        return Interface(name, mac, sandbox)
    return Interface(name, mac, sandbox, _uint(f.get("mtu"), f"{path}.mtu", DECODE),
                     _text(f.get("socketpath"), f"{path}.socketPath", DECODE),
                     _text(f.get("pciid"), f"{path}.pciID", DECODE))


def _parse_ip(obj, path, with_version):
    f = _fields(obj, path)
    address = _cidr(f.get("address"), f"{path}.address", DECODE)
    if with_version:
        ver = f.get("version")
        if ver is not None:
            if not isinstance(ver, str):
                raise _wrong(f"{path}.version", 'the string "4" or "6"', ver, DECODE)
            actual = "6" if ":" in address else "4"
            if ver not in ("", "4", "6"):
                raise CNIError(DECODE, f'{path}.version: {_quote(ver)} is not "4" or "6"')
            if ver and ver != actual:
                raise CNIError(DECODE, f"{path}.version: {_quote(ver)} but the address {_quote(address)} "
                                       f"is IPv{actual}; set \"version\": \"{actual}\"")
    return IPConfig(address, _addr(f.get("gateway"), f"{path}.gateway", DECODE),
                    _uint(f.get("interface"), f"{path}.interface", DECODE))


def _parse_route(obj, path):
    f = _fields(obj, path)
    return Route(_cidr(f.get("dst"), f"{path}.dst", DECODE),
                 _addr(f.get("gw"), f"{path}.gw", DECODE),
                 _uint(f.get("mtu"), f"{path}.mtu", DECODE),
                 _uint(f.get("advmss"), f"{path}.advmss", DECODE),
                 _uint(f.get("priority"), f"{path}.priority", DECODE),
                 _uint(f.get("table"), f"{path}.table", DECODE),
                 _uint(f.get("scope"), f"{path}.scope", DECODE, _U8))


def _parse_dns(obj, path):
    if obj is None:
        return None
    f = _fields(obj, path)
    return DNS(_texts(f.get("nameservers"), f"{path}.nameservers", DECODE),
               _text(f.get("domain"), f"{path}.domain", DECODE),
               _texts(f.get("search"), f"{path}.search", DECODE),
               _texts(f.get("options"), f"{path}.options", DECODE))


def _parse_100(f, version, where):
    return Result(
        version,
        [_parse_interface(x, f"{where}.interfaces[{i}]", True)
         for i, x in enumerate(_list(f.get("interfaces"), f"{where}.interfaces"))],
        [_parse_ip(x, f"{where}.ips[{i}]", False) for i, x in enumerate(_list(f.get("ips"), f"{where}.ips"))],
        [_parse_route(x, f"{where}.routes[{i}]") for i, x in enumerate(_list(f.get("routes"), f"{where}.routes"))],
        _parse_dns(f.get("dns"), f"{where}.dns"))


def _parse_040(f, version, where):
    # Go reads "ips" for 0.3.0 too; the 0.3.0 text's "ip" is an unknown key (docs/REFERENCE.md#result-shapes).
    return Result(
        version,
        [_parse_interface(x, f"{where}.interfaces[{i}]", False)
         for i, x in enumerate(_list(f.get("interfaces"), f"{where}.interfaces"))],
        [_parse_ip(x, f"{where}.ips[{i}]", True) for i, x in enumerate(_list(f.get("ips"), f"{where}.ips"))],
        [_parse_route(x, f"{where}.routes[{i}]") for i, x in enumerate(_list(f.get("routes"), f"{where}.routes"))],
        _parse_dns(f.get("dns"), f"{where}.dns"))


def _parse_020(f, version, where):
    # ip4 then ip6 become ips; their routes are concatenated, IPv4 first (Go's 0.2 -> 0.4 conversion).
    ips, routes = [], []
    for key, family in (("ip4", 4), ("ip6", 6)):
        obj = f.get(key)
        if obj is None:
            continue
        path = f"{where}.{key}"
        g = _fields(obj, path)
        address = _cidr(g.get("ip"), f"{path}.ip", DECODE)
        other = "ip6" if family == 4 else "ip4"
        if (6 if ":" in address else 4) != family:
            raise CNIError(DECODE, f"{path}.ip: {_quote(address)} is not an IPv{family} address; "
                                   f"{key} holds IPv{family}, put it under {other}")
        ips.append(IPConfig(address, _addr(g.get("gateway"), f"{path}.gateway", DECODE)))
        for i, x in enumerate(_list(g.get("routes"), f"{path}.routes")):
            route = _parse_route(x, f"{path}.routes[{i}]")
            if route.family != family:
                raise CNIError(DECODE, f"{path}.routes[{i}].dst: {_quote(route.dst)} is not an IPv{family} "
                                       f"destination; {key} holds IPv{family} routes, put it under "
                                       f"{other}.routes")
            routes.append(route)
    return Result(version, (), ips, routes, _parse_dns(f.get("dns"), f"{where}.dns"))


_PARSERS = {"020": _parse_020, "040": _parse_040, "100": _parse_100}


def _read_version(f, default, where):
    """The result's cniVersion; missing or "" -> ``default`` (the caller's version) -> 0.1.0."""
    version = f.get("cniversion")
    if version is not None and not isinstance(version, str):
        raise _wrong(f"{where}.cniVersion", "a string", version, DECODE)
    if version:
        if version not in _FAMILY:
            raise CNIError(INCOMPATIBLE_VERSION, f"{where}.cniVersion: {_quote(version)} is not a CNI version "
                                                 "this plugin can read", f"supported versions: {_SUPPORTED_TEXT}")
        return version
    if default is not None and not isinstance(default, str):
        raise _wrong("cniVersion", "a string", default, DECODE)
    version = default or "0.1.0"
    if version not in _FAMILY:
        raise CNIError(INCOMPATIBLE_VERSION, f"{where}: has no cniVersion and the configuration's "
                                             f"{_quote(version)} is not a CNI version this plugin can read",
                       f"supported versions: {_SUPPORTED_TEXT}")
    return version


def parse_result(obj, version=None, where="result"):
    """A Result from decoded JSON of any supported version. ``version`` (the configuration's) is used when
    the result has no cniVersion; with neither it is 0.1.0 (docs/REFERENCE.md#results-without-a-version). ``null`` is an empty
    result. ``where`` prefixes the field paths in error messages. Raises CNIError (6 malformed, 1 version)."""
    if obj is None:
        obj = {}
    f = _fields(obj, where)
    v = _read_version(f, version, where)
    return _PARSERS[_FAMILY[v]](f, v, where)


def parse_prev_result(conf_version, obj):
    """The ``prevResult`` of a configuration with cniVersion ``conf_version`` (Go's
    ``version.ParsePrevResult``): a missing (or "") cniVersion is the configuration's, and the prevResult
    must be in the configuration's version family. None (no prevResult) gives None."""
    if obj is None:
        return None
    if conf_version is not None and not isinstance(conf_version, str):
        raise _wrong("cniVersion", "a string", conf_version, DECODE)
    conf_version = conf_version or "0.1.0"
    conf_family = _FAMILY.get(conf_version)
    if conf_family is None:
        raise CNIError(INCOMPATIBLE_VERSION, "incompatible CNI versions",
                       f"config is {_quote(conf_version)}, supported versions: {_SUPPORTED_TEXT}")
    f = _fields(obj, "prevResult")
    v = _read_version(f, conf_version, "prevResult")
    family = _FAMILY[v]
    if family != conf_family:
        raise CNIError(INCOMPATIBLE_VERSION,
                       f"prevResult.cniVersion {_quote(v)} does not match the configuration's cniVersion "
                       f"{_quote(conf_version)}",
                       f"a prevResult must be in the configuration's version family ({_FAMILY_MEMBERS[conf_family]}); "
                       f"the previous plugin in the chain answered in another version: make it answer in "
                       f"{conf_version}, or set the network's cniVersion to one of {_FAMILY_MEMBERS[family]}")
    return _PARSERS[family](f, v, "prevResult")
