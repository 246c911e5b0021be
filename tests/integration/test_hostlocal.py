"""host-local as a runtime calls it (processes, a temporary dataDir): files on disk are the oracle.

host-local changes no kernel state, so these tests need no sandbox; the dataDir is always a tmp dir."""
import json
import os
import stat

import pytest

from tests.helpers import cni_env, run_plugin

VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


@pytest.fixture
def hl(bin_dir, tmp_path):
    exe = os.path.join(bin_dir, "host-local")
    data = tmp_path / "data"

    def call(command, cid="c1", ifname="eth0", version="1.0.0", args="", ipam=None, **top):
        conf = {"cniVersion": version, "name": "net1", "type": "host-local",
                "ipam": dict({"type": "host-local", "dataDir": str(data), "ranges": [[{"subnet": "10.1.0.0/24"}]]},
                             **(ipam or {}))}
        conf.update(top)
        return run_plugin(exe, cni_env(command, containerid=cid, ifname=ifname, args=args, netns="/x"), conf)
    call.dir = data / "net1"
    return call


def files(d):
    return sorted(n for n in os.listdir(d) if not n.startswith("."))


def test_add_writes_go_format(hl):
    r = hl("ADD", cid="ctr1")
    assert r.rc == 0, r
    assert r.json == {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1"}]}
    assert files(hl.dir) == ["10.1.0.2", "last_reserved_ip.0", "lock"]
    assert (hl.dir / "10.1.0.2").read_bytes() == b"ctr1\r\neth0"
    assert (hl.dir / "last_reserved_ip.0").read_bytes() == b"10.1.0.2"
    assert stat.S_IMODE((hl.dir / "10.1.0.2").stat().st_mode) == 0o600


@pytest.mark.parametrize("version", VERSIONS)
def test_result_in_every_version(hl, version):
    ipam = {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00::/120"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    r = hl("ADD", version=version, ipam=ipam)
    assert r.rc == 0, r
    if version in ("0.1.0", "0.2.0"):
        assert r.json == {"cniVersion": version, "ip4": {"ip": "10.1.0.2/24", "gateway": "10.1.0.1",
                                                         "routes": [{"dst": "0.0.0.0/0"}]},
                          "ip6": {"ip": "fd00::2/120", "gateway": "fd00::1"}, "dns": {}}
    elif version.startswith("0."):
        assert r.json["ips"] == [{"version": "4", "address": "10.1.0.2/24", "gateway": "10.1.0.1"},
                                 {"version": "6", "address": "fd00::2/120", "gateway": "fd00::1"}]
    else:
        assert r.json["ips"] == [{"address": "10.1.0.2/24", "gateway": "10.1.0.1"},
                                 {"address": "fd00::2/120", "gateway": "fd00::1"}]


def test_repeated_add_returns_the_same_addresses(hl):
    first = hl("ADD", cid="c1")
    again = hl("ADD", cid="c1")
    other = hl("ADD", cid="c1", ifname="eth1")
    assert again.rc == 0 and again.json == first.json
    assert other.json["ips"][0]["address"] == "10.1.0.3/24"
    assert files(hl.dir) == ["10.1.0.2", "10.1.0.3", "last_reserved_ip.0", "lock"]


def test_del_removes_only_that_attachments_reservations(hl):
    hl("ADD", cid="c1")
    hl("ADD", cid="c2")
    (hl.dir / "notes.txt").write_bytes(b"c1\r\neth0")       # Go's DEL deletes this; we never do
    (hl.dir / "sub").mkdir()
    (hl.dir / "sub" / "10.1.0.200").write_bytes(b"c1\r\neth0")
    r = hl("DEL", cid="c1")
    assert (r.rc, r.stdout) == (0, "")
    assert files(hl.dir) == ["10.1.0.3", "last_reserved_ip.0", "lock", "notes.txt", "sub"]
    assert (hl.dir / "sub" / "10.1.0.200").exists()
    assert hl("DEL", cid="c1").rc == 0 and hl("DEL", cid="never").rc == 0


def test_del_legacy_id_only_reservation(hl):
    hl("ADD", cid="c1")
    (hl.dir / "10.1.0.77").write_bytes(b"legacy")
    assert hl("CHECK", cid="legacy", ifname="eth7").rc == 0
    assert hl("DEL", cid="legacy", ifname="eth7").rc == 0
    assert not (hl.dir / "10.1.0.77").exists() and (hl.dir / "10.1.0.2").exists()


def test_del_needs_only_the_data_dir(hl):
    hl("ADD", cid="c1")
    r = hl("DEL", cid="c1", ipam={"ranges": [[{"subnet": "10.1.0.5/24"}]]})  # ranges now invalid
    assert r.rc == 0 and not (hl.dir / "10.1.0.2").exists()


def test_check(hl):
    assert hl("CHECK", version="0.4.0").json["msg"] == "host-local: Failed to find address added by container c1"
    hl("ADD")
    assert hl("CHECK", version="0.4.0").rc == 0


def test_requested_ip_and_errors(hl):
    r = hl("ADD", cid="c1", args="IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.0.50")
    assert r.json["ips"][0]["address"] == "10.1.0.50/24"
    r = hl("ADD", cid="c2", args="IP=10.1.0.50")
    assert r.rc == 1 and r.json["code"] == 101 and "10.1.0.50 is not available" in r.json["msg"]
    assert "'c1'" in r.json["details"]
    r = hl("ADD", cid="c2", args="IP=10.9.0.5")
    assert r.json["msg"] == "failed to allocate all requested IPs: 10.9.0.5"
    r = hl("ADD", cid="c3", runtimeConfig={"ips": ["10.1.0.60/24"]})
    assert r.json["ips"][0]["address"] == "10.1.0.60/24"
    assert files(hl.dir) == ["10.1.0.50", "10.1.0.60", "last_reserved_ip.0", "lock"]  # failed calls left nothing


def test_failed_add_changes_nothing(hl):
    """Range set 1 is full, so ADD fails after set 0 succeeded: set 0's reservation is rolled back and
    last_reserved_ip.0 keeps its value (the reference leaves it advanced)."""
    ipam = {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.2.0.0/30"}]]}
    assert hl("ADD", cid="a", ipam=ipam).rc == 0                 # takes 10.2.0.2, the only address
    before = {n: (hl.dir / n).read_bytes() for n in files(hl.dir)}
    r = hl("ADD", cid="b", ipam=ipam)
    assert r.rc == 1 and r.json["code"] == 100
    assert r.json["msg"] == "failed to allocate for range 1: no IP addresses available in range set: 10.2.0.1-10.2.0.2"
    assert {n: (hl.dir / n).read_bytes() for n in files(hl.dir)} == before


def test_a_failed_add_keeps_the_address_a_request_would_replace(hl):
    """The attachment holds .7 and now asks for .50; the IPv6 set is full, so ADD fails: .7 stays its."""
    ipam = {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00::/126"}]]}
    assert hl("ADD", cid="x", ipam=ipam, args="IP=10.1.0.7").rc == 0     # takes fd00::2
    assert hl("ADD", cid="y", ipam=ipam).rc == 0                         # takes fd00::3, the last one
    assert hl("DEL", cid="x", ipam={"ranges": [[{"subnet": "10.1.0.0/24"}]]}).rc == 0
    assert hl("ADD", cid="x", ipam={"ranges": [[{"subnet": "10.1.0.0/24"}]]}, args="IP=10.1.0.7").rc == 0
    assert hl("ADD", cid="z", ipam=ipam).rc == 0                         # fd00::2 is free again: z takes it
    r = hl("ADD", cid="x", ipam=ipam, args="IP=10.1.0.50")
    assert r.rc == 1 and r.json["code"] == 100
    assert (hl.dir / "10.1.0.7").read_bytes() == b"x\r\neth0" and not (hl.dir / "10.1.0.50").exists()


def test_exhaustion_message(hl):
    ipam = {"ranges": [[{"subnet": "10.1.0.0/29"}]]}
    for i in range(5):
        assert hl("ADD", cid=f"c{i}", ipam=ipam).rc == 0
    r = hl("ADD", cid="c9", ipam=ipam)
    assert r.json["msg"] == "failed to allocate for range 0: no IP addresses available in range set: 10.1.0.1-10.1.0.6"
    assert "all 5 addresses of ipam.ranges[0]" in r.json["details"] and "GC" in r.json["details"]


def test_status(hl, tmp_path):
    ipam = {"ranges": [[{"subnet": "10.1.0.0/30"}]]}
    assert hl("STATUS", version="1.1.0", ipam=ipam).rc == 0
    assert hl("ADD", version="1.1.0", ipam=ipam).rc == 0
    r = hl("STATUS", version="1.1.0", ipam=ipam)
    assert r.rc == 1 and r.json["code"] == 50 and "ipam.ranges[0]" in r.json["msg"]
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = hl("STATUS", version="1.1.0", ipam={"dataDir": str(blocker)})
    assert r.json["code"] == 50 and f"cannot be created: {blocker} is not a directory" in r.json["msg"], r
    assert hl("ADD", version="1.1.0", ipam={"dataDir": str(blocker)}).json["code"] == 5     # as the ADD finds


def gc(hl, valid, key="cni.dev/valid-attachments"):
    top = {} if valid is None else {key: [{"containerID": c, "ifname": i} for c, i in valid]}
    return hl("GC", version="1.1.0", **top)


@pytest.mark.parametrize("key", ["cni.dev/valid-attachments", "cni.dev/attachments"])
def test_gc_releases_invalid_attachments(hl, key):
    for cid in ("a", "b", "c"):
        hl("ADD", cid=cid)
    (hl.dir / "10.1.0.99").write_bytes(b"legacy")
    (hl.dir / "notes.txt").write_bytes(b"b\r\neth0")
    r = gc(hl, [("a", "eth0"), ("legacy", "eth9")], key)
    assert (r.rc, r.stdout) == (0, ""), r
    assert files(hl.dir) == ["10.1.0.2", "10.1.0.99", "last_reserved_ip.0", "lock", "notes.txt"]
    assert hl("ADD", cid="b").json["ips"][0]["address"] == "10.1.0.5/24"  # round robin goes on
    assert hl("ADD", cid="a").json["ips"][0]["address"] == "10.1.0.2/24"  # a kept its address


def test_gc_without_a_list_releases_nothing(hl):
    hl("ADD", cid="a")
    assert gc(hl, None).rc == 0 and (hl.dir / "10.1.0.2").exists()
    assert gc(hl, []).rc == 0 and not (hl.dir / "10.1.0.2").exists()  # an empty list: nothing is valid


def test_garbage_in_the_store(hl):
    hl("ADD", cid="a")
    (hl.dir / "10.1.0.3").mkdir()                    # a directory named like an address: skipped, kept
    (hl.dir / "10.1.0.4").write_bytes(b"")           # a torn reservation (Go killed mid-write): reclaimed
    (hl.dir / "garbage").write_bytes(b"\xff\xfe")
    (hl.dir / "last_reserved_ip.0").write_bytes(b"10.1.0.2\n")  # unparsable (Go too): restart at range start
    r = hl("ADD", cid="b")
    assert r.rc == 0 and r.json["ips"][0]["address"] == "10.1.0.4/24"
    assert (hl.dir / "10.1.0.4").read_bytes() == b"b\r\neth0" and (hl.dir / "10.1.0.3").is_dir()
    assert (hl.dir / "garbage").read_bytes() == b"\xff\xfe"


def test_unusable_data_dir_is_a_clear_error(hl, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = hl("ADD", ipam={"dataDir": str(blocker)})
    assert r.rc == 1 and r.json["code"] == 5 and str(blocker) in r.json["msg"] and "dataDir" in r.json["details"]


def test_missing_data_dir_is_created(hl):
    assert not hl.dir.exists()
    assert hl("ADD").rc == 0 and hl.dir.is_dir()


def test_index_survives_foreign_changes(hl):
    """Files changed behind our back (another plugin, an operator) are picked up: the index is a cache."""
    hl("ADD", cid="a")
    os.unlink(hl.dir / "10.1.0.2")
    (hl.dir / "10.1.0.40").write_bytes(b"a\r\neth0")
    assert hl("ADD", cid="a").json["ips"][0]["address"] == "10.1.0.40/24"
    assert hl("DEL", cid="a").rc == 0 and not (hl.dir / "10.1.0.40").exists()


def test_resolv_conf_and_routes(hl, tmp_path):
    rc = tmp_path / "resolv.conf"
    rc.write_text("nameserver 10.1.0.53\nsearch a.example\n")
    r = hl("ADD", ipam={"resolvConf": str(rc), "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.1.0.9"}]})
    assert r.json["dns"] == {"nameservers": ["10.1.0.53"], "search": ["a.example"]}
    assert r.json["routes"] == [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.1.0.9"}]


@pytest.mark.parametrize("kind", ["dangling symlink", "directory", "fifo"])
def test_odd_entries_named_like_addresses_are_taken(hl, tmp_path, kind):
    """A dangling symlink named like an address made every later ADD fail with code 999; like Go, any
    entry under an address's name means the address is taken, and it is left as it is."""
    hl("ADD", cid="a")
    odd = hl.dir / "10.1.0.3"
    if kind == "dangling symlink":
        os.symlink("/nonexistent/skb-test", odd)
    elif kind == "directory":
        odd.mkdir()
    else:
        os.mkfifo(odd)
    r = hl("ADD", cid="b")
    assert r.rc == 0 and r.json["ips"][0]["address"] == "10.1.0.4/24", r
    for command in ("CHECK", "DEL"):
        assert hl(command, cid="b").rc == 0
    assert gc(hl, [("a", "eth0")]).rc == 0
    assert os.path.lexists(odd) and stat.S_IFMT(os.lstat(odd).st_mode) == {
        "dangling symlink": stat.S_IFLNK, "directory": stat.S_IFDIR, "fifo": stat.S_IFIFO}[kind]
    assert files(hl.dir) == ["10.1.0.2", "10.1.0.3", "last_reserved_ip.0", "lock"]


@pytest.mark.kernel      # mounts: only inside the sandbox's private mount namespace
def test_read_only_store_is_code_5_naming_the_directory(hl, tmp_path):
    import subprocess
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "skb-test", str(data)], check=True)
    try:
        assert hl("ADD", cid="a").rc == 0
        subprocess.run(["mount", "-o", "remount,ro", str(data)], check=True)
        for command, cid in (("ADD", "b"), ("DEL", "a")):
            r = hl(command, cid=cid)
            assert r.rc == 1 and r.json["code"] == 5, r
            assert str(hl.dir) in r.json["msg"] and "EROFS" in r.json["msg"] and ".skb" not in r.json["msg"], r
            assert "read-only" in r.json["details"], r
        assert hl("CHECK", cid="a").rc == 0   # reading still works
    finally:
        subprocess.run(["umount", str(data)], check=False)


def test_a_nul_byte_in_data_dir_is_code_7(hl):
    for command in ("ADD", "DEL"):
        r = hl(command, ipam={"dataDir": "/tmp/skb\u0000x"})
        assert r.rc == 1 and r.json["code"] == 7 and "dataDir" in r.json["msg"], r


def test_1500_range_sets(hl):
    """One address per range set, in set order, each from its own set; a repeated ADD returns the same;
    DEL releases every one. (An ADD took 25 s here before the pairwise steps went: no timing asserted.)"""
    n = 1500
    ranges = [[{"subnet": f"10.{i // 256}.{i % 256}.0/24"}] for i in range(n)]
    r = hl("ADD", ipam={"ranges": ranges})
    assert r.rc == 0, r
    want = [f"10.{i // 256}.{i % 256}.2/24" for i in range(n)]
    assert [ip["address"] for ip in r.json["ips"]] == want
    assert [ip["gateway"] for ip in r.json["ips"]] == [f"10.{i // 256}.{i % 256}.1" for i in range(n)]
    on_disk = [f for f in files(hl.dir) if not f.startswith(("last_reserved", "lock"))]
    assert sorted(on_disk) == sorted(a.split("/")[0] for a in want)
    assert all((hl.dir / f).read_bytes() == b"c1\r\neth0" for f in on_disk)
    assert (hl.dir / "last_reserved_ip.1499").read_bytes() == b"10.5.219.2"
    again = hl("ADD", ipam={"ranges": ranges})
    assert again.rc == 0 and again.json["ips"] == r.json["ips"]
    assert hl("DEL", ipam={"ranges": ranges}).rc == 0
    assert [f for f in files(hl.dir) if not f.startswith(("last_reserved", "lock"))] == []


def test_a_result_that_cannot_be_built_fails_the_add_with_nothing_reserved(hl):
    """A route the config check let through but the result rejected failed the ADD after the commit,
    leaving a reservation no runtime knows about. Now every key of a route is decoded and checked with the
    configuration, before the store is opened."""
    for route in ({"dst": "0.0.0.0/0", "priority": "high"}, {"dst": "0.0.0.0/0", "mtu": "x"},
                  {"dst": "0.0.0.0/0", "scope": 256}, {"dst": "0.0.0.0/0", "table": -1}):
        r = hl("ADD", ipam={"routes": [route]})
        assert r.rc == 1 and r.json["code"] == 7 and "ipam.routes[0]." in r.json["msg"], r
        assert not os.path.exists(hl.dir) or [f for f in files(hl.dir) if f[0].isdigit()] == [], r


from tests.unit.test_hostlocal_store import tmpfs_dir  # noqa: E402,F401  (the fixture)


def test_index_survives_foreign_changes_on_tmpfs(hl, tmpfs_dir):
    """The same, with the store on tmpfs (Debian 13's /tmp, every /run), where the directory's mtime comes
    from a coarse clock; the unlink and the create follow the ADD at once, repeatedly."""
    ipam = {"dataDir": tmpfs_dir}
    d = os.path.join(tmpfs_dir, "net1")
    for i in range(20):
        first = hl("ADD", cid="a", ipam=ipam).json["ips"][0]["address"].split("/")[0]
        os.unlink(os.path.join(d, first))
        with open(os.path.join(d, "10.1.0.240"), "wb") as f:
            f.write(b"a\r\neth0")
        r = hl("ADD", cid="a", ipam=ipam)
        assert r.json["ips"][0]["address"] == "10.1.0.240/24", (i, r)
        assert hl("DEL", cid="a", ipam=ipam).rc == 0
        assert [n for n in os.listdir(d) if n[0].isdigit()] == [], i
