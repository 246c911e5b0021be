"""skb.linux.masq's names, comments and rule text: the reference's, byte for byte (reference-plugins.md §2.5, §4.5)."""
import pytest

from skb.linux import masq
from skb.cni.errors import CNIError


def test_chain_name_and_comment_match_the_reference():
    assert masq.chain_name("sbxnet", "ctr1") == "CNI-bd8c5e22087bfc0fc5f2b8fa"   # observed from Go v1.1.1
    assert len(masq.chain_name("n" * 200, "c" * 200)) == 28
    assert masq.iptables_comment("sbxnet", "ctr1") == 'name: "sbxnet" id: "ctr1"'


def test_iptables_rules():
    m = masq.Masq("sbxnet", "eth0", "ctr1", [("10.22.0.2", "10.22.0.0/24", 4), ("10.23.0.2", "10.23.0.0/24", 4),
                                              ("fd00::2", "fd00::/64", 6)])
    chain = "CNI-bd8c5e22087bfc0fc5f2b8fa"
    c = '--comment "name: \\"sbxnet\\" id: \\"ctr1\\""'
    body, jumps = masq.iptables_rules(m, 4)
    # every ACCEPT before the MASQUERADE (the reference would put 10.23.0.0/24's ACCEPT after it)
    assert body == [f"-A {chain} -d 10.22.0.0/24 -m comment {c} -j ACCEPT",
                    f"-A {chain} -d 10.23.0.0/24 -m comment {c} -j ACCEPT",
                    f"-A {chain} ! -d 224.0.0.0/4 -m comment {c} -j MASQUERADE"]
    assert jumps == [f"-A POSTROUTING -s 10.22.0.2/32 -m comment {c} -j {chain}",
                     f"-A POSTROUTING -s 10.23.0.2/32 -m comment {c} -j {chain}"]
    body6, jumps6 = masq.iptables_rules(m, 6)
    assert body6[-1] == f"-A {chain} ! -d ff00::/8 -m comment {c} -j MASQUERADE"
    assert jumps6 == [f"-A POSTROUTING -s fd00::2/128 -m comment {c} -j {chain}"]


def test_nft_names():
    comment = masq.nft_comment("sbxnet", "eth0", "ctr1")
    h = masq.nft_instance_hash("sbxnet", "eth0", "ctr1")
    assert comment == f"{h}, net: sbxnet, if: eth0, id: ctr1"
    assert h.startswith(masq.nft_network_hash("sbxnet") + "-") and len(h) == 33
    assert len(masq.nft_comment("n" * 100, "eth0", "c" * 100)) == 128
    m = masq.Masq("sbxnet", "eth0", "ctr1")
    assert masq.nft_rule(m, "fd00::2", "fd00::/64", 6) == (
        f'add rule inet cni_plugins_masquerade masq_checks ip6 saddr fd00::2 ip6 daddr != fd00::/64 masquerade '
        f'comment "{comment}"')


def test_backend_from_config():
    assert masq.backend_from_config(None) is None
    assert masq.backend_from_config("nftables") == "nftables"
    with pytest.raises(CNIError) as e:
        masq.backend_from_config("bpf")
    assert e.value.code == 7 and e.value.msg == 'unknown ipmasq backend "bpf"'


def test_setup_without_addresses_does_nothing():
    assert masq.setup(masq.Masq("n", "eth0", "c"), "iptables") is None
