"""host-local's index journal: appended, folded at its bound, never trusted past what the files say.

The oracles are the files: reservation files read straight from the directory, and the index file parsed
here from its bytes (independently of plugins/hostlocal_ipam/index.py). Kills are real SIGKILLs of a
forked process, at every write, link, unlink, rename, utime and truncate of a scenario, and half-way
through every write."""
import json
import os
import signal
import stat
import traceback

import pytest

from skb.cni.addr import IP
from skb_plugins.hostlocal_ipam import index
from skb_plugins.hostlocal_ipam.store import Store

NET = "net"


def ip(s):
    return IP.parse(s)


# -- oracles -----------------------------------------------------------------------------------------
def disk(d):
    """{owner: sorted addresses} read straight from the reservation files."""
    out = {}
    for n in os.listdir(d):
        p = os.path.join(d, n)
        if n == "lock" or n.startswith((".", "last_reserved_ip.")) or not stat.S_ISREG(os.lstat(p).st_mode):
            continue
        with open(p, "rb") as f:
            cid, _, ifname = f.read().partition(b"\r\n")
        out.setdefault((cid.decode(), ifname.decode()), []).append(n)
    return {o: sorted(v) for o, v in out.items()}


def index_files(d):
    return sorted(n for n in os.listdir(os.path.join(d, ".skb")) if n.startswith("index"))


def parsed(d):
    """The single index file of ``d``, parsed here: (its base's lines, its journal's lines, what it says
    each owner holds as {owner: sorted addresses}). Asserts the file's own invariants on the way."""
    (name,) = index_files(d)
    with open(os.path.join(d, ".skb", name), "rb") as f:
        data = f.read()
    header, _, rest = data.partition(b"\n")
    magic, stamp, length = header.split()[:3]
    assert magic == b"skb-host-local-index-v5" and int(length) <= len(rest)
    base, journal = rest[:int(length)].splitlines(), rest[int(length):].splitlines()
    assert base == sorted(base)
    assert not journal or journal[-1].startswith(b"=") and data.endswith(b"\n")
    held = {tuple(x.split(b"\t")) for x in base}
    for x in journal:
        if x[:1] == b"+":
            held.add(tuple(x[1:].split(b"\t")))
        elif x[:1] == b"-":
            held.discard(tuple(x[1:].split(b"\t")))
        else:
            assert x[:1] in (b"L", b"="), x
    says = {}
    for cid, ifname, addr in held:
        says.setdefault((cid.decode(), ifname.decode()), []).append(addr.decode())
    return base, journal, {o: sorted(v) for o, v in says.items()}


def owned(d, owners):
    with Store(os.path.dirname(d), NET) as s:
        return {o: sorted(str(x) for x in s.owned(o)) for o in owners}


# -- one call of each kind, as hostlocal.py makes them ------------------------------------------------
def add(data, owner, addr):
    with Store(data, NET) as s:
        if s.owned(owner):
            return
        assert s.reserve(ip(addr), owner)
        s.set_last_reserved(0, ip(addr))
        s.commit()


def delete(data, owner):
    with Store(data, NET) as s:
        for x in s.owned(owner):
            s.release(x, owner)
        s.commit()


@pytest.fixture
def d(tmp_path):
    return str(tmp_path / NET)


def test_calls_append_records_to_one_file_and_never_rewrite_it(tmp_path, d):
    """Each call that changes something appends one record; the file (its inode) and everything before
    the new record stay as they were: what a call writes does not grow with the reservations."""
    for i in range(40):   # a base of 40 reservations
        add(str(tmp_path), (f"seed{i}", "eth0"), f"10.0.1.{i + 2}")
    with Store(str(tmp_path), NET) as s:    # fold what the seeding journaled
        s._index._fold(b"", s._index.stamp)
    (name,) = index_files(d)
    path = os.path.join(d, ".skb", name)
    for i in range(10):
        before = open(path, "rb").read()
        ino = os.stat(path).st_ino
        add(str(tmp_path), (f"c{i}", "eth0"), f"10.0.0.{i + 2}")
        after = open(path, "rb").read()
        assert os.stat(path).st_ino == ino and after.startswith(before) and 0 < len(after) - len(before) < 200
    delete(str(tmp_path), ("c3", "eth0"))
    base, journal, says = parsed(d)
    assert len(base) == 40 and len([x for x in journal if x.startswith(b"=")]) == 11
    assert says == disk(d)
    assert owned(d, [("c3", "eth0"), ("c4", "eth0"), ("seed7", "eth0")]) == {
        ("c3", "eth0"): [], ("c4", "eth0"): ["10.0.0.6"], ("seed7", "eth0"): ["10.0.1.9"]}


