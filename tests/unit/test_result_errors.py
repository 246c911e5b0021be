"""skb.cni.result's refusals as exact objects: code 7 from a constructor (``Class.field``), code 6 from the
parser (the JSON path), 1 for a version; every field of every value, and the edges of an address."""
import pytest

from skb.cni.errors import CNIError
from skb.cni.result import DNS, Interface, IPConfig, Result, Route, parse_prev_result, parse_result

CIDR = '(expected e.g. "10.1.0.5/24" or "fd00::5/64")'
ADDR = '(expected e.g. "10.1.0.1" or "fd00::1")'


def refused(fn, *args, **kw):
    with pytest.raises(CNIError) as ei:
        fn(*args, **kw)
    return ei.value.code, ei.value.msg


@pytest.mark.parametrize("make,msg", [
    (lambda: Interface(5), "Interface.name: expected a string, found the number 5"),
    (lambda: Interface("e", mac=5), "Interface.mac: expected a string, found the number 5"),
    (lambda: Interface("e", sandbox=[]), "Interface.sandbox: expected a string, found a list"),
    (lambda: Interface("e", mtu="x"), 'Interface.mtu: expected an integer, found the string "x"'),
    (lambda: Interface("e", socket_path=1), "Interface.socket_path: expected a string, found the number 1"),
    (lambda: Interface("e", pci_id=True), "Interface.pci_id: expected a string, found true"),
    (lambda: IPConfig(5), "IPConfig.address: expected a string, found the number 5"),
    (lambda: IPConfig(None), f"IPConfig.address: missing; expected an IP address with a prefix length {CIDR}"),
    (lambda: IPConfig("10.0.0.1/24", gateway=5), "IPConfig.gateway: expected a string, found the number 5"),
    (lambda: IPConfig("10.0.0.1/24", gateway="x"), f'IPConfig.gateway: "x" is not an IP address {ADDR}'),
    (lambda: IPConfig("10.0.0.1/24", interface=-1), "IPConfig.interface: the number -1 is out of range (expected 0 to "
                                                    "4294967295)"),
    (lambda: Route(5), "Route.dst: expected a string, found the number 5"),
    (lambda: Route("0.0.0.0/0", gw=5), "Route.gw: expected a string, found the number 5"),
    (lambda: Route("0.0.0.0/0", mtu="1"), 'Route.mtu: expected an integer, found the string "1"'),
    (lambda: Route("0.0.0.0/0", advmss=True), "Route.advmss: expected an integer, found true"),
    (lambda: Route("0.0.0.0/0", priority=1.5), "Route.priority: expected an integer, found the number 1.5"),
    (lambda: Route("0.0.0.0/0", table=2 ** 32), "Route.table: the number 4294967296 is out of range (expected 0 to "
                                                "4294967295)"),
    (lambda: Route("0.0.0.0/0", scope=256), "Route.scope: the number 256 is out of range (expected 0 to 255)"),
    (lambda: DNS(nameservers=5), "DNS.nameservers: expected a list of strings, found the number 5"),
    (lambda: DNS(domain=5), "DNS.domain: expected a string, found the number 5"),
    (lambda: DNS(search=["a", 5]), "DNS.search[1]: expected a string, found the number 5"),
    (lambda: DNS(options="x"), 'DNS.options: expected a list of strings, found the string "x"'),
    (lambda: Result(interfaces=5), "Result.interfaces: expected a list, found the number 5"),
    (lambda: Result(interfaces=[Interface("e"), 5]), "Result.interfaces[1]: expected a Interface, found the number 5"),
    (lambda: Result(ips=[Route("0.0.0.0/0")]), "Result.ips[0]: expected a IPConfig, found Route"),
    (lambda: Result(routes=["x"]), 'Result.routes[0]: expected a Route, found the string "x"'),
    (lambda: Result(dns={}), "Result.dns: expected a DNS, found an object"),
])
def test_a_constructor_refuses_each_field_with_code_7(make, msg):
    assert refused(make) == (7, msg)


def test_a_result_of_an_unknown_version_is_refused_with_the_list():
    with pytest.raises(CNIError) as ei:
        Result("9.9.9")
    assert ei.value.to_dict() == {"code": 7, "msg": 'Result.cni_version: unsupported CNI version the string "9.9.9"',
                                  "details": "supported versions: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"}


