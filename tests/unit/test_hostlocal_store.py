"""The disk store on its own: Go's files, the index as a cache that heals, and what it never touches."""
import os
import stat

import pytest

from skb.cni.addr import IP
from skb_plugins.hostlocal_ipam.store import Store

A, B = ("ctrA", "eth0"), ("ctrB", "eth1")


def _fstype(path):
    best, kind = "", ""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mnt = fields[4]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, fields[fields.index("-") + 1]
    return kind


@pytest.fixture
def tmpfs_dir(tmp_path):
    """A directory on a tmpfs: one mounted for the test inside the sandbox (private mounts), else a
    temporary directory under /dev/shm or /run when those are tmpfs; skipped otherwise."""
    import subprocess
    import tempfile

    from tests.conftest import SANDBOXED
    if SANDBOXED:
        d = tmp_path / "tmpfs"
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "skb-test", str(d)], check=True)
        try:
            assert _fstype(str(d)) == "tmpfs"
            yield str(d)
        finally:
            subprocess.run(["umount", str(d)], check=False)
        return
    for base in ("/dev/shm", "/run"):
        if os.path.isdir(base) and os.access(base, os.W_OK) and _fstype(base) == "tmpfs":
            with tempfile.TemporaryDirectory(dir=base) as d:
                yield d
            return
    pytest.skip("no tmpfs to test on")


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
    """The Go plugin reserves right after us, within the same coarse clock tick: the kernel gives the
    directory the mtime it had after our own change, which is not our stamp (one ns past it); and Go
    rewrites last_reserved_ip.N in place, which the header records too."""
    with Store(str(tmp_path), "net") as s:
        s.reserve(ip("10.0.0.2"), A)
        s.set_last_reserved(0, ip("10.0.0.2"))
        s.commit()
    d = tmp_path / "net"
    st = os.stat(d)
    (d / "10.0.0.3").write_bytes(b"goctr\r\neth0")
    with open(d / "last_reserved_ip.0", "r+b") as f:   # in place, as Go writes it
        f.write(b"10.0.0.3")
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns - 1))   # what the coarse clock gives in our tick
    with Store(str(tmp_path), "net") as s:
        assert s.owned(("goctr", "eth0")) == [ip("10.0.0.3")]


def _fool_the_stamp(d, st):
    """Put the directory's mtime back to what it was: the worst case of a coarse clock."""
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_index_entry_its_file_contradicts_forces_a_rebuild(tmp_path):
    """Even with the stamp fooled (the directory looks unchanged), what the index says an attachment
    holds is confirmed by the file; one contradiction rebuilds the index, so the attachment's new
    reservation (made by someone else) is found, not a second address handed out."""
    with Store(str(tmp_path), "net") as s:
        s.reserve(ip("10.0.0.2"), A)
        s.commit()
    d = tmp_path / "net"
    st = os.stat(d)
    os.unlink(d / "10.0.0.2")                          # an operator, or Go's DEL ...
    (d / "10.0.0.40").write_bytes(b"ctrA\r\neth0")    # ... and Go's ADD, in the same tick
    _fool_the_stamp(d, st)
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [ip("10.0.0.40")]
        assert not s.is_free(ip("10.0.0.40")) and s.is_free(ip("10.0.0.2"))


def test_unlink_and_create_in_one_tick_on_tmpfs(tmpfs_dir):
    """On tmpfs (Debian 13's /tmp, every /run) the mtime comes from a coarse clock: a foreign unlink and
    create right after our commit usually land in its tick. Repeated, so the race is really run."""
    d = os.path.join(tmpfs_dir, "net")
    for i in range(200):
        owner = (f"c{i}", "eth0")
        with Store(tmpfs_dir, "net") as s:
            got = s.reserve(ip(f"10.0.{i // 200}.{i % 200 + 2}"), owner)
            assert got
            s.commit()
        os.unlink(os.path.join(d, f"10.0.{i // 200}.{i % 200 + 2}"))
        with open(os.path.join(d, f"10.9.0.{i + 2}"), "wb") as f:
            f.write(f"c{i}\r\neth0".encode())
        with Store(tmpfs_dir, "net") as s:
            assert s.owned(owner) == [ip(f"10.9.0.{i + 2}")], i


