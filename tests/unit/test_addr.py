"""skb.cni.addr against the standard library's ipaddress (the oracle): text, families, order, networks."""
import ipaddress

import pytest

from skb.cni.addr import IP, Net, parse_text


@pytest.mark.parametrize("text", ["10.0.0.0/24", "10.0.0.0/024", "10.0.0.0/0024", "10.0.0.0/000000024",
                                  "fd00::/0064", "0.0.0.0/0", "0.0.0.0/00"])
def test_a_prefix_length_with_leading_zeros_is_read_as_go_reads_it(text):
    """Go's net.ParseCIDR (host-local's subnet, a route's dst) takes any number of leading zeros in the
    prefix length; so does ipaddress. A subnet "10.0.0.0/0024" was refused before."""
    want = ipaddress.ip_network(text, strict=False)
    got = Net.parse(text)
    assert (str(got.network), got.prefixlen) == (str(want.network_address), want.prefixlen)


@pytest.mark.parametrize("text", ["10.0.0.0/0033", "10.0.0.0/1000", "10.0.0.0/", "10.0.0.0/+24", "10.0.0.0/ 24",
                                  "fd00::/0129"])
def test_a_prefix_length_out_of_range_or_not_digits_is_refused(text):
    assert Net.parse(text) is None


@pytest.mark.parametrize("text,want", [
    ("10.1.2.3", ("10.1.2.3", 4, False)),
    ("::ffff:10.1.2.3", ("10.1.2.3", 4, True)),
    ("::ffff:0a01:0203", ("10.1.2.3", 4, True)),
    ("::fffe:10.1.2.3", ("::fffe:a01:203", 6, False)),
    ("FD00:1:2:3:4:5:6:ABCD", ("fd00:1:2:3:4:5:6:abcd", 6, False)),
    ("fd00::1", ("fd00::1", 6, False)),
    ("1:0:0:2:0:0:0:3", ("1:0:0:2::3", 6, False)),
    ("1:0:0:2:3:0:0:4", ("1::2:3:0:0:4", 6, False)),
])
def test_parse_text_gives_gos_text_the_family_and_whether_it_was_mapped(text, want):
    assert parse_text(text) == want
    if not want[2]:
        assert want[0] == str(ipaddress.ip_address(text))


@pytest.mark.parametrize("text", ["10.1.2.3", "::ffff:10.1.2.3", "fd00::1", "FD00:1:2:3:4:5:6:ABCD", "::", "0.0.0.0",
                                  "255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"])
def test_ip_parse_matches_ipaddress(text):
    want = ipaddress.ip_address(text)
    if want.version == 6 and want.ipv4_mapped:
        want = want.ipv4_mapped
    ip = IP.parse(text)
    assert (ip.family, ip.value, str(ip), ip.bits, ip.packed) == (want.version, int(want), str(want), want.max_prefixlen,
                                                                  want.packed)
    assert repr(ip) == f"IP({str(want)!r})"


def test_order_and_equality():
    a, b = IP.parse("10.0.0.1"), IP.parse("10.0.0.2")
    assert a < b and not b < a and not a < IP.parse("10.0.0.1")
    assert a <= b and a <= IP.parse("10.0.0.1") and not b <= a
    assert IP.parse("255.255.255.255") < IP.parse("::")          # IPv4 sorts before IPv6
    assert a == IP(4, a.value) and a != IP(6, a.value) and a != "10.0.0.1"
    assert hash(a) == hash(IP.parse("::ffff:10.0.0.1"))
    assert str(a + 1) == "10.0.0.2" and str(b - 2) == "10.0.0.0"


@pytest.mark.parametrize("text,plen", [("::ffff:10.0.0.0/120", 24), ("::ffff:10.0.0.0/96", 0), ("::ffff:10.0.0.5/128", 32)])
def test_an_ipv4_mapped_network_counts_its_prefix_over_128_bits(text, plen):
    n = Net.parse(text)
    assert (n.family, str(n.ip), n.prefixlen) == (4, text.split("/")[0][7:], plen)


@pytest.mark.parametrize("text", ["::ffff:10.0.0.0/95", "::ffff:10.0.0.0/129", "10.0.0.0/33", "fd00::/129",
                                  "10.0.0.0", "10.0.0.0/ab", "10.0.0.0/²", "x/24", "10.0.0.0/2/4", 5, None])
def test_net_parse_refuses(text):
    assert Net.parse(text) is None


@pytest.mark.parametrize("text", ["10.0.0.5/32", "10.0.0.0/0", "fd00::1/128", "10.1.2.3/24", "fd00::5/64"])
def test_net_matches_ipaddress(text):
    n = Net.parse(text)
    want = ipaddress.ip_interface(text)
    net = want.network
    assert (n.family, n.prefixlen, str(n.ip), str(n.network), str(n.last), n.size) == (
        want.version, net.prefixlen, str(want.ip), str(net.network_address), str(net.broadcast_address),
        net.num_addresses)
    assert n.has_host_bits() == (want.ip != net.network_address)
    assert str(n) == text and repr(n) == f"Net({text!r})"
    assert IP.parse(str(net.network_address)) in n and IP.parse(str(net.broadcast_address)) in n
    assert (n.last + 1) not in n and (n.network - 1) not in n or n.prefixlen == 0


def test_net_equality_needs_the_same_address_and_prefix():
    n = Net.parse("10.0.0.0/24")
    assert n == Net.parse("10.0.0.0/24") and hash(n) == hash(Net.parse("10.0.0.0/24"))
    assert n != Net.parse("10.0.0.0/25") and n != Net.parse("10.0.0.1/24") and n != Net.parse("10.0.1.0/24")
    assert n != "10.0.0.0/24" and len({n, Net.parse("10.0.0.0/24"), Net.parse("10.0.0.0/23")}) == 2


@pytest.mark.parametrize("a,b,want", [
    ("10.0.0.0/24", "10.0.0.128/25", True), ("10.0.0.128/25", "10.0.0.0/24", True),
    ("10.0.0.0/24", "10.0.0.0/24", True), ("10.0.0.0/25", "10.0.0.128/25", False),
    ("10.0.1.0/24", "10.0.0.0/24", False), ("0.0.0.0/0", "::/0", False), ("::/0", "fd00::/64", True),
])
def test_overlaps_matches_ipaddress(a, b, want):
    assert Net.parse(a).overlaps(Net.parse(b)) is want
    assert ipaddress.ip_network(a).version != ipaddress.ip_network(b).version or \
        ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b)) is want


def test_values_are_immutable():
    with pytest.raises(AttributeError):
        IP.parse("10.0.0.1").value = 5
    with pytest.raises(AttributeError):
        Net.parse("10.0.0.0/24").prefixlen = 5
