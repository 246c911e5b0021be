"""host-local's on-disk store: byte-compatible with the Go plugin's, plus a sidecar index.

The Go plugin's layout, kept exactly so a node can switch between the two in either direction::

    <dataDir>/<network>/lock                 flock(LOCK_EX) around every operation (both plugins)
    <dataDir>/<network>/10.1.0.5             one file per reserved address: "<containerID>\\r\\n<ifname>"
    <dataDir>/<network>/last_reserved_ip.0   the last address handed out from range set 0

What we add, invisible to the Go plugin (it skips the hidden directory's names, none of which is an IP,
and none of its files holds "<id>\\r\\n<ifname>", so its DEL never deletes them):

    <dataDir>/<network>/.skb/index.<stamp>.<pid>   "<id>\t<ifname>\t<ip>" per reservation, under a header
                                     holding the network directory's mtime when the index was last right
    <dataDir>/<network>/.skb/tmp/    reservation files are written here, then link()ed

Why: finding an attachment's addresses (for DEL, and for an ADD that must return an existing
reservation) means reading every reservation file in the Go layout: ~1 s per ADD with 60,000 of them.
The index is one file searched with ``bytes.find`` (about a millisecond at that size), written under a
new name when it changes (see ``_write_index``). It is a cache, never the truth: each address it names is
checked against its reservation file, and when the network directory changed behind our back (the Go
plugin ran, an operator deleted a file, or we were killed mid-way) the header no longer matches and the
index is rebuilt from a full scan. The index never decides alone:

- what it says an attachment holds is confirmed by reading that one reservation file; a single entry
  that does not match proves the index stale, and it is rebuilt before anything is answered;
- a free address is never taken from it: the allocator lstat()s the candidate's file and creates it
  exclusively (``link()``), so two containers can never get one address whatever the index says;
- the header's stamp is the directory's mtime, which most filesystems (tmpfs, ext4 without multigrain
  timestamps) take from a coarse clock: an unlink and a create in the same tick as our last change would
  leave it unchanged. So at each commit we set the directory's mtime one nanosecond past any value the
  kernel would give it in that tick (``utime``), and stamp that: any later change by anyone moves the
  mtime away from it. Where a filesystem cannot store that value, the index is marked untrusted and every
  call rebuilds it (correct, slower). Go rewrites ``last_reserved_ip.N`` on every reservation; the header
  records those too.

Directory entries are not trusted either: every entry is lstat()ed and opened with O_NOFOLLOW|O_NONBLOCK;
an entry named like an address that is not a regular file (a dangling symlink, a directory, a FIFO) is
an address that is taken, as in Go, and is never followed, read or removed.

Crash safety: a reservation file is complete before it has its name (written under .skb/tmp, then
``link()``ed, which fails if the address is taken), so a SIGKILL never leaves a torn or empty reservation
of ours. The index is written under a new name before the previous one is removed, and carries its own
length; ``last_reserved_ip.N`` is rewritten in place, as Go does (torn, it only moves the next search's
start). Empty reservation files (the Go plugin's, when killed
between create and write) are reclaimed: we see them only while holding the lock, so no writer is
mid-way through one.
"""
import errno
import fcntl
import os
import stat as _stat

from skb.cni.addr import IP
from skb.cni.errors import CNIError, INVALID_CONFIG, IO_FAILURE

_INDEX = ".skb"
_MAGIC = b"skb-host-local-index-v4"
_UNTRUSTED = b"-"          # the stamp when the directory's mtime cannot be made unique: always rebuild
_OPEN = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_ENTRY_LIMIT = 4096        # a reservation or last_reserved_ip file: "<container id>\r\n<ifname>", an address
ODD = ("", "")             # holder() of an entry that is not a reservation file: taken, by nobody we know


def owner_content(cid, ifname):
    return f"{cid.strip()}\r\n{ifname}"


def parse_owner(content):
    """(container id, ifname) from a reservation file's content; ifname "" for the legacy id-only form."""
    text = content.strip()
    cid, sep, ifname = text.partition("\r\n")
    return (cid, ifname) if sep else (text, "")