def test_a_journal_at_the_fold_bound(tmp_path, d, monkeypatch):
    """A journal exactly at FOLD_AT stays; one byte past it is folded into a new file with an empty
    journal (the old file is removed); a record larger than the bound is folded at once."""
    owners = [(f"c{i}", "eth0") for i in range(8)]
    for i, o in enumerate(owners[:4]):
        add(str(tmp_path), o, f"10.0.0.{i + 2}")
    _, journal, _ = parsed(d)
    size = sum(len(x) + 1 for x in journal)
    # again from scratch, with the bound at exactly that size
    other = tmp_path / "again"
    monkeypatch.setattr(index, "FOLD_AT", size)
    for i, o in enumerate(owners[:4]):
        add(str(other), o, f"10.0.0.{i + 2}")
    at_bound = index_files(str(other / NET))
    _, journal, says = parsed(str(other / NET))
    assert sum(len(x) + 1 for x in journal) == size and says == disk(str(other / NET))
    add(str(other), owners[4], "10.0.0.6")             # past the bound: folded
    assert index_files(str(other / NET)) != at_bound
    base, journal, says = parsed(str(other / NET))
    assert journal == [] and len(base) == 5 and says == disk(str(other / NET))
    # a record larger than the bound (a GC releasing many) goes straight into a new base
    monkeypatch.setattr(index, "FOLD_AT", 60)
    with Store(str(other), NET) as s:
        for x, o in s.scan().items():
            if o != owners[0]:
                s.release(x, o)
        s.commit()
    base, journal, says = parsed(str(other / NET))
    assert journal == [] and says == disk(str(other / NET)) == {owners[0]: ["10.0.0.2"]}
    assert owned(str(other / NET), owners) == {o: (["10.0.0.2"] if o == owners[0] else []) for o in owners}


GARBAGE = {
    "zeros": b"\0" * 4096,                                   # what a crash can leave past a file's end
    "random": bytes(range(256)) * 7,
    "torn record": b"+c9\teth0\t10.0.0.9\n=17",             # a killed writer's half record
    "commit line alone": b"\n=\n",
    "a record of the wrong length": b"+c9\teth0\t10.0.0.9\n=1 999\n",
    "no newline at all": b"x" * (index.FOLD_AT * 5),         # larger than any journal read
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_after_the_journal_is_ignored_then_cut(tmp_path, d, kind):
    """Bytes after the last complete record (the directory's mtime untouched, so the index is still
    the right one): ignored, no rebuild, and the next append cuts them off before writing."""
    for i in range(3):
        add(str(tmp_path), (f"c{i}", "eth0"), f"10.0.0.{i + 2}")
    (name,) = index_files(d)
    path = os.path.join(d, ".skb", name)
    good = open(path, "rb").read()
    st = os.stat(d)
    with open(path, "ab") as f:
        f.write(GARBAGE[kind])
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
    rebuilt = []
    real = Store.rebuild
    try:
        Store.rebuild = lambda self: rebuilt.append(1) or real(self)
        assert owned(d, [("c1", "eth0"), ("c9", "eth0")]) == {("c1", "eth0"): ["10.0.0.3"], ("c9", "eth0"): []}
        add(str(tmp_path), ("c3", "eth0"), "10.0.0.5")
    finally:
        Store.rebuild = real
    assert rebuilt == [] and index_files(d) == [name]
    data = open(path, "rb").read()
    assert data.startswith(good) and GARBAGE[kind][:8] not in data[len(good):]
    assert parsed(d)[2] == disk(d)


def test_a_changed_directory_is_noticed_after_records_and_folds(tmp_path, d, monkeypatch):
    """With a journal full of records (and folds behind it), a change by hand or by Go still makes the
    next call rebuild: the last record's stamp is no longer the directory's mtime."""
    monkeypatch.setattr(index, "FOLD_AT", 200)
    for i in range(12):
        add(str(tmp_path), (f"c{i}", "eth0"), f"10.0.0.{i + 2}")
    os.unlink(os.path.join(d, "10.0.0.4"))                      # c2's, by hand
    with open(os.path.join(d, "10.0.0.99"), "wb") as f:        # and what Go writes
        f.write(b"c2\r\neth0")
    assert owned(d, [("c2", "eth0"), ("c3", "eth0")]) == {("c2", "eth0"): ["10.0.0.99"], ("c3", "eth0"): ["10.0.0.5"]}
    delete(str(tmp_path), ("c2", "eth0"))
    assert not os.path.exists(os.path.join(d, "10.0.0.99")) and parsed(d)[2] == disk(d)


def test_a_rewritten_last_reserved_recorded_in_the_journal_is_noticed(tmp_path, d):
    """The journal records last_reserved_ip.0 as our calls wrote it; Go rewriting it in place (no
    mtime change, as when Go and we share a clock tick) makes the next call rebuild."""
    for i in range(3):
        add(str(tmp_path), (f"c{i}", "eth0"), f"10.0.0.{i + 2}")
    st = os.stat(d)
    with open(os.path.join(d, "10.0.0.50"), "wb") as f:
        f.write(b"goctr\r\neth0")
    with open(os.path.join(d, "last_reserved_ip.0"), "r+b") as f:
        f.write(b"10.0.0.50")
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))    # the worst case: the stamp fooled
    assert owned(d, [("goctr", "eth0")]) == {("goctr", "eth0"): ["10.0.0.50"]}


