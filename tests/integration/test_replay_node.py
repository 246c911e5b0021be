"""Review 15 (second wave): a replayed ADD ran its pod side in a scratch netns but its host side on the
node: Go's bridge left its bridge and turned IPv4 forwarding on, ptp turned forwarding on and made
root-owned directories at a dataDir the record chose, and the replay said "the ADD left nothing on the
node". A replay without --live now runs in a scratch node (netns and mount namespace of its own, overlays
over every dataDir and /var/lib/cni). Read back from outside: ip -j, /proc/sys, the file system, nft."""
import json
import os
import subprocess

import pytest

from tests.helpers import GO_BIN_DIR, ip_json
from tests.integration.test_replay_safety import record, run, skb, write_records  # noqa: F401 (fixture)

pytestmark = pytest.mark.kernel


def forwarding():
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        return f.read().strip()


@pytest.fixture
def forwarding_off():
    before = forwarding()
    subprocess.run(["sysctl", "-qw", "net.ipv4.ip_forward=0"], check=True)   # (the sandbox's netns)
    yield
    subprocess.run(["sysctl", "-qw", f"net.ipv4.ip_forward={before}"], check=True)


def tree(path):
    return sorted(os.path.relpath(os.path.join(d, n), path) for d, ds, fs in os.walk(path) for n in ds + fs) \
        if os.path.exists(path) else None


def nft_tables():
    p = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True)
    return p.stdout


def test_a_replayed_go_bridge_add_leaves_the_node_as_it_was(skb, tmp_path, forwarding_off):
    if not os.path.exists(os.path.join(GO_BIN_DIR, "bridge")):
        pytest.skip("no Go bridge plugin")
    data = tmp_path / "ipam"
    conf = {"cniVersion": "1.0.0", "name": "bn", "type": "bridge", "bridge": "skbtestbr0", "isGateway": True,
            "ipMasq": True, "ipam": {"type": "host-local", "subnet": "10.80.0.0/24", "dataDir": str(data)}}
    log = write_records(tmp_path / "calls.jsonl", dict(record("ADD", conf, "/run/netns/skb-gone-42"),
                                                      plugin="bridge"))
    links, tables = [link["ifname"] for link in ip_json("link", "show")], nft_tables()
    p = run(skb, "replay", str(log), "--json", "--cni-path", GO_BIN_DIR)
    out = json.loads(p.stdout)
    assert out["replayed"]["exitCode"] == 0, out
    assert "scratch node" in out["netnsNote"], out
    assert [link["ifname"] for link in ip_json("link", "show")] == links
    assert forwarding() == "0" and nft_tables() == tables and tree(str(data)) is None


def test_a_replayed_ptp_add_makes_no_directory_and_no_rule_on_the_node(skb, bin_dir, tmp_path, forwarding_off):
    evil = tmp_path / "evil dir" / "x"
    conf = {"cniVersion": "1.0.0", "name": "pn", "type": "ptp", "ipMasq": True, "ipMasqBackend": "nftables",
            "ipam": {"type": "host-local", "subnet": "10.81.0.0/24", "dataDir": str(evil)}}
    log = write_records(tmp_path / "calls.jsonl", dict(record("ADD", conf, ""), plugin="ptp"))
    links, tables = [link["ifname"] for link in ip_json("link", "show")], nft_tables()
    p = run(skb, "replay", str(log), "--json", "--cni-path", bin_dir)
    out = json.loads(p.stdout)
    assert out["replayed"]["exitCode"] == 0 and "exit 0" in out["cleanupNote"], out
    assert not (tmp_path / "evil dir").exists()
    assert [link["ifname"] for link in ip_json("link", "show")] == links
    assert forwarding() == "0" and nft_tables() == tables


@pytest.mark.parametrize("depth", [300, 985, 988, 2000])
def test_hooks_nested_at_any_depth_never_run_without_live(skb, bin_dir, tmp_path, depth):
    """At a depth where skb's parse hit the recursion limit and a plugin's did not, the hook ran."""
    pwned = tmp_path / "pwned"
    stdin = ('{"cniVersion":"1.0.0","name":"dn","type":"debug","addHooks":[["touch","%s"]],"x":%s%s}'
             % (pwned, "[" * depth, "]" * depth))
    rec = dict(record("ADD", {}, "/run/netns/skb-gone-43"), stdin=stdin)
    log = write_records(tmp_path / "calls.jsonl", rec)
    p = run(skb, "replay", str(log), "--cni-path", bin_dir)
    assert p.returncode == 2 and "--live" in p.stderr, p.stderr
    assert not pwned.exists()


def test_a_relative_data_dir_under_the_replays_cwd_stays_in_the_scratch_node(skb, tmp_path):
    """Covered by an overlay, the cwd itself (where a relative dataDir resolves) kept naming the directory
    under the mount: Go's host-local wrote its store there, on the node (review 15)."""
    if not os.path.exists(os.path.join(GO_BIN_DIR, "host-local")):
        pytest.skip("no Go host-local")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    conf = {"cniVersion": "1.0.0", "name": "mynet", "type": "host-local",
            "ipam": {"type": "host-local", "subnet": "10.9.0.0/24", "dataDir": "state"}}
    log = write_records(tmp_path / "calls.jsonl", dict(record("ADD", conf, "/run/netns/skb-gone-44"),
                                                      plugin="host-local"))
    p = subprocess.run([skb, "replay", str(log), "--json", "--plugin", os.path.join(GO_BIN_DIR, "host-local")],
                       cwd=cwd, capture_output=True, text=True, timeout=120)
    assert json.loads(p.stdout)["replayed"]["exitCode"] == 0, p.stdout + p.stderr
    assert tree(str(cwd)) == []
