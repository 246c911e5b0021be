"""skb.cni.addr against the standard library's ipaddress (the oracle), on random addresses and networks."""
import ipaddress

from hypothesis import given, strategies as st

from skb.cni.addr import IP, Net

v4 = st.integers(0, 2**32 - 1).map(lambda n: ipaddress.IPv4Address(n))
v6 = st.integers(0, 2**128 - 1).map(lambda n: ipaddress.IPv6Address(n))
# Go writes IPv4-mapped IPv6 as IPv4; ipaddress writes it as ::ffff:a.b.c.d: exclude those from equality.
plain_v6 = v6.filter(lambda a: a.ipv4_mapped is None)


@given(v4 | plain_v6)
def test_parse_and_format_match_ipaddress(a):
    ip = IP.parse(str(a))
    assert (ip.family, ip.value) == (a.version, int(a))
    assert IP.parse(a.exploded) == ip
    if a.version == 4:
        assert str(ip) == str(a)
    else:  # compressed lower case, as ipaddress does, except for embedded IPv4 forms
        assert str(ip) == a.compressed or "." in a.compressed


@given(v4)
def test_ipv4_mapped_reads_as_ipv4(a):
    assert IP.parse(f"::ffff:{a}") == IP(4, int(a))
    assert str(Net.parse(f"::ffff:{a}/120")) == f"{a}/24"


@given(v4 | plain_v6, st.integers(0, 128))
def test_networks_match_ipaddress(a, plen):
    plen = min(plen, a.max_prefixlen)
    ref = ipaddress.ip_interface(f"{a}/{plen}").network
    net = Net.parse(f"{a}/{plen}")
    assert net.prefixlen == plen and net.family == a.version
    assert int(net.network.value) == int(ref.network_address)
    assert int(net.last.value) == int(ref.broadcast_address)
    assert net.size == ref.num_addresses
    assert net.has_host_bits() == (int(a) != int(ref.network_address))
    assert IP(a.version, int(ref.network_address)) in net and IP(a.version, int(ref.broadcast_address)) in net
    if plen:
        assert IP(a.version, (int(ref.broadcast_address) + 1) % 2**a.max_prefixlen) not in net or plen == 0


@given(st.text(max_size=20))
def test_garbage_is_none_never_an_exception(s):
    ip = IP.parse(s)
    try:
        ref = ipaddress.ip_address(s)
    except ValueError:
        ref = None
    if ref is None:
        # ipaddress refuses zone ids and some forms inet_pton takes; only check we never crash
        return
    assert ip is not None and ip.value == int(ref) or ref.version == 6 and ref.ipv4_mapped is not None


def test_examples():
    assert str(Net.parse("10.1.0.5/24").network) == "10.1.0.0"
    assert Net.parse("10.1.0.0/33") is None and Net.parse("10.1.0.0") is None and Net.parse("x/1") is None
    assert Net.parse("fd00::/120").overlaps(Net.parse("fd00::80/121"))
    assert not Net.parse("10.0.0.0/25").overlaps(Net.parse("10.0.0.128/25"))
    assert str(IP.parse("2001:0db8:0000:0000:0000:0000:0000:0001")) == "2001:db8::1"
    assert IP.parse("10.0.0.255") + 1 == IP.parse("10.0.1.0")
