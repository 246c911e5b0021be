"""The disk store on its own: Go's files, the index as a cache that heals, and what it never touches."""
import os

from skb.cni.addr import IP
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


def test_a_go_reservation_in_the_same_clock_tick_is_still_seen(tmp_path):
    """The Go plugin reserves right after us, within the same coarse mtime tick: the directory's mtime
    does not move, but Go always rewrites last_reserved_ip.N in place, and that is noticed."""
    with Store(str(tmp_path), "net") as s:
        s.reserve(ip("10.0.0.2"), A)
        s.set_last_reserved(0, ip("10.0.0.2"))
        s.commit()
    d = tmp_path / "net"
    st = os.stat(d)
    (d / "10.0.0.3").write_bytes(b"goctr\r\neth0")
    with open(d / "last_reserved_ip.0", "r+b") as f:   # in place, as Go writes it
        f.write(b"10.0.0.3")
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))   # same tick: the mtime did not change
    with Store(str(tmp_path), "net") as s:
        assert s.owned(("goctr", "eth0")) == [ip("10.0.0.3")]


def test_write_errors_are_code_5_and_release_the_lock(tmp_path, monkeypatch):
    import errno
    import fcntl

    from skb.cni.errors import CNIError

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with Store(str(tmp_path), "net") as s:
        monkeypatch.setattr(os, "write", full)
        try:
            s.reserve(ip("10.0.0.2"), A)
        except CNIError as e:
            assert e.code == 5 and "No space left on device" in e.msg and "10.0.0.2" not in os.listdir(tmp_path / "net")
        else:
            raise AssertionError("no error")
        monkeypatch.undo()
    fd = os.open(tmp_path / "net" / "lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # the lock was released
    os.close(fd)
