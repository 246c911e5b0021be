"""skb.cni.result: parsing, conversion and writing of CNI results.

Expected dicts are written from docs/REFERENCE.md#results (and the Go converters it describes), not from our output.
"""
import json
import pickle

import pytest

from skb.cni.errors import CNIError
from skb.cni.result import (DNS, SUPPORTED_VERSIONS, Interface, IPConfig, Result, Route, parse_prev_result,
                        parse_result, parse_version, version_family, version_tuple)

V1 = ("1.0.0", "1.1.0")
V04 = ("0.3.0", "0.3.1", "0.4.0")
V02 = ("0.1.0", "0.2.0")

# ---------------------------------------------------------------------------------------------------
# outputs observed from Go (docs/REFERENCE.md#result-shapes), as printed

SPEC_3_1 = """{
    "cniVersion": "1.1.0",
    "dns": {
        "nameservers": [
            "10.1.0.1"
        ],
        "search": [
            "a.b"
        ]
    },
    "interfaces": [
        {
            "mac": "aa:bb:cc:dd:ee:ff",
            "mtu": 1400,
            "name": "veth1"
        },
        {
            "mac": "11:22:33:44:55:66",
            "name": "eth0",
            "pciID": "0000:00:01.0",
            "sandbox": "/var/run/netns/x",
            "socketPath": "/run/s.sock"
        }
    ],
    "ips": [
        {
            "address": "10.1.0.5/16",
            "gateway": "10.1.0.1",
            "interface": 1
        },
        {
            "address": "fd00::5/64",
            "gateway": "fd00::1",
            "interface": 1
        }
    ],
    "routes": [
        {
            "advmss": 1200,
            "dst": "0.0.0.0/0",
            "gw": "10.1.0.1",
            "mtu": 1300,
            "priority": 10,
            "scope": 0,
            "table": 100
        },
        {
            "dst": "::/0"
        }
    ]
}"""

HOSTLOCAL_110 = ('{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.2/24","gateway":"10.1.0.1"},'
                 '{"address":"fd00::10/120","gateway":"fd00::1"}],"routes":[{"dst":"0.0.0.0/0"},'
                 '{"dst":"::/0","gw":"fd00::1","mtu":1300}]}')

HOSTLOCAL_040 = """{"cniVersion":"0.4.0",
 "ips":[{"version":"4","address":"10.1.0.2/24","gateway":"10.1.0.1"},
        {"version":"6","address":"fd00::10/120","gateway":"fd00::1"}],
 "routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0","gw":"fd00::1","mtu":1300}],
 "dns":{}}"""

SPEC_3_3 = """{
  "cniVersion": "0.2.0",
  "ip4": { "ip": "10.1.0.2/24", "gateway": "10.1.0.1", "routes": [ { "dst": "0.0.0.0/0" } ] },
  "ip6": { "ip": "fd00::10/120", "gateway": "fd00::1", "routes": [ { "dst": "::/0", "gw": "fd00::1" } ] },
  "dns": {}
}"""

LOOPBACK_100 = ('{"cniVersion":"1.0.0","interfaces":[{"name":"lo","mac":"00:00:00:00:00:00",'
                '"sandbox":"/var/run/netns/x"}],"ips":[{"interface":0,"address":"127.0.0.1/8"},'
                '{"interface":0,"address":"::1/128"}]}')

DEBUG_EMPTY = ('{"cniVersion":"1.1.0"}', '{"cniVersion":"0.4.0","dns":{}}')


@pytest.mark.parametrize("text", [SPEC_3_1, HOSTLOCAL_110, HOSTLOCAL_040, SPEC_3_3, LOOPBACK_100, *DEBUG_EMPTY],
                         ids=["spec3.1", "host-local-1.1.0", "host-local-0.4.0", "spec3.3", "loopback", "debug-1.1.0",
                              "debug-0.4.0"])
def test_observed_go_outputs_reserialise_to_the_same_content(text):
    obj = json.loads(text)
    assert parse_result(obj).to_dict(obj["cniVersion"]) == obj


def test_key_order_matches_go_so_indent4_output_is_byte_identical():
    # Go's 1.x result marshals through a map (sorted keys); 0.x through structs (declaration order).
    assert json.dumps(parse_result(json.loads(SPEC_3_1)).to_dict(), indent=4) == SPEC_3_1
    hl = json.loads(HOSTLOCAL_040)
    assert json.dumps(parse_result(hl).to_dict("0.4.0")) == json.dumps(hl)
    v2 = json.loads(SPEC_3_3)
    assert json.dumps(parse_result(v2).to_dict("0.2.0")) == json.dumps(v2)


