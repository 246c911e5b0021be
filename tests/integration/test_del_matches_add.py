"""A DEL must find everything its ADD made, however the inputs are spelled or sized.

Each input a DEL matches against what ADD wrote (config keys, CNI_CONTAINERID, CNI_IFNAME, the network
name, CNI_ARGS) is varied here; ADD then DEL must leave the kernel, the firewall and host-local's
files as they were, read back with `ip -j`, iptables-save, nft and the dataDir. An input our records
cannot hold is refused by ADD before anything is applied.
"""
import os
import subprocess

import pytest

from tests.helpers import GO_BIN_DIR
from tests.integration.ptp_support import (Ptp, host_veths, masq_chain_rules, nft_masq_rules, nspath, ptp_conf,
                                           reservations, snapshot)

pytestmark = pytest.mark.kernel


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "ipam")


@pytest.fixture
def ours(bin_dir):
    return Ptp(os.path.join(bin_dir, "ptp"), bin_dir)


def masq_rules():
    return masq_chain_rules() + nft_masq_rules()


@pytest.fixture(autouse=True)
def _firewall_left_as_found():
    """A test that fails leaves its rules behind: put the nat tables back, so the next test's
    before-and-after comparison is not fooled by them."""
    saved = {tool: subprocess.run([f"{tool}-save", "-t", "nat"], capture_output=True, text=True).stdout
             for tool in ("iptables", "ip6tables")}
    had_nft = subprocess.run(["nft", "list", "table", "inet", "cni_plugins_masquerade"],
                             capture_output=True).returncode == 0
    yield
    for tool, text in saved.items():
        if text:
            subprocess.run([f"{tool}-restore"], input=text, text=True, capture_output=True)
    if not had_nft:
        subprocess.run(["nft", "delete", "table", "inet", "cni_plugins_masquerade"], capture_output=True)


# Go's decoder matches keys case-insensitively, with Unicode's simple folding: "ſ" (U+017F) is an "s".
IPMASQ_SPELLINGS = ["IPMasq", "ipmasq", "IPMASQ", "ipMa\u017fq"]


@pytest.mark.parametrize("backend", ["iptables", "nftables"])
@pytest.mark.parametrize("key", IPMASQ_SPELLINGS)
def test_ipmasq_spelled_otherwise_is_set_up_by_add_and_torn_down_by_del(ours, make_netns, data_dir, key, backend):
    ns = make_netns()
    conf = ptp_conf(data_dir, ipMasqBackend=backend)
    conf[key] = True
    before = snapshot(data_dir, [ns])
    r = ours.add(conf, nspath(ns))
    assert r.rc == 0, r
    assert set(masq_rules()) - set(before["iptables"] + before["nft"]), f"ADD with {key!r} set up no masquerade rule"
    d = ours.delete(conf, nspath(ns))
    assert d.rc == 0, d
    after = snapshot(data_dir, [ns])
    after["sysctl"] = before["sysctl"]   # forwarding stays on, as in the reference
    assert after == before


@pytest.mark.gobin
@pytest.mark.parametrize("key", IPMASQ_SPELLINGS)
def test_go_ptp_reads_the_same_spellings(make_netns, data_dir, key):
    """The reference does what the test above asks of ours (Debian's ptp has the iptables backend only)."""
    go = Ptp(os.path.join(GO_BIN_DIR, "ptp"), GO_BIN_DIR)
    ns = make_netns()
    conf = ptp_conf(data_dir)
    conf[key] = True
    before = masq_chain_rules()
    assert go.add(conf, nspath(ns)).rc == 0
    assert len(masq_chain_rules()) == len(before) + 4       # the chain, its two rules, the jump to it
    assert go.delete(conf, nspath(ns)).rc == 0
    assert masq_chain_rules() == before