def test_an_index_of_the_previous_format_is_not_read(tmp_path, d):
    """The previous release's index (format v4: a whole file per call, named by the directory's stamp),
    stamped with the current mtime and claiming an address for another owner: never believed."""
    add(str(tmp_path), ("c0", "eth0"), "10.0.0.2")
    (name,) = index_files(d)
    os.unlink(os.path.join(d, ".skb", name))
    st = os.stat(d)
    body = b"ctrX\teth0\t10.0.0.2\n"
    with open(os.path.join(d, ".skb", f"index.{st.st_mtime_ns}.1"), "wb") as f:
        f.write(b"skb-host-local-index-v4 %d %d \n" % (st.st_mtime_ns, len(body)) + body)
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert owned(d, [("c0", "eth0"), ("ctrX", "eth0")]) == {("c0", "eth0"): ["10.0.0.2"], ("ctrX", "eth0"): []}
    add(str(tmp_path), ("c1", "eth0"), "10.0.0.3")
    assert parsed(d)[2] == disk(d)


def test_a_foreign_owner_with_a_newline_never_reaches_the_journal(tmp_path, d):
    """A reservation file whose container id holds a newline and what looks like a journal line (no
    runtime passes such an id; a file can hold one): GC releases it, and the journal stays what we wrote,
    one line per change (that line, journaled, hid c0's address from the index: a DEL would leak it)."""
    add(str(tmp_path), ("c0", "eth0"), "10.0.0.2")
    with open(os.path.join(d, "10.0.0.3"), "wb") as f:
        f.write(b"evil\n-c0\teth0\t10.0.0.2\nx\r\neth0")    # a line that would release c0's address
    with Store(str(tmp_path), NET) as s:
        for x, o in s.scan().items():
            if o != ("c0", "eth0"):
                s.release(x, o)
        s.commit()
    assert not os.path.exists(os.path.join(d, "10.0.0.3"))
    assert parsed(d)[2] == disk(d) == {("c0", "eth0"): ["10.0.0.2"]}
    assert owned(d, [("c0", "eth0")]) == {("c0", "eth0"): ["10.0.0.2"]}


def test_a_filesystem_that_cannot_keep_the_stamp_rebuilds_every_call(tmp_path, d, monkeypatch):
    monkeypatch.setattr(index.Index, "stamp_directory", lambda self: None)
    rebuilt = []
    real = Store.rebuild
    monkeypatch.setattr(Store, "rebuild", lambda self: rebuilt.append(1) or real(self))
    for i in range(3):
        add(str(tmp_path), (f"c{i}", "eth0"), f"10.0.0.{i + 2}")
    assert len(rebuilt) == 3
    assert owned(d, [("c1", "eth0")]) == {("c1", "eth0"): ["10.0.0.3"]}


