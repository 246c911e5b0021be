"""host-local config: the reference's keys and defaults; stricter validation, naming the range."""
import pytest

from skb.cni import netconf
from skb.cni.errors import CNIError
from skb_plugins.hostlocal_ipam import config as hcfg


def load(raw, command="ADD"):
    return netconf.load(raw, hcfg.HostLocalConf, command)


def parse(ipam, version="1.0.0", **top):
    raw = {"name": "n", "cniVersion": version, "type": "host-local", "ipam": ipam}
    raw.update(top)
    return load(raw)


def err(*a, **kw):
    with pytest.raises(CNIError) as ei:
        parse(*a, **kw)
    return ei.value


def test_defaults_and_order_of_range_sets():
    c = parse({"subnet": "10.1.0.0/24", "ranges": [[{"subnet": "fd00::/64"}]]},
              runtimeConfig={"ipRanges": [[{"subnet": "10.9.0.0/16"}]]})
    assert [str(rs) for rs in c.range_sets] == ["10.9.0.1-10.9.255.254", "10.1.0.1-10.1.0.254",
                                                "fd00::1-fd00::ffff:ffff:ffff:ffff"]
    assert [rs.index for rs in c.range_sets] == [0, 1, 2]
    assert str(c.range_sets[1].ranges[0].gateway) == "10.1.0.1"
    assert c.ipam.store_dir == "/var/lib/cni/networks"


def test_keys_match_case_insensitively_like_go():
    c = parse({"Ranges": [[{"Subnet": "10.1.0.0/24", "RangeStart": "10.1.0.10"}]], "DataDir": "/d"})
    assert str(c.range_sets[0].ranges[0].start) == "10.1.0.10" and c.ipam.store_dir == "/d"


