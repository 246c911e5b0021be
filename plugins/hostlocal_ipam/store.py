"""host-local's on-disk store: byte-compatible with the Go plugin's, plus a sidecar index.

The Go plugin's layout, kept exactly so a node can switch between the two in either direction::

    <dataDir>/<network>/lock                 flock(LOCK_EX) around every operation (both plugins)
    <dataDir>/<network>/10.1.0.5             one file per reserved address: "<containerID>\\r\\n<ifname>"
    <dataDir>/<network>/last_reserved_ip.0   the last address handed out from range set 0

What we add, invisible to the Go plugin (it skips the hidden directory's names, none of which is an IP,
and none of its files holds "<id>\\r\\n<ifname>", so its DEL never deletes them):

    <dataDir>/<network>/.skb/index   "<id>\t<ifname>\t<ip>" per reservation, under a header holding the
                                     network directory's mtime when the index was last right
    <dataDir>/<network>/.skb/tmp/    reservation files are written here, then link()ed

Why: finding an attachment's addresses (for DEL, and for an ADD that must return an existing
reservation) means reading every reservation file in the Go layout: ~1 s per ADD with 60,000 of them.
The index is one file searched with ``bytes.find`` (about a millisecond at that size) and rewritten by
rename when it changes. It is a cache, never the truth: each address it names is checked against its
reservation file, and when the network directory changed behind our back (the Go plugin ran, or we were
killed mid-way) its mtime no longer matches the header and the index is rebuilt from a full scan.
(One hole, documented: a change by the Go plugin within the same coarse clock tick as our last one keeps
the mtime; the worst outcome is a second address for an attachment that already held one, never an
address given to two containers: reservation files are created exclusively.)

Crash safety: a reservation file is complete before it has its name (written under .skb/tmp, then
``link()``ed, which fails if the address is taken), so a SIGKILL never leaves a torn or empty reservation
of ours. Every other file is replaced by rename. Empty reservation files (the Go plugin's, when killed
between create and write) are reclaimed: we see them only while holding the lock, so no writer is
mid-way through one.
"""
import errno
import fcntl
import os

from skb.cni.addr import IP
from skb.cni.errors import CNIError, INTERNAL, IO_FAILURE

_INDEX = ".skb"
_MAGIC = b"skb-host-local-index-v2"


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


