"""The words messages are made of (skb.cni.errors): a JSON value described, a string quoted for a message,
Go's %q; and the file-kind names and the bounded reader of skb.linux.files."""
import os

import pytest

from skb.cni.errors import describe, go_quote, quote
from skb.linux import files


@pytest.mark.parametrize("value,words", [
    (None, "null"), (True, "true"), (False, "false"), (5, "the number 5"), (1.5, "the number 1.5"),
    (2 ** 64, "a number too large for 64 bits"), (2 ** 63, "the number 9223372036854775808"),
    ("x", 'the string "x"'), ({}, "an object"), ([], "a list"),
])
def test_describe_names_each_json_kind(value, words):
    assert describe(value) == words


def test_quote_escapes_and_cuts_for_one_line():
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\u000ad"'
    assert quote("x" * 81) == '"' + "x" * 77 + '..."' and quote("x" * 80) == '"' + "x" * 80 + '"'


# Expected values are Go's strconv.Quote outputs (the %q of fmt), from its documented rules: printable
# runes as they are, \a \b \f \n \r \t \v, \xHH below space and for DEL, \uHHHH and \UHHHHHHHH otherwise.
@pytest.mark.parametrize("s,want", [
    ("", '""'),
    ('"Fran & Freddie\'s Diner\t\u263a"', '"\\"Fran & Freddie\'s Diner\\t\u263a\\""'),
    ("a\\b", '"a\\\\b"'),
    ("\x00\x07\x08\x0c\x0b\x1f\x7f", '"\\x00\\a\\b\\f\\v\\x1f\\x7f"'),
    ("\u00a0", '"\\u00a0"'),                    # no-break space: a separator, not printable
    ("\u200b\u2028", '"\\u200b\\u2028"'),
    ("\U000e0001", '"\\U000e0001"'),
    ("caf\u00e9 \U0001F600", '"caf\u00e9 \U0001F600"'),
    (b"\xffok".decode("utf-8", "surrogateescape"), '"\\xffok"'),   # a byte that is not UTF-8
])
def test_go_quote_is_strconv_quote(s, want):
    assert go_quote(s) == want


@pytest.mark.parametrize("mode,name", [
    (0o100644, "a regular file"), (0o040755, "a directory"), (0o010644, "a FIFO (named pipe)"),
    (0o020666, "a character device"), (0o060660, "a block device"), (0o140755, "a socket"),
    (0o120777, "a symbolic link"), (0o000000, "a special file"),
])
def test_kind_name(mode, name):
    assert files.kind_name(mode) == name


@pytest.mark.parametrize("size,limit", [(0, None), (10, None), (200000, None), (200000, 70000), (10, 10),
                                        (11, 10), (10, 0)])
def test_read_bounded_reads_to_the_end_or_the_limit(tmp_path, size, limit):
    data = os.urandom(size)
    p = tmp_path / "f"
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    try:
        got = files.read_bounded(fd, limit, size_hint=size if size < 100 else 0)
    finally:
        os.close(fd)
    assert got == data[:limit] if limit is not None else got == data


def _read_recorded(tmp_path, monkeypatch, data, *args, most=None, **kw):
    """read_bounded(fd of a file holding ``data``, *args, **kw), and the size each os.read asked for; with
    ``most``, a read returns at most that many bytes (a pipe or a slow file: part of what was asked for)."""
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    asked, real = [], os.read
    monkeypatch.setattr(os, "read", lambda fd, n: asked.append(n) or real(fd, n if most is None else min(n, most)))
    try:
        return files.read_bounded(fd, *args, **kw), asked
    finally:
        monkeypatch.undo()
        os.close(fd)


def test_read_bounded_reads_64_kib_at_a_time_without_a_size(tmp_path, monkeypatch):
    data = os.urandom(150000)
    # 64 KiB, 64 KiB, the rest, then the end
    assert _read_recorded(tmp_path, monkeypatch, data) == (data, [65536] * 4)


def test_read_bounded_with_the_size_reads_it_in_one_read_and_sees_the_end(tmp_path, monkeypatch):
    data = os.urandom(100000)
    assert _read_recorded(tmp_path, monkeypatch, data, size_hint=len(data)) == (data, [100001, 100001])


def test_read_bounded_takes_the_limit_to_its_last_byte_from_short_reads(tmp_path, monkeypatch):
    # and no read once the limit is reached
    assert _read_recorded(tmp_path, monkeypatch, b"abcdefghijklmnop", 10, most=3) == (b"abcdefghij", [10, 7, 4, 1])


def test_write_all_writes_everything_into_a_pipe_that_takes_part_at_a_time():
    r, w = os.pipe()
    data = os.urandom(300000)     # more than a pipe holds: os.write returns short
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            files.write_all(w, data)
        finally:
            os._exit(0)
    os.close(w)
    got = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        got += chunk
    os.close(r)
    os.waitpid(pid, 0)
    assert got == data


def test_describe_names_a_non_json_value_by_its_type():
    assert (describe(b"x"), describe(object()), describe((1,))) == ("bytes", "object", "a list")


def test_quote_escapes_only_quotes_backslashes_and_the_unprintable():
    assert quote('X"\\\x00\u00e9') == '"X\\"\\\\\\u0000\u00e9"'


@pytest.mark.parametrize("s,want", [
    ("\udc80\udcff", "\\x80\\xff"),              # surrogateescape: the bytes 0x80 and 0xff
    ("\udc7f\udd00\ud800\udfff", "\\ufffd" * 4),   # other lone surrogates: the replacement character
    ("\ue000\U000e0001", "\\ue000\\U000e0001"),    # unprintable, just past the surrogates and past 16 bits
    ("\x1f\x7f", "\\x1f\\x7f"),
])
def test_go_quote_edges_of_each_escape(s, want):
    assert go_quote(s) == f'"{want}"'


def test_errno_reason_of_an_errno_without_a_name():
    from skb.cni.errors import errno_reason
    assert errno_reason(13) == "permission denied (EACCES)"
    assert errno_reason(9999) == "unknown error 9999 (9999)"


def test_a_cni_error_as_text_and_as_an_object():
    from skb.cni.errors import CNIError
    e = CNIError(7, "invalid field x", "fix x")
    assert (str(e), e.args, e.to_dict("1.1.0")) == ("invalid field x: fix x", ("invalid field x",),
                                                     {"cniVersion": "1.1.0", "code": 7, "msg": "invalid field x",
                                                      "details": "fix x"})
    bare = CNIError(4, "m")
    assert (str(bare), bare.to_dict(), repr(bare)) == ("m", {"code": 4, "msg": "m"}, "CNIError(4, 'm', '')")


def test_write_all_at_an_offset_goes_on_where_a_short_pwrite_stopped(tmp_path, monkeypatch):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 10)
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, at: real(fd, bytes(data[:3]), at))   # 3 bytes a call
    fd = os.open(p, os.O_RDWR)
    try:
        files.write_all(fd, b"abcdefgh", 4)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0      # pwrite: the file position is not moved
    finally:
        os.close(fd)
    assert p.read_bytes() == b"xxxxabcdefgh"
