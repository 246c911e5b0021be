"""CNI results: read any version's result JSON, hold it in the 1.1.0 shape, write it in any version.

Objects in, plain dicts and lists out: ``parse_result`` takes what a JSON decoder produced, ``to_dict``
returns what a JSON encoder takes. Loaded on every plugin call, so it imports only ``_socket`` (to check
and canonicalise addresses) and ``skb.cni.errors``.

The conversion rules are Go's (``pkg/types/{020,040,100}``, see docs/REFERENCE.md#result-conversion). Decisions where the
spec, Go or our strictness differ:

* One internal shape (1.1.0). 1.0.0 and 1.1.0 share it, as in Go: interface ``mtu``/``socketPath``/``pciID``
  survive into 1.0.0 output; they are dropped below 1.0.0. Route extras (``mtu``, ``advmss``,
  ``priority``, ``table``, ``scope``) are written for 0.3.0-1.1.0 (Go shares one route type) and dropped
  for 0.1.0/0.2.0, which keep only ``dst`` and ``gw``.
* Values: empty strings and a zero ``mtu``/``advmss``/``priority`` mean "absent" (Go's omitempty), so they
  become None; ``table``, ``scope`` and ``ips[].interface`` keep an explicit 0. An empty DNS is None.
  Addresses keep their host bits; IPv6 is written compressed and lower-case as Go does; an IPv4-mapped
  IPv6 address becomes IPv4 as in Go (a mapped prefix shorter than /96 is refused: Go would turn it
  into a meaningless /0). DNS strings are checked for type only (resolv.conf may hold ``fe80::1%eth0``).
* Keys are matched case-insensitively, last one wins, like Go's decoder; unknown keys are dropped.
* Stricter than Go: wrong JSON types, integers that are negative or out of range (32 bits; ``scope``
  8 bits), an interface without a name, a 0.3/0.4 ``version`` that contradicts its address, ``ip4``
  holding IPv6 (or the reverse) and a 0.1/0.2 route filed under the other family are errors (code 6)
  naming the field. Go would accept most of them and misbehave later.
* A 0.3/0.4 IP entry with no ``version`` (Go's own loopback writes those for 0.3.1) takes its family
  from the address, also when converting to 0.1/0.2 (Go would drop it there).
* Writing 0.1.0/0.2.0 needs an IP address: otherwise msg ``cannot convert: no valid IP addresses``
  exactly as Go's plugins word it, with details naming the version, but code 1 (the config's version
  cannot express the result) where Go says 999: every error we print carries a spec code. This check applies
  to every result written as 0.1/0.2 (Go skips it for a 0.2 result written back as 0.2, but our plugins
  always build 1.x results, as Go's do).
* A 0.3.0 result's ``ip`` list (the 0.3.0 spec text's name) is ignored, as in Go.
* Error codes: malformed content is 6 (DECODE); an unknown or mismatched version is 1
  (INCOMPATIBLE_VERSION); bad values given to the constructors are 7 (INVALID_CONFIG: they usually come
  from the network configuration).

Values are immutable and hashable; derive changed copies with ``replace(field=...)``.
"""

from skb.cni.addr import parse_text as _ip
from skb.cni.netconf import LATEST, SUPPORTED_VERSIONS, fold  # one list of versions for the suite
from skb.cni.errors import CNIError, DECODE, INCOMPATIBLE_VERSION, INVALID_CONFIG
from skb.cni.errors import describe as _describe, quote as _quote

# Go's result packages: a result can be read only by its family's parser (docs/REFERENCE.md#version-families).
_FAMILY = {"0.1.0": "020", "0.2.0": "020", "0.3.0": "040", "0.3.1": "040", "0.4.0": "040",
           "1.0.0": "100", "1.1.0": "100"}
_FAMILY_MEMBERS = {"020": "0.1.0, 0.2.0", "040": "0.3.0, 0.3.1, 0.4.0", "100": "1.0.0, 1.1.0"}
_SUPPORTED_TEXT = ", ".join(SUPPORTED_VERSIONS)

_U32 = 0xFFFFFFFF
_U8 = 0xFF
_CIDR_EXAMPLE = '(expected e.g. "10.1.0.5/24" or "fd00::5/64")'
_IP_EXAMPLE = '(expected e.g. "10.1.0.1" or "fd00::1")'


# ---------------------------------------------------------------------------------------------------
# versions (docs/REFERENCE.md#version-negotiation)

def parse_version(s):
    """``"1.1"`` -> ``(1, 1, 0)``, as Go's ``version.ParseVersion``: up to three integer parts (optional
    sign, ASCII digits), missing parts are 0, ``""`` is 0.1.0. Anything else is a code-6 CNIError."""
    if not isinstance(s, str):
        raise CNIError(DECODE, f"invalid version: expected a string, found {_describe(s)}",
                       'a CNI version looks like "1.1.0"')
    if s == "":
        return (0, 1, 0)
    parts = s.split(".")
    if len(parts) > 3:
        raise CNIError(DECODE, f"invalid version {_quote(s)}: too many parts",
                       'a CNI version has at most three dot-separated numbers, e.g. "1.1.0"')
    out = [0, 0, 0]
    for i, part in enumerate(parts):
        digits = part[1:] if part[:1] in ("+", "-") else part
        if not (digits.isascii() and digits.isdigit()):
            raise CNIError(DECODE, f"invalid version {_quote(s)}: {_quote(part)} is not an integer",
                           'a CNI version has at most three dot-separated numbers, e.g. "1.1.0"')
        out[i] = -int(digits) if part[0] == "-" else int(digits)
    return tuple(out)


