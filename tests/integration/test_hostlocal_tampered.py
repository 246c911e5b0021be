"""host-local on a node whose store someone else touched, and requests the reference also refuses: a
restored backup, a hand edit, names planted beside the index, a lock that is not a file, impossible
ranges. Files on disk are the oracle; Go's host-local, where it is compared, runs on a store of its own."""
import os
import subprocess

import pytest

from tests.helpers import GO_BIN_DIR, cni_env, run_plugin

GO = os.path.join(GO_BIN_DIR, "host-local")


def _caller(exe, data):
    def call(command, cid="c1", ifname="eth0", cni_args="", ipam=None, **top):
        conf = {"cniVersion": "1.0.0", "name": "net1", "type": "host-local",
                "ipam": dict({"type": "host-local", "dataDir": str(data), "ranges": [[{"subnet": "10.1.0.0/28"}]]},
                             **(ipam or {}))}
        conf.update(top)
        return run_plugin(exe, cni_env(command, containerid=cid, ifname=ifname, args=cni_args, netns="/x"), conf)
    call.dir = data / "net1"
    return call


@pytest.fixture
def hl(bin_dir, tmp_path):
    return _caller(os.path.join(bin_dir, "host-local"), tmp_path / "data")


@pytest.fixture(params=["ours", "go"])
def either(request, bin_dir, tmp_path):
    if request.param == "go" and not os.path.exists(GO):
        pytest.skip(f"no reference plugin at {GO} (apt install containernetworking-plugins)")
    exe = os.path.join(bin_dir, "host-local") if request.param == "ours" else GO
    return _caller(exe, tmp_path / request.param)


def holders(d):
    """{address: content} of the reservation files (names that are addresses), read from disk."""
    return {n: (d / n).read_bytes() for n in os.listdir(d) if n[0].isdigit()}


def index_files(d):
    return {n: os.lstat(d / ".skb" / n).st_ino for n in os.listdir(d / ".skb") if n.startswith("index.")
            and os.path.isfile(d / ".skb" / n)}


def test_a_backup_restored_over_the_store_is_read_from_its_files(hl, tmp_path):
    """`cp -a` sets the directory's mtime back to the backup's, which its index was stamped with: the
    index must not be trusted (the directory's ctime says it changed), or c2's reservation is missed."""
    assert hl("ADD", cid="c1").rc == 0
    backup = tmp_path / "backup"
    subprocess.run(["cp", "-a", str(hl.dir), str(backup)], check=True)
    r = hl("ADD", cid="c2")
    assert r.rc == 0 and r.json["ips"][0]["address"] == "10.1.0.3/28", r
    subprocess.run(["cp", "-a", f"{backup}/.", str(hl.dir)], check=True)
    assert holders(hl.dir) == {"10.1.0.2": b"c1\r\neth0", "10.1.0.3": b"c2\r\neth0"}
    r = hl("ADD", cid="c2")     # the address c2 holds, not a second one
    assert r.rc == 0 and r.json["ips"][0]["address"] == "10.1.0.3/28", r
    assert hl("CHECK", cid="c2").rc == 0
    assert hl("DEL", cid="c2").rc == 0
    assert holders(hl.dir) == {"10.1.0.2": b"c1\r\neth0"}


def test_a_reservation_edited_by_hand_is_seen_once_skb_is_removed(hl):
    """The documented residue (docs/HOSTLOCAL.md): an in-place edit changes neither the directory nor a
    last_reserved_ip file; removing .skb, as the doc says, makes the next call read the files."""
    assert hl("ADD", cid="c9").rc == 0
    (hl.dir / "10.1.0.2").write_bytes(b"c1\r\neth0")
    subprocess.run(["rm", "-rf", str(hl.dir / ".skb")], check=True)
    assert hl("CHECK", cid="c1").rc == 0
    assert hl("DEL", cid="c1").rc == 0
    assert holders(hl.dir) == {}


@pytest.mark.parametrize("how", [{"runtimeConfig": {"ips": ["10.1.0.7", "10.1.0.8"]}},
                                 {"args": {"cni": {"ips": ["10.1.0.5"]}}, "runtimeConfig": {"ips": ["10.1.0.6"]}},
                                 {"cni_args": "IP=10.1.0.9", "runtimeConfig": {"ips": ["10.1.0.8"]}}],
                         ids=["runtimeConfig", "args-and-runtimeConfig", "CNI_ARGS-and-runtimeConfig"])
def test_two_requested_addresses_in_one_range_set_fail_and_reserve_nothing(either, how):
    r = either("ADD", **how)
    assert r.rc != 0 and "failed to allocate all requested IPs" in r.json["msg"], r
    assert not either.dir.exists() or holders(either.dir) == {}


