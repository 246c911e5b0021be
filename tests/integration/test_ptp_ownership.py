"""ptp DEL deletes only what it can prove is this attachment's (network, container ID, ifname).

The kernel is the oracle (`ip -j`): which links exist, which alias the host end carries, which pairs
survive. Each test builds the situation a runtime can create (a failed ADD followed by its DEL, a stale
or wrong cached result, another implementation's pair) and checks what DEL leaves."""
import os
import subprocess

import pytest

from tests.helpers import GO_BIN_DIR, ip_json
from tests.integration.ptp_support import GO_PTP, Ptp, host_veths, nspath, ptp_conf, reservations

pytestmark = pytest.mark.kernel


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "ipam")


@pytest.fixture
def ours(bin_dir):
    return Ptp(os.path.join(bin_dir, "ptp"), bin_dir)


def links(netns=None):
    return {l["ifname"]: l for l in ip_json("-d", "link", "show", netns=netns)}


def pair_intact(hostveth, ns, ifname="eth0"):
    """``hostveth`` exists and its peer is ``ifname`` in ``ns`` (ifindex and netns, read by ip)."""
    host = links().get(hostveth)
    cont = links(ns).get(ifname)
    return bool(host and cont and host.get("link_index") == cont["ifindex"] and cont.get("link_index") == host["ifindex"])


def test_add_tags_the_host_veth_with_the_attachment(ours, make_netns, data_dir):
    ns = make_netns()
    r = ours.add(ptp_conf(data_dir), nspath(ns))
    assert r.rc == 0, r
    alias = links()[r.json["interfaces"][0]["name"]].get("ifalias", "")
    assert alias.startswith("skb-cni ptp ") and len(alias) == len("skb-cni ptp ") + 32
    assert ours.delete(ptp_conf(data_dir), nspath(ns)).rc == 0


@pytest.mark.parametrize("first", ["ours", "go"])
def test_del_after_a_failed_add_leaves_the_other_networks_pair(bin_dir, ours, make_netns, tmp_path, first):
    """Network A has eth0 in the pod; network B's ADD of eth0 fails ("already exists"); the runtime then
    sends B's DEL (as libcni does after a failed ADD). A's pair must survive it, made by us or by Go."""
    if first == "go" and not os.path.exists(GO_PTP):
        pytest.skip("no Go ptp")
    ns = make_netns()
    conf_a = ptp_conf(str(tmp_path / "a"), name="neta", v4="10.31.0.0/24")
    conf_b = ptp_conf(str(tmp_path / "b"), name="netb", v4="10.32.0.0/24", ipMasq=True)
    maker = ours if first == "ours" else Ptp(GO_PTP, GO_BIN_DIR)
    ra = maker.add(conf_a, nspath(ns))
    assert ra.rc == 0, ra
    hostveth = ra.json["interfaces"][0]["name"]
    rb = ours.add(conf_b, nspath(ns))
    assert rb.rc == 1 and "already exists" in rb.json["msg"], rb
    for netns in (nspath(ns), ""):
        d = ours.delete(conf_b, netns)
        assert d.rc == 0, d
        assert pair_intact(hostveth, ns), f"B's DEL (CNI_NETNS={netns!r}) broke A's pair"
    assert ours.check(conf_a, nspath(ns), ra.json).rc == 0 if first == "ours" else True
    assert maker.delete(conf_a, nspath(ns), prev=ra.json).rc == 0
    assert host_veths() == []


def test_a_prev_result_naming_other_host_veths_changes_nothing(ours, make_netns, data_dir):
    """The cached result is input: a host veth it names is deleted only when proven this attachment's.
    Here it names another attachment's host veth and a foreign pair (as another runtime's ptp makes)."""
    conf = ptp_conf(data_dir)
    ns_a, ns_b, ns_f = make_netns(), make_netns(), make_netns()
    ra = ours.add(conf, nspath(ns_a), containerid="a")
    rb = ours.add(conf, nspath(ns_b), containerid="b")
    assert ra.rc == 0 and rb.rc == 0
    veth_a, veth_b = ra.json["interfaces"][0]["name"], rb.json["interfaces"][0]["name"]
    subprocess.run(["ip", "link", "add", "vethforeign0", "type", "veth", "peer", "name", "eth0", "netns", ns_f],
                   check=True)
    subprocess.run(["ip", "link", "add", "vethlocal0", "type", "veth", "peer", "name", "vethlocal1"], check=True)
    try:
        for netns in ("", nspath(ns_b)):
            lie = dict(rb.json, interfaces=[{"name": n} for n in (veth_a, "vethforeign0", "vethlocal0", "vethlocal1")]
                       + [rb.json["interfaces"][1]])
            assert ours.delete(conf, netns, prev=lie, containerid="b").rc == 0
            assert pair_intact(veth_a, ns_a) and pair_intact("vethforeign0", ns_f)
            assert {"vethlocal0", "vethlocal1"} <= set(links())
            assert veth_b not in links() and "eth0" not in links(ns_b)     # b's own pair went (derived name)
    finally:
        subprocess.run(["ip", "link", "del", "vethlocal0"], check=False)
    assert ours.delete(conf, nspath(ns_a), containerid="a").rc == 0
    assert veth_a not in links() and reservations(data_dir) == {}


