"""Properties of skb.cni.result over generated inputs (hypothesis).

1. Any JSON value (and result-shaped objects with random field types) parses to a Result or fails with a
   CNIError carrying a spec code and a message: never any other exception.
2. Every valid Result converts to every version, or fails with the documented "no valid IP addresses".
3. to_dict(v) -> parse -> to_dict(v) is a fixed point for every v, and the output is plain JSON.
4. Down-converting then reading back loses exactly what cni-spec.md §3.5 says (a model written here).
Addresses are also checked against CPython's ipaddress (RFC 5952 text, like Go's) as an independent oracle.
"""
import ipaddress
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skb.cni.errors import CNIError
from skb.cni.result import (DNS, SUPPORTED_VERSIONS, Interface, IPConfig, Result, Route, parse_prev_result,
                        parse_result, parse_version, version_family)

CODES = {1, 2, 3, 4, 5, 6, 7, 999}
V1 = ("1.0.0", "1.1.0")
V04 = ("0.3.0", "0.3.1", "0.4.0")
V02 = ("0.1.0", "0.2.0")

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------------
# strategies

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)

v4 = st.ip_addresses(v=4).map(str)
v6 = st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None).map(str)
ips = v4 | v6
cidrs = (st.tuples(v4, st.integers(0, 32)) | st.tuples(v6, st.integers(0, 128))).map(lambda t: f"{t[0]}/{t[1]}")
u32 = st.integers(0, 2 ** 32 - 1)
texts = st.text(max_size=12)


@st.composite
def near_addresses(draw):
    """Valid addresses (with or without prefix), some with one character changed, added or removed."""
    s = draw(cidrs | ips)
    i = draw(st.integers(0, len(s)))
    c = draw(st.sampled_from("0123456789abcdefABCDEF:./%x +-"))
    op = draw(st.sampled_from(["keep", "replace", "insert", "delete", "upper"]))
    if op == "replace":
        return s[:i] + c + s[i + 1:]
    if op == "insert":
        return s[:i] + c + s[i:]
    if op == "delete":
        return s[:i] + s[i + 1:]
    return s.upper() if op == "upper" else s


near_addresses = near_addresses()


def opt(strategy):
    return st.none() | strategy


def maybe(good):
    """The right type most of the time, anything else sometimes."""
    return st.one_of(good, good, json_values)


# objects shaped like results, fields of random type
ip_entries = st.fixed_dictionaries({}, optional={
    "address": maybe(cidrs | near_addresses), "gateway": maybe(ips | near_addresses),
    "interface": maybe(st.integers(-2, 2 ** 33)), "version": maybe(st.sampled_from(["4", "6", "", "x"]))})
route_entries = st.fixed_dictionaries({}, optional={
    "dst": maybe(cidrs | near_addresses), "gw": maybe(ips), "mtu": maybe(st.integers(-1, 2 ** 33)),
    "advmss": maybe(u32), "priority": maybe(u32), "table": maybe(st.integers(-1, 2 ** 33)),
    "scope": maybe(st.integers(-1, 300))})
iface_entries = st.fixed_dictionaries({}, optional={
    "name": maybe(texts), "mac": maybe(texts), "sandbox": maybe(texts), "mtu": maybe(u32),
    "socketPath": maybe(texts), "pciID": maybe(texts)})
dns_entries = st.fixed_dictionaries({}, optional={
    "nameservers": maybe(st.lists(maybe(ips))), "domain": maybe(texts), "search": maybe(st.lists(maybe(texts))),
    "options": maybe(st.lists(texts))})
ip020_entries = st.fixed_dictionaries({}, optional={
    "ip": maybe(cidrs), "gateway": maybe(ips), "routes": maybe(st.lists(maybe(route_entries), max_size=3))})
