"""host-local's on-disk store: byte-compatible with the Go plugin's, plus a sidecar index.

The Go plugin's layout, kept exactly so a node can switch between the two in either direction::

    <dataDir>/<network>/lock                 flock(LOCK_EX) around every operation (both plugins)
    <dataDir>/<network>/10.1.0.5             one file per reserved address: "<containerID>\\r\\n<ifname>"
    <dataDir>/<network>/last_reserved_ip.0   the last address handed out from range set 0

What we add, invisible to the Go plugin (it skips the hidden directory's names, none of which is an IP,
and none of its files holds "<id>\\r\\n<ifname>", so its DEL never deletes them):

    <dataDir>/<network>/.skb/owners/<id>@<ifname>   the addresses that attachment holds, one per line
    <dataDir>/<network>/.skb/state                  the network directory's mtime when the index was right
    <dataDir>/<network>/.skb/tmp/                   reservation files are written here, then link()ed

Why: finding an attachment's addresses (for DEL, and for an ADD that must return an existing
reservation) means reading every reservation file in the Go layout, which grows with the store. The
index answers in O(1). It is a cache, never the truth: each address it names is checked against its
reservation file, and when the network directory changed behind our back (the Go plugin ran, or we were
killed mid-way) its mtime no longer matches ``state`` and the index is rebuilt from a full scan.
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

from skb.addr import IP
from skb.env import valid_name
from skb.errors import CNIError, INTERNAL, IO_FAILURE

_INDEX = ".skb"
_STATE_MAGIC = "skb-host-local-index-v1"


def owner_content(cid, ifname):
    return f"{cid.strip()}\r\n{ifname}"


def parse_owner(content):
    """(container id, ifname) from a reservation file's content; ifname "" for the legacy id-only form."""
    text = content.strip()
    cid, sep, ifname = text.partition("\r\n")
    return (cid, ifname) if sep else (text, "")


def _owner_key(owner):
    cid, ifname = owner
    if valid_name(cid) and (not ifname or all(c.isalnum() or c in "_.-" for c in ifname)) and len(cid) < 200:
        return f"{cid}@{ifname}"
    return "x-" + f"{cid}\n{ifname}".encode().hex()[:200]


class Store:
    """One network's directory. Use as a context manager: the lock is held from enter to exit."""

    def __init__(self, data_dir, network):
        self.dir = os.path.join(data_dir, network)
        self.index = os.path.join(self.dir, _INDEX)
        self._lock_fd = -1
        self._dirty_owners = set()
        self._owners = None  # owner -> [IP], loaded lazily per owner from the index
        self._cache = {}

    # -- locking ------------------------------------------------------------------------------------
    def __enter__(self):
        try:
            os.makedirs(self.dir, 0o755, exist_ok=True)
            self._lock_fd = os.open(os.path.join(self.dir, "lock"), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            for d in ("owners", "tmp"):
                os.makedirs(os.path.join(self.index, d), 0o700, exist_ok=True)
        except OSError as e:
            self._close()
            raise CNIError(IO_FAILURE, f"host-local store {self.dir} is unusable: {e.strerror}",
                           "dataDir must be a writable directory (default /var/lib/cni/networks)") from None
        self._clear_tmp()
        if not self._index_current():
            self.rebuild()
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
        tmp = os.path.join(self.index, "tmp", f"r{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, owner_content(*owner).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, os.path.join(self.dir, str(ip)))
        except FileExistsError:
            if self._reclaim_if_torn(ip):
                os.link(tmp, os.path.join(self.dir, str(ip)))
            else:
                return False
        finally:
            _unlink(tmp)
        self._owned(owner).append(ip)
        self._dirty_owners.add(owner)
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
        ips = self._owned(owner)
        if ip in ips:
            ips.remove(ip)
        self._dirty_owners.add(owner)

    def is_free(self, ip):
        return not os.path.exists(os.path.join(self.dir, str(ip)))

    def last_reserved(self, index):
        try:
            with open(os.path.join(self.dir, f"last_reserved_ip.{index}"), "rb") as f:
                return IP.parse(f.read().decode("ascii", "replace"))  # a trailing newline: unparsable, as in Go
        except OSError:
            return None

    def set_last_reserved(self, index, ip):
        self._replace(os.path.join(self.dir, f"last_reserved_ip.{index}"), str(ip), 0o600)

    # -- the index ----------------------------------------------------------------------------------
    def owned(self, owner):
        """The addresses ``owner`` (container id, ifname) holds, each checked against its file."""
        return list(self._owned(owner))

    def _owned(self, owner):
        ips = self._cache.get(owner)
        if ips is None:
            ips = []
            try:
                with open(os.path.join(self.index, "owners", _owner_key(owner)), encoding="ascii") as f:
                    for line in f.read().split():
                        ip = IP.parse(line)
                        if ip is not None and self.holder(ip) == owner:
                            ips.append(ip)
            except (FileNotFoundError, UnicodeDecodeError):
                pass
            self._cache[owner] = ips
        return ips

    def commit(self):
        """Write the index entries this call changed, then record the directory's mtime as current."""
        for owner in self._dirty_owners:
            path = os.path.join(self.index, "owners", _owner_key(owner))
            ips = self._cache.get(owner) or []
            if ips:
                self._replace(path, "".join(f"{ip}\n" for ip in ips), 0o600)
            else:
                _unlink(path)
        self._dirty_owners.clear()
        self._replace(os.path.join(self.index, "state"), f"{_STATE_MAGIC} {os.stat(self.dir).st_mtime_ns}\n", 0o600)

    def _index_current(self):
        try:
            with open(os.path.join(self.index, "state"), encoding="ascii") as f:
                magic, mtime = f.read().split()
            return magic == _STATE_MAGIC and int(mtime) == os.stat(self.dir).st_mtime_ns
        except (OSError, ValueError, UnicodeDecodeError):
            return False

    def scan(self):
        """Every reservation in the directory: {IP: (container id, ifname)}. Reclaims empty (torn) files;
        leaves every file that is not named like an address alone."""
        found = {}
        with os.scandir(self.dir) as it:
            for entry in it:
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
        by_owner = {}
        for ip, owner in sorted(self.scan().items(), key=lambda kv: (kv[0].family, kv[0].value)):
            by_owner.setdefault(owner, []).append(ip)
        owners_dir = os.path.join(self.index, "owners")
        wanted = {_owner_key(o): "".join(f"{ip}\n" for ip in ips) for o, ips in by_owner.items()}
        for name in os.listdir(owners_dir):
            if name not in wanted:
                _unlink(os.path.join(owners_dir, name))
        for name, text in wanted.items():
            path = os.path.join(owners_dir, name)
            try:
                with open(path, encoding="ascii") as f:
                    if f.read() == text:
                        continue
            except (OSError, UnicodeDecodeError):
                pass
            self._replace(path, text, 0o600)
        self._cache = dict(by_owner)
        self.commit()
        return by_owner

    # -- helpers ------------------------------------------------------------------------------------
    def _replace(self, path, text, mode):
        tmp = os.path.join(self.index, "tmp", f"w{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.rename(tmp, path)


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
