"""host-local's store: the Go plugin's files (``reservations``) and skb's index of them (``index``),
behind the methods the allocator and the plugin use. docs/HOSTLOCAL.md explains the design.

The index never decides alone: what it says an attachment holds is confirmed by reading that one
reservation file (a single contradiction proves it stale: it is rebuilt from a full scan and asked again),
and a free address is never taken from it (the candidate's file is lstat()ed and created exclusively).
"""
import os

from skb.cni.addr import IP
from skb.cni.errors import CNIError, INVALID_CONFIG, IO_FAILURE
from skb_plugins.hostlocal_ipam.index import Index, indexable, line
from skb_plugins.hostlocal_ipam.reservations import ODD, Reservations, fix, reason

__all__ = ["Store", "ODD"]


class Store:
    """One network's directory. Use as a context manager: the lock is held from enter to exit."""

    def __init__(self, data_dir, network):
        if "\0" in data_dir:
            raise CNIError(INVALID_CONFIG, "invalid field ipam.dataDir: it contains a NUL byte",
                           f"dataDir {data_dir!r} must be a directory path (no NUL); default /var/lib/cni/networks")
        self.dir = os.path.join(data_dir, network)
        self._files = Reservations(self.dir)
        self._index = None
        self._added = {}       # index lines to append at commit (a dict: ordered, O(1) membership)
        self._removed = set()  # index lines to drop at commit
        self._changed = False
        self._lr = {}          # range set index -> last_reserved_ip.<index> content, as last seen
        self._owned = {}       # owner -> [IP], confirmed against the files during this call

    # -- locking ------------------------------------------------------------------------------------
    def __enter__(self):
        try:
            self._files.open()
            self._index = Index(self.dir, self._files.dir_fd, self._files.skb_fd, self._files.fail)
            if not self._index.load(self._files.read_last_reserved):
                self.rebuild()
        except OSError as e:
            self._close()
            raise CNIError(IO_FAILURE, f"host-local store {self.dir} is unusable: {reason(e)}", fix(e)) from None
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc):
        self._close()

    def _close(self):
        if self._index is not None:
            self._index.close()
        self._files.close()

    # -- reservations (the Go-compatible part) -------------------------------------------------------
    def reserve(self, ip, owner):
        """Create the reservation file for ``ip`` if the address is free. True if it is now ours."""
        if not self._files.reserve(ip, owner):
            return False
        if indexable(owner):
            text = line(owner, ip)
            if text in self._removed:
                self._removed.discard(text)
            else:
                self._added[text] = None
        if owner in self._owned:
            self._owned[owner].append(ip)
        self._changed = True
        return True

    def holder(self, ip):
        """The owner recorded in ``ip``'s reservation file; None if the address is free (or its file is
        torn: empty); ``ODD`` when the entry is not a regular file (taken, by nobody we know)."""
        return self._files.holder(ip)

    def release(self, ip, owner):
        if not self._files.release(ip):
            return      # not a reservation file: not ours to remove
        text = line(owner, ip)
        if text in self._added:
            del self._added[text]
        elif indexable(owner):   # (an owner that is not, read from a foreign file, was never indexed)
            self._removed.add(text)
        held = self._owned.get(owner)
        if held and ip in held:
            held.remove(ip)
        self._changed = True

    def is_free(self, ip):
        """No entry of any kind under the address's name (lstat: a dangling symlink is not free)."""
        return self._files.is_free(ip)

    def last_reserved(self, index):
        data = self._files.read_last_reserved(index)
        if data is None:
            return None
        self._lr[index] = data
        return IP.parse(data.decode("ascii", "replace"))  # a trailing newline: unparsable, as in Go

    def set_last_reserved(self, index, ip):
        """Rewritten in place, as Go does; the index records the content (Go rewrites it too)."""
        data = str(ip).encode()
        self._files.set_last_reserved(index, data)
        self._lr[index] = data
        self._changed = True

    def scan(self):
        """Every reservation in the directory: {IP: (container id, ifname)}. Reclaims empty (torn) files;
        leaves every entry that is not a regular file named like an address alone."""
        found, last = self._files.scan()
        self._lr.update(last)
        return found

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
        ips = [ip for ip in self._index.lookup(owner) if line(owner, ip) not in self._removed]
        if indexable(owner):
            prefix = line(owner, "")
            for text in self._added:
                if text.startswith(prefix):
                    ip = IP.parse(text[len(prefix):].decode())
                    if ip not in ips:
                        ips.append(ip)
        confirmed = [ip for ip in ips if self.holder(ip) == owner]
        return confirmed, len(confirmed) != len(ips)

    def commit(self):
        """Record this call's changes in the index (one journal record), if it changed anything."""
        if not self._changed:
            return
        last = {i: data for i, data in self._lr.items() if self._index.last.get(i) != data}
        self._index.append(list(self._added), self._removed, last, self._index.stamp_directory())
        self._added, self._removed, self._changed = {}, set(), False

    def rebuild(self):
        """Rebuild the index from a full scan (after a foreign change, or after we were killed)."""
        found = self.scan()
        self._owned = {}
        self._added, self._removed = {}, set()
        if self._index.rebuild(found, self._lr):
            self._changed = False
        return found