versions_seen = st.sampled_from(SUPPORTED_VERSIONS + ("", "0.5.0", "1.1"))
shaped = st.fixed_dictionaries({}, optional={
    "cniVersion": maybe(versions_seen),
    "interfaces": maybe(st.lists(maybe(iface_entries), max_size=3)),
    "ips": maybe(st.lists(maybe(ip_entries), max_size=3)),
    "ip": maybe(st.lists(ip_entries, max_size=2)),
    "routes": maybe(st.lists(maybe(route_entries), max_size=3)),
    "dns": maybe(dns_entries),
    "ip4": maybe(ip020_entries), "ip6": maybe(ip020_entries)})

# valid values
interfaces = st.builds(Interface, texts, mac=opt(texts), sandbox=opt(texts), mtu=opt(u32), socket_path=opt(texts),
                       pci_id=opt(texts))
ipconfigs = st.builds(IPConfig, cidrs, gateway=opt(ips), interface=opt(st.integers(0, 4)))
routes = st.builds(Route, cidrs, gw=opt(ips), mtu=opt(u32), advmss=opt(u32), priority=opt(u32), table=opt(u32),
                   scope=opt(st.integers(0, 255)))
dnss = st.builds(DNS, opt(st.lists(ips, max_size=3)), opt(texts), opt(st.lists(texts, max_size=3)),
                 opt(st.lists(texts, max_size=3)))
results = st.builds(Result, opt(st.sampled_from(SUPPORTED_VERSIONS)), st.lists(interfaces, max_size=3),
                    st.lists(ipconfigs, max_size=4), st.lists(routes, max_size=4), opt(dnss))


@st.composite
def perturbed(draw):
    """A valid result written in some version, with one value replaced by junk or one key removed."""
    result, version = draw(results), draw(st.sampled_from(SUPPORTED_VERSIONS))
    try:
        obj = result.to_dict(version)
    except CNIError:
        obj = {"cniVersion": version, "ips": [{"address": "10.0.0.1/8"}]}
    spots = []

    def walk(o):
        for k in (o if isinstance(o, dict) else range(len(o)) if isinstance(o, list) else ()):
            spots.append((o, k))
            walk(o[k])
    walk(obj)
    container, key = draw(st.sampled_from(spots))
    if isinstance(container, dict) and draw(st.booleans()):
        del container[key]
    else:
        container[key] = draw(json_values | near_addresses | st.integers(-1, 2 ** 32 + 1))
    return obj


perturbed = perturbed()


def _check_error(e):
    assert type(e.code) is int and e.code in CODES, e
    assert isinstance(e.msg, str) and e.msg, e
    assert isinstance(e.details, str), e


def _is_no_ip_error(e, version):
    return e.code == 1 and e.msg == "cannot convert: no valid IP addresses" and version in e.details


# ---------------------------------------------------------------------------------------------------
# 1. never anything but a Result or a CNIError

def _parse_or_error(call):
    try:
        result = call()
    except CNIError as e:
        _check_error(e)
        return None
    if result is not None:
        assert isinstance(result, Result)
        for v in SUPPORTED_VERSIONS:  # whatever parsed can be written (or is the documented failure)
            try:
                json.dumps(result.to_dict(v))
            except CNIError as e:
                assert _is_no_ip_error(e, v) and v in V02 and not result.ips
    return result


@FAST
@given(obj=json_values | shaped | perturbed, default=opt(versions_seen) | json_values)
def test_parse_result_never_raises_anything_else(obj, default):
    _parse_or_error(lambda: parse_result(obj, default))


@FAST
@given(obj=json_values | shaped | perturbed, conf=opt(versions_seen) | json_values)
def test_parse_prev_result_never_raises_anything_else(obj, conf):
    result = _parse_or_error(lambda: parse_prev_result(conf, obj))
    if result is not None:
        assert version_family(result.cni_version) == version_family(conf or "")


@FAST
@given(s=st.text(max_size=12) | st.text(alphabet="0123456789.+-", max_size=12) | json_values)
def test_version_helpers_never_raise_anything_else(s):
    try:
        t = parse_version(s)
        assert isinstance(t, tuple) and len(t) == 3 and all(type(n) is int for n in t)
    except CNIError as e:
        _check_error(e)
        assert e.code == 6
    try:
        assert version_family(s) in ("020", "040", "100")
    except CNIError as e:
        _check_error(e)
        assert e.code == 1


