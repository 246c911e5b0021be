"""skb's own index of host-local's reservations: which addresses an attachment holds, without reading
every reservation file. A cache, never the truth; docs/HOSTLOCAL.md gives the design and its reasons.

    <dataDir>/<network>/.skb/index.<stamp>.<pid>

    skb-host-local-index-v5 <stamp> <base length> <i>=<hex> ...\n   the header (<i>: last_reserved_ip.<i>)
    <id>\t<ifname>\t<ip>\n ...          the base: sorted, so an attachment's lines are found by bisection
    -<id>\t<ifname>\t<ip>\n             the journal: one record per call that changed something; its
    +<id>\t<ifname>\t<ip>\n             lines (released, reserved, last_reserved_ip.<i> rewritten),
    L<i> <hex>\n                        then its commit line
    =<stamp> <length of its lines>\n

A call reads the header and the journal (at most ``FOLD_AT`` bytes and a record), bisects the base with
a few pread()s and appends one record: its cost does not grow with the number of reservations. A journal
past ``FOLD_AT`` is folded into a new file. The index is trusted only when the stamp of its last complete
record is the network directory's mtime (set by the commit one nanosecond past any value the kernel
would give it in that tick), the directory's ctime (which no process can set) is no later than the index
file's mtime (the commit writes the file after it stamps the directory: a directory whose mtime was set
back, as restoring a backup does, is newer), and each recorded ``last_reserved_ip.<i>`` still holds what
it recorded.
"""
import os
import stat as _stat

from skb.cni.addr import IP
from skb.cni.errors import CNIError
from skb.cni.jsonio import write_all

MAGIC = b"skb-host-local-index-v5"
FOLD_AT = 32768            # journal bytes past which the journal is folded into a new base
_JOURNAL_READ = 4          # a journal is read up to this many times FOLD_AT: beyond is a foreign tail
_HEADER_LIMIT = 1 << 20    # a longer first line is not a header (a planted file)
_TRIES = 3                 # index files tried at load, newest stamp first (two remain after a killed fold)
_OPEN = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_CHUNK = 4096             # a read of the header, and of the last stretch of a bisection


def line(owner, ip):
    """An index line (no newline). Container ids and interface names never hold a tab or a newline (skel
    validates both); an owner read from a foreign file that does is kept out of the index."""
    return f"{owner[0]}\t{owner[1]}\t{ip}".encode()


def indexable(owner):
    return not any(c in "\t\n" for c in owner[0] + owner[1])


def _stamp_text(stamp):
    return b"-" if stamp is None else b"%d" % stamp


def _stamp_value(text):
    return None if text == b"-" else int(text)


def _last_text(last):
    return b" ".join(b"%d=%s" % (i, last[i].hex().encode()) for i in sorted(last))


def _last_value(tokens):
    out = {}
    for token in tokens:
        i, _, content = token.partition(b"=")
        out[int(i)] = bytes.fromhex(content.decode("ascii"))
    return out


def _body(lines):
    return b"\n".join(lines) + b"\n" if lines else b""


def _name_stamp(name):
    parts = name.split(".")
    if len(parts) == 3 and parts[1].isascii() and parts[1].isdigit():
        return int(parts[1])
    return None