# ---------------------------------------------------------------------------------------------------
# one hand-written result per version: parse -> to_dict(same version) is the identity

PER_VERSION = {
    "0.1.0": {"cniVersion": "0.1.0",
              "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1", "routes": [{"dst": "10.9.0.0/16", "gw": "10.0.0.9"}]},
              "dns": {"nameservers": ["10.0.0.53"], "domain": "example.org"}},
    "0.2.0": {"cniVersion": "0.2.0", "ip6": {"ip": "2001:db8::2/64", "routes": [{"dst": "::/0"}]},
              "dns": {"search": ["a", "b"], "options": ["ndots:2"]}},
    "0.3.0": {"cniVersion": "0.3.0", "interfaces": [{"name": "eth0", "sandbox": "/proc/1/ns/net"}],
              "ips": [{"version": "4", "interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1"}],
              "dns": {}},
    "0.3.1": {"cniVersion": "0.3.1",
              "interfaces": [{"name": "veth0", "mac": "aa:aa:aa:aa:aa:aa"},
                             {"name": "eth0", "mac": "bb:bb:bb:bb:bb:bb", "sandbox": "/run/netns/a"}],
              "ips": [{"version": "6", "interface": 1, "address": "fd00::2/64", "gateway": "fd00::1"}],
              "routes": [{"dst": "::/0", "gw": "fd00::1"}], "dns": {"nameservers": ["fd00::53"]}},
    "0.4.0": {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}],
              "routes": [{"dst": "0.0.0.0/0", "table": 0, "scope": 253}], "dns": {}},
    "1.0.0": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/run/netns/b"}],
              "ips": [{"address": "192.168.1.3/24", "interface": 0}]},
    "1.1.0": {"cniVersion": "1.1.0",
              "interfaces": [{"name": "eth0", "mtu": 9000, "socketPath": "/s", "pciID": "0000:01:00.0"}],
              "ips": [{"address": "10.0.0.2/8"}],
              "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "mtu": 1400, "advmss": 1360, "priority": 5,
                          "table": 0, "scope": 0}],
              "dns": {"domain": "d"}},
}


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_round_trip_in_the_same_version(version):
    obj = PER_VERSION[version]
    result = parse_result(obj)
    assert result.cni_version == version
    assert result.to_dict(version) == obj
    assert result.to_dict() == obj  # default: the version it was read in
    assert parse_result(result.to_dict(version)) == result


# ---------------------------------------------------------------------------------------------------
# conversion rules (docs/REFERENCE.md#result-conversion), from the 1.1.0 example down to every version

SPEC_3_1_AS_04 = {
    # interface mtu, pciID and socketPath lost
    "interfaces": [{"name": "veth1", "mac": "aa:bb:cc:dd:ee:ff"},
                   {"name": "eth0", "mac": "11:22:33:44:55:66", "sandbox": "/var/run/netns/x"}],
    "ips": [{"version": "4", "interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
            {"version": "6", "interface": 1, "address": "fd00::5/64", "gateway": "fd00::1"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1300, "advmss": 1200, "priority": 10, "table": 100,
                "scope": 0},  # routes copied whole
               {"dst": "::/0"}],
    "dns": {"nameservers": ["10.1.0.1"], "search": ["a.b"]},
}
SPEC_3_1_AS_02 = {
    "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
    "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0"}]},
    "dns": {"nameservers": ["10.1.0.1"], "search": ["a.b"]},
}


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_1_1_result_written_in_every_version(version):
    src = json.loads(SPEC_3_1)
    if version in V1:  # one shape for 1.0.0 and 1.1.0, as in Go: only cniVersion changes
        expected = dict(src, cniVersion=version)
    elif version in V04:
        expected = dict(SPEC_3_1_AS_04, cniVersion=version)
    else:
        expected = dict(SPEC_3_1_AS_02, cniVersion=version)
    assert parse_result(src).to_dict(version) == expected


