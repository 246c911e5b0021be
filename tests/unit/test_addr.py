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