version_tuple = parse_version


def version_family(v):
    """The result family of a supported version: ``"020"``, ``"040"`` or ``"100"`` (``""`` is 0.1.0)."""
    family = _FAMILY.get(v or "0.1.0") if v is None or isinstance(v, str) else None
    if family is None:
        raise CNIError(INCOMPATIBLE_VERSION, f"unsupported CNI version {_describe(v)}",
                       f"supported versions: {_SUPPORTED_TEXT}")
    return family


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

    def _dict100(self):  # Go 1.x sorts keys
        out = {}
        if self.mac is not None:
            out["mac"] = self.mac
        if self.mtu is not None:
            out["mtu"] = self.mtu
        out["name"] = self.name
        if self.pci_id is not None:
            out["pciID"] = self.pci_id
        if self.sandbox is not None:
            out["sandbox"] = self.sandbox
        if self.socket_path is not None:
            out["socketPath"] = self.socket_path
        return out

    def _dict040(self):
        out = {"name": self.name}
        if self.mac is not None:
            out["mac"] = self.mac
        if self.sandbox is not None:
            out["sandbox"] = self.sandbox
        return out


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

    def _dict100(self):
        out = {"address": self.address}
        if self.gateway is not None:
            out["gateway"] = self.gateway
        if self.interface is not None:
            out["interface"] = self.interface
        return out

    def _dict040(self):
        out = {"version": "6" if ":" in self.address else "4"}
        if self.interface is not None:
            out["interface"] = self.interface
        out["address"] = self.address
        if self.gateway is not None:
            out["gateway"] = self.gateway
        return out


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

    def _dict100(self):  # Go 1.x sorts keys
        out = {}
        if self.advmss is not None:
            out["advmss"] = self.advmss
        out["dst"] = self.dst
        if self.gw is not None:
            out["gw"] = self.gw
        if self.mtu is not None:
            out["mtu"] = self.mtu
        if self.priority is not None:
            out["priority"] = self.priority
        if self.scope is not None:
            out["scope"] = self.scope
        if self.table is not None:
            out["table"] = self.table
        return out

    def _dict040(self):  # Go's struct order
        out = {"dst": self.dst}
        if self.gw is not None:
            out["gw"] = self.gw
        if self.mtu is not None:
            out["mtu"] = self.mtu
        if self.advmss is not None:
            out["advmss"] = self.advmss
        if self.priority is not None:
            out["priority"] = self.priority
        if self.table is not None:
            out["table"] = self.table
        if self.scope is not None:
            out["scope"] = self.scope
        return out

    def _dict020(self):
        out = {"dst": self.dst}
        if self.gw is not None:
            out["gw"] = self.gw
        return out


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

    def _dict100(self):  # Go 1.x sorts keys
        out = {}
        if self.domain is not None:
            out["domain"] = self.domain
        if self.nameservers is not None:
            out["nameservers"] = list(self.nameservers)
        if self.options is not None:
            out["options"] = list(self.options)
        if self.search is not None:
            out["search"] = list(self.search)
        return out

    def _dict0x(self):  # Go's struct order
        out = {}
        if self.nameservers is not None:
            out["nameservers"] = list(self.nameservers)
        if self.domain is not None:
            out["domain"] = self.domain
        if self.search is not None:
            out["search"] = list(self.search)
        if self.options is not None:
            out["options"] = list(self.options)
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
        if family == "100":
            out = {"cniVersion": version}
            if self.dns is not None:
                out["dns"] = self.dns._dict100()
            if self.interfaces:
                out["interfaces"] = [i._dict100() for i in self.interfaces]
            if self.ips:
                out["ips"] = [i._dict100() for i in self.ips]
            if self.routes:
                out["routes"] = [r._dict100() for r in self.routes]
            return out
        if family == "040":
            out = {"cniVersion": version}
            if self.interfaces:
                out["interfaces"] = [i._dict040() for i in self.interfaces]
            if self.ips:
                out["ips"] = [i._dict040() for i in self.ips]
            if self.routes:
                out["routes"] = [r._dict040() for r in self.routes]
            out["dns"] = {} if self.dns is None else self.dns._dict0x()
            return out
        return self._dict020(version)

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
                ipc.setdefault("routes", []).append(route._dict020())
        out = {"cniVersion": version}
        if 4 in by_family:
            out["ip4"] = by_family[4]
        if 6 in by_family:
            out["ip6"] = by_family[6]
        out["dns"] = {} if self.dns is None else self.dns._dict0x()
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