# ---------------------------------------------------------------------------------------------------
# 2. and 3. valid results convert to every version; to_dict -> parse -> to_dict is a fixed point

@FAST
@given(result=results)
def test_every_version_converts_or_fails_as_documented(result):
    for v in SUPPORTED_VERSIONS:
        try:
            out = result.to_dict(v)
        except CNIError as e:
            assert v in V02 and not result.ips and _is_no_ip_error(e, v), e
            continue
        assert out["cniVersion"] == v
        assert json.loads(json.dumps(out)) == out  # plain JSON: dicts, lists, str, int
        again = parse_result(out)
        assert again.cni_version == v
        assert again.to_dict(v) == out


@FAST
@given(result=results)
def test_1_1_0_is_lossless(result):
    assert parse_result(result.to_dict("1.1.0")) == result.replace(cni_version="1.1.0")
    assert parse_result(result.to_dict("1.0.0")).to_dict("1.1.0") == result.to_dict("1.1.0")


# ---------------------------------------------------------------------------------------------------
# 4. what a trip through an older version loses (cni-spec.md §3.5), as an independent model

def expected_after(result, version):
    """The Result that reading ``result.to_dict(version)`` back should give, modelled from the rules."""
    if version in V1:
        return result.replace(cni_version=version)
    if version in V04:  # 1.1 interface extras lost; everything else kept
        return result.replace(cni_version=version, interfaces=[Interface(i.name, i.mac, i.sandbox)
                                                                  for i in result.interfaces])
    first = {}
    for ipc in result.ips:
        fam = ipaddress.ip_interface(ipc.address).version
        first.setdefault(fam, IPConfig(ipc.address, ipc.gateway))  # interface index lost
    kept = [Route(r.dst, r.gw) for fam in (4, 6) if fam in first
            for r in result.routes if ipaddress.ip_network(r.dst, strict=False).version == fam]
    return Result(version, ips=[first[f] for f in (4, 6) if f in first], routes=kept, dns=result.dns)


@SLOW
@given(result=results)
def test_down_then_up_loses_only_what_the_rules_say(result):
    for low in SUPPORTED_VERSIONS:
        try:
            back = parse_result(result.to_dict(low))
        except CNIError as e:
            assert _is_no_ip_error(e, low)
            continue
        model = expected_after(result, low)
        assert back == model
        for high in SUPPORTED_VERSIONS:
            assert _written(back, high) == _written(model, high)


def _written(result, version):
    try:
        return result.to_dict(version)
    except CNIError as e:
        return e.code, e.msg


# ---------------------------------------------------------------------------------------------------
# addresses against CPython's ipaddress

def _spellings(addr):
    a = ipaddress.ip_address(addr)
    return st.sampled_from([str(a), a.exploded, a.exploded.upper(), str(a).upper()])


@FAST
@given(data=st.data(), addr=ips, plen=st.integers(0, 128))
def test_addresses_canonicalise_like_ipaddress(data, addr, plen):
    a = ipaddress.ip_address(addr)
    plen = min(plen, a.max_prefixlen)
    text = data.draw(_spellings(addr))
    ipc = IPConfig(f"{text}/{plen}")
    assert ipc.address == f"{a}/{plen}"  # host bits kept, RFC 5952 text
    assert ipc.family == a.version
    assert Route(f"{text}/{plen}", gw=text).gw == str(a)


@FAST
@given(text=near_addresses)
def test_address_fuzz_accepts_exactly_what_ipaddress_accepts(text):
    try:
        iface = ipaddress.ip_interface(text)
        ok = "/" in text and "%" not in text and "." not in text.partition("/")[2]  # no scope, no netmask
        if ok and iface.version == 6 and iface.ip.ipv4_mapped is not None:
            ok = iface.network.prefixlen >= 96
    except ValueError:
        ok = False
    try:
        IPConfig(text)
    except CNIError as e:
        assert e.code == 7
        assert not ok, text
    else:
        assert ok, text