@pytest.mark.parametrize("kind", ["symlink to a directory", "file", "dangling symlink", "fifo"])
@pytest.mark.parametrize("where", [".skb", ".skb/tmp"])
def test_our_directories_are_never_followed(tmp_path, d, kind, where):
    """Something else under .skb or .skb/tmp: replaced by our own directory; what a symlink points to
    (here a directory holding files, as /tmp would) is never listed, written or cleared."""
    os.makedirs(os.path.join(d, ".skb"))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_bytes(b"keep")
    (victim / "tmp").mkdir()
    (victim / "tmp" / "r1").write_bytes(b"keep")
    path = os.path.join(d, where)
    if os.path.isdir(path):
        os.rmdir(path)
    if kind == "symlink to a directory":
        os.symlink(victim, path)
    elif kind == "file":
        open(path, "wb").close()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/nonexistent/skb-test", path)
    signal.alarm(20)     # a FIFO opened for reading would block: fail instead
    try:
        add(str(tmp_path), ("c0", "eth0"), "10.0.0.2")
    finally:
        signal.alarm(0)
    assert sorted(os.listdir(victim)) == ["precious", "tmp"] and os.listdir(victim / "tmp") == ["r1"]
    for p in (os.path.join(d, ".skb"), os.path.join(d, ".skb", "tmp")):
        assert stat.S_ISDIR(os.lstat(p).st_mode)
    assert parsed(d)[2] == disk(d) == {("c0", "eth0"): ["10.0.0.2"]}


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "device", "huge sparse", "no header"])
def test_odd_index_files_neither_hang_nor_mislead(tmp_path, d, kind):
    """Entries named like index files with the newest stamp: never opened for blocking, followed, or
    believed; the call answers from the files and the next write removes them."""
    signal.alarm(20)
    try:
        add(str(tmp_path), ("c0", "eth0"), "10.0.0.2")
        odd = os.path.join(d, ".skb", "index.%d.1" % (10 ** 20))
        if kind == "fifo":
            os.mkfifo(odd)
        elif kind == "symlink":
            (tmp_path / "elsewhere").write_bytes(b"skb-host-local-index-v5 1 0 \n=1 0\n")
            os.symlink(tmp_path / "elsewhere", odd)
        elif kind == "directory":
            os.mkdir(odd)
        elif kind == "device":      # /dev/null's numbers: harmless even if it were opened
            os.mknod(odd, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        elif kind == "huge sparse":
            with open(odd, "wb") as f:
                f.truncate(1 << 34)
        else:
            with open(odd, "wb") as f:
                f.write(b"ctrX\teth0\t10.0.0.2\n")
        assert owned(d, [("c0", "eth0"), ("ctrX", "eth0")]) == {("c0", "eth0"): ["10.0.0.2"], ("ctrX", "eth0"): []}
        add(str(tmp_path), ("c1", "eth0"), "10.0.0.3")
        assert kind == "directory" or not os.path.lexists(odd)
        assert (tmp_path / "elsewhere").exists() if kind == "symlink" else True
    finally:
        signal.alarm(0)


# -- 60,000 reservations ------------------------------------------------------------------------------
def _fill(d, n):
    os.makedirs(d)
    for i in range(n):
        v = (10 << 24) | (1 << 16) | (i + 2)
        with open(os.path.join(d, f"10.1.{(v >> 8) & 255}.{v & 255}"), "wb") as f:
            f.write(f"fill{i}\r\neth0".encode())


def test_60000_reservations(tmp_path, d, monkeypatch):
    """Correctness at scale (not speed): owners whose lines sit at the base's edges, owners whose ids
    are prefixes of others', a 4,000-character id, an owner with 1,500 addresses (a block longer than a
    read), the legacy id-only form; ADDs and DELs across folds; the index against the files."""
    _fill(d, 60000)
    odd = {("fill1", "eth01"): "10.9.0.1", ("fill1", "eth"): "10.9.0.2", ("fill", "eth0"): "10.9.0.3",
           ("x" * 4000, "eth0"): "10.9.0.4", ("legacy", ""): "10.9.0.5", ("0", "eth0"): "10.9.0.6",
           ("~~~", "eth0"): "10.9.0.7"}
    for (cid, ifname), addr in odd.items():
        with open(os.path.join(d, addr), "wb") as f:
            f.write(f"{cid}\r\n{ifname}".encode() if ifname else cid.encode())
    for i in range(1500):
        with open(os.path.join(d, f"10.8.{i // 250}.{i % 250 + 1}"), "wb") as f:
            f.write(b"many\r\neth0")
    truth = disk(d)
    sample = [(f"fill{i}", "eth0") for i in (0, 1, 9, 10, 11, 100, 29999, 30000, 59998, 59999)] + \
        list(odd) + [("many", "eth0"), ("fill60000", "eth0"), ("fill1", "eth0 "), ("", "eth0")]
    assert owned(d, sample) == {o: truth.get(o, []) for o in sample}
    monkeypatch.setattr(index, "FOLD_AT", 2000)      # a few folds within the calls below
    for i in range(0, 60000, 997):
        delete(os.path.dirname(d), (f"fill{i}", "eth0"))
        add(os.path.dirname(d), (f"new{i}", "eth0"), f"10.7.{i // 250 % 250}.{i % 250 + 1}")
    delete(os.path.dirname(d), ("many", "eth0"))
    truth = disk(d)
    assert len(truth) == 60000 + len(odd) and ("many", "eth0") not in truth
    assert parsed(d)[2] == truth
    check = sample + [(f"{kind}{i}", "eth0") for kind in ("new", "fill") for i in range(0, 60000, 997)]
    assert owned(d, check) == {o: truth.get(o, []) for o in check}


def test_a_call_at_60000_reads_and_writes_little(tmp_path, d):
    """What a call costs in I/O (the kernel's count of bytes this process read and wrote, not time):
    the same with 60,000 reservations as with none, and nothing like the 2 MB index it used to rewrite."""
    def io():
        with open("/proc/self/io") as f:
            fields = dict(x.split(": ") for x in f.read().splitlines())
        return int(fields["rchar"]), int(fields["wchar"])

    def pair_cost(data, i):
        before = io()
        add(data, (f"probe{i}", "eth0"), f"10.3.0.{i + 2}")
        delete(data, (f"probe{i}", "eth0"))
        after = io()
        return after[0] - before[0], after[1] - before[1]
    _fill(d, 60000)
    empty = str(tmp_path / "empty")
    for data in (str(tmp_path), empty):
        pair_cost(data, 99)    # the first call rebuilds (60,000 files read once)
    big = [pair_cost(str(tmp_path), i) for i in range(20)]
    small = [pair_cost(empty, i) for i in range(20)]
    size = os.path.getsize(os.path.join(d, ".skb", index_files(d)[0]))
    assert size > 1_000_000    # the base, as big as the index every call used to read and rewrite
    for (r, w), (r0, w0) in zip(big, small):
        assert w < 2048 and w - w0 < 256, (w, w0)
        assert r < 64 * 1024 + 4 * index.FOLD_AT and r - r0 < 48 * 1024, (r, r0)


# -- killed at every step ----------------------------------------------------------------------------
MUTATIONS = ("write", "pwrite", "link", "unlink", "rename", "utime", "ftruncate", "mkdir")


def _fork(fn):
    """Start ``fn`` in a forked child; ``_reap`` gives its outcome."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            out = json.dumps(fn()).encode()
            os.write(w, out)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _reap(child):
    """(exit code, or -signal; what the child's function returned)."""
    pid, r = child
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), json.loads(b"".join(chunks) or b"null")


def _forked(fn):
    return _reap(_fork(fn))


def _armed(step, torn):
    """From now on, SIGKILL this process at the ``step``-th mutating call (half of the bytes written first,
    when ``torn`` and the call is a write). Returns the counter."""
    count = []
    for name in MUTATIONS:
        def wrapped(*a, _real=getattr(os, name), _name=name, **kw):
            count.append(_name)
            if len(count) == step:
                if torn and _name in ("write", "pwrite"):
                    data = bytes(a[1])
                    _real(a[0], data[:len(data) // 2], *a[2:])
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*a, **kw)
        setattr(os, name, wrapped)
    return count


OWNERS = [(f"c{i}-" + "x" * 20, "eth0") for i in range(10)] + [("go1", "eth0"), ("go2", "eth0")]


def _scenario(data):
    """ADDs and DELs through several folds (FOLD_AT 300), and a GC whose record is folded at once."""
    index.FOLD_AT = 300
    for i, o in enumerate(OWNERS[:10]):
        add(data, o, f"10.0.0.{i + 10}")
    for o in OWNERS[:10:3]:
        delete(data, o)
    add(data, OWNERS[0], "10.0.0.40")
    with Store(data, NET) as s:    # GC of everything but c1..c3
        for x, o in s.scan().items():
            if o not in OWNERS[1:4]:
                s.release(x, o)
        s.commit()
    add(data, OWNERS[4], "10.0.0.41")


def _seed(d):
    os.makedirs(d)
    for n, o in (("10.0.0.2", OWNERS[10]), ("10.0.0.3", OWNERS[11])):   # Go's, before we ever ran
        with open(os.path.join(d, n), "wb") as f:
            f.write(f"{o[0]}\r\n{o[1]}".encode())


def test_sigkill_at_every_step_leaves_a_store_that_answers_true(tmp_path, monkeypatch):
    """A SIGKILL before each mutating system call of the scenario, and half-way through each write: no
    reservation file is ever torn; a fresh call's answers are the files' for every owner; after its
    commit one index file remains, it agrees with the files, and the scratch directory is empty."""
    monkeypatch.setattr(index, "FOLD_AT", 300)
    probe = tmp_path / "probe"
    _seed(str(probe / NET))

    def count_steps():
        count = _armed(0, False)
        _scenario(str(probe))
        return count
    code, steps = _forked(count_steps)
    assert code == 0 and len(steps) > 60 and steps.count("pwrite") > 10
    runs = [(k, False) for k in range(1, len(steps) + 1)] + \
        [(k, True) for k, name in enumerate(steps, 1) if name in ("write", "pwrite")]
    killed = 0
    for k, torn in runs:
        data = str(tmp_path / f"k{k}{'t' if torn else ''}")
        d = os.path.join(data, NET)
        _seed(d)

        def run():
            _armed(k, torn)
            _scenario(data)
        code, _ = _forked(run)
        killed += code == -signal.SIGKILL
        for n in os.listdir(d):          # no torn reservation: each names one of ours or Go's
            p = os.path.join(d, n)
            if n[0].isdigit() and stat.S_ISREG(os.lstat(p).st_mode):
                cid, _, ifname = open(p, "rb").read().partition(b"\r\n")
                assert (cid.decode(), ifname.decode()) in OWNERS, (k, torn, n)
        truth = disk(d)
        assert owned(d, OWNERS) == {o: truth.get(o, []) for o in OWNERS}, (k, torn)
        add(data, ("after", "eth0"), "10.0.0.99")
        assert len(index_files(d)) == 1 and os.listdir(os.path.join(d, ".skb", "tmp")) == [], (k, torn)
        assert parsed(d)[2] == disk(d), (k, torn)
    assert killed == len(runs)


# -- processes racing ---------------------------------------------------------------------------------
def test_processes_racing_keep_one_true_journal(tmp_path, d):
    """Three processes ADD and DEL at once, under the lock, across folds: every address is held once,
    each process's view of its own attachments is what the files say, the index agrees with the files,
    and no call had to rebuild (each trusted the journal the others appended to)."""
    add(str(tmp_path), ("init", "eth0"), "10.0.0.2")
    r, w = os.pipe()

    def racer(n):
        def run():
            index.FOLD_AT = 400
            rebuilt = []
            real = Store.rebuild
            Store.rebuild = lambda self: rebuilt.append(1) or real(self)
            os.read(r, 1)     # start together
            mine = {}
            for j in range(60):
                o = (f"p{n}-{j % 7}", "eth0")
                if o in mine:
                    delete(str(tmp_path), o)
                    del mine[o]
                    continue
                with Store(str(tmp_path), NET) as s:
                    assert s.owned(o) == []
                    free = (ip(f"10.0.0.{k}") for k in range(3, 250))
                    got = next(x for x in free if s.is_free(x) and s.reserve(x, o))
                    s.set_last_reserved(0, got)
                    s.commit()
                mine[o] = str(got)
            return {"mine": {o[0]: a for o, a in mine.items()}, "rebuilt": len(rebuilt)}
        return run
    children = [_fork(racer(n)) for n in range(3)]
    os.write(w, b"go!")
    results = [_reap(c) for c in children]
    assert all(code == 0 for code, _ in results), results
    assert sum(out["rebuilt"] for _, out in results) == 0
    want = {(cid, "eth0"): [a] for _, out in results for cid, a in out["mine"].items()}
    want[("init", "eth0")] = ["10.0.0.2"]
    assert disk(d) == want and parsed(d)[2] == want
