"""host-local's files in the Go plugin's layout, byte for byte (docs/HOSTLOCAL.md has the why).

    <dataDir>/<network>/lock                 flock(LOCK_EX) around every operation (both plugins)
    <dataDir>/<network>/10.1.0.5             one file per reserved address: "<containerID>\\r\\n<ifname>"
    <dataDir>/<network>/last_reserved_ip.0   the last address handed out from range set 0

Every entry is lstat()ed and opened with O_NOFOLLOW|O_NONBLOCK; an entry named like an address that is
not a regular file is taken, as in Go, and never followed, read or removed. A reservation is written
complete under ``.skb/tmp`` and then ``link()``ed to its name, so a kill never leaves a torn one of ours.
"""
import errno
import fcntl
import os
import stat as _stat

from skb.cni.addr import IP
from skb.cni.errors import CNIError, IO_FAILURE
from skb.cni.jsonio import read_bounded, write_all

_OPEN = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ENTRY_LIMIT = 4096         # a reservation or last_reserved_ip file: "<container id>\r\n<ifname>", an address
ODD = ("", "")             # holder() of an entry that is not a reservation file: taken, by nobody we know
SKB_DIR = ".skb"           # ours, invisible to Go: no address is named so, nothing in it holds "<id>\r\n<if>"


def owner_content(cid, ifname):
    return f"{cid.strip()}\r\n{ifname}"


def parse_owner(content):
    """(container id, ifname) from a reservation file's content; ifname "" for the legacy id-only form."""
    text = content.strip()
    cid, sep, ifname = text.partition("\r\n")
    return (cid, ifname) if sep else (text, "")


def reason(e):
    name = errno.errorcode.get(e.errno, "")
    return f"{e.strerror or e} ({name})" if name else f"{e.strerror or e}"


def _lock_trouble(e, lock, what):
    """The error for something other than a regular file at the lock's name: the reference locks through
    a symlink, or fails, and no call of either can go on until the name holds a regular file again."""
    e.strerror = f"its lock file {lock} is {what}"
    e.fix = f"remove {lock}: host-local creates it again, as a regular file"
    return e


def fix(e):
    if getattr(e, "fix", None):
        return e.fix
    return {errno.EROFS: "dataDir is on a read-only filesystem: host-local must write there to reserve and release "
                         "addresses (mount it read-write, or point ipam.dataDir at a writable directory)",
            errno.ENOSPC: "the filesystem of dataDir is full",
            errno.EDQUOT: "the disk quota of dataDir is exhausted",
            errno.EACCES: "host-local runs as root and needs to write dataDir: check its permissions and any LSM "
                          "policy",
            errno.EPERM: "host-local runs as root and needs to write dataDir: check its permissions, attributes "
                         "(chattr +i) and any LSM policy",
            errno.ENOTDIR: "dataDir and <dataDir>/<network> must be directories",
            errno.ELOOP: "dataDir or <dataDir>/<network> is a loop of symlinks: point ipam.dataDir at a directory",
            }.get(e.errno, "dataDir must be a writable directory (default /var/lib/cni/networks)")