def test_a_host_veth_with_the_derived_name_but_another_attachments_alias_is_not_ours(ours, make_netns, data_dir):
    """The derived name is 32 bits of a hash: on a clash the alias decides."""
    conf = ptp_conf(data_dir)
    ns, other = make_netns(), make_netns()
    r = ours.add(conf, nspath(ns))
    assert r.rc == 0
    veth = r.json["interfaces"][0]["name"]
    subprocess.run(["ip", "link", "set", veth, "name", "vethmoved0"], check=True)
    # a pair with this attachment's derived name, but tagged for another one
    subprocess.run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", other], check=True)
    subprocess.run(["ip", "link", "set", veth, "alias", "skb-cni ptp " + "0" * 32], check=True)
    prev = dict(r.json, interfaces=[dict(r.json["interfaces"][0], name="vethmoved0"), r.json["interfaces"][1]])
    assert ours.delete(conf, "", prev=prev).rc == 0
    assert "vethmoved0" not in links(), "the renamed host end carries our alias: ours"
    assert pair_intact(veth, other), "the clashing pair carries another alias: not ours"
    subprocess.run(["ip", "link", "del", veth], check=True)


def _next_name(network, cid, ifname):
    """The second name ADD tries for the host end: the hash's next 8 hex digits (docs/PTP.md#ownership)."""
    import hashlib
    return "veth" + hashlib.sha512(f"{network}\0{cid}\0{ifname}".encode()).hexdigest()[8:16]


def test_an_add_killed_before_tagging_a_veth_under_its_next_name_is_undone_by_del(ours, make_netns, data_dir):
    """Review 15: with the derived name taken, ADD fell back to a random name; killed before it set the alias,
    it left a pair no DEL could prove the attachment's, and every later ADD failed ("eth0 already exists").
    The state such a kill leaves is made here by hand: the derived name taken, an untagged pair under the
    next name, paired with eth0 in the pod. A pair under that name in another pod's netns stays."""
    from skb_plugins.ptp.ownership import host_veth_name
    ns, other = make_netns(), make_netns()
    derived, nxt = host_veth_name("ptpnet", "ctr1", "eth0"), _next_name("ptpnet", "ctr1", "eth0")
    subprocess.run(["ip", "link", "add", derived, "type", "bridge"], check=True)
    try:
        conf = ptp_conf(data_dir)
        # the next name paired with eth0 in another pod: not this attachment's, whatever its name
        subprocess.run(["ip", "link", "add", nxt, "type", "veth", "peer", "name", "eth0", "netns", other], check=True)
        assert ours.delete(conf, nspath(ns)).rc == 0
        assert pair_intact(nxt, other)
        subprocess.run(["ip", "link", "del", nxt], check=True)
        # the killed ADD's leftover, in this pod
        subprocess.run(["ip", "link", "add", nxt, "type", "veth", "peer", "name", "eth0", "netns", ns], check=True)
        r = ours.add(conf, nspath(ns))
        assert r.rc == 1 and "eth0" in r.json["msg"] and "already exists" in r.json["msg"], r
        assert ours.delete(conf, nspath(ns)).rc == 0
        assert nxt not in links() and "eth0" not in links(ns)
        r = ours.add(conf, nspath(ns))
        assert r.rc == 0 and r.json["interfaces"][0]["name"] == nxt, r
        assert links()[nxt].get("ifalias", "").startswith("skb-cni ptp ")
        assert ours.delete(conf, nspath(ns)).rc == 0
        assert nxt not in links() and "eth0" not in links(ns) and not reservations(data_dir)
    finally:
        subprocess.run(["ip", "link", "del", derived], check=False)