def _line(owner, ip):
    # Container ids and interface names never hold a tab or a newline (skel validates both); an owner read
    # from a foreign file that does is kept out of the index and found by the scan instead.
    return f"{owner[0]}\t{owner[1]}\t{ip}\n".encode()


def _indexable(owner):
    return not any(c in "\t\n" for c in owner[0] + owner[1])


def _reason(e):
    name = errno.errorcode.get(e.errno, "")
    return f"{e.strerror or e} ({name})" if name else f"{e.strerror or e}"


def _fix(e):
    return {errno.EROFS: "dataDir is on a read-only filesystem: host-local must write there to reserve and release "
                         "addresses (mount it read-write, or point ipam.dataDir at a writable directory)",
            errno.ENOSPC: "the filesystem of dataDir is full",
            errno.EDQUOT: "the disk quota of dataDir is exhausted",
            errno.EACCES: "host-local runs as root and needs to write dataDir: check its permissions and any LSM "
                          "policy",
            errno.EPERM: "host-local runs as root and needs to write dataDir: check its permissions, attributes "
                         "(chattr +i) and any LSM policy",
            errno.ENOTDIR: "dataDir and <dataDir>/<network> must be directories",
            }.get(e.errno, "dataDir must be a writable directory (default /var/lib/cni/networks)")


