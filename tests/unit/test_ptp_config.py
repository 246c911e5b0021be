"""ptp's configuration and pure planning: checked before anything is done, errors name the field."""
import json

import pytest

from skb.cni import netconf as config
from skb.cni.errors import CNIError
from skb.cni.result import DNS, IPConfig, Result, Route, parse_result
from skb_plugins.ptp import ownership, ptp
from skb_plugins.ptp.config import Addressing, PtpConf, plan_addresses


def conf(command="ADD", **extra):
    raw = {"cniVersion": "1.0.0", "name": "net", "type": "ptp", "ipam": {"type": "host-local"}}
    raw.update(extra)
    return config.load(json.dumps(raw), PtpConf, command)


def test_defaults():
    pc = conf()
    assert (pc.ip_masq, pc.masq_backend, pc.mtu, pc.dns, pc.ipam.type) == (False, None, 0, None, "host-local")


@pytest.mark.parametrize("extra, field", [
    ({"mtu": "1400"}, "mtu"), ({"mtu": 1.5}, "mtu"), ({"ipMasq": "yes"}, "ipMasq"),
    ({"ipMasqBackend": 3}, "ipMasqBackend"), ({"ipam": {"type": 5}}, "ipam.type"), ({"ipam": []}, "ipam"),
    ({"dns": {"nameservers": "1.1.1.1"}}, "dns.nameservers"), ({"dns": {"search": [1]}}, "dns.search[0]"),
])
def test_type_errors_name_the_field(extra, field):
    with pytest.raises(CNIError) as e:
        conf(**extra)
    assert e.value.code == 7 and f"field {field}" in e.value.msg


def test_mtu_range_and_case_insensitive_keys():
    for bad in (70000, 65536, 67, 1, -(1 << 63) - 1, 1 << 63):
        with pytest.raises(CNIError) as e:
            conf(mtu=bad)
        assert e.value.code == 7 and "mtu" in e.value.msg
    assert conf(mtu=68).mtu == 68 and conf(mtu=0).mtu == 0 and conf(mtu=65535).mtu == 65535
    assert conf(mtu=-1).mtu == 0 and conf(mtu=-70000).mtu == 0     # the kernel's default, as in the reference
    c = conf(MTU=1400, ipmasq=True)      # Go's decoder ignores key case
    assert (c.mtu, c.ip_masq) == (1400, True)


def test_masq_backend_checked_only_with_ipmasq_and_not_on_del():
    assert conf(ipMasqBackend="bpf").masq_backend == "bpf"   # unused: not checked (as Go)
    with pytest.raises(CNIError) as e:
        conf(ipMasq=True, ipMasqBackend="bpf")
    assert e.value.msg == 'unknown ipmasq backend "bpf"' and e.value.code == 7
    assert conf("DEL", ipMasq=True, ipMasqBackend="bpf").ip_masq is True    # DEL tears down both anyway
    assert conf(ipMasq=True, ipMasqBackend="nftables").masq_backend == "nftables"


def test_dns_override_only_when_a_field_is_set():
    assert conf(dns={}).result_dns() is None
    assert conf(dns={"domain": ""}).result_dns() is None
    assert conf(dns={"domain": "x"}).result_dns() == DNS(domain="x")
    assert conf(DNS={"Nameservers": ["1.1.1.1"], "OPTIONS": ["ndots:2"]}).result_dns() == \
        DNS(["1.1.1.1"], None, None, ["ndots:2"])


def test_addressing():
    a4 = Addressing(IPConfig("10.22.0.7/24", "10.22.0.1"))
    assert (a4.ip, a4.subnet, a4.gateway, a4.host_bits, a4.family) == ("10.22.0.7", "10.22.0.0/24", "10.22.0.1", 32, 4)
    a6 = Addressing(IPConfig("fd00:1:2::9/64", "fd00:1:2::1"))
    assert (a6.subnet, a6.host_bits, a6.family) == ("fd00:1:2::/64", 128, 6)


def test_plan_needs_addresses_with_gateways():
    with pytest.raises(CNIError) as e:
        plan_addresses(Result("1.0.0"))
    assert e.value.msg == "IPAM plugin returned missing IP config"
    with pytest.raises(CNIError) as e:
        plan_addresses(Result("1.0.0", ips=[IPConfig("10.0.0.5/24")]))
    assert e.value.code == 7 and "10.0.0.5/24 has no gateway" in e.value.msg


class _Link:
    def __init__(self, name, mac):
        self.name, self.mac = name, mac


def test_result_shape_like_the_reference():
    ipam_result = parse_result({"cniVersion": "1.0.0", "ips": [{"address": "10.22.0.2/24", "gateway": "10.22.0.1"}],
                                "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["10.22.0.53"]}})
    c = conf()
    r = ptp.build_result(c, ipam_result, _Link("veth01020304", "aa:aa:aa:aa:aa:aa"),
                         _Link("eth0", "bb:bb:bb:bb:bb:bb"), "/run/netns/x")
    assert r.to_dict("1.0.0") == {
        "cniVersion": "1.0.0", "dns": {"nameservers": ["10.22.0.53"]},
        "interfaces": [{"mac": "aa:aa:aa:aa:aa:aa", "name": "veth01020304"},
                       {"mac": "bb:bb:bb:bb:bb:bb", "name": "eth0", "sandbox": "/run/netns/x"}],
        "ips": [{"address": "10.22.0.2/24", "gateway": "10.22.0.1", "interface": 1}],
        "routes": [{"dst": "0.0.0.0/0"}]}
    r2 = ptp.build_result(conf(dns={"domain": "d"}), ipam_result, _Link("v", "a"), _Link("eth0", "b"), "/x")
    assert r2.dns == DNS(domain="d")
    assert r.routes == (Route("0.0.0.0/0"),)


def test_host_veth_name():
    n = ownership.host_veth_name("net", "ctr1", "eth0")
    assert n == ownership.host_veth_name("net", "ctr1", "eth0") and len(n) == 12 and n.startswith("veth")
    int(n[4:], 16)
    assert n != ownership.host_veth_name("net", "ctr1", "eth1") != ownership.host_veth_name("net2", "ctr1", "eth0")
    assert n != ownership.host_veth_name("ne", "tctr1", "eth0")     # fields are separated before hashing




def test_del_and_gc_need_only_ipam_and_ipmasq():
    """A config edited into invalid values after ADD must not block cleanup (that would leak forever)."""
    broken = dict(mtu=70000, ipMasq=True, dns="x", ipMasqBackend=5)
    assert conf("DEL", **broken).ip_masq is True
    assert conf("GC", **broken).ipam.type == "host-local"
    assert conf("DEL", **dict(broken, ipMasq="yes")).ip_masq is False     # ignored, with a remark
    with pytest.raises(CNIError):
        conf("ADD", **broken)
