"""skb.linux.files: the one way a plugin opens a file a configuration names. Never blocks, never opens a
device, never creates through a dangling link, reads with a bound; errors name the key and the path."""
import os
import socket

import pytest

from skb.cni.errors import CNIError
from skb.linux import files


def err(fn, *a, **kw):
    with pytest.raises(CNIError) as ei:
        fn(*a, **kw)
    return ei.value


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "fifo"
    os.mkfifo(p)
    return str(p)


def test_reads_a_regular_file_and_follows_a_link_to_one(tmp_path):
    f = tmp_path / "resolv.conf"
    f.write_bytes(b"nameserver 10.0.0.1\n")
    (tmp_path / "link").symlink_to(f)
    assert files.read_regular(str(f), "ipam.resolvConf", 100) == b"nameserver 10.0.0.1\n"
    assert files.read_regular(str(tmp_path / "link"), "ipam.resolvConf", 100) == b"nameserver 10.0.0.1\n"


@pytest.mark.parametrize("path,kind", [("/dev/zero", "a character device"), ("/dev/null", "a character device"),
                                       ("/", "a directory")])
def test_read_refuses_what_is_not_a_regular_file(path, kind):
    e = err(files.read_regular, path, "ipam.resolvConf", 100)
    assert e.code == 7 and "ipam.resolvConf" in e.msg and repr(path) in e.msg and kind in e.msg


def test_fifos_are_refused_without_blocking_with_or_without_a_peer(fifo):
    for fn in (lambda: files.read_regular(fifo, "k", 10), lambda: files.open_append(fifo, "k")):
        assert "a FIFO" in err(fn).msg
    # with a peer holding the other end (an open would then succeed), still refused
    peer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        assert "a FIFO" in err(files.open_append, fifo, "skbDebugLog").msg
        assert "a FIFO" in err(files.read_regular, fifo, "k", 10).msg
    finally:
        os.close(peer)


def test_a_unix_socket_is_refused(tmp_path):
    p = str(tmp_path / "sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)
    try:
        assert "a socket" in err(files.open_append, p, "captureFile").msg
    finally:
        s.close()


def test_reads_are_bounded(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * 101)
    e = err(files.read_regular, str(f), "ipam.resolvConf", 100)
    assert e.code == 7 and "larger than 100 bytes" in e.msg
    f.write_bytes(b"x" * 100)
    assert len(files.read_regular(str(f), "ipam.resolvConf", 100)) == 100


@pytest.mark.parametrize("path,words", [("rel/x", "relative path"), ("", "expected a file path"),
                                        ("/tmp/a\0b", "NUL byte"), (5, "expected a file path")])
def test_bad_path_values_are_code_7_naming_the_key(path, words):
    for fn in (lambda: files.read_regular(path, "ipam.resolvConf", 10), lambda: files.append(path, "cniOutput", b"x")):
        e = err(fn)
        assert e.code == 7 and words in e.msg


def test_missing_file_is_code_7_and_missing_dir_too(tmp_path):
    e = err(files.read_regular, str(tmp_path / "none"), "ipam.resolvConf", 10)
    assert e.code == 7 and "No such file" in e.msg
    e = err(files.append, str(tmp_path / "no" / "dir"), "cniOutput", b"x")
    assert e.code == 7 and "cniOutput" in e.msg


def test_append_creates_with_mode_and_appends(tmp_path):
    p = tmp_path / "log"
    files.append(str(p), "skbDebugLog", b"one\n", 0o600)
    files.append(str(p), "skbDebugLog", b"two\n", 0o644)
    assert p.read_bytes() == b"one\ntwo\n" and p.stat().st_mode & 0o777 == 0o600


def test_append_never_creates_through_a_dangling_link(tmp_path):
    target = tmp_path / "elsewhere" / "created"
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "log"
    link.symlink_to(target)
    e = err(files.append, str(link), "skbDebugLog", b"x")
    assert e.code == 7 and "symbolic link to a missing file" in e.msg
    assert not target.exists()


def test_append_through_a_link_to_a_regular_file(tmp_path):
    target = tmp_path / "real"
    target.write_bytes(b"a")
    (tmp_path / "log").symlink_to(target)
    files.append(str(tmp_path / "log"), "skbDebugLog", b"b")
    assert target.read_bytes() == b"ab"


def test_a_directory_is_refused_for_append(tmp_path):
    e = err(files.append, str(tmp_path), "captureFile", b"x")
    assert e.code == 7 and "a directory" in e.msg and "captureFile" in e.msg


def test_unreadable_is_an_io_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads everything")
    f = tmp_path / "f"
    f.write_bytes(b"x")
    f.chmod(0)
    assert err(files.read_regular, str(f), "k", 10).code == 5


def test_no_descriptor_leaks(tmp_path, fifo):
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        for fn in (lambda: files.append(fifo, "k", b"x"), lambda: files.read_regular("/dev/zero", "k", 1),
                   lambda: files.append(str(tmp_path), "k", b"x")):
            err(fn)
        files.append(str(tmp_path / "ok"), "k", b"x")
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_fifo_swapped_in_after_the_stat_is_caught_by_fstat(tmp_path, monkeypatch):
    """The race the O_NONBLOCK open and the fstat are there for: the path changes between stat and open."""
    p = str(tmp_path / "log")
    open(p, "w").close()
    real_open = os.open

    def swap(path, flags, *a):
        if path == p:
            os.unlink(p)
            os.mkfifo(p)
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", swap)
    with pytest.raises(CNIError) as ei:
        files.read_regular(p, "ipam.resolvConf", 10)
    assert "a FIFO" in ei.value.msg
