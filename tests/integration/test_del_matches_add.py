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
from tests.integration.test_ptp import data_dir, ours  # noqa: F401 (the fixtures)

pytestmark = pytest.mark.kernel


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


# Characters that fold to nothing ASCII: the dotless and the dotted I, the sharp s. No key matches.
NOT_IPMASQ = ["\u0131pMasq", "\u0130PMASQ", "ipMa\u00dfq"]


@pytest.mark.gobin
@pytest.mark.parametrize("key", NOT_IPMASQ)
def test_a_spelling_go_does_not_fold_to_ipmasq_is_ignored_by_both(bin_dir, make_netns, data_dir, key):
    for exe, path in ((os.path.join(bin_dir, "ptp"), bin_dir), (os.path.join(GO_BIN_DIR, "ptp"), GO_BIN_DIR)):
        plugin = Ptp(exe, path)
        ns = make_netns()
        conf = ptp_conf(data_dir)
        conf[key] = True
        before = masq_rules()
        assert plugin.add(conf, nspath(ns)).rc == 0
        assert masq_rules() == before, (exe, key)
        assert plugin.delete(conf, nspath(ns)).rc == 0


# --------------------------------------------------------------------------------------------------
# sizes and characters of what DEL matches: CNI_CONTAINERID, CNI_IFNAME, the network name, CNI_ARGS

MAX_ID = 1024       # skb.cni.env.MAX_CONTAINER_ID, restated: a test of ours must not read the limit from us
MAX_NAME = 255      # skb.cni.netconf.MAX_NAME: a network name is a directory name


@pytest.mark.parametrize("length", [MAX_ID + 1, 5000])
def test_a_container_id_over_the_limit_is_refused_by_add_before_anything(ours, make_netns, data_dir, length):
    """A 5,000-character id used to pass ADD, and its reservation (a file longer than host-local reads) then
    outlived DEL; refused, it costs nothing, and its DEL succeeds."""
    ns = make_netns()
    cid = "c" * length
    conf = ptp_conf(data_dir, ipMasq=True, ipMasqBackend="nftables")
    before = snapshot(data_dir, [ns])
    r = ours.add(conf, nspath(ns), containerid=cid)
    assert r.rc == 1 and r.json["code"] == 4, r
    assert r.json["msg"] == f"CNI_CONTAINERID is longer than {MAX_ID} characters"
    assert snapshot(data_dir, [ns]) == before
    assert ours.delete(conf, nspath(ns), containerid=cid).rc == 0
    assert ours.check(conf, nspath(ns), {"cniVersion": "1.0.0"}, containerid=cid).json["code"] == 4


def test_an_iptables_comment_that_would_be_cut_is_refused_by_add_before_anything(ours, make_netns, data_dir):
    """iptables keeps 255 characters of a comment: a longer one would make the rules unrecognisable to
    CHECK and GC. With nftables (comments are matched by their hash prefix) the same id works."""
    ns = make_netns()
    cid = "c" * (255 - len('name: "ptpnet" id: ""') + 1)
    conf = ptp_conf(data_dir, ipMasq=True, ipMasqBackend="iptables")
    before = snapshot(data_dir, [ns])
    r = ours.add(conf, nspath(ns), containerid=cid)
    assert r.rc == 1 and r.json["code"] == 4 and "iptables keeps 255" in r.json["msg"], r
    assert snapshot(data_dir, [ns]) == before
    ok = ours.add(conf, nspath(ns), containerid=cid[1:])        # exactly 255: accepted, and found again
    assert ok.rc == 0, ok
    assert ours.check(conf, nspath(ns), ok.json, containerid=cid[1:]).rc == 0
    assert ours.delete(conf, nspath(ns), containerid=cid[1:]).rc == 0
    after = snapshot(data_dir, [ns])
    after["sysctl"] = before["sysctl"]
    assert after == before


def test_a_network_name_over_the_limit_is_refused_by_add_and_its_del_succeeds(ours, make_netns, data_dir):
    ns = make_netns()
    conf = ptp_conf(data_dir, name="n" * (MAX_NAME + 1))
    before = snapshot(data_dir, [ns])
    r = ours.add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7 and r.json["msg"] == f"invalid field name: longer than {MAX_NAME} characters", r
    assert snapshot(data_dir, [ns]) == before and not os.path.exists(data_dir)
    assert ours.delete(conf, nspath(ns)).rc == 0


EDGES = {
    "id of the longest length": dict(containerid="i" * MAX_ID),
    "id of one letter": dict(containerid="Z"),
    "ifname of 15 bytes, non-ASCII": dict(ifname="e\u00e4\u00e4\u00e4\u00e4\u00e4\u00e4\u00e4"),
    "ifname with a quote": dict(ifname='e"th0'),
    "network name of the longest length": dict(name="n" * MAX_NAME),
    "CNI_ARGS at ADD only": dict(add_args="IgnoreUnknown=1;IP=10.22.0.77;K8S_POD_NAME=p"),
}


@pytest.mark.parametrize("backend", ["iptables", "nftables"])
@pytest.mark.parametrize("case", sorted(EDGES))
def test_del_releases_everything_add_made_at_the_edges(ours, make_netns, data_dir, case, backend):
    """ADD, CHECK, then DEL: the kernel, the firewall and host-local's files are as before."""
    edge = dict(EDGES[case])
    name = edge.pop("name", "ptpnet")
    add_args = edge.pop("add_args", "")
    if backend == "iptables" and len(f'name: "{name}" id: "{edge.get("containerid", "ctr1")}"') > 255:
        pytest.skip("refused up front with iptables (the test above)")
    ns = make_netns()
    conf = ptp_conf(data_dir, name=name, ipMasq=True, ipMasqBackend=backend)
    before = snapshot(data_dir, [ns], name=name)
    r = ours.add(conf, nspath(ns), args=add_args, **edge)
    assert r.rc == 0, r
    if add_args:
        assert r.json["ips"][0]["address"] == "10.22.0.77/24"
    assert reservations(data_dir, name) and host_veths() and masq_rules()
    assert ours.check(conf, nspath(ns), r.json, **edge).rc == 0
    d = ours.delete(conf, nspath(ns), **edge)
    assert d.rc == 0, d
    after = snapshot(data_dir, [ns], name=name)
    after["sysctl"] = before["sysctl"]
    assert after == before