def read_entry(path, limit=ENTRY_LIMIT, dir_fd=None):
    """The content of the regular file ``path`` (at most ``limit`` bytes; None: no limit), never following
    a symlink and never blocking on a FIFO. None when there is no such entry, False when the entry is not a
    regular file (a symlink, dangling or not, a directory, a FIFO, a device). Other errors: OSError."""
    try:
        st = os.lstat(path, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not _stat.S_ISREG(st.st_mode):
        return False
    try:
        fd = os.open(path, _OPEN, dir_fd=dir_fd)
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
        return read_bounded(fd, limit, st.st_size)     # the whole file in one read, as a rule
    finally:
        os.close(fd)


def open_private_dir(name, dir_fd):
    """Open (creating it, mode 0700) the directory ``name`` under ``dir_fd`` without following a symlink.
    Anything else under that name (a symlink, a file, a FIFO) is removed first: the name is ours, and what
    a symlink points to is never touched."""
    for _ in range(3):
        try:
            return os.open(name, _DIR, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            os.unlink(name, dir_fd=dir_fd)     # not a directory: replaced
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass
    raise OSError(errno.EAGAIN, f"{name} keeps changing under us")


class Reservations:
    """One network's directory in Go's layout. ``open()`` takes the lock; every other method assumes it is
    held (the Go plugin takes the same lock, so neither plugin sees the other half-way)."""

    def __init__(self, directory):
        self.dir = directory
        self.lock_fd = self.dir_fd = self.skb_fd = self.tmp_fd = -1
        self.dev = None

    def fail(self, what, e):
        return CNIError(IO_FAILURE, f"host-local store {self.dir}: cannot {what}: {reason(e)}", fix(e))

    # -- the lock and our private directories ---------------------------------------------------------
    def open(self):
        """Create the directory if needed, flock ``lock``, open ``.skb`` and ``.skb/tmp`` and clear the
        latter. OSError on failure (everything opened is closed again)."""
        try:
            try:
                os.makedirs(self.dir, 0o755, exist_ok=True)
            except FileExistsError as e:     # a file, or a dangling symlink, where the directory should be
                e.errno, e.strerror = errno.ENOTDIR, "it exists and is not a directory"
                raise
            lock = os.path.join(self.dir, "lock")
            try:
                self.lock_fd = os.open(lock, _OPEN | os.O_CREAT, 0o600)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.EISDIR):  # (O_NOFOLLOW: ELOOP is a symlink at the name)
                    raise _lock_trouble(e, lock, "a symlink" if e.errno == errno.ELOOP else "a directory")
                raise
            st = os.fstat(self.lock_fd)
            if not _stat.S_ISREG(st.st_mode):
                raise _lock_trouble(OSError(errno.EINVAL, ""), lock, "not a regular file")
            self.dev = st.st_dev   # the network directory's filesystem (the lock file lives in it)
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            self.dir_fd = os.open(self.dir, _DIR & ~os.O_NOFOLLOW)   # the configured path, as Go follows it
            self.skb_fd = open_private_dir(SKB_DIR, self.dir_fd)
            self.tmp_fd = open_private_dir("tmp", self.skb_fd)
            # Only lock holders write there, and we hold the lock: whatever is left is from a killed call.
            for name in os.listdir(self.tmp_fd):
                self._unlink(name, "clear its scratch directory", self.tmp_fd)
        except BaseException:
            self.close()
            raise

    def close(self):
        for name in ("tmp_fd", "skb_fd", "dir_fd", "lock_fd"):   # closing the lock file drops the flock
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    # -- reservations ---------------------------------------------------------------------------------
    def reserve(self, ip, owner):
        """Create the reservation file for ``ip`` if the address is free. True if it is now ours."""
        name = str(ip)
        tmp = self._write_tmp(f"r{os.getpid()}", owner_content(*owner).encode(), f"reserve {ip}")
        try:
            try:
                os.link(tmp, name, src_dir_fd=self.tmp_fd, dst_dir_fd=self.dir_fd)
            except FileExistsError:
                if not self._reclaim_if_torn(ip):
                    return False
                try:
                    os.link(tmp, name, src_dir_fd=self.tmp_fd, dst_dir_fd=self.dir_fd)
                except FileExistsError:
                    return False
        except OSError as e:
            raise self.fail(f"reserve {ip}", e) from None
        finally:
            try:
                os.unlink(tmp, dir_fd=self.tmp_fd)
            except OSError:
                pass    # only scratch (the next open() clears .skb/tmp): the reservation, once linked, stands
        return True

    def _reclaim_if_torn(self, ip):
        """An empty regular file is a reservation torn by a killed writer (the Go plugin creates it, then
        writes): remove it. Anything else under that name means the address is taken. We see it only
        under the lock, so no writer is mid-way through it."""
        try:
            st = os.lstat(str(ip), dir_fd=self.dir_fd)
        except FileNotFoundError:
            return True
        except OSError as e:
            raise self.fail(f"look at {os.path.join(self.dir, str(ip))}", e) from None
        if _stat.S_ISREG(st.st_mode) and st.st_size == 0:
            self._unlink(str(ip), f"reclaim the torn reservation {ip}")
            return True
        return False

    def holder(self, ip):
        """The owner recorded in ``ip``'s reservation file; None if the address is free (or its file is
        torn: empty); ``ODD`` when the entry is not a regular file (taken, by nobody we know)."""
        try:
            data = read_entry(str(ip), dir_fd=self.dir_fd)
        except OSError as e:
            raise self.fail(f"read {os.path.join(self.dir, str(ip))}", e) from None
        if data is False:
            return ODD
        return parse_owner(data.decode("utf-8", "replace")) if data and data.strip() else None

    def release(self, ip):
        """Remove ``ip``'s reservation file. False when the entry is not a regular file: not a reservation,
        not ours to remove (it is left as it is)."""
        try:
            if not _stat.S_ISREG(os.lstat(str(ip), dir_fd=self.dir_fd).st_mode):
                return False
        except FileNotFoundError:
            return True
        except OSError as e:
            raise self.fail(f"release {ip}", e) from None
        self._unlink(str(ip), f"release {ip}")
        return True

    def is_free(self, ip):
        """No entry of any kind under the address's name (lstat: a dangling symlink is not free)."""
        try:
            os.lstat(str(ip), dir_fd=self.dir_fd)
        except FileNotFoundError:
            return True
        except OSError as e:
            raise self.fail(f"look up {ip}", e) from None
        return False

    # -- last_reserved_ip.N ---------------------------------------------------------------------------
    def read_last_reserved(self, index):
        """The bytes of ``last_reserved_ip.<index>``; None when it is missing, empty or not a regular file."""
        try:
            data = read_entry(f"last_reserved_ip.{index}", dir_fd=self.dir_fd)
        except OSError:
            return None
        return data or None

    def set_last_reserved(self, index, data):
        """Rewritten in place, as Go does (a torn file only changes where the next search starts). Only a
        regular file that has no other name is rewritten: anything else (a symlink, a hard link planted
        here, a FIFO) is replaced by a new file instead, never written through."""
        name = f"last_reserved_ip.{index}"
        if not self._rewrite(name, data):
            tmp = self._write_tmp(f"w{os.getpid()}", data, "record the last reserved address")
            try:
                os.rename(tmp, name, src_dir_fd=self.tmp_fd, dst_dir_fd=self.dir_fd)
            except OSError as e:
                self._unlink(tmp, "record the last reserved address", self.tmp_fd)
                raise self.fail("record the last reserved address", e) from None

    def _rewrite(self, name, data):
        """Overwrite an existing regular, singly linked file of the network directory's own filesystem
        with ``data``; False when it is not one (then it is replaced). lstat() decides before anything is
        opened, so a device node, a FIFO or a mount point planted under the name is never opened for
        writing, and the file opened must be the one looked at (same device and inode)."""
        try:
            st = os.lstat(name, dir_fd=self.dir_fd)
        except OSError:
            return False
        if not _stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_dev != self.dev:
            return False
        try:
            fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                         dir_fd=self.dir_fd)
        except OSError:
            return False
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not _stat.S_ISREG(now.st_mode) \
                    or now.st_nlink != 1:
                return False
            write_all(fd, data, 0)
            if now.st_size > len(data):
                # cut after writing, never to zero first: ext4 flushes a file truncated to zero on close
                # (its replace-via-truncate guard), which costs more than the whole call's other I/O
                os.ftruncate(fd, len(data))
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    # -- the whole directory --------------------------------------------------------------------------
    def scan(self):
        """Every reservation: ({IP: (container id, ifname)}, {range set index: last_reserved_ip bytes}).
        Reclaims empty (torn) files; leaves every entry that is not a regular file named like an address
        alone (such an address is taken: ``is_free`` says so)."""
        found, last = {}, {}
        try:
            with os.scandir(self.dir_fd) as it:
                entries = list(it)
        except OSError as e:
            raise self.fail("list its reservations", e) from None
        for entry in entries:
            if entry.name.startswith("last_reserved_ip."):
                i = entry.name[len("last_reserved_ip."):]
                if i.isascii() and i.isdigit():
                    data = self.read_last_reserved(int(i))
                    if data is not None:
                        last[int(i)] = data
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
            if owner is None and self._reclaim_if_torn(ip):
                continue
            if owner is not None and owner != ODD:
                found[ip] = owner
        return found, last

    # -- helpers --------------------------------------------------------------------------------------
    def _write_tmp(self, name, data, what):
        """A complete file under .skb/tmp (every byte written), ready to be linked or renamed into place."""
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600,
                         dir_fd=self.tmp_fd)
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
        except OSError as e:
            try:
                os.unlink(name, dir_fd=self.tmp_fd)
            except OSError:
                pass
            raise self.fail(what, e) from None
        return name

    def _unlink(self, name, what, dir_fd=None):
        try:
            os.unlink(name, dir_fd=self.dir_fd if dir_fd is None else dir_fd)
        except (FileNotFoundError, IsADirectoryError):
            pass
        except OSError as e:
            raise self.fail(what, e) from None