def test_directories_named_like_index_files_do_not_make_every_call_rebuild(hl):
    """They would rank first and were tried in place of the real index: every call rebuilt it from a
    full scan (a new file each time). Now the index file a call appends to stays the same file."""
    assert hl("ADD", cid="a").rc == 0
    for n in (1, 2, 3):
        os.mkdir(hl.dir / ".skb" / f"index.99999999999999999999.{n}")
    assert hl("ADD", cid="b").rc == 0      # (the directories changed .skb, not the network directory)
    first = index_files(hl.dir)
    assert len(first) == 1, first
    for cid in ("c", "d"):
        assert hl("ADD", cid=cid).rc == 0
        assert hl("DEL", cid=cid).rc == 0
    assert index_files(hl.dir) == first
    assert sorted(n for n in os.listdir(hl.dir / ".skb") if n.startswith("index.9")) == \
        [f"index.99999999999999999999.{n}" for n in (1, 2, 3)]     # left alone


@pytest.mark.parametrize("what", ["symlink", "directory"])
def test_a_lock_that_is_not_a_file_is_named_with_its_fix(hl, tmp_path, what):
    hl.dir.mkdir(parents=True)
    lock = hl.dir / "lock"
    if what == "symlink":
        (tmp_path / "elsewhere").write_bytes(b"")
        lock.symlink_to(tmp_path / "elsewhere")
    else:
        lock.mkdir()
    r = hl("DEL")
    assert r.rc == 1 and r.json["code"] == 5, r
    assert f"its lock file {lock} is a {what}" in r.json["msg"], r
    assert r.json["details"].startswith(f"remove {lock}:"), r
    assert (tmp_path / "elsewhere").read_bytes() == b"" if what == "symlink" else lock.is_dir()


def test_a_data_dir_that_loops_is_not_blamed_on_the_lock(bin_dir, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    r = _caller(os.path.join(bin_dir, "host-local"), tmp_path / "loop")("ADD")
    assert r.rc == 1 and r.json["code"] == 5, r
    assert "lock" not in r.json["msg"] and "loop of symlinks" in r.json["details"], r


@pytest.mark.parametrize("subnet", ["::ffff:10.1.0.0/120", "0.0.0.0/0", "::/0"])
def test_subnets_the_reference_cannot_use_are_refused(either, subnet):
    r = either("ADD", ipam={"ranges": [[{"subnet": subnet}]]})
    assert r.rc != 0, r
    assert not either.dir.exists() or holders(either.dir) == {}


def test_subnets_the_reference_cannot_use_are_config_errors(hl):
    for subnet, says in (("::ffff:10.1.0.0/120", 'write "10.1.0.0/24"'), ("0.0.0.0/0", "holds every address")):
        r = hl("ADD", ipam={"ranges": [[{"subnet": subnet}]]})
        assert r.json["code"] == 7 and says in r.json["msg"] + r.json["details"], r


def test_a_range_whose_only_address_is_its_gateway_is_a_config_error(hl):
    r = hl("ADD", ipam={"ranges": [[{"subnet": "10.1.0.0/29", "rangeStart": "10.1.0.5", "rangeEnd": "10.1.0.5",
                                     "gateway": "10.1.0.5"}]]})
    assert r.rc == 1 and r.json["code"] == 7 and "only address is its gateway" in r.json["msg"], r
    assert not hl.dir.exists()
    r = hl("STATUS", cniVersion="1.1.0", ipam={"ranges": [[{"subnet": "10.1.0.0/29", "rangeStart": "10.1.0.5",
                                                            "rangeEnd": "10.1.0.5", "gateway": "10.1.0.5"}]]})
    assert r.rc == 1 and "only address is its gateway" in r.json["msg"], r    # not ready, as ADD says


def test_status_before_any_add_creates_nothing(hl):
    """skb doctor asks STATUS on the node: a network no ADD has used yet is ready, and stays untouched."""
    r = hl("STATUS", cniVersion="1.1.0")
    assert r.rc == 0 and r.stdout == "", r
    assert not hl.dir.parent.exists()
    assert hl("ADD", cniVersion="1.1.0").rc == 0 and hl("STATUS", cniVersion="1.1.0").rc == 0


@pytest.mark.kernel
def test_status_before_any_add_is_not_ready_where_the_add_could_not_create_its_store(hl, tmp_path):
    """An immutable parent (chattr +i): ADD fails there (EPERM), so STATUS must not say ready."""
    parent = tmp_path / "data"
    parent.mkdir()
    if subprocess.run(["chattr", "+i", str(parent)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        assert hl("ADD", cniVersion="1.1.0").rc == 1
        r = hl("STATUS", cniVersion="1.1.0")
        assert r.rc == 1 and r.json["code"] == 50 and "cannot be created" in r.json["msg"], r
        assert not hl.dir.exists()
    finally:
        subprocess.run(["chattr", "-i", str(parent)], check=True)