class Store:
    """One network's directory. Use as a context manager: the lock is held from enter to exit."""

    def __init__(self, data_dir, network):
        self.dir = os.path.join(data_dir, network)
        self.index = os.path.join(self.dir, _INDEX)
        self._lock_fd = -1
        self._body = b""       # the index's lines, as read (or rebuilt)
        self._added = []       # lines to append at commit
        self._removed = []     # lines to drop at commit
        self._changed = False
        self._lr = {}          # range set index -> last_reserved_ip.<index> content, as last seen

    # -- locking ------------------------------------------------------------------------------------
    def __enter__(self):
        try:
            os.makedirs(self.dir, 0o755, exist_ok=True)
            self._lock_fd = os.open(os.path.join(self.dir, "lock"), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            os.makedirs(os.path.join(self.index, "tmp"), 0o700, exist_ok=True)
            self._clear_tmp()
            if not self._load_index():
                self.rebuild()
        except OSError as e:
            self._close()
            raise CNIError(IO_FAILURE, f"host-local store {self.dir} is unusable: {e.strerror}",
                           "dataDir must be a writable directory (default /var/lib/cni/networks)") from None
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
            _unlink(os.path.join(tmp, name))

    # -- reservations (the Go-compatible part) -------------------------------------------------------
    def reserve(self, ip, owner):
        """Create the reservation file for ``ip`` if the address is free. True if it is now ours."""
        tmp = self._write_tmp(f"r{os.getpid()}", owner_content(*owner).encode())
        try:
            os.link(tmp, os.path.join(self.dir, str(ip)))
        except FileExistsError:
            if not self._reclaim_if_torn(ip):
                return False
            os.link(tmp, os.path.join(self.dir, str(ip)))
        except OSError as e:
            raise _io_error(f"reserve {ip} in", self.dir, e) from None
        finally:
            _unlink(tmp)
        if _indexable(owner):
            self._added.append(_line(owner, ip))
        self._changed = True
        return True

    def _reclaim_if_torn(self, ip):
        path = os.path.join(self.dir, str(ip))
        try:
            if os.stat(path).st_size == 0:
                _unlink(path)
                return True
        except FileNotFoundError:
            return True
        return False

    def holder(self, ip):
        """The owner recorded in ``ip``'s reservation file, or None if the address is free."""
        try:
            with open(os.path.join(self.dir, str(ip)), "rb") as f:
                data = f.read()
        except (FileNotFoundError, IsADirectoryError):
            return None
        return parse_owner(data.decode("utf-8", "replace")) if data.strip() else None

    def release(self, ip, owner):
        _unlink(os.path.join(self.dir, str(ip)))
        line = _line(owner, ip)
        if line in self._added:
            self._added.remove(line)
        else:
            self._removed.append(line)
        self._changed = True

    def is_free(self, ip):
        return not os.path.exists(os.path.join(self.dir, str(ip)))

    def _read_last_reserved(self, index):
        try:
            with open(os.path.join(self.dir, f"last_reserved_ip.{index}"), "rb") as f:
                return f.read()
        except OSError:
            return None

    def last_reserved(self, index):
        data = self._read_last_reserved(index)
        if data is None:
            return None
        self._lr[index] = data
        return IP.parse(data.decode("ascii", "replace"))  # a trailing newline: unparsable, as in Go

    def set_last_reserved(self, index, ip):
        data = str(ip).encode()
        self._replace(os.path.join(self.dir, f"last_reserved_ip.{index}"), data)
        self._lr[index] = data
        self._changed = True

    # -- the index ----------------------------------------------------------------------------------
    def owned(self, owner):
        """The addresses ``owner`` (container id, ifname) holds, each checked against its file."""
        prefix = b"\n" + _line(owner, "")[:-1]
        body = b"\n" + self._body
        ips = []
        at = body.find(prefix)
        while at >= 0:
            end = body.find(b"\n", at + 1)
            ip = IP.parse(body[at + len(prefix):end].decode("ascii", "replace"))
            if ip is not None and ip not in ips and _line(owner, ip) not in self._removed:
                ips.append(ip)
            at = body.find(prefix, end)
        for line in self._added:
            if line.startswith(prefix[1:]):
                ips.append(IP.parse(line[len(prefix) - 1:-1].decode()))
        return [ip for ip in ips if self.holder(ip) == owner]

    def commit(self):
        """Write the index if this call changed anything, stamped with the directory's mtime."""
        if not self._changed:
            return
        body = self._body
        for line in self._removed:
            at = (b"\n" + body).find(b"\n" + line)
            if at >= 0:
                body = body[:at] + body[at + len(line):]
        body += b"".join(self._added)
        self._write_index(body)

    def _write_index(self, body):
        # The header: the directory's mtime, and what each last_reserved_ip.N held. A reservation by the
        # Go plugin changes the mtime, but not if it lands in the same coarse clock tick as our last
        # change; it always rewrites last_reserved_ip.N, which the header lets us notice.
        lr = b" ".join(b"%d=%s" % (i, self._lr[i].hex().encode()) for i in sorted(self._lr))
        header = b"%s %d %s\n" % (_MAGIC, os.stat(self.dir).st_mtime_ns, lr)
        self._replace(os.path.join(self.index, "index"), header + body)
        self._body, self._added, self._removed, self._changed = body, [], [], False

    def _load_index(self):
        try:
            with open(os.path.join(self.index, "index"), "rb") as f:
                data = f.read()
            header, _, body = data.partition(b"\n")
            magic, mtime, *lr = header.split()
            if magic != _MAGIC or int(mtime) != os.stat(self.dir).st_mtime_ns:
                return False
            seen = {}
            for item in lr:
                i, _, content = item.partition(b"=")
                seen[int(i)] = bytes.fromhex(content.decode())
        except (OSError, ValueError):
            return False
        for i, content in seen.items():
            if self._read_last_reserved(i) != content:
                return False
        if self._read_last_reserved(max(seen, default=-1) + 1) is not None:   # a range set's first file
            return False
        self._lr = seen
        self._body = body
        return True

    def scan(self):
        """Every reservation in the directory: {IP: (container id, ifname)}. Reclaims empty (torn) files;
        leaves every file that is not named like an address alone."""
        found = {}
        with os.scandir(self.dir) as it:
            for entry in it:
                if entry.name.startswith("last_reserved_ip."):
                    i = entry.name[len("last_reserved_ip."):]
                    if i.isdigit():
                        data = self._read_last_reserved(int(i))
                        if data is not None:
                            self._lr[int(i)] = data
                    continue
                ip = IP.parse(entry.name)
                if ip is None or str(ip) != entry.name or not entry.is_file(follow_symlinks=False):
                    continue
                owner = self.holder(ip)
                if owner is None:
                    _unlink(entry.path)
                    continue
                found[ip] = owner
        return found

    def rebuild(self):
        """Rebuild the index from a full scan (after the Go plugin ran, or after we were killed)."""
        found = self.scan()
        self._write_index(b"".join(_line(owner, ip) for ip, owner in found.items() if _indexable(owner)))
        return found

    # -- helpers ------------------------------------------------------------------------------------
    def _write_tmp(self, name, data):
        """A complete file under .skb/tmp (every byte written), ready to be linked or renamed into place."""
        tmp = os.path.join(self.index, "tmp", name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as e:
            _unlink(tmp)
            raise _io_error("write", tmp, e) from None
        return tmp

    def _replace(self, path, data):
        tmp = self._write_tmp(f"w{os.getpid()}", data)
        try:
            os.rename(tmp, path)
        except OSError as e:
            _unlink(tmp)
            raise _io_error("replace", path, e) from None


def _io_error(what, path, e):
    return CNIError(IO_FAILURE, f"host-local store: cannot {what} {path}: {e.strerror or e}",
                    "the dataDir's filesystem refused a write (full? read-only? permissions?)")


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        pass
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise CNIError(INTERNAL, f"cannot remove {path}: {e.strerror}") from None
