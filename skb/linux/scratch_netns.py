"""Named network namespaces for trying things: what ``ip netns add/del NAME`` does, without iproute2.

A named netns is an empty file under ``/run/netns`` with the namespace's nsfs file bind-mounted on it.
Like iproute2 we first make ``/run/netns`` a shared mount point (bind-mounting it onto itself if it is
not a mount point yet), so the mount is seen from mount namespaces created later (a runtime's, a
``ip netns exec``). The new namespace comes from a forked child that calls ``unshare(CLONE_NEWNET)``
and bind-mounts its own ``/proc/self/ns/net``: this process never leaves its own namespace. As with
``ip netns add``, ``lo`` starts DOWN.

Used by ``skb netns``, ``skb replay`` (when the captured netns is gone) and ``skb doctor --probe``.
"""
import errno
import os

from skb.linux.netns import libc_function

RUN_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2

_calls = {}


class NetnsAdminError(Exception):
    """Creating or deleting a named netns failed; the message says what and why."""


def libc(name):
    """libc's ``mount``, ``umount2`` or ``unshare`` (``skb.linux.netns.libc_function``: OSError on -1),
    loaded on first use. ``mount``'s data is a C string or None."""
    fn = _calls.get(name)
    if fn is None:
        argtypes = {"mount": ("char_p", "char_p", "char_p", "ulong", "char_p"), "umount2": ("char_p", "int"),
                    "unshare": ("int",)}[name]
        fn = _calls[name] = libc_function(name, "int", *argtypes)
    return fn


def _mount(source, target, fstype, flags):
    libc("mount")(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                  flags, None)


def valid_name(name):
    return bool(name) and "/" not in name and name not in (".", "..") and len(name.encode()) <= 255


def path_of(name, run_dir=RUN_DIR):
    return os.path.join(run_dir, name)


def _make_shared(run_dir):
    try:
        _mount("", run_dir, "none", MS_SHARED | MS_REC)
    except OSError as e:
        if e.errno != errno.EINVAL:   # EINVAL: not a mount point yet
            raise
        _mount(run_dir, run_dir, "none", MS_BIND | MS_REC)
        _mount("", run_dir, "none", MS_SHARED | MS_REC)


def add(name, run_dir=RUN_DIR):
    """Create the named netns; return its path. Fails if the name exists."""
    if not valid_name(name):
        raise NetnsAdminError(f"invalid netns name {name!r}: use a plain file name (no '/')")
    os.makedirs(run_dir, mode=0o755, exist_ok=True)
    try:
        _make_shared(run_dir)
    except OSError as e:
        raise NetnsAdminError(f"cannot make {run_dir} a shared mount point: {e.strerror} (needs root)") from None
    path = path_of(name, run_dir)
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0))
    except FileExistsError:
        raise NetnsAdminError(f'cannot create namespace file "{path}": it exists already '
                              f"(skb netns del {name} removes it)") from None
    except OSError as e:
        raise NetnsAdminError(f'cannot create namespace file "{path}": {e.strerror}') from None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: a new netns of its own, bind-mounted on the file; report errno through the pipe
        code = 0
        try:
            os.close(r)
            libc("unshare")(CLONE_NEWNET)
            _mount("/proc/self/ns/net", path, "none", MS_BIND)
        except OSError as e:
            code = e.errno or 1
        finally:
            try:
                os.write(w, str(code).encode())
            finally:
                os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        reply = f.read().decode() or "1"
    os.waitpid(pid, 0)
    if reply != "0":
        os.unlink(path)
        err = int(reply)
        raise NetnsAdminError(f'cannot create network namespace "{name}": {os.strerror(err)} (needs root)')
    return path


def delete(name, run_dir=RUN_DIR):
    """Unmount and remove the named netns. Fails if it does not exist."""
    if not valid_name(name):
        raise NetnsAdminError(f"invalid netns name {name!r}: use a plain file name (no '/')")
    path = path_of(name, run_dir)
    if not os.path.lexists(path):
        raise NetnsAdminError(f'cannot remove namespace file "{path}": no such file')
    try:
        libc("umount2")(path.encode(), MNT_DETACH)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOENT):  # EINVAL: nothing mounted there
            raise NetnsAdminError(f'cannot unmount "{path}": {e.strerror}') from None
    try:
        os.unlink(path)
    except OSError as e:
        raise NetnsAdminError(f'cannot remove namespace file "{path}": {e.strerror}') from None


def names(run_dir=RUN_DIR):
    try:
        return sorted(os.listdir(run_dir))
    except FileNotFoundError:
        return []


def unique_name(prefix):
    return f"{prefix}-{os.urandom(4).hex()}"
