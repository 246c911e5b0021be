"""host-local against Go's /usr/lib/cni/host-local (v1.1.1): same order, same files, and one dataDir
shared in both directions with every reservation honoured."""
import os

import pytest

from tests.helpers import GO_BIN_DIR, cni_env, run_plugin

pytestmark = pytest.mark.gobin
GO = os.path.join(GO_BIN_DIR, "host-local")

CONFIGS = {
    "v4": {"ranges": [[{"subnet": "10.1.0.0/29"}]]},
    "dual": {"ranges": [[{"subnet": "10.1.0.0/29"}], [{"subnet": "fd00::/125"}]]},
    "gateway-last": {"ranges": [[{"subnet": "10.22.0.0/29", "gateway": "10.22.0.6"}]]},
    "bounds": {"ranges": [[{"subnet": "10.22.0.0/24", "rangeStart": "10.22.0.252", "rangeEnd": "10.22.0.254",
                            "gateway": "10.22.0.253"}]]},
    "two-ranges": {"ranges": [[{"subnet": "10.1.0.0/30"}, {"subnet": "10.1.1.0/30"}]]},
    "legacy": {"subnet": "10.5.0.0/29", "rangeStart": "10.5.0.3"},
}


def call(exe, data, command, cid, ipam, ifname="eth0", version="1.0.0"):
    conf = {"cniVersion": version, "name": "net1", "type": "host-local",
            "ipam": dict(ipam, type="host-local", dataDir=str(data))}
    return run_plugin(exe, cni_env(command, containerid=cid, ifname=ifname, netns="/x", path=GO_BIN_DIR), conf)


def addrs(r):
    return [ip["address"] for ip in r.json["ips"]] if r.rc == 0 else ("error", r.json["msg"])


def tree(d):
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d)) if not n.startswith(".")}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_same_allocation_sequence_and_files(bin_dir, tmp_path, name):
    """A script of ADDs and DELs (with wrap-around and exhaustion) gives the same addresses and the same
    files (names and bytes, lock aside) with either plugin."""
    ipam = CONFIGS[name]
    ours_exe = os.path.join(bin_dir, "host-local")
    script = [("ADD", "a"), ("ADD", "b"), ("ADD", "c"), ("DEL", "a"), ("ADD", "d"), ("ADD", "e"), ("ADD", "f"),
              ("ADD", "g"), ("ADD", "h"), ("DEL", "c"), ("ADD", "i")]
    seen = {}
    for label, exe in (("ours", ours_exe), ("go", GO)):
        data = tmp_path / label
        seq = []
        for command, cid in script:
            r = call(exe, data, command, cid, ipam)
            if command == "ADD":
                seq.append(addrs(r) if r.rc == 0 else "exhausted" if "no IP addresses available" in r.json["msg"]
                           else r.json["msg"])
            else:
                assert r.rc == 0
        seen[label] = (seq, tree(data / "net1"))
    assert seen["ours"][0] == seen["go"][0]
    assert seen["ours"][1] == seen["go"][1]


def test_switch_go_to_ours_and_back(bin_dir, tmp_path):
    ours = os.path.join(bin_dir, "host-local")
    ipam = CONFIGS["dual"]
    assert addrs(call(GO, tmp_path, "ADD", "g1", ipam)) == ["10.1.0.2/29", "fd00::2/125"]
    assert addrs(call(GO, tmp_path, "ADD", "g2", ipam)) == ["10.1.0.3/29", "fd00::3/125"]
    # ours honours Go's reservations, continues its round robin, and returns g1's own addresses to g1
    assert addrs(call(ours, tmp_path, "ADD", "o1", ipam)) == ["10.1.0.4/29", "fd00::4/125"]
    assert addrs(call(ours, tmp_path, "ADD", "g1", ipam)) == ["10.1.0.2/29", "fd00::2/125"]
    assert call(ours, tmp_path, "CHECK", "g2", ipam, version="0.4.0").rc == 0
    assert call(ours, tmp_path, "DEL", "g2", ipam).rc == 0
    # Go honours ours: o1 is a duplicate for Go, and the next address skips it
    r = call(GO, tmp_path, "ADD", "o1", ipam)
    assert r.rc == 1 and "duplicate allocation is not allowed" in r.json["msg"]
    assert addrs(call(GO, tmp_path, "ADD", "g3", ipam)) == ["10.1.0.5/29", "fd00::5/125"]
    assert call(GO, tmp_path, "CHECK", "o1", ipam, version="0.4.0").rc == 0
    assert call(GO, tmp_path, "DEL", "o1", ipam).rc == 0
    # back to ours: o1's addresses were released by Go; round robin wraps to the freed ones (the IPv6
    # range has one more address: no broadcast to exclude)
    assert addrs(call(ours, tmp_path, "ADD", "o2", ipam)) == ["10.1.0.6/29", "fd00::6/125"]
    assert addrs(call(ours, tmp_path, "ADD", "o3", ipam)) == ["10.1.0.3/29", "fd00::7/125"]
    assert addrs(call(ours, tmp_path, "ADD", "o4", ipam)) == ["10.1.0.4/29", "fd00::3/125"]
    holders = sorted((tmp_path / "net1" / n).read_bytes() for n in os.listdir(tmp_path / "net1") if n != "lock" and not n.startswith(("last_", ".")))
    assert holders == sorted([b"g1\r\neth0"] * 2 + [b"g3\r\neth0"] * 2 + [b"o2\r\neth0"] * 2 + [b"o3\r\neth0"] * 2
                             + [b"o4\r\neth0"] * 2)


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0"])
def test_same_result_every_version(bin_dir, tmp_path, version):
    ipam = dict(CONFIGS["dual"], routes=[{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}])
    ours = call(os.path.join(bin_dir, "host-local"), tmp_path / "o", "ADD", "c", ipam, version=version)
    go = call(GO, tmp_path / "g", "ADD", "c", ipam, version=version)
    assert ours.rc == go.rc == 0
    strip = lambda r: {k: v for k, v in r.items() if not (k == "dns" and not v)}  # noqa: E731 (Go 1.1.1: "dns":{} in 1.0.0)
    assert strip(ours.json) == strip(go.json)