def read_entry(path, limit=_ENTRY_LIMIT):
    """The content of the regular file ``path`` (at most ``limit`` bytes; None: no limit), never following
    a symlink and never blocking on a FIFO. None when there is no such entry, False when the entry is not a
    regular file (a symlink, dangling or not, a directory, a FIFO, a device). Other errors: OSError."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not _stat.S_ISREG(st.st_mode):
        return False
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):   # replaced meanwhile
            return False
        raise
    try:
        st = os.fstat(fd)
        if not _stat.S_ISREG(st.st_mode):
            return False
        step = max(st.st_size + 1, 65536)     # the whole file in one read, as a rule
        chunks, left = [], limit
        while left is None or left > 0:
            chunk = os.read(fd, step if left is None else min(left, step))
            if not chunk:
                break
            chunks.append(chunk)
            if left is not None:
                left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class Store:
    """One network's directory. Use as a context manager: the lock is held from enter to exit."""

    def __init__(self, data_dir, network):
        if "\0" in data_dir:
            raise CNIError(INVALID_CONFIG, "invalid field ipam.dataDir: it contains a NUL byte",
                           f"dataDir {data_dir!r} must be a directory path (no NUL); default /var/lib/cni/networks")
        self.dir = os.path.join(data_dir, network)
        self.index = os.path.join(self.dir, _INDEX)
        self._lock_fd = -1
        self._dev = None
        self._body = b""       # the index's lines, as read (or rebuilt)
        self._added = {}       # lines to append at commit (a dict: ordered, O(1) membership)
        self._removed = set()  # lines to drop at commit
        self._changed = False
        self._stamp = 0        # the mtime stamped in the index as read (for a strictly newer one at commit)
        self._index_names = set()  # the index files in .skb (the valid one and stale ones), as last listed
        self._lr = {}          # range set index -> last_reserved_ip.<index> content, as last seen
        self._owned = {}       # owner -> [IP], confirmed against the files during this call

    # -- errors -------------------------------------------------------------------------------------
    def _fail(self, what, e):
        return CNIError(IO_FAILURE, f"host-local store {self.dir}: cannot {what}: {_reason(e)}", _fix(e))

    # -- locking ------------------------------------------------------------------------------------
    def __enter__(self):
        try:
            try:
                os.makedirs(self.dir, 0o755, exist_ok=True)
            except FileExistsError as e:     # a file, or a dangling symlink, where the directory should be
                e.errno, e.strerror = errno.ENOTDIR, "it exists and is not a directory"
                raise
            self._lock_fd = os.open(os.path.join(self.dir, "lock"), _OPEN | os.O_CREAT, 0o600)
            st = os.fstat(self._lock_fd)
            if not _stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "its lock file is not a regular file")
            self._dev = st.st_dev   # the network directory's filesystem (the lock file lives in it)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            os.makedirs(os.path.join(self.index, "tmp"), 0o700, exist_ok=True)
            self._clear_tmp()
            if not self._load_index():
                self.rebuild()
        except OSError as e:
            self._close()
            if e.errno == errno.ELOOP:
                e.strerror = "its lock file is a symlink"
            raise CNIError(IO_FAILURE, f"host-local store {self.dir} is unusable: {_reason(e)}", _fix(e)) from None
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc):
        self._close()

    def _close(self):
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = -1

    def _clear_tmp(self):
        # Only lock holders write there, and we hold the lock: whatever is left is from a killed call.
        tmp = os.path.join(self.index, "tmp")
        for name in os.listdir(tmp):
            self._unlink(os.path.join(tmp, name), "clear its scratch directory")

    # -- reservations (the Go-compatible part) -------------------------------------------------------
    def reserve(self, ip, owner):
        """Create the reservation file for ``ip`` if the address is free. True if it is now ours."""
        path = os.path.join(self.dir, str(ip))
        tmp = self._write_tmp(f"r{os.getpid()}", owner_content(*owner).encode(), f"reserve {ip}")
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                if not self._reclaim_if_torn(ip):
                    return False
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
        except OSError as e:
            raise self._fail(f"reserve {ip}", e) from None
        finally:
            self._unlink(tmp, f"reserve {ip}")
        line = _line(owner, ip)
        if _indexable(owner):
            if line in self._removed:
                self._removed.discard(line)
            else:
                self._added[line] = None
        if owner in self._owned:
            self._owned[owner].append(ip)
        self._changed = True
        return True

    def _reclaim_if_torn(self, ip):
        """An empty regular file is a reservation torn by a killed writer: remove it. Anything else under
        that name (a reservation, a symlink, a directory, a FIFO) means the address is taken."""
        path = os.path.join(self.dir, str(ip))
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return True
        except OSError as e:
            raise self._fail(f"look at {path}", e) from None
        if _stat.S_ISREG(st.st_mode) and st.st_size == 0:
            self._unlink(path, f"reclaim the torn reservation {ip}")
            return True
        return False

    def holder(self, ip):
        """The owner recorded in ``ip``'s reservation file; None if the address is free (or its file is
        torn: empty); ``ODD`` when the entry is not a regular file (taken, by nobody we know)."""
        path = os.path.join(self.dir, str(ip))
        try:
            data = read_entry(path)
        except OSError as e:
            raise self._fail(f"read {path}", e) from None
        if data is False:
            return ODD
        return parse_owner(data.decode("utf-8", "replace")) if data and data.strip() else None

    def release(self, ip, owner):
        path = os.path.join(self.dir, str(ip))
        try:
            if not _stat.S_ISREG(os.lstat(path).st_mode):
                return      # not a reservation file: not ours to remove
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._fail(f"release {ip}", e) from None
        else:
            self._unlink(path, f"release {ip}")
        line = _line(owner, ip)
        if line in self._added:
            del self._added[line]
        else:
            self._removed.add(line)
        held = self._owned.get(owner)
        if held and ip in held:
            held.remove(ip)
        self._changed = True

    def is_free(self, ip):
        """No entry of any kind under the address's name (lstat: a dangling symlink is not free)."""
        try:
            os.lstat(os.path.join(self.dir, str(ip)))
        except FileNotFoundError:
            return True
        except OSError as e:
            raise self._fail(f"look up {ip}", e) from None
        return False

    def _read_last_reserved(self, index):
        try:
            data = read_entry(os.path.join(self.dir, f"last_reserved_ip.{index}"))
        except OSError:
            return None
        return data or None

    def last_reserved(self, index):
        data = self._read_last_reserved(index)
        if data is None:
            return None
        self._lr[index] = data
        return IP.parse(data.decode("ascii", "replace"))  # a trailing newline: unparsable, as in Go

    def set_last_reserved(self, index, ip):
        """Rewritten in place, as Go does (a torn file only changes where the next search starts; the index
        header, which records the content, is then not trusted). Only a regular file that
        has no other name is rewritten: anything else (a symlink, a hard link planted here, a FIFO) is
        replaced by a new file instead, never written through."""
        data = str(ip).encode()
        path = os.path.join(self.dir, f"last_reserved_ip.{index}")
        if not self._rewrite(path, data):
            self._replace(path, data, "record the last reserved address")
        self._lr[index] = data
        self._changed = True

    def _rewrite(self, path, data):
        """Overwrite an existing regular, singly linked file of the network directory's own filesystem
        with ``data``; False when it is not one (then it is replaced). lstat() decides before anything is
        opened, so a device node, a FIFO or a mount point planted under the name is never opened for
        writing, and the file opened must be the one looked at (same device and inode)."""
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if not _stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_dev != self._dev:
            return False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not _stat.S_ISREG(now.st_mode) \
                    or now.st_nlink != 1:
                return False
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, len(data) - len(view)):]
            if now.st_size > len(data):
                # cut after writing, never to zero first: ext4 flushes a file truncated to zero on close
                # (its replace-via-truncate guard), which costs more than the whole call's other I/O
                os.ftruncate(fd, len(data))
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    # -- the index ----------------------------------------------------------------------------------
    def owned(self, owner):
        """The addresses ``owner`` (container id, ifname) holds, each confirmed by its file. One entry
        that its file contradicts proves the index stale: it is then rebuilt and asked again."""
        if owner in self._owned:
            return list(self._owned[owner])
        ips, stale = self._owned_from_index(owner)
        if stale:
            self.rebuild()
            ips, stale = self._owned_from_index(owner)
        self._owned[owner] = ips
        return list(ips)

    def _owned_from_index(self, owner):
        prefix = b"\n" + _line(owner, "")[:-1]
        body = b"\n" + self._body
        seen = set()
        ips = []
        at = body.find(prefix)
        while at >= 0:
            end = body.find(b"\n", at + 1)
            ip = IP.parse(body[at + len(prefix):end].decode("ascii", "replace"))
            if ip is not None and ip not in seen and _line(owner, ip) not in self._removed:
                seen.add(ip)
                ips.append(ip)
            at = body.find(prefix, end)
        for line in self._added:
            if line.startswith(prefix[1:]):
                ip = IP.parse(line[len(prefix) - 1:-1].decode())
                if ip not in seen:
                    seen.add(ip)
                    ips.append(ip)
        confirmed = [ip for ip in ips if self.holder(ip) == owner]
        return confirmed, len(confirmed) != len(ips)

    def commit(self):
        """Write the index if this call changed anything, stamped as described in the module docstring."""
        if not self._changed:
            return
        body = self._body
        if self._removed:
            if len(self._removed) <= 8:
                for line in self._removed:
                    at = (b"\n" + body).find(b"\n" + line)
                    if at >= 0:
                        body = body[:at] + body[at + len(line):]
            else:   # one pass instead of one copy of the body per line
                body = b"".join(x for x in body.splitlines(keepends=True) if x not in self._removed)
        body += b"".join(self._added)
        self._write_index(body)

    def _make_stamp(self):
        """Set the directory's mtime to a value no change in this clock tick can produce (one ns past its
        own, and past the previous stamp) and return it; None when the filesystem does not keep it."""
        try:
            st = os.stat(self.dir)
            want = max(st.st_mtime_ns, self._stamp) + 1
            os.utime(self.dir, ns=(st.st_atime_ns, want))
            if os.stat(self.dir).st_mtime_ns == want:
                return want
        except OSError:
            pass
        return None

    def _write_index(self, body):
        """The index goes to a new file (index.<stamp>.<pid>), then the ones it replaces are removed: no
        file is replaced in place or by rename, which ext4 would flush to disk at once (its
        replace-via-rename guard: most of a call's I/O time). Killed between the two, two index files
        remain; the stamp tells which one speaks for the directory, and the next write removes both."""
        # The header: the stamp, the body's length (a file cut short is not the index), and what each
        # last_reserved_ip.N held (Go rewrites it on every reservation).
        stamp = self._make_stamp()
        lr = b" ".join(b"%d=%s" % (i, self._lr[i].hex().encode()) for i in sorted(self._lr))
        header = b"%s %s %d %s\n" % (_MAGIC, _UNTRUSTED if stamp is None else b"%d" % stamp, len(body), lr)
        name = f"index.{stamp or 0}.{os.getpid()}"
        path = os.path.join(self.index, name)
        self._unlink(path, "write its index")  # (only a killed call of the same pid and stamp leaves one)
        fd = -1
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            view = memoryview(header + body)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            if fd >= 0:   # a partial file must not stay (it is never trusted, but it takes space)
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise self._fail("write its index", e) from None
        finally:
            if fd >= 0:
                os.close(fd)
        for old in self._index_names - {name}:
            try:   # a stale index that cannot be removed is only untidy: never trusted, retried next write
                os.unlink(os.path.join(self.index, old))
            except OSError:
                pass
        self._index_names = {name}
        self._body, self._added, self._removed, self._changed = body, {}, set(), False
        self._stamp = stamp or 0

    def _load_index(self):
        """Find the index file whose stamp is the directory's mtime (any other one is stale: removed at
        the next write, as is a previous version's ``index``)."""
        try:
            self._index_names = {n for n in os.listdir(self.index) if n == "index" or n.startswith("index.")}
            mtime = b"%d" % os.stat(self.dir).st_mtime_ns
        except OSError:
            return False
        want = "index.%s." % mtime.decode()   # only an index written with the directory's stamp can be right
        for name in sorted(n for n in self._index_names if n.startswith(want)):
            try:
                data = read_entry(os.path.join(self.index, name), None)
                if not data:
                    continue
                header, _, body = data.partition(b"\n")
                magic, stamp, length, *lr = header.split()
                if magic != _MAGIC or stamp != mtime or int(length) != len(body):
                    continue
                seen = {}
                for item in lr:
                    i, _, content = item.partition(b"=")
                    seen[int(i)] = bytes.fromhex(content.decode())
                break
            except (OSError, ValueError):
                continue
        else:
            return False
        for i, content in seen.items():
            if self._read_last_reserved(i) != content:
                return False
        if self._read_last_reserved(max(seen, default=-1) + 1) is not None:   # a range set's first file
            return False
        self._lr = seen
        self._body = body
        self._stamp = int(stamp)
        return True

    def scan(self):
        """Every reservation in the directory: {IP: (container id, ifname)}. Reclaims empty (torn) files;
        leaves every entry that is not a regular file named like an address alone (such an address is
        taken: ``is_free`` says so)."""
        found = {}
        try:
            with os.scandir(self.dir) as it:
                entries = list(it)
        except OSError as e:
            raise self._fail("list its reservations", e) from None
        for entry in entries:
            if entry.name.startswith("last_reserved_ip."):
                i = entry.name[len("last_reserved_ip."):]
                if i.isascii() and i.isdigit():
                    data = self._read_last_reserved(int(i))
                    if data is not None:
                        self._lr[int(i)] = data
                continue
            ip = IP.parse(entry.name)
            if ip is None or str(ip) != entry.name:
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            owner = self.holder(ip)
            if owner is None:
                if self._reclaim_if_torn(ip):
                    continue
                owner = self.holder(ip)     # written meanwhile (cannot happen under the lock, but cheap)
            if owner is not None and owner != ODD:
                found[ip] = owner
        return found

    def rebuild(self):
        """Rebuild the index from a full scan (after a foreign change, or after we were killed)."""
        found = self.scan()
        self._owned = {}
        body = b"".join(_line(owner, ip) for ip, owner in found.items() if _indexable(owner))
        self._added, self._removed = {}, set()
        try:
            self._write_index(body)
        except CNIError:
            # A read-only store can still answer DEL's, CHECK's and STATUS's questions: keep the scan in
            # memory; a call that must write fails on its first write, with the real cause.
            self._body = body
        return found

    # -- helpers ------------------------------------------------------------------------------------
    def _write_tmp(self, name, data, what):
        """A complete file under .skb/tmp (every byte written), ready to be linked or renamed into place."""
        tmp = os.path.join(self.index, "tmp", name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise self._fail(what, e) from None
        return tmp

    def _replace(self, path, data, what):
        tmp = self._write_tmp(f"w{os.getpid()}", data, what)
        try:
            os.rename(tmp, path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise self._fail(what, e) from None

    def _unlink(self, path, what):
        try:
            os.unlink(path)
        except (FileNotFoundError, IsADirectoryError):
            pass
        except OSError as e:
            raise self._fail(what, e) from None