ODDITIES = ["dangling symlink", "symlink to a reservation elsewhere", "directory", "fifo", "socket"]


def _make_odd(path, kind, elsewhere):
    import socket
    if kind == "dangling symlink":
        os.symlink("/nonexistent/skb-test", path)
    elif kind == "symlink to a reservation elsewhere":
        elsewhere.write_bytes(b"ctrA\r\neth0")
        os.symlink(str(elsewhere), path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()


@pytest.mark.parametrize("kind", ODDITIES)
def test_an_odd_entry_named_like_an_address_is_taken_never_followed(tmp_path, kind):
    """Go treats any entry under an address's name as taken; so do we, without following, opening (a
    FIFO would block) or removing it, and without failing (it was code 999)."""
    import signal
    signal.alarm(20)   # a FIFO opened for reading would block forever: fail instead
    try:
        d = tmp_path / "net"
        d.mkdir()
        path = d / "10.0.0.2"
        _make_odd(path, kind, tmp_path / "elsewhere")
        with Store(str(tmp_path), "net") as s:
            assert not s.is_free(ip("10.0.0.2"))
            assert not s.reserve(ip("10.0.0.2"), B)
            assert s.holder(ip("10.0.0.2")) not in (None, A)
            assert s.owned(A) == [] and ip("10.0.0.2") not in s.scan()
            s.release(ip("10.0.0.2"), A)
            s.commit()
        assert os.path.lexists(path) and os.lstat(path).st_mode == os.lstat(path).st_mode
        if kind == "symlink to a reservation elsewhere":
            assert (tmp_path / "elsewhere").read_bytes() == b"ctrA\r\neth0"
    finally:
        signal.alarm(0)


@pytest.mark.parametrize("kind", ["dangling symlink", "directory", "fifo"])
def test_odd_bookkeeping_files_neither_hang_nor_crash(tmp_path, kind):
    import signal
    signal.alarm(20)
    try:
        d = tmp_path / "net"
        d.mkdir()
        _make_odd(d / "last_reserved_ip.0", kind, tmp_path / "elsewhere")
        with Store(str(tmp_path), "net") as s:
            assert s.last_reserved(0) is None
            assert s.reserve(ip("10.0.0.2"), A)
            s.commit()
    finally:
        signal.alarm(0)


def test_a_nul_byte_in_data_dir_is_a_config_error(tmp_path):
    from skb.cni.errors import CNIError
    with pytest.raises(CNIError) as e:
        Store(str(tmp_path) + "\0x", "net")
    assert e.value.code == 7 and "ipam.dataDir" in e.value.msg


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


def test_last_reserved_is_rewritten_in_place_as_go_does(tmp_path):
    """One open, no new file: the same inode holds the new address (Go writes it in place too)."""
    with Store(str(tmp_path), "net") as s:
        s.set_last_reserved(0, ip("10.0.0.2"))
        s.commit()
    f = tmp_path / "net" / "last_reserved_ip.0"
    before = os.stat(f).st_ino
    with Store(str(tmp_path), "net") as s:
        s.set_last_reserved(0, ip("10.0.0.3"))
        s.commit()
    assert f.read_bytes() == b"10.0.0.3" and os.stat(f).st_ino == before


@pytest.mark.parametrize("kind", ["hardlink", "symlink", "fifo", "chardev"])
def test_last_reserved_is_never_written_through_a_planted_entry(tmp_path, kind):
    """A hard link or symlink to another file, or a FIFO, under the name: that other file keeps its
    content (nothing hangs), and the name becomes a regular file of our own holding the address."""
    d = tmp_path / "net"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    f = d / "last_reserved_ip.0"
    if kind == "hardlink":
        os.link(victim, f)
    elif kind == "symlink":
        os.symlink(victim, f)
    elif kind == "fifo":
        os.mkfifo(f)
    else:   # a device node (here a harmless one: /dev/null's numbers)
        os.mknod(f, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    with Store(str(tmp_path), "net") as s:
        s.set_last_reserved(0, ip("10.0.0.7"))
        s.commit()
    assert victim.read_bytes() == b"precious"
    st = os.lstat(f)
    assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and f.read_bytes() == b"10.0.0.7"


def _index_files(tmp_path):
    return sorted(n for n in os.listdir(tmp_path / "net" / ".skb") if n.startswith("index"))


def test_one_index_file_remains_and_nothing_in_scratch(tmp_path):
    for i in range(5):
        with Store(str(tmp_path), "net") as s:
            assert s.reserve(ip(f"10.0.0.{i + 2}"), A)
            s.commit()
    assert len(_index_files(tmp_path)) == 1
    assert os.listdir(tmp_path / "net" / ".skb" / "tmp") == []


def test_an_index_cut_short_is_not_trusted(tmp_path):
    """The header says how long the body is: an index that lost its end (a crash while it was written)
    would hide a reservation from DEL; it is rebuilt from the files instead."""
    with Store(str(tmp_path), "net") as s:
        assert s.reserve(ip("10.0.0.2"), A) and s.reserve(ip("10.0.0.3"), B)
        s.commit()
    (name,) = _index_files(tmp_path)
    f = tmp_path / "net" / ".skb" / name
    st = os.stat(tmp_path / "net")
    data = f.read_bytes()
    lines = data.split(b"\n")
    kept = b"\n".join(line for line in lines if b"ctrB" not in line)
    assert kept != data
    f.write_bytes(kept)
    os.utime(tmp_path / "net", ns=(st.st_atime_ns, st.st_mtime_ns))  # the stamp still matches
    with Store(str(tmp_path), "net") as s:
        assert s.owned(B) == [ip("10.0.0.3")]


def test_a_stale_second_index_is_ignored_then_removed(tmp_path):
    """Killed between writing the new index and removing the old one: the one whose stamp is the
    directory's mtime is used, and the next write leaves only its own."""
    with Store(str(tmp_path), "net") as s:
        assert s.reserve(ip("10.0.0.2"), A)
        s.commit()
    (old,) = _index_files(tmp_path)
    stale = (tmp_path / "net" / ".skb" / old).read_bytes()
    with Store(str(tmp_path), "net") as s:
        s.release(ip("10.0.0.2"), A)
        assert s.reserve(ip("10.0.0.4"), B)
        s.commit()
    # the earlier index, back under a name that carries the directory's current stamp and sorts first: its
    # header (an older stamp) is what rules it out
    mtime = os.stat(tmp_path / "net").st_mtime_ns
    (tmp_path / "net" / ".skb" / f"index.{mtime}.0").write_bytes(stale)
    st = os.stat(tmp_path / "net")
    os.utime(tmp_path / "net", ns=(st.st_atime_ns, mtime))
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [] and s.owned(B) == [ip("10.0.0.4")]
        assert s.reserve(ip("10.0.0.5"), A)
        s.commit()
    assert len(_index_files(tmp_path)) == 1


def test_last_reserved_shorter_address_is_cut_to_length(tmp_path):
    """A shorter address rewritten over a longer one: the file holds exactly the new one (what Go reads
    back), in the same inode."""
    with Store(str(tmp_path), "net") as s:
        s.set_last_reserved(0, ip("10.0.0.100"))
        s.commit()
    f = tmp_path / "net" / "last_reserved_ip.0"
    before = os.stat(f).st_ino
    with Store(str(tmp_path), "net") as s:
        assert s.last_reserved(0) == ip("10.0.0.100")
        s.set_last_reserved(0, ip("10.0.0.99"))
        s.commit()
    assert f.read_bytes() == b"10.0.0.99" and os.stat(f).st_ino == before
    with Store(str(tmp_path), "net") as s:
        assert s.last_reserved(0) == ip("10.0.0.99")


def test_a_previous_versions_index_is_ignored_then_removed(tmp_path):
    """An index left by an earlier release (.skb/index, another format) that would claim a reservation
    for A: never read; the next write removes it."""
    with Store(str(tmp_path), "net") as s:
        assert s.reserve(ip("10.0.0.2"), B)
        s.commit()
    d = tmp_path / "net"
    st = os.stat(d)
    (d / ".skb" / "index").write_bytes(b"skb-host-local-index-v3 %d\nctrA\teth0\t10.0.0.2\n" % st.st_mtime_ns)
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [] and s.owned(B) == [ip("10.0.0.2")]
        assert s.reserve(ip("10.0.0.3"), A)
        s.commit()
    assert "index" not in os.listdir(d / ".skb") and len(_index_files(tmp_path)) == 1


def test_odd_last_reserved_names_are_left_alone(tmp_path):
    """Names like last_reserved_ip.N whose N is not plain ASCII digits ("²" is a digit to str.isdigit)
    are not range sets: the rebuild's scan skips them instead of failing."""
    d = tmp_path / "net"
    d.mkdir()
    (d / "last_reserved_ip.\u00b2").write_bytes(b"10.0.0.9")
    (d / "last_reserved_ip.\u0663").write_bytes(b"10.0.0.9")
    (d / "10.0.0.4").write_bytes(b"ctrA\r\neth0")
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [ip("10.0.0.4")]
        assert s.reserve(ip("10.0.0.5"), B)
        s.commit()


def test_a_failed_index_write_leaves_no_partial_file(tmp_path, monkeypatch):
    """The disk fills while the index is written (the journal's record, or a whole new index file): the
    call fails with the cause, and no part-written record or file remains (the index is byte for byte
    what it was); the next call, seeing the directory changed since, rebuilds."""
    import errno

    from skb.cni.errors import CNIError
    from skb_plugins.hostlocal_ipam import index
    with Store(str(tmp_path), "net") as s:
        assert s.reserve(ip("10.0.0.2"), A)
        s.commit()
    real_write, real_pwrite = os.write, os.pwrite

    def full(fd, data, *offset):
        (real_pwrite(fd, bytes(data[:10]), *offset) if offset else real_write(fd, bytes(data[:10])))
        raise OSError(errno.ENOSPC, "No space left on device")
    for fold_at in (index.FOLD_AT, 1):    # appended to the journal; folded into a new file
        monkeypatch.setattr(index, "FOLD_AT", fold_at)
        with Store(str(tmp_path), "net") as s:
            (name,) = _index_files(tmp_path)
            before = (tmp_path / "net" / ".skb" / name).read_bytes()
            assert s.reserve(ip("10.0.0.3"), B)
            monkeypatch.setattr(os, "write", full)
            monkeypatch.setattr(os, "pwrite", full)
            with pytest.raises(CNIError) as e:
                s.commit()
            monkeypatch.setattr(os, "write", real_write)
            monkeypatch.setattr(os, "pwrite", real_pwrite)
            s.release(ip("10.0.0.3"), B)
        assert "No space left" in e.value.msg
        assert _index_files(tmp_path) == [name] and (tmp_path / "net" / ".skb" / name).read_bytes() == before
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [ip("10.0.0.2")] and s.owned(B) == []


def test_a_scratch_file_that_cannot_be_removed_does_not_undo_a_reservation(tmp_path, monkeypatch):
    """Review 15: removing the scratch file after link() failed (EIO), so the ADD failed with the address
    already reserved on disk, and its index (committed anyway) did not know it: DEL never released it."""
    import errno

    real_unlink = os.unlink

    def unlink(name, *, dir_fd=None):
        if str(name).startswith("r"):     # the scratch files reserve() writes in .skb/tmp
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_unlink(name, dir_fd=dir_fd)

    with Store(str(tmp_path), "net") as s:
        monkeypatch.setattr(os, "unlink", unlink)
        assert s.reserve(ip("10.0.0.2"), A)
        monkeypatch.setattr(os, "unlink", real_unlink)
        s.commit()
    assert (tmp_path / "net" / "10.0.0.2").read_bytes() == b"ctrA\r\neth0"
    with Store(str(tmp_path), "net") as s:
        assert s.owned(A) == [ip("10.0.0.2")]
        s.release(ip("10.0.0.2"), A)
        s.commit()
    assert not (tmp_path / "net" / "10.0.0.2").exists()
    assert os.listdir(tmp_path / "net" / ".skb" / "tmp") == []   # the next open cleared the scratch file