@pytest.mark.parametrize("ipam,code", [({}, 7), ({"ranges": [[{"subnet": "10.0.0.0/31"}]]}, 7),
                                       ({"ranges": [[{"subnet": "10.0.0.5/24"}]]}, 7)])
def test_invalid_config_both_fail(bin_dir, tmp_path, ipam, code):
    ours = call(os.path.join(bin_dir, "host-local"), tmp_path, "ADD", "c", ipam)
    go = call(GO, tmp_path, "ADD", "c", ipam)
    assert ours.rc == go.rc == 1 and ours.json["code"] == code


def _toggle_script(who, pool, rounds):
    """(plugin, command, cid) steps: each step ADDs the next attachment of the pool, or DELs it when it is
    held; ``who`` gives the plugin of each step."""
    held, steps = set(), []
    for i in range(rounds):
        cid = pool[i % len(pool)]
        steps.append((who(i), "DEL" if cid in held else "ADD", cid))
        held ^= {cid}
    return steps


def _run_script(bin_dir, data, ipam, steps, go_only=False):
    ours = os.path.join(bin_dir, "host-local")
    seq = []
    for who, command, cid in steps:
        r = call(GO if go_only or who == "go" else ours, data, command, cid, ipam)
        assert r.rc == 0, (who, command, cid, r.json)
        if command == "ADD":
            seq.append(addrs(r))
    return seq, tree(data / "net1")


def test_go_between_our_calls_across_a_journal_fold(bin_dir, tmp_path):
    """One dataDir: runs of our calls long enough to fold our index's journal (ids of 200 characters),
    with Go's calls between them, each plugin ADDing and DELeting attachments the other made. The
    addresses and the files are exactly those of Go alone running the same script: after each of Go's
    calls our next call saw what Go changed (a journal that missed it would leak a DEL or double an
    address)."""
    from skb_plugins.hostlocal_ipam import index
    ipam = {"ranges": [[{"subnet": "10.1.0.0/25"}]]}
    pool = [f"c{i:02d}-" + "x" * 200 for i in range(23)]
    ours_first = index.FOLD_AT // 200     # records of our calls: more than FOLD_AT bytes before Go's first

    def who(i):
        return "ours" if i < ours_first or (i - ours_first) % 14 >= 4 else "go"
    from tests.unit.test_hostlocal_index import parsed
    steps = _toggle_script(who, pool, ours_first + 14 * 6)
    first, _ = _run_script(bin_dir, tmp_path / "mixed", ipam, steps[:ours_first])
    base, journal, _ = parsed(str(tmp_path / "mixed" / "net1"))
    assert len(base) > 1 and 0 < len([x for x in journal if x[:1] == b"="]) < ours_first - 2   # folded
    rest, mixed = _run_script(bin_dir, tmp_path / "mixed", ipam, steps[ours_first:])
    assert (first + rest, mixed) == _run_script(bin_dir, tmp_path / "go", ipam, steps, go_only=True)


def test_our_journal_notices_go_deleting_and_readding(bin_dir, tmp_path):
    """Our ADD is in our journal; Go DELs it and ADDs the same attachment again (another address): our
    ADD returns Go's address (not a second one), our DEL removes Go's file, and Go agrees afterwards."""
    ours = os.path.join(bin_dir, "host-local")
    ipam = CONFIGS["v4"]
    assert addrs(call(ours, tmp_path, "ADD", "a", ipam)) == ["10.1.0.2/29"]
    assert addrs(call(ours, tmp_path, "ADD", "b", ipam)) == ["10.1.0.3/29"]
    assert call(GO, tmp_path, "DEL", "a", ipam).rc == 0
    assert addrs(call(GO, tmp_path, "ADD", "a", ipam)) == ["10.1.0.4/29"]
    assert addrs(call(ours, tmp_path, "ADD", "a", ipam)) == ["10.1.0.4/29"]
    assert call(ours, tmp_path, "DEL", "a", ipam).rc == 0
    assert sorted(n for n in tree(tmp_path / "net1") if n[0].isdigit()) == ["10.1.0.3"]
    assert call(GO, tmp_path, "CHECK", "a", ipam, version="0.4.0").rc == 1
    assert call(GO, tmp_path, "DEL", "b", ipam).rc == 0
    assert call(ours, tmp_path, "CHECK", "b", ipam, version="0.4.0").rc == 1
    assert addrs(call(ours, tmp_path, "ADD", "c", ipam)) == ["10.1.0.5/29"]   # round robin after Go's .4