@pytest.mark.parametrize("ipam,fragment", [
    ({}, "no IP ranges specified"),
    ({"ranges": [[]]}, "invalid range set ipam.ranges[0]: empty range set"),
    ({"subnet": "10.0.0.0/31"}, "Network 10.0.0.0/31 too small to allocate from"),
    ({"subnet": "10.0.0.5/24"}, "Network has host bits set. For a subnet mask of length 24 the network address is 10.0.0.0"),
    ({"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.1"}, "rangeStart 10.0.1.1 not in network 10.0.0.0/24"),
    ({"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.3"}, "rangeStart 10.0.0.9 is after rangeEnd 10.0.0.3"),
    ({"subnet": "10.0.0.0/24", "gateway": "10.0.1.1"}, "invalid range ipam: gateway 10.0.1.1 is outside the subnet 10.0.0.0/24"),
    ({"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "fd00::1"}]]},
     "invalid range ipam.ranges[0][0]: gateway fd00::1 is an IPv6 address in an IPv4 subnet"),
    ({"ranges": [[{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]]}, "mixed address families"),
    ({"ranges": [[{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.0/25"}]]},
     "ranges ipam.ranges[0][0] (10.0.0.1-10.0.0.254) and ipam.ranges[0][1] (10.0.0.1-10.0.0.126) overlap"),
    ({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.128/25"}]]},
     "range set ipam.ranges[0] overlaps with ipam.ranges[1]"),
    ({"ranges": [[{"subnet": "nope"}]]}, "subnet 'nope' is not a network in CIDR notation"),
    ({"ranges": [[{"rangeStart": "10.0.0.1"}]]}, "missing field ipam.ranges[0][0].subnet"),
    ({"ranges": "10.0.0.0/24"}, "invalid field ipam.ranges: expected a list"),
    ({"subnet": "10.0.0.0/24", "routes": [{"dst": "x"}]}, "invalid field ipam.routes[0].dst"),
])
def test_invalid_configs_name_the_range(ipam, fragment):
    e = err(ipam)
    assert e.code == 7 and fragment in e.msg, e.msg


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "STATUS", "GC"])
def test_missing_ipam(command):
    with pytest.raises(CNIError) as ei:
        load({"name": "n", "cniVersion": "1.1.0"}, command)
    assert ei.value.msg == "IPAM config missing 'ipam' key"


def test_del_and_gc_read_only_the_data_dir():
    """Ranges made invalid since ADD must not block cleanup: DEL and GC do not decode them."""
    raw = {"name": "n", "cniVersion": "1.1.0", "ipam": {"ranges": "nonsense", "routes": 5, "dataDir": "/d"},
           "runtimeConfig": {"ipRanges": 3}}
    for command in ("DEL", "GC"):
        c = load(raw, command)
        assert c.ipam.store_dir == "/d" and not hasattr(c, "range_sets")
    assert "ipam.ranges" in pytest.raises(CNIError, load, raw, "ADD").value.msg
    with pytest.raises(CNIError) as ei:
        load(dict(raw, ipam={"dataDir": "relative"}), "DEL")
    assert ei.value.code == 7 and "ipam.dataDir" in ei.value.msg


def test_old_versions_allow_one_set_per_family():
    ipam = {"ranges": [[{"subnet": "10.0.0.0/25"}], [{"subnet": "10.0.0.128/25"}]]}
    assert err(ipam, version="0.2.0").msg == "CNI version 0.2.0 does not support more than 1 address per family"
    parse({"ranges": [[{"subnet": "10.0.0.0/25"}], [{"subnet": "fd00::/64"}]]}, version="0.2.0")


def test_requested_ips_from_all_three_sources():
    raw = {"name": "n", "cniVersion": "1.0.0", "ipam": {"subnet": "10.0.0.0/24"},
           "args": {"cni": {"ips": ["10.0.0.6"]}}, "runtimeConfig": {"ips": ["10.0.0.7/24", "10.0.0.5"]}}
    c = load(raw)
    assert [str(ip) for ip in c.requested("IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.0.0.5/24")] == \
        ["10.0.0.5", "10.0.0.6", "10.0.0.7"]
    with pytest.raises(CNIError) as ei:
        c.requested("K8S_POD_NAME=p")
    assert ei.value.code == 4 and "unknown args" in ei.value.msg
    with pytest.raises(CNIError, match="invalid requested IP 'x'"):
        c.requested("IP=x")
    case_varied = {"NAME": "n", "cniVersion": "1.0.0", "IPAM": {"SUBNET": "10.0.0.0/24"},
                   "Args": {"CNI": {"IPs": ["10.0.0.6"]}}, "RuntimeConfig": {"IPS": ["10.0.0.7/24"]}}
    assert [str(ip) for ip in load(case_varied).requested("")] == ["10.0.0.6", "10.0.0.7"]


def test_resolv_conf(tmp_path):
    f = tmp_path / "resolv.conf"
    f.write_text("# c\n; c\nnameserver 10.0.0.53\nnameserver 10.0.0.54\ndomain example\nsearch a.example b.example\n"
                 "options ndots:2 timeout:1\nbogus\n")
    assert hcfg.read_resolv_conf(str(f)) == {"nameservers": ["10.0.0.53", "10.0.0.54"], "domain": "example",
                                             "search": ["a.example", "b.example"], "options": ["ndots:2", "timeout:1"]}
    with pytest.raises(CNIError, match="cannot read ipam.resolvConf"):
        hcfg.read_resolv_conf(str(tmp_path / "nope"))


def _sets(n):
    return [[{"subnet": f"10.{i // 256}.{i % 256}.0/24"}] for i in range(n)]


@pytest.mark.parametrize("a, b, inner", [(0, 1499, "10.0.0.128/25"), (700, 3, "10.2.188.0/26"),
                                          (1499, 1500, "10.5.219.0/24")])
def test_overlap_among_1500_range_sets_is_found_and_named(a, b, inner):
    """The pairwise check took seconds with 1,500 sets; its replacement must still find every overlap:
    the nested subnet may sit in any set, before or after the one it overlaps."""
    sets = _sets(1500)
    sets.append([{"subnet": "172.16.0.0/24"}])
    sets[b] = [{"subnet": inner}] if b < 1500 else [{"subnet": "10.5.219.0/24"}]
    sets[a] = sets[a] if a != 1499 else [{"subnet": "10.5.219.0/24"}]
    e = err({"ranges": sets})
    lo, hi = sorted((a, b))
    assert e.code == 7 and f"range set ipam.ranges[{lo}] overlaps with ipam.ranges[{hi}]" in e.msg, e.msg


def test_overlap_within_one_set_of_many_ranges():
    ranges = [{"subnet": "10.0.0.0/16", "rangeStart": f"10.0.{i}.10", "rangeEnd": f"10.0.{i}.20"} for i in range(255)]
    assert len(parse({"ranges": [ranges]}).range_sets[0].ranges) == 255
    ranges[200] = {"subnet": "10.0.0.0/16", "rangeStart": "10.0.7.15", "rangeEnd": "10.0.7.30"}
    e = err({"ranges": [ranges]})
    assert "ranges ipam.ranges[0][7] (10.0.7.10-10.0.7.20) and ipam.ranges[0][200] (10.0.7.15-10.0.7.30) overlap" in e.msg


def test_range_set_lookup_with_1500_sets():
    from skb.cni.addr import IP
    ipc = parse({"ranges": _sets(1500) + [[{"subnet": "fd00::/64"}]]})
    for i in (0, 1, 777, 1499):
        assert ipc.range_set_for(IP.parse(f"10.{i // 256}.{i % 256}.9")).index == i
    assert ipc.range_set_for(IP.parse("fd00::5")).index == 1500
    assert ipc.range_set_for(IP.parse("10.5.220.1")) is None and ipc.range_set_for(IP.parse("10.0.0.255")) is None


def test_routes_are_decoded_with_every_field_and_checked():
    c = parse({"subnet": "10.0.0.0/24", "Routes": [{"DST": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "GW": "10.0.0.9",
               "mtu": 1400, "advmss": 1360, "priority": 5, "table": 0, "scope": 253}]})
    got = [(r.dst, r.gw, r.mtu, r.advmss, r.priority, r.table, r.scope) for r in c.ipam.routes]
    assert got == [("0.0.0.0/0", "", 0, 0, 0, None, None), ("10.9.0.0/16", "10.0.0.9", 1400, 1360, 5, 0, 253)]
    for route, words in (({"dst": "0.0.0.0/0", "scope": 256}, "ipam.routes[0].scope: 256 is out of range"),
                         ({"dst": "0.0.0.0/0", "mtu": -1}, "ipam.routes[0].mtu: -1 is out of range"),
                         ({"dst": "0.0.0.0/0", "gw": "x"}, "ipam.routes[0].gw: 'x' is not an IP address"),
                         ({"gw": "10.0.0.1"}, "missing field ipam.routes[0].dst")):
        assert words in err({"subnet": "10.0.0.0/24", "routes": [route]}).msg


@pytest.mark.parametrize("text", ["10.0.0.5/24/x", "10.0.0.5/33", "10.0.0.5/", "10.0.0.5/x", "x/24", "fd00::5/129"])
def test_a_requested_address_with_an_invalid_prefix_is_refused_as_go_refuses_it(text):
    """Go reads a requested address with a slash as a CIDR (ip.ParseIP): the prefix must be valid."""
    c = load({"name": "n", "cniVersion": "1.0.0", "ipam": {"subnet": "10.0.0.0/24"}, "runtimeConfig": {"ips": [text]}})
    with pytest.raises(CNIError) as ei:
        c.requested("")
    assert ei.value.to_dict() == {"code": 7, "msg": f"invalid requested IP {text!r} in runtimeConfig.ips[0]",
                                  "details": "requested addresses are IP addresses, optionally with a /prefix"}
    with pytest.raises(CNIError) as ei:
        c.requested(f"IP={text}")
    assert ei.value.msg == f"invalid requested IP {text!r} in CNI_ARGS IP="


# exact error objects: the code, the range or field named, the fix

GW_FIX = "the gateway must be an address of the range's own subnet (or leave it out: it defaults to the subnet's first address)"


ADDRESS_FIX = 'write an address alone, e.g. "10.1.0.1" or "fd00::1" (no prefix length, spaces or zone)'


@pytest.mark.parametrize("ipam,version,msg,details", [
    ({"ranges": [[{"subnet": "nope"}]]}, "1.0.0", "invalid range ipam.ranges[0][0]: subnet 'nope' is not a network in "
     "CIDR notation", 'e.g. "10.1.0.0/24" or "fd00::/64"'),
    ({"subnet": "10.0.0.5/24"}, "1.0.0", "invalid range ipam: Network has host bits set. For a subnet mask of length 24 "
     "the network address is 10.0.0.0", 'write "10.0.0.0/24"'),
    ({"subnet": "10.0.0.0/31"}, "1.0.0", "invalid range ipam: Network 10.0.0.0/31 too small to allocate from",
     "use at most /30 (a /31 leaves no address to hand out)"),
    ({"subnet": "fd00::/127"}, "1.0.0", "invalid range ipam: Network fd00::/127 too small to allocate from",
     "use at most /126 (a /127 leaves no address to hand out)"),
    ({"subnet": "10.0.0.0/24", "rangeStart": "x"}, "1.0.0", "invalid range ipam: rangeStart 'x' is not an IP address", ADDRESS_FIX),
    ({"ranges": [[{"subnet": "10.0.0.0/24", "rangeEnd": "y"}]]}, "1.0.0",
     "invalid range ipam.ranges[0][0]: rangeEnd 'y' is not an IP address", ADDRESS_FIX),
    ({"subnet": "10.0.0.0/24", "gateway": "z"}, "1.0.0", "invalid range ipam: gateway 'z' is not an IP address", ADDRESS_FIX),
    ({"subnet": "10.0.0.0/24", "rangeEnd": "10.0.1.1"}, "1.0.0", "invalid range ipam: rangeEnd 10.0.1.1 not in network "
     "10.0.0.0/24", None),
    ({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.3"}]]}, "1.0.0",
     "invalid range ipam.ranges[0][0]: rangeStart 10.0.0.9 is after rangeEnd 10.0.0.3", None),
    ({"subnet": "10.0.0.0/24", "gateway": "10.0.1.1"}, "1.0.0", "invalid range ipam: gateway 10.0.1.1 is outside the "
     "subnet 10.0.0.0/24", GW_FIX),
    ({"subnet": "fd00::/64", "gateway": "10.0.0.1"}, "1.0.0", "invalid range ipam: gateway 10.0.0.1 is an IPv4 address "
     "in an IPv6 subnet", GW_FIX),
    ({"ranges": [[{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]]}, "1.0.0", "invalid range set ipam.ranges[0]: "
     "mixed address families", "ipam.ranges[0][0] is IPv4 and ipam.ranges[0][1] IPv6; put IPv4 and IPv6 in separate "
     "range sets to get one address of each"),
    ({"ranges": [[{"subnet": "fd00::/64"}, {"subnet": "fd01::/64"}, {"subnet": "10.0.0.0/24"}]]}, "1.0.0",
     "invalid range set ipam.ranges[0]: mixed address families", "ipam.ranges[0][0] is IPv6 and ipam.ranges[0][2] IPv4; "
     "put IPv4 and IPv6 in separate range sets to get one address of each"),
    ({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.20", "rangeEnd": "10.0.0.30"},
                  {"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20"}]]}, "1.0.0",
     "ranges ipam.ranges[0][0] (10.0.0.20-10.0.0.30) and ipam.ranges[0][1] (10.0.0.10-10.0.0.20) overlap",
     "an address must belong to one range only"),
    ({"ranges": [[{"subnet": "10.0.0.128/25"}], [{"subnet": "10.0.0.0/24"}]]}, "1.0.0", "range set ipam.ranges[0] "
     "overlaps with ipam.ranges[1]", "10.0.0.128/25 and 10.0.0.0/24 share addresses; each range set must be disjoint"),
    ({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.128/25"}]]}, "1.0.0", "range set ipam.ranges[0] "
     "overlaps with ipam.ranges[1]", "10.0.0.0/24 and 10.0.0.128/25 share addresses; each range set must be disjoint"),
    ({"ranges": [[{"subnet": "fd00::/64"}], [{"subnet": "fd01::/64"}]]}, "0.2.0", "CNI version 0.2.0 does not support "
     "more than 1 address per family", "use cniVersion 0.3.0 or later for several range sets of one family"),
    ({}, "1.0.0", "no IP ranges specified", 'add "ranges": [[{"subnet": "10.1.0.0/24"}]] (or "subnet") to the ipam object'),
    ({"ranges": [[]]}, "1.0.0", "invalid range set ipam.ranges[0]: empty range set", "give it at least one range"),
    ({"subnet": "10.0.0.0/24", "routes": [{"dst": "x"}]}, "1.0.0",
     "invalid field ipam.routes[0].dst: 'x' is not a network in CIDR notation",
     'e.g. "0.0.0.0/0", "10.96.0.0/12" or "::/0" (no zone)'),
    ({"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gw": "x"}]}, "1.0.0",
     "invalid field ipam.routes[0].gw: 'x' is not an IP address",
     'write an address alone, e.g. "10.1.0.1", or leave gw out for the range\'s gateway'),
    ({"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "table": 4294967296}]}, "1.0.0",
     "invalid field ipam.routes[0].table: 4294967296 is out of range (0 to 4294967295)", None),
])
def test_config_errors_are_exact_objects(ipam, version, msg, details):
    want = {"code": 7, "msg": msg}
    if details:
        want["details"] = details
    assert err(ipam, version=version).to_dict() == want


def test_missing_ipam_is_an_exact_object():
    with pytest.raises(CNIError) as ei:
        load({"name": "n", "cniVersion": "1.1.0"})
    assert ei.value.to_dict() == {"code": 7, "msg": "IPAM config missing 'ipam' key", "details": 'host-local reads its '
                                  'settings from the "ipam" object, e.g. "ipam": {"type": "host-local", "ranges": '
                                  '[[{"subnet": "10.1.0.0/24"}]]}'}


def test_route_fields_at_their_largest_values():
    # mtu and advmss are applied by ptp since review 15: at most 65535, which the kernel takes as it is
    c = parse({"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "scope": 255, "mtu": 65535,
                                                    "advmss": 65535, "priority": 4294967295, "table": 4294967295}]})
    r = c.ipam.routes[0]
    assert (r.scope, r.mtu, r.advmss, r.priority, r.table) == (255, 65535, 65535, 4294967295, 4294967295)


def test_the_first_and_last_address_of_each_range_find_their_set():
    from skb.cni.addr import IP
    c = parse({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20"}],
                          [{"subnet": "fd00::/64", "rangeStart": "fd00::10", "rangeEnd": "fd00::20"}]]})
    for text, index in (("10.0.0.10", 0), ("10.0.0.20", 0), ("fd00::10", 1), ("fd00::20", 1), ("10.0.0.9", None),
                        ("10.0.0.21", None), ("fd00::21", None), ("fd00::f", None)):
        rs = c.range_set_for(IP.parse(text))
        assert (rs.index if rs else None) == index, text


def test_requested_without_args_or_runtime_config_and_non_string_addresses():
    c = parse({"subnet": "10.0.0.0/24"})
    assert [str(ip) for ip in c.requested("IP=10.0.0.5")] == ["10.0.0.5"] and c.requested("") == []
    assert parse({"subnet": "10.0.0.0/24"}, args={}).requested("") == []
    with pytest.raises(CNIError) as ei:
        parse({"subnet": "10.0.0.0/24"}, runtimeConfig={"ips": [5]}).requested("")
    assert ei.value.to_dict() == {"code": 7, "msg": "invalid requested IP 5 in runtimeConfig.ips[0]",
                                  "details": "requested addresses are IP addresses, optionally with a /prefix"}
    with pytest.raises(CNIError) as ei:
        parse({"subnet": "10.0.0.0/24"}, args={"cni": {"ips": ["10.0.0.6", "y"]}}).requested("")
    assert ei.value.msg == "invalid requested IP 'y' in args.cni.ips[1]"


def test_resolv_conf_with_blank_lines_a_lone_comment_sign_short_lines_and_bad_bytes(tmp_path):
    f = tmp_path / "resolv.conf"
    f.write_bytes(b"\n#\n;\nbogus\n  nameserver 10.0.0.53  \n# \xff\xfe not UTF-8\n\ndomain example\nsearch \xc3\xa9.example\n")
    assert hcfg.read_resolv_conf(str(f)) == {"nameservers": ["10.0.0.53"], "domain": "example",
                                             "search": ["\u00e9.example"], "options": []}


def test_resolv_conf_without_a_domain_and_an_unreadable_one(tmp_path):
    f = tmp_path / "resolv.conf"
    f.write_text("nameserver 10.0.0.53\n")
    assert hcfg.read_resolv_conf(str(f)) == {"nameservers": ["10.0.0.53"], "domain": "", "search": [], "options": []}
    with pytest.raises(CNIError) as ei:
        hcfg.read_resolv_conf(str(tmp_path / "nope"))
    assert ei.value.code == 7 and ei.value.details.endswith("point resolvConf at a readable resolv.conf file, or remove it")


def test_cni_010_allows_one_set_per_family_too_and_a_set_prints_its_ranges():
    ipam = {"ranges": [[{"subnet": "10.0.0.0/25"}], [{"subnet": "10.0.0.128/25"}]]}
    assert err(ipam, version="0.1.0").msg == "CNI version 0.1.0 does not support more than 1 address per family"
    rs = parse({"ranges": [[{"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"}]]}).range_sets[0]
    assert str(rs) == "10.0.0.1-10.0.0.2,10.0.1.1-10.0.1.2"