@pytest.mark.parametrize("version,obj,msg", [
    ("1.0.0", {"interfaces": [{"name": "e", "mac": 5}]}, "result.interfaces[0].mac: expected a string, found the number 5"),
    ("1.0.0", {"interfaces": [{"name": "e", "sandbox": 5}]}, "result.interfaces[0].sandbox: expected a string, found the "
                                                             "number 5"),
    ("1.0.0", {"interfaces": [{"name": "e", "mtu": "x"}]}, 'result.interfaces[0].mtu: expected an integer, found the '
                                                           'string "x"'),
    ("1.0.0", {"interfaces": [{"name": "e", "socketPath": 5}]}, "result.interfaces[0].socketPath: expected a string, "
                                                                "found the number 5"),
    ("1.0.0", {"interfaces": [{"name": "e", "pciID": 5}]}, "result.interfaces[0].pciID: expected a string, found the "
                                                           "number 5"),
    ("1.0.0", {"interfaces": [{"mac": "m"}]}, "result.interfaces[0].name: missing; every interface has a name"),
    ("1.0.0", {"interfaces": 5}, "result.interfaces: expected a list, found the number 5"),
    ("1.0.0", {"interfaces": [5]}, "result.interfaces[0]: expected an object, found the number 5"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/24", "gateway": 5}]}, "result.ips[0].gateway: expected a string, found the "
                                                                   "number 5"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/24", "interface": -1}]}, "result.ips[0].interface: the number -1 is out of "
                                                                      "range (expected 0 to 4294967295)"),
    ("1.0.0", {"ips": 5}, "result.ips: expected a list, found the number 5"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "mtu": -1}]}, "result.routes[0].mtu: the number -1 is out of range "
                                                             "(expected 0 to 4294967295)"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "advmss": "x"}]}, 'result.routes[0].advmss: expected an integer, found '
                                                                 'the string "x"'),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "priority": []}]}, "result.routes[0].priority: expected an integer, found "
                                                                  "a list"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "table": True}]}, "result.routes[0].table: expected an integer, found "
                                                                 "true"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "scope": 256}]}, "result.routes[0].scope: the number 256 is out of range "
                                                                "(expected 0 to 255)"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "gw": 1}]}, "result.routes[0].gw: expected a string, found the number 1"),
    ("1.0.0", {"routes": 5}, "result.routes: expected a list, found the number 5"),
    ("1.0.0", {"dns": {"domain": 5}}, "result.dns.domain: expected a string, found the number 5"),
    ("1.0.0", {"dns": {"options": "x"}}, 'result.dns.options: expected a list of strings, found the string "x"'),
    ("1.0.0", {"dns": {"search": [5]}}, "result.dns.search[0]: expected a string, found the number 5"),
    ("1.0.0", {"dns": {"nameservers": 5}}, "result.dns.nameservers: expected a list of strings, found the number 5"),
    ("1.0.0", {"dns": 5}, "result.dns: expected an object, found the number 5"),
    ("0.4.0", {"interfaces": [{"name": 5}]}, "result.interfaces[0].name: expected a string, found the number 5"),
    ("0.4.0", {"interfaces": 5}, "result.interfaces: expected a list, found the number 5"),
    ("0.4.0", {"ips": 5}, "result.ips: expected a list, found the number 5"),
    ("0.4.0", {"ips": [{"address": "10.0.0.1/24", "version": 4}]}, 'result.ips[0].version: expected the string "4" or '
                                                                    '"6", found the number 4'),
    ("0.4.0", {"routes": [{"dst": 5}]}, "result.routes[0].dst: expected a string, found the number 5"),
    ("0.4.0", {"routes": 5}, "result.routes: expected a list, found the number 5"),
    ("0.4.0", {"dns": {"domain": 5}}, "result.dns.domain: expected a string, found the number 5"),
    ("0.2.0", {"ip4": {"ip": "10.0.0.1/24", "gateway": 5}}, "result.ip4.gateway: expected a string, found the number 5"),
    ("0.2.0", {"ip4": {"ip": "10.0.0.1/24", "routes": [{"dst": 5}]}}, "result.ip4.routes[0].dst: expected a string, "
                                                                      "found the number 5"),
    ("0.2.0", {"ip4": {"ip": "10.0.0.1/24"}, "dns": {"domain": 5}}, "result.dns.domain: expected a string, found the "
                                                                    "number 5"),
    ("0.2.0", {"ip4": {"ip": "fd00::1/64"}}, 'result.ip4.ip: "fd00::1/64" is not an IPv4 address; ip4 holds IPv4, put '
                                             'it under ip6'),
    ("0.2.0", {"ip6": {"ip": "10.0.0.1/24"}}, 'result.ip6.ip: "10.0.0.1/24" is not an IPv6 address; ip6 holds IPv6, put '
                                              'it under ip4'),
    ("0.2.0", {"ip6": {"ip": "fd00::1/64", "routes": [{"dst": "0.0.0.0/0"}]}}, 'result.ip6.routes[0].dst: "0.0.0.0/0" '
     'is not an IPv6 destination; ip6 holds IPv6 routes, put it under ip4.routes'),
])
def test_the_parser_refuses_each_field_with_code_6_at_its_path(version, obj, msg):
    assert refused(parse_result, dict(obj, cniVersion=version)) == (6, msg)