SPEC_3_3_UP_04 = {
    "ips": [{"version": "4", "address": "10.1.0.2/24", "gateway": "10.1.0.1"},
            {"version": "6", "address": "fd00::10/120", "gateway": "fd00::1"}],
    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}],
    "dns": {},
}
SPEC_3_3_UP_1 = {
    "ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1"}, {"address": "fd00::10/120", "gateway": "fd00::1"}],
    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}],
}


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_0_2_result_written_in_every_version(version):
    src = json.loads(SPEC_3_3)
    if version in V02:  # 0.1.0 <-> 0.2.0: only cniVersion changes
        expected = dict(src, cniVersion=version)
    elif version in V04:  # ip4 then ip6 become ips, their routes top-level routes (v4 first); no interfaces
        expected = dict(SPEC_3_3_UP_04, cniVersion=version)
    else:
        expected = dict(SPEC_3_3_UP_1, cniVersion=version)
    assert parse_result(src).to_dict(version) == expected


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_0_4_host_local_result_written_in_every_version(version):
    src = json.loads(HOSTLOCAL_040)
    got = parse_result(src).to_dict(version)
    if version in V04:
        assert got == dict(src, cniVersion=version)
    elif version in V1:
        assert got == dict(json.loads(HOSTLOCAL_110), cniVersion=version)  # version dropped, dns omitted
    else:
        assert got == {"cniVersion": version,
                       "ip4": {"ip": "10.1.0.2/24", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
                       "ip6": {"ip": "fd00::10/120", "gateway": "fd00::1",
                               "routes": [{"dst": "::/0", "gw": "fd00::1"}]},  # route mtu lost
                       "dns": {}}


@pytest.mark.parametrize("version", V02)
def test_down_to_0_2_keeps_first_address_of_each_family_and_routes_of_present_families(version):
    result = parse_result({
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth0", "sandbox": "/x"}],
        "ips": [{"address": "fd00::2/64", "interface": 0}, {"address": "10.0.0.2/24", "interface": 0},
                {"address": "10.0.1.2/24", "gateway": "10.0.1.1"}, {"address": "fd01::2/64"}],
        "routes": [{"dst": "10.8.0.0/16", "gw": "10.0.0.1", "mtu": 1400, "table": 7},
                   {"dst": "fd08::/64"}, {"dst": "0.0.0.0/0", "priority": 3}],
    })
    assert result.to_dict(version) == {
        "cniVersion": version,
        "ip4": {"ip": "10.0.0.2/24", "routes": [{"dst": "10.8.0.0/16", "gw": "10.0.0.1"}, {"dst": "0.0.0.0/0"}]},
        "ip6": {"ip": "fd00::2/64", "routes": [{"dst": "fd08::/64"}]},
        "dns": {},
    }


@pytest.mark.parametrize("version", V02)
def test_down_to_0_2_drops_routes_of_a_family_without_address(version):
    result = Result("1.0.0", ips=[IPConfig("10.0.0.2/24")], routes=[Route("::/0", gw="fd00::1"), Route("10.1.0.0/16")])
    assert result.to_dict(version) == {"cniVersion": version,
                                       "ip4": {"ip": "10.0.0.2/24", "routes": [{"dst": "10.1.0.0/16"}]}, "dns": {}}


@pytest.mark.parametrize("version", V02)
@pytest.mark.parametrize("result", [
    Result("1.1.0"),
    Result("0.4.0", interfaces=[Interface("eth0")], routes=[Route("0.0.0.0/0", gw="10.0.0.1")], dns=DNS(["1.1.1.1"])),
], ids=["empty", "routes-only"])
def test_down_to_0_2_without_addresses_fails_with_go_message(version, result):
    with pytest.raises(CNIError) as e:
        result.to_dict(version)
    assert e.value.code == 1
    assert e.value.msg == "cannot convert: no valid IP addresses"
    assert version in e.value.details


def test_debug_plugin_empty_results_per_version():
    # docs/REFERENCE.md#the-debug-plugin: an empty result is {"cniVersion":"1.1.0"} for 1.x, {"cniVersion":"0.4.0","dns":{}} for
    # 0.3/0.4, and a failure for 0.1/0.2.
    empty = Result()
    assert empty.to_dict() == {"cniVersion": "1.1.0"}
    for v in V1:
        assert empty.to_dict(v) == {"cniVersion": v}
    for v in V04:
        assert empty.to_dict(v) == {"cniVersion": v, "dns": {}}


def test_0_4_entry_without_version_takes_the_address_family():
    # Go's loopback writes 0.3.1 results without "version" (docs/REFERENCE.md#loopback); Go would drop these
    # entries when converting to 0.2.0, we keep them by address family.
    result = parse_result({"cniVersion": "0.3.1", "ips": [{"address": "::1/128"}, {"address": "127.0.0.1/8",
                                                                                     "version": ""}]})
    assert result.to_dict("0.3.1")["ips"] == [{"version": "6", "address": "::1/128"},
                                               {"version": "4", "address": "127.0.0.1/8"}]
    assert result.to_dict("0.2.0") == {"cniVersion": "0.2.0", "ip4": {"ip": "127.0.0.1/8"}, "ip6": {"ip": "::1/128"},
                                       "dns": {}}


def test_0_3_0_ip_key_is_ignored_like_go():
    result = parse_result({"cniVersion": "0.3.0", "ip": [{"version": "4", "address": "10.0.0.2/24"}]})
    assert result.ips == ()
    assert result.to_dict("0.3.0") == {"cniVersion": "0.3.0", "dns": {}}


def test_0_4_interface_extras_are_unknown_keys():
    result = parse_result({"cniVersion": "0.4.0", "interfaces": [{"name": "e", "mtu": 1400, "pciID": "p"}]})
    assert result.interfaces == (Interface("e"),)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS[2:])
