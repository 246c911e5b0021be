"""The disk store on its own: Go's files, the index as a cache that heals, and what it never touches."""
import os

from skb.addr import IP
from skb_plugins.hostlocal_ipam.store import Store

A, B = ("ctrA", "eth0"), ("ctrB", "eth1")


def ip(s):
    return IP.parse(s)


def test_reserve_release_and_index_across_calls(tmp_path):
    with Store(str(tmp_path), "net") as s:
        assert s.reserve(ip("10.0.0.2"), A) and s.reserve(ip("fd00::2"), A)
        assert not s.reserve(ip("10.0.0.2"), B)
        assert s.reserve(ip("10.0.0.3"), B)
        s.commit()
    d = tmp_path / "net"
    assert (d / "10.0.0.2").read_bytes() == b"ctrA\r\neth0" and (d / "fd00::2").read_bytes() == b"ctrA\r\neth0"
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [ip("10.0.0.2"), ip("fd00::2")] and s.owned(B) == [ip("10.0.0.3")]
        s.release(ip("10.0.0.2"), A)
        s.commit()
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [ip("fd00::2")] and s.owned(("ctrA", "eth1")) == [] and s.owned(("ctr", "eth0")) == []
    assert not (d / "10.0.0.2").exists()


def test_foreign_changes_trigger_a_rebuild(tmp_path):
    with Store(str(tmp_path), "net") as s:
        s.reserve(ip("10.0.0.2"), A)
        s.commit()
    d = tmp_path / "net"
    (d / "10.0.0.9").write_bytes(b"ctrB\r\neth1")      # what the Go plugin would write
    os.unlink(d / "10.0.0.2")
    with Store(str(tmp_path), "net") as s:
        assert s.owned(B) == [ip("10.0.0.9")] and s.owned(A) == []


def test_index_lies_are_caught_by_the_files(tmp_path):
    """Even a wrong index (same mtime) never makes us claim an address another container holds."""
    with Store(str(tmp_path), "net") as s:
        s.reserve(ip("10.0.0.2"), A)
        s.commit()
    d = tmp_path / "net"
    (d / "10.0.0.2").write_bytes(b"ctrB\r\neth1")       # content changed in place: the dir mtime does not move
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == []


def test_scan_reclaims_torn_files_and_ignores_the_rest(tmp_path):
    d = tmp_path / "net"
    d.mkdir()
    (d / "10.0.0.4").write_bytes(b"")                   # torn by a killed writer
    (d / "10.0.0.5").write_bytes(b"legacy")             # old format: id only
    (d / "notes").write_bytes(b"ctrA\r\neth0")
    (d / "10.0.0.6").mkdir()
    with Store(str(tmp_path), "net") as s:
        assert s.scan() == {ip("10.0.0.5"): ("legacy", "")}
        assert s.owned(("legacy", "")) == [ip("10.0.0.5")]
        assert s.reserve(ip("10.0.0.4"), A)
    assert sorted(os.listdir(d)) == [".skb", "10.0.0.4", "10.0.0.5", "10.0.0.6", "lock", "notes"]