class Index:
    """The index of one network directory; ``dir_fd`` and ``skb_fd`` are its directory and ``.skb``,
    opened (and locked) by the caller. ``fail(what, OSError)`` builds the call's error."""

    def __init__(self, directory, dir_fd, skb_fd, fail):
        self.dir, self.dir_fd, self.skb_fd, self.fail = directory, dir_fd, skb_fd, fail
        self.fd = -1           # the index file in use; -1: none (the base, if any, is in ``memory``)
        self.name = None
        self.names = set()     # index files in .skb as last listed (all but ours are removed at a write)
        self.memory = b""      # the base when no file holds it (a rebuild that could not be written)
        self.base_at = self.base_len = 0
        self.journal = b""     # the complete records after the base
        self.size = 0          # the file's size: more than base + journal when a torn or foreign tail follows
        self.written = 0       # the file's mtime (ns) when it was opened
        self.stamp = None      # the stamp of the last record (or of the base)
        self.last = {}         # range set index -> last_reserved_ip.<index> bytes, as recorded

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- reading --------------------------------------------------------------------------------------
    def load(self, read_last_reserved):
        """Open the index that speaks for the directory as it is now; False when there is none (then the
        caller rebuilds). ``read_last_reserved(i)`` reads ``last_reserved_ip.<i>`` (None if absent)."""
        try:
            self.names = {n for n in os.listdir(self.skb_fd) if n == "index" or n.startswith("index.")}
            now = os.stat(self.dir_fd)
        except OSError:
            return False
        ranked = sorted(((_name_stamp(n), n) for n in self.names if _name_stamp(n) is not None), reverse=True)
        tries, found = 0, False
        for _, name in ranked:
            opened = self._open(name)
            if opened is None:   # not a regular file (never ours, and not removable): not a try
                continue
            if opened and self.stamp == now.st_mtime_ns and now.st_ctime_ns <= self.written:
                found = True
                break
            self.close()
            tries += 1
            if tries == _TRIES:
                break
        if not found:
            self.stamp, self.last = None, {}
            return False
        ok = all(read_last_reserved(i) == content for i, content in self.last.items()) and \
            read_last_reserved(max(self.last, default=-1) + 1) is None   # a range set's first file
        if not ok:
            self.close()
            self.stamp, self.last = None, {}
        return ok

    def _open(self, name):
        """Read ``name``'s header and complete records into this object; False if it is no index, None if
        it is not even a regular file."""
        try:    # lstat() first: a device planted under the name is never opened
            st = os.lstat(name, dir_fd=self.skb_fd)
            if not _stat.S_ISREG(st.st_mode):
                return None
            self.fd = os.open(name, _OPEN, dir_fd=self.skb_fd)
            now = os.fstat(self.fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not _stat.S_ISREG(now.st_mode):
                return False
            st = now
            head = b""
            while b"\n" not in head and len(head) < min(st.st_size, _HEADER_LIMIT):
                more = os.pread(self.fd, _CHUNK, len(head))
                if not more:
                    break
                head += more
            end = head.find(b"\n")
            if end < 0:
                return False
            magic, stamp, length, *last = head[:end].split()
            base_at, base_len = end + 1, int(length)
            if magic != MAGIC or base_len < 0 or base_at + base_len > st.st_size:
                return False
            stamp, last = _stamp_value(stamp), _last_value(last)
            at = base_at + base_len
            data = os.pread(self.fd, min(st.st_size - at, _JOURNAL_READ * FOLD_AT), at) if st.st_size > at else b""
        except (OSError, ValueError):
            return False
        journal, last_stamp = self._complete(data)
        hay = b"\n" + journal
        for i in last:     # the latest value each range set's file was recorded with
            at = hay.rfind(b"\nL%d " % i)
            if at >= 0:
                try:
                    last[i] = bytes.fromhex(hay[hay.index(b" ", at) + 1:hay.index(b"\n", at + 1)].decode("ascii"))
                except ValueError:
                    return False
        self.name, self.memory = name, b""
        self.base_at, self.base_len, self.journal, self.size = base_at, base_len, journal, st.st_size
        self.written = st.st_mtime_ns
        self.stamp, self.last = stamp if last_stamp is False else last_stamp, last
        return True

    @staticmethod
    def _complete(data):
        """The complete records at the start of the journal ``data`` and the stamp of the last one (False
        when there is none). The last record is the last commit line that parses and whose lines start
        where the previous record's commit line ends: each writer appends there, after cutting off what
        followed, so what precedes it is complete too; a torn or foreign tail after it is left out."""
        hi = len(data)
        while hi > 0:
            c = data.rfind(b"\n=", 0, hi) + 1         # a commit line: "=<stamp> <length of the lines>"
            if c == 0 and not data.startswith(b"="):
                break
            e = data.find(b"\n", c)
            try:
                stamp, length = data[c + 1:e].split(b" ") if e > c else (b"", b"")
                s = c - int(length)         # where the record's lines start
                if 0 <= s <= c and (s == 0 or data[s - 1:s] == b"\n" and
                                    data[data.rfind(b"\n", 0, s - 1) + 1:s][:1] == b"="):
                    return data[:e + 1], _stamp_value(stamp)
            except ValueError:
                pass
            hi = c - 1
        return b"", False

    def _read(self, at, n):
        if self.fd < 0:
            return self.memory[at:at + n]
        return os.pread(self.fd, n, at)

    def lookup(self, owner):
        """What the index says ``owner`` holds (unconfirmed): the base's lines, then the journal's."""
        if not indexable(owner):
            return []
        prefix = line(owner, "")
        held = self._bisect(prefix)
        hay = b"\n" + self.journal
        events = []
        for op in (b"+", b"-"):
            needle = b"\n" + op + prefix
            at = hay.find(needle)
            while at >= 0:
                end = hay.find(b"\n", at + 1)
                events.append((at, op, hay[at + len(needle):end]))
                at = hay.find(needle, end)
        for _, op, ip in sorted(events):
            if op == b"+" and ip not in held:
                held.append(ip)
            elif op == b"-" and ip in held:
                held.remove(ip)
        ips = (IP.parse(ip.decode("ascii", "replace")) for ip in held)
        return [ip for ip in ips if ip is not None]

    def _bisect(self, prefix):
        """The rest of every base line that starts with ``prefix`` (they are adjacent: the base is sorted),
        found with O(log n) small reads."""
        start = self.base_at if self.fd >= 0 else 0
        end = start + (self.base_len if self.fd >= 0 else len(self.memory))
        lo, hi = start, end     # lines starting before lo sort before prefix, those from hi on do not
        while hi - lo > _CHUNK:
            mid = (lo + hi) // 2
            at, text = self._probe(mid, end)
            if at >= hi:
                hi = mid        # no line starts in [mid, hi)
            elif text < prefix:
                lo = at + len(text) + 1
            else:
                hi = at
        out, seen = [], set()
        for text in self._lines(lo, end):
            if text.startswith(prefix):
                if text not in seen:
                    seen.add(text)
                    out.append(text[len(prefix):])
            elif text > prefix:
                break
        return out

    def _probe(self, mid, end):
        """(offset, text) of the first line that starts at or after ``mid`` (> the region's start)."""
        at = mid - 1
        while True:     # the newline that ends the line holding mid - 1
            chunk = self._read(at, min(512, end - at)) if at < end else b""
            if not chunk:
                return end, b""
            i = chunk.find(b"\n")
            if i >= 0:
                break
            at += len(chunk)
        start, text, at = at + i + 1, chunk[i + 1:], at + len(chunk)
        while b"\n" not in text and at < end:
            more = self._read(at, min(512, end - at))
            if not more:
                break
            text, at = text + more, at + len(more)
        return start, text.split(b"\n", 1)[0]

    def _lines(self, at, end):
        rest = b""
        while at < end:
            chunk = self._read(at, min(_CHUNK, end - at))
            if not chunk:
                break
            at += len(chunk)
            *lines, rest = (rest + chunk).split(b"\n")
            yield from lines
        if rest:
            yield rest

    # -- writing --------------------------------------------------------------------------------------
    def stamp_directory(self):
        """Set the directory's mtime to a value no change in this clock tick can produce (one ns past its
        own, and past the previous stamp) and return it; None when the filesystem does not keep it."""
        try:
            st = os.stat(self.dir_fd)
            want = max(st.st_mtime_ns, self.stamp or 0) + 1
            os.utime(self.dir_fd, ns=(st.st_atime_ns, want))
            if os.stat(self.dir_fd).st_mtime_ns == want:
                return want
        except (OSError, OverflowError):
            pass
        return None

    def append(self, added, removed, last, stamp):
        """Record one call's changes (index lines added and removed, last_reserved_ip contents that
        changed) under ``stamp``: one record appended, then a fold if the journal grew past FOLD_AT."""
        ops = b"".join(b"-" + x + b"\n" for x in removed) + b"".join(b"+" + x + b"\n" for x in added) + \
            b"".join(b"L%d %s\n" % (i, last[i].hex().encode()) for i in sorted(last))
        record = ops + b"=%s %d\n" % (_stamp_text(stamp), len(ops))
        if self.fd < 0 or len(record) > FOLD_AT or not last.keys() <= self.last.keys():
            # no file to append to, a record as large as a journal, or a range set the header does not
            # name yet (a load checks the range sets its header names)
            self._fold(ops, stamp)
            return
        at = self.base_at + self.base_len + len(self.journal)
        try:
            write_all(self.fd, record, at)
            if self.size > at + len(record):   # a torn or foreign tail after the last complete record
                os.ftruncate(self.fd, at + len(record))
        except OSError as e:
            try:   # no partial record may stay behind a later one
                os.ftruncate(self.fd, at)
            except OSError:
                pass
            raise self.fail("write its index", e) from None
        self.journal += record
        self.size = at + len(record)
        self.stamp = stamp
        self.last.update(last)
        self._remove_stale()
        if len(self.journal) > FOLD_AT:
            try:
                self._fold(b"", stamp)
            except CNIError:
                pass   # the journal is complete as it is; the next call folds it

    def _fold(self, ops, stamp):
        """A new base file: the base, then the journal and ``ops`` applied in order, sorted."""
        net, last = {}, dict(self.last)
        for text in (self.journal + ops).split(b"\n"):
            if text[:1] in (b"+", b"-"):
                net[text[1:]] = text[:1]
            elif text[:1] == b"L":
                i, _, content = text[1:].partition(b" ")
                try:
                    last[int(i)] = bytes.fromhex(content.decode("ascii"))
                except ValueError:   # not ours: never written so
                    pass
        base = self._read(self.base_at, self.base_len) if self.fd >= 0 else self.memory
        lines = base.split(b"\n")[:-1]
        gone = {x for x, op in net.items() if op == b"-"}
        if gone:
            lines = [x for x in lines if x not in gone]
        new = [x for x, op in net.items() if op == b"+"]
        if new:
            lines += new
            lines.sort()    # a sorted run and a short tail: close to linear
        self.write(_body(lines), last, stamp)

    def rebuild(self, found, last):
        """A new base from a full scan ({IP: owner}), stamped now. True if it was written; else (a full or
        read-only filesystem) it is kept in memory: a read-only store still answers DEL's, CHECK's and
        STATUS's questions, and a call that must write fails on its first write, with the real cause."""
        body = _body(sorted(line(o, ip) for ip, o in found.items() if indexable(o)))
        try:
            self.write(body, last, self.stamp_directory())
            return True
        except CNIError:
            self.close()
            self.memory, self.base_at, self.base_len, self.journal = body, 0, len(body), b""
            self.last = dict(last)
            return False

    def write(self, body, last, stamp):
        """``body`` as the base of a new index file with an empty journal, then the others are removed. A
        new name, never a replacement by rename or a truncation to zero, which ext4 flushes to disk at
        once. Killed before the old files are removed, several remain; the stamps tell which one speaks
        for the directory, and the next write removes the others."""
        header = b"%s %s %d %s\n" % (MAGIC, _stamp_text(stamp), len(body), _last_text(last))
        name = f"index.{stamp or 0}.{os.getpid()}"
        fd = -1
        try:
            try:   # only a killed call of the same pid and stamp leaves one
                os.unlink(name, dir_fd=self.skb_fd)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self.skb_fd)
            write_all(fd, header)
            write_all(fd, body)
        except OSError as e:
            if fd >= 0:   # a partial file must not stay (it is never trusted, but it takes space)
                os.close(fd)
                try:
                    os.unlink(name, dir_fd=self.skb_fd)
                except OSError:
                    pass
            raise self.fail("write its index", e) from None
        self.close()
        self.fd, self.name, self.memory = fd, name, b""
        self.base_at, self.base_len, self.journal = len(header), len(body), b""
        self.size, self.stamp, self.last = len(header) + len(body), stamp, dict(last)
        self.names.add(name)
        self._remove_stale()

    def _remove_stale(self):
        for old in self.names - {self.name}:
            try:   # a stale index that cannot be removed is only untidy: never trusted, retried next write
                os.unlink(old, dir_fd=self.skb_fd)
            except OSError:
                pass
        self.names = {self.name}