def test_a_prev_result_names_its_own_path_and_the_versions():
    assert refused(parse_prev_result, "1.0.0", {"cniVersion": "1.0.0", "ips": [{"address": 5}]}) == \
        (6, "prevResult.ips[0].address: expected a string, found the number 5")
    assert refused(parse_prev_result, 5, {}) == (6, "cniVersion: expected a string, found the number 5")
    assert refused(parse_result, {}, 5) == (6, "cniVersion: expected a string, found the number 5")
    with pytest.raises(CNIError) as ei:
        parse_prev_result("9.9", {})
    assert ei.value.to_dict() == {"code": 1, "msg": "incompatible CNI versions", "details": 'config is "9.9", supported '
                                  "versions: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"}
    with pytest.raises(CNIError) as ei:
        parse_result({}, "9.9")
    assert ei.value.to_dict() == {"code": 1, "msg": 'result: has no cniVersion and the configuration\'s "9.9" is not a '
                                  "CNI version this plugin can read", "details": "supported versions: 0.1.0, 0.2.0, 0.3.0, "
                                  "0.3.1, 0.4.0, 1.0.0, 1.1.0"}


@pytest.mark.parametrize("text,want", [
    ("10.0.0.1/0000024", "10.0.0.1/24"), ("::ffff:10.0.0.1/120", "10.0.0.1/24"), ("::ffff:10.0.0.1/128", "10.0.0.1/32"),
    ("fd00::1/128", "fd00::1/128"), ("10.0.0.1/32", "10.0.0.1/32"),
])
def test_addresses_at_the_edges(text, want):
    assert IPConfig(text).address == want


@pytest.mark.parametrize("text,most", [("10.0.0.1/33", 32), ("fd00::1/129", 128), ("::ffff:10.0.0.1/129", 128),
                                       ("10.0.0.1/" + "1" * 5000, 32)])
def test_a_prefix_longer_than_the_address(text, most):
    code, msg = refused(IPConfig, text)
    assert code == 7 and msg.endswith(f"has a prefix length longer than the address (at most /{most})")


def test_keys_fold_as_go_folds_them():
    r = parse_result({"cniVersion": "1.0.0", "interfaces": [{"name": "e", "\u017fandbox": "/x", "MAC": "m"}],
                      "\u212aey": 1})
    assert (r.interfaces[0].sandbox, r.interfaces[0].mac) == ("/x", "m")


def test_the_largest_values_of_a_route():
    r = Route("0.0.0.0/0", mtu=2 ** 32 - 1, scope=255, table=2 ** 32 - 1)
    assert (r.mtu, r.scope, r.table) == (2 ** 32 - 1, 255, 2 ** 32 - 1)


def test_a_value_cannot_lose_an_attribute():
    with pytest.raises(AttributeError) as ei:
        del Route("0.0.0.0/0").dst
    assert str(ei.value) == "Route is immutable"


def test_a_10_result_ignores_the_04_version_key_of_an_address():
    r = parse_result({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/24", "version": "6"}]})
    assert r.ips[0].address == "10.0.0.1/24"


def test_a_route_that_is_not_an_object():
    assert refused(parse_result, {"cniVersion": "1.0.0", "routes": [5]}) == \
        (6, "result.routes[0]: expected an object, found the number 5")


SUPPORTED = "supported versions: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"


@pytest.mark.parametrize("fn,args,msg", [
    (parse_result, ({"cniVersion": "9.9"},), 'result.cniVersion: "9.9" is not a CNI version this plugin can read'),
    (parse_prev_result, ("1.0.0", {"cniVersion": "9.9"}), 'prevResult.cniVersion: "9.9" is not a CNI version this '
                                                          "plugin can read"),
    (parse_prev_result, ("9.9", {}), "incompatible CNI versions"),
])
def test_unreadable_versions_are_code_1_with_the_list(fn, args, msg):
    with pytest.raises(CNIError) as ei:
        fn(*args)
    assert ei.value.code == 1 and ei.value.msg == msg and ei.value.details.endswith(SUPPORTED)


@pytest.mark.parametrize("version,found", [("9", 'the string "9"'), (0, "the number 0"), ([], "a list")])
def test_a_result_cannot_be_written_in_an_unknown_version(version, found):
    with pytest.raises(CNIError) as ei:
        Result("1.0.0").to_dict(version)
    assert ei.value.to_dict() == {"code": 1, "msg": f"cannot convert a result to CNI version {found}",
                                  "details": SUPPORTED}


def test_a_02_result_needs_an_address():
    with pytest.raises(CNIError) as ei:
        Result("0.2.0").to_dict()
    assert ei.value.to_dict() == {"code": 1, "msg": "cannot convert: no valid IP addresses", "details": "a CNI 0.2.0 "
                                  "result holds at least one IP address and this result has none; use cniVersion 0.3.0 "
                                  "or later for a result without addresses"}