def test_zero_values_follow_go_omitempty(version):
    result = parse_result({"cniVersion": "1.1.0",
                           "interfaces": [{"name": "", "mac": "", "mtu": 0, "sandbox": "", "socketPath": "",
                                           "pciID": ""}],
                           "ips": [{"address": "10.0.0.1/8", "gateway": "", "interface": 0}],
                           "routes": [{"dst": "0.0.0.0/0", "gw": "", "mtu": 0, "advmss": 0, "priority": 0,
                                       "table": 0, "scope": 0}],
                           "dns": {"nameservers": [], "domain": "", "search": [], "options": []}})
    got = result.to_dict(version)
    assert got["interfaces"] == [{"name": ""}]
    ip = {"address": "10.0.0.1/8", "interface": 0}
    assert got["ips"] == [ip if version in V1 else dict(ip, version="4")]
    assert got["routes"] == [{"dst": "0.0.0.0/0", "table": 0, "scope": 0}]
    assert ("dns" in got) == (version in V04) and got.get("dns", {}) == {}


def test_route_extras_survive_a_trip_through_0_4_but_not_0_2():
    src = {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24"}],
           "routes": [{"dst": "0.0.0.0/0", "mtu": 1, "advmss": 2, "priority": 3, "table": 4, "scope": 5}]}
    via04 = parse_result(parse_result(src).to_dict("0.4.0")).to_dict("1.1.0")
    assert via04 == src
    via02 = parse_result(parse_result(src).to_dict("0.2.0")).to_dict("1.1.0")
    assert via02 == {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24"}], "routes": [{"dst": "0.0.0.0/0"}]}


def test_interface_extras_survive_1_0_but_not_0_4():
    src = json.loads(SPEC_3_1)
    assert parse_result(parse_result(src).to_dict("1.0.0")).to_dict("1.1.0") == src
    back = parse_result(parse_result(src).to_dict("0.4.0")).to_dict("1.1.0")
    assert back["interfaces"] == [{"mac": "aa:bb:cc:dd:ee:ff", "name": "veth1"},
                                  {"mac": "11:22:33:44:55:66", "name": "eth0", "sandbox": "/var/run/netns/x"}]
    assert {k: v for k, v in back.items() if k != "interfaces"} == {k: v for k, v in src.items() if k != "interfaces"}


def test_target_version_errors_and_defaults():
    result = parse_result(json.loads(HOSTLOCAL_110))
    for bad in ("0.5.0", "1.1", "v1.1.0", "2.0.0", 1):
        with pytest.raises(CNIError) as e:
            result.to_dict(bad)
        assert e.value.code == 1
        assert "0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0" in e.value.details
    assert result.to_dict("")["cniVersion"] == "0.1.0"  # "" is 0.1.0 (Go's Convert)
    assert Result(ips=[IPConfig("10.0.0.1/8")]).to_dict()["cniVersion"] == "1.1.0"


# ---------------------------------------------------------------------------------------------------
# addresses

@pytest.mark.parametrize("given, canonical", [
    ("192.168.1.3/24", "192.168.1.3/24"),           # host bits kept
    ("10.0.0.1/024", "10.0.0.1/24"),                # Go accepts leading zeros in the prefix
    ("FD00:0000:0000::0001/64", "fd00::1/64"),
    ("2001:db8:0:0:1:0:0:1/128", "2001:db8::1:0:0:1/128"),   # first of equal runs
    ("1:0:0:1:0:0:0:1/64", "1:0:0:1::1/64"),        # longest run
    ("1:0:2:3:4:5:6:7/64", "1:0:2:3:4:5:6:7/64"),   # a single zero group is not compressed
    ("::/0", "::/0"),
    ("::1.2.3.4/128", "::102:304/128"),             # Go writes hex (glibc would write ::1.2.3.4)
    ("::ffff:10.1.2.3/120", "10.1.2.3/24"),         # IPv4-mapped becomes IPv4, as in Go
    ("::ffff:10.1.2.3/96", "10.1.2.3/0"),           # the shortest mapped prefix there is: /0
    ("::ffff:10.1.2.3/128", "10.1.2.3/32"),
])
def test_addresses_are_canonicalised_like_go(given, canonical):
    assert IPConfig(given).address == canonical
    assert parse_result({"cniVersion": "1.0.0", "ips": [{"address": given}]}).ips[0].address == canonical


@pytest.mark.parametrize("bad", ["10.0.0.300/24", "10.0.0.1", "10.0.0.1/33", "fd00::1/129", "010.0.0.1/8",
                                 "10.0.0.1/", "10.0.0.1/+8", "10.0.0.1/ 8", "10.0.0.1/8/8", "fe80::1%eth0/64",
                                 "10.0.0.1/٨", "", " 10.0.0.1/8", "::ffff:1.2.3.4/64", "::ffff:1.2.3.4/95", "x"])
def test_bad_addresses(bad):
    with pytest.raises(CNIError) as e:
        parse_result({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8"}, {"address": bad}]})
    assert e.value.code == 6
    assert e.value.msg.startswith("result.ips[1].address: ")


def test_gateway_canonicalised_and_v4_mapped():
    r = parse_result({"cniVersion": "0.4.0", "ips": [{"version": "6", "address": "fd00::2/64", "gateway": "FD00::1"},
                                                     {"version": "4", "address": "10.0.0.2/8",
                                                      "gateway": "::ffff:10.0.0.1"}]})
    assert [i.gateway for i in r.ips] == ["fd00::1", "10.0.0.1"]


# ---------------------------------------------------------------------------------------------------
# parse errors: the code, and a message that starts with the exact field path

BAD = [
    ([], "result: expected an object, found a list"),
    ("x", 'result: expected an object, found the string "x"'),
    ({"cniVersion": 1}, "result.cniVersion: expected a string, found the number 1"),
    ({"cniVersion": "1.0.0", "ips": {}}, "result.ips: expected a list, found an object"),
    ({"cniVersion": "1.0.0", "ips": [None]}, "result.ips[0]: expected an object, found null"),
    ({"cniVersion": "1.0.0", "ips": [{}]}, "result.ips[0].address: missing"),
    ({"cniVersion": "1.0.0", "ips": [{"address": 5}]}, "result.ips[0].address: expected a string, found the number 5"),
    ({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8", "gateway": "10.0.0.1/8"}]},
     'result.ips[0].gateway: "10.0.0.1/8" is not an IP address'),
    ({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8", "interface": -1}]},
     "result.ips[0].interface: the number -1 is out of range"),
    ({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8", "interface": True}]},
     "result.ips[0].interface: expected an integer, found true"),
    ({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8", "interface": 1.0}]},
     "result.ips[0].interface: expected an integer, found the number 1.0"),
    ({"cniVersion": "1.1.0", "interfaces": [{"name": "a"}, {"mac": "x"}]}, "result.interfaces[1].name: missing"),
    ({"cniVersion": "1.1.0", "interfaces": [{"name": 3}]}, "result.interfaces[0].name: expected a string"),
    ({"cniVersion": "1.1.0", "interfaces": [{"name": "a", "mtu": "1400"}]},
     'result.interfaces[0].mtu: expected an integer, found the string "1400"'),
    ({"cniVersion": "1.1.0", "interfaces": [{"name": "a", "sandbox": []}]},
     "result.interfaces[0].sandbox: expected a string, found a list"),
    ({"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "scope": 256}]}, "result.routes[0].scope: the number 256"),
    ({"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "table": 2 ** 32}]}, "result.routes[0].table: "),
    ({"cniVersion": "1.1.0", "routes": [{"gw": "10.0.0.1"}]}, "result.routes[0].dst: missing"),
    ({"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "gw": "gw"}]}, 'result.routes[0].gw: "gw" is not an IP'),
    ({"cniVersion": "1.1.0", "dns": []}, "result.dns: expected an object, found a list"),
    ({"cniVersion": "1.1.0", "dns": {"nameservers": "1.1.1.1"}}, "result.dns.nameservers: expected a list of strings"),
    ({"cniVersion": "1.1.0", "dns": {"search": ["a", None]}}, "result.dns.search[1]: expected a string, found null"),
    ({"cniVersion": "1.1.0", "dns": {"domain": 1}}, "result.dns.domain: expected a string"),
    ({"cniVersion": "0.4.0", "ips": [{"version": 4, "address": "10.0.0.1/8"}]}, "result.ips[0].version: expected"),
    ({"cniVersion": "0.4.0", "ips": [{"version": "v4", "address": "10.0.0.1/8"}]},
     'result.ips[0].version: "v4" is not "4" or "6"'),
    ({"cniVersion": "0.4.0", "ips": [{"version": "6", "address": "10.0.0.1/8"}]},
     'result.ips[0].version: "6" but the address "10.0.0.1/8" is IPv4'),
    ({"cniVersion": "0.2.0", "ip4": "10.0.0.1/8"}, "result.ip4: expected an object"),
    ({"cniVersion": "0.2.0", "ip4": {}}, "result.ip4.ip: missing"),
    ({"cniVersion": "0.2.0", "ip4": {"ip": "fd00::1/64"}}, 'result.ip4.ip: "fd00::1/64" is not an IPv4 address'),
    ({"cniVersion": "0.2.0", "ip6": {"ip": "10.0.0.1/8"}}, 'result.ip6.ip: "10.0.0.1/8" is not an IPv6 address'),
    ({"cniVersion": "0.2.0", "ip6": {"ip": "fd00::1/64", "routes": [{"dst": "0.0.0.0/0"}]}},
     'result.ip6.routes[0].dst: "0.0.0.0/0" is not an IPv6 destination'),
    ({"cniVersion": "0.1.0", "ip4": {"ip": "10.0.0.1/8", "routes": {}}}, "result.ip4.routes: expected a list"),
]


@pytest.mark.parametrize("obj, msg", BAD)
def test_parse_errors_name_the_field(obj, msg):
    with pytest.raises(CNIError) as e:
        parse_result(obj)
    assert e.value.code == 6
    assert e.value.msg.startswith(msg), e.value.msg


def test_error_values_are_quoted_and_escaped():
    with pytest.raises(CNIError) as e:
        parse_result({"cniVersion": "1.0.0", "ips": [{"address": 'a"b\\c\n' + "x" * 200}]})
    assert e.value.msg.startswith(r'result.ips[0].address: "a\"b\\c\u000axxx')
    assert len(e.value.msg) < 250


@pytest.mark.parametrize("version", ["0.5.0", "1.1", "v1.0.0", "1.2.0"])
def test_unknown_result_version_is_code_1(version):
    with pytest.raises(CNIError) as e:
        parse_result({"cniVersion": version})
    assert e.value.code == 1
    assert f'result.cniVersion: "{version}"' in e.value.msg
    assert "1.1.0" in e.value.details


def test_where_prefixes_paths():
    with pytest.raises(CNIError) as e:
        parse_result({"cniVersion": "1.0.0", "ips": [{"address": "x"}]}, where="IPAM result")
    assert e.value.msg.startswith("IPAM result.ips[0].address: ")


def test_unknown_keys_dropped_and_keys_matched_case_insensitively_like_go():
    r = parse_result({"CNIVersion": "1.0.0", "IPs": [{"Address": "10.0.0.2/8", "GATEWAY": "10.0.0.1", "x": 1}],
                      "extra": {"anything": [1]}, "Routes": [{"DST": "0.0.0.0/0"}]})
    assert r.to_dict() == {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/8", "gateway": "10.0.0.1"}],
                           "routes": [{"dst": "0.0.0.0/0"}]}


def test_null_fields_are_absent():
    r = parse_result({"cniVersion": "1.1.0", "interfaces": None, "ips": None, "routes": None, "dns": None})
    assert r == Result("1.1.0")
    r = parse_result({"cniVersion": "0.2.0", "ip4": None, "ip6": {"ip": "fd00::1/64", "gateway": None,
                                                                   "routes": None}})
    assert r == Result("0.2.0", ips=[IPConfig("fd00::1/64")])
    assert parse_result(None, "1.0.0") == Result("1.0.0")  # libcni accepts a literal null


# ---------------------------------------------------------------------------------------------------
# cniVersion defaults (docs/REFERENCE.md#results-without-a-version)

def test_missing_version_takes_the_callers_version():
    assert parse_result({"ips": [{"address": "10.0.0.1/8"}]}, "1.0.0").cni_version == "1.0.0"
    assert parse_result({"cniVersion": "", "ips": [{"address": "10.0.0.1/8"}]}, "0.4.0").cni_version == "0.4.0"


def test_result_version_wins_over_the_callers():
    assert parse_result({"cniVersion": "0.4.0"}, "1.1.0").cni_version == "0.4.0"


def test_no_version_anywhere_is_0_1_0():
    # read with the 0.1/0.2 parser: a 1.x-shaped body without cniVersion has no ip4/ip6, so no addresses
    r = parse_result({"ips": [{"address": "10.0.0.1/8"}], "ip4": {"ip": "10.0.0.2/8"}})
    assert r.cni_version == "0.1.0"
    assert r.ips == (IPConfig("10.0.0.2/8"),)
    assert parse_result({}, "").cni_version == "0.1.0"


def test_missing_version_with_an_unsupported_default():
    with pytest.raises(CNIError) as e:
        parse_result({}, "0.5.0")
    assert e.value.code == 1 and '"0.5.0"' in e.value.msg


class TestPrevResult:
    def test_absent(self):
        assert parse_prev_result("1.0.0", None) is None

    def test_missing_version_is_the_configs(self):
        r = parse_prev_result("0.4.0", {"ips": [{"version": "4", "address": "10.0.0.1/8"}]})
        assert r.cni_version == "0.4.0" and r.ips == (IPConfig("10.0.0.1/8"),)

    @pytest.mark.parametrize("conf, prev", [("1.1.0", "1.0.0"), ("1.0.0", "1.1.0"), ("0.3.0", "0.4.0"),
                                            ("0.4.0", "0.3.1"), ("0.1.0", "0.2.0"), ("", "0.2.0"), (None, "0.1.0")])
    def test_same_family(self, conf, prev):
        assert parse_prev_result(conf, {"cniVersion": prev}).cni_version == prev

    @pytest.mark.parametrize("conf, prev", [("1.1.0", "0.4.0"), ("0.4.0", "1.0.0"), ("0.3.1", "0.2.0"),
                                            ("0.2.0", "0.3.0"), ("", "1.0.0")])
    def test_other_family_is_code_1_naming_both_versions(self, conf, prev):
        with pytest.raises(CNIError) as e:
            parse_prev_result(conf, {"cniVersion": prev, "ips": []})
        assert e.value.code == 1
        assert f'"{prev}"' in e.value.msg and f'"{conf or "0.1.0"}"' in e.value.msg
        assert "cniVersion" in e.value.details  # says what to change

    def test_paths_start_with_prevResult(self):
        with pytest.raises(CNIError) as e:
            parse_prev_result("1.0.0", {"ips": [{"address": "10.0.0.1/8"}, {"address": "10.0.0.300/24"}]})
        assert e.value.code == 6
        assert e.value.msg == ('prevResult.ips[1].address: "10.0.0.300/24" is not an IP address with a prefix length '
                               '(expected e.g. "10.1.0.5/24" or "fd00::5/64")')

    def test_not_an_object(self):
        with pytest.raises(CNIError) as e:
            parse_prev_result("1.0.0", [1])
        assert e.value.code == 6 and e.value.msg.startswith("prevResult: expected an object")

    def test_unsupported_config_version(self):
        with pytest.raises(CNIError) as e:
            parse_prev_result("9.9.9", {})
        assert e.value.code == 1


# ---------------------------------------------------------------------------------------------------
# building results in plugins

def loopback_result(netns):
    return Result("1.1.0", interfaces=[Interface("lo", mac="00:00:00:00:00:00", sandbox=netns)],
                  ips=[IPConfig("127.0.0.1/8", interface=0), IPConfig("::1/128", interface=0)])


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_loopback_result_in_every_version(version):
    got = loopback_result("/var/run/netns/x").to_dict(version)
    if version in V1:
        assert got == dict(json.loads(LOOPBACK_100), cniVersion=version)
    elif version in V04:
        assert got == {"cniVersion": version,
                       "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": "/var/run/netns/x"}],
                       "ips": [{"version": "4", "interface": 0, "address": "127.0.0.1/8"},
                               {"version": "6", "interface": 0, "address": "::1/128"}],
                       "dns": {}}
    else:
        assert got == {"cniVersion": version, "ip4": {"ip": "127.0.0.1/8"}, "ip6": {"ip": "::1/128"}, "dns": {}}


def test_ptp_style_build_from_an_ipam_result():
    ipam = parse_result(json.loads(HOSTLOCAL_110))
    result = ipam.replace(interfaces=[Interface("veth1234", mac="aa:bb:cc:dd:ee:01"),
                                      Interface("eth0", mac="aa:bb:cc:dd:ee:02", sandbox="/run/netns/c")],
                          ips=[ip.replace(interface=1) for ip in ipam.ips])
    assert [ip.interface for ip in result.ips] == [1, 1]
    assert ipam.ips[0].interface is None  # the original is untouched
    assert result.to_dict("1.0.0")["ips"][1] == {"address": "fd00::10/120", "gateway": "fd00::1", "interface": 1}


def test_values_are_immutable_hashable_and_comparable():
    a, b = loopback_result("/x"), loopback_result("/x")
    assert a == b and hash(a) == hash(b) and a != loopback_result("/y")
    assert a != a.to_dict()
    with pytest.raises(AttributeError):
        a.ips = ()
    with pytest.raises(AttributeError):
        a.ips[0].interface = 1
    with pytest.raises(AttributeError):
        del a.dns
    assert pickle.loads(pickle.dumps(a)) == a
    assert "IPConfig(address='127.0.0.1/8', interface=0)" in repr(a)
    assert a.ips[1].family == 6 and a.ips[1].ip == "::1" and a.ips[1].prefixlen == 128
    assert Route("fd00::/8").family == 6 and Route("10.0.0.0/8").family == 4


def test_constructors_normalise_like_parsing():
    assert Interface("e", mac="", mtu=0, sandbox="") == Interface("e")
    r = Route("0.0.0.0/0", gw="", mtu=0, advmss=0, priority=0, table=0, scope=0)
    assert (r.mtu, r.advmss, r.priority, r.table, r.scope, r.gw) == (None, None, None, 0, 0, None)
    assert Result("1.0.0", dns=DNS([], "", [], [])).dns is None
    assert DNS(["1.1.1.1"]).nameservers == ("1.1.1.1",)
    assert Result("") == Result()


@pytest.mark.parametrize("make, field", [
    (lambda: IPConfig("10.0.0.1"), "IPConfig.address"),
    (lambda: IPConfig("10.0.0.1/8", gateway="nope"), "IPConfig.gateway"),
    (lambda: IPConfig("10.0.0.1/8", interface=-1), "IPConfig.interface"),
    (lambda: Route("0.0.0.0/0", scope=300), "Route.scope"),
    (lambda: Interface(None), "Interface.name"),
    (lambda: DNS("1.1.1.1"), "DNS.nameservers"),
    (lambda: Result("0.5.0"), "Result.cni_version"),
    (lambda: Result(ips=["10.0.0.1/8"]), "Result.ips[0]"),
    (lambda: Result(dns={}), "Result.dns"),
])
def test_constructor_errors_are_code_7_naming_the_field(make, field):
    with pytest.raises(CNIError) as e:
        make()
    assert e.value.code == 7 and e.value.msg.startswith(field + ": ")


# ---------------------------------------------------------------------------------------------------
# version helpers (docs/REFERENCE.md#version-negotiation)

@pytest.mark.parametrize("s, expected", [
    ("1.1.0", (1, 1, 0)), ("1.1", (1, 1, 0)), ("1", (1, 0, 0)), ("", (0, 1, 0)), ("0.4.0", (0, 4, 0)),
    ("01.02.03", (1, 2, 3)), ("+1.0.0", (1, 0, 0)), ("0.-42.0", (0, -42, 0)),  # Go's strconv.Atoi
])
def test_parse_version(s, expected):
    assert parse_version(s) == expected
    assert version_tuple(s) == expected


@pytest.mark.parametrize("s", ["1.1.0.0", "1.x", "v1.0.0", "1.1.0-rc1", "1..0", "1.0.", " 1", "1_0", "١.0", None, 1.1])
def test_parse_version_errors_are_code_6(s):
    with pytest.raises(CNIError) as e:
        parse_version(s)
    assert e.value.code == 6 and e.value.msg


def test_versions_compare_as_tuples():
    assert parse_version("1.1") >= parse_version("1.1.0") > parse_version("0.4.0") > parse_version("")


@pytest.mark.parametrize("v, family", [("", "020"), (None, "020"), ("0.1.0", "020"), ("0.2.0", "020"),
                                       ("0.3.0", "040"), ("0.3.1", "040"), ("0.4.0", "040"), ("1.0.0", "100"),
                                       ("1.1.0", "100")])
def test_version_family(v, family):
    assert version_family(v) == family


@pytest.mark.parametrize("v", ["0.5.0", "1.1", 1])
def test_version_family_unknown(v):
    with pytest.raises(CNIError) as e:
        version_family(v)
    assert e.value.code == 1 and "1.1.0" in e.value.details
