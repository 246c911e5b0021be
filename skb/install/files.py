"""The suite's files in a bin dir: the bundle's MANIFEST, our launchers, and durable writes (a temporary
file fsync'd, then renamed). Errors are ``InstallError``. Standard library only (see ``skb.install``)."""
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat

LINK = ".skb"
BUNDLE_RE = re.compile(r"^\.skb-\d[^/]*-[0-9a-f]{12}$")
TMP_PREFIX = ".skb-tmp."  # every temporary name an install makes in a bin dir starts with this
CONF_TMP_INFIX = ".skb-tmp."  # temporary config files: .<conf name>.skb-tmp.<pid>
DEFAULT_BIN_DIR = "/opt/cni/bin"
LAUNCHER_MAX_SIZE = 1 << 20  # our launchers are static binaries of about 50 KB
LAUNCHER_MARK = b"skb-cni launcher"  # a string compiled into build/launcher.c's messages
# A launcher names the bundle dir it starts: build/bundle.py stage writes the name after this mark, in a
# slot of BUNDLE_SLOT bytes plus a NUL (build/launcher.c: bundle_slot).
BUNDLE_MARK = b"skb-cni bundle dir="
BUNDLE_SLOT = 96

# Crash points for tests (tests/integration/test_installer.py): SKB_INSTALL_CRASH_AT=<point> makes the
# installer SIGKILL itself there, exactly like a node reboot or an OOM kill at that instant.
CRASH_ENV = "SKB_INSTALL_CRASH_AT"


class InstallError(Exception):
    pass


def crash_point(name):
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), 9)


def say(log, msg):
    if log:
        log(msg)


# ------------------------------------------------------------------------------------ the bundle's files

def tree_files(top):
    """(relative path, absolute path) of every file and symlink under top, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))):
            path = os.path.join(dirpath, name)
            out.append((os.path.relpath(path, top), path))
    return sorted(out)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_lines(top):
    lines = []
    for rel, path in tree_files(top):
        if rel == "MANIFEST":
            continue
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            lines.append(f"link {os.readlink(path)} {rel}")
        else:
            lines.append(f"{sha256_file(path)} {stat.S_IMODE(st.st_mode):o} {rel}")
    return lines


# No network configuration comes near this; a log file that sorts first might (read whole, it could take
# the installer's container past its memory limit, at every --wait round).
CONF_READ_LIMIT = 4 << 20


def read_regular(path, limit=None, what="network configuration"):
    """The bytes of ``path`` (symbolic links followed, as the runtime follows them), or None when it is not a
    regular file: opened without waiting, so a FIFO put at a config's name never holds the installer (nor
    its --wait loop, nor the lock it holds on the conf dir). OSError as open() raises it (IsADirectoryError
    for a directory), and EFBIG for a file over ``limit`` (default CONF_READ_LIMIT)."""
    limit = CONF_READ_LIMIT if limit is None else limit
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(st.st_mode):
            return None
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB, which no {what} is", path)
        return b"".join(chunks)
    finally:
        os.close(fd)


def verify(bundle_dir):
    """True when bundle_dir holds exactly what its MANIFEST lists (a copy may have been cut)."""
    try:
        with open(os.path.join(bundle_dir, "MANIFEST")) as f:
            want = f.read().splitlines()
    except OSError:
        return False
    return _safe_modes(want) == manifest_lines(bundle_dir)


def _file_mode(line):
    """(digest, mode, relative path) of a MANIFEST line naming a file, its mode at most 755 (never writable
    by others, never set-id); None for a link or a line that is not one."""
    digest, mode, rel = (line.split(" ", 2) + ["", ""])[:3]
    return (digest, int(mode, 8) & 0o755, rel) if digest != "link" and re.fullmatch(r"[0-7]{1,4}", mode) else None


def _safe_modes(lines):
    """MANIFEST lines with each mode as an install sets it (``copy_tree_durably``): what an installed bundle
    must hold exactly (a file made writable by others since is altered, and repaired)."""
    return [f"{f[0]} {f[1]:o} {f[2]}" if (f := _file_mode(line)) else line for line in lines]


def staged_bundle(src):
    """The bundle dir name a staged (or installed) bin dir's .skb link names."""
    link = os.path.join(src, LINK)
    if not os.path.islink(link) or not BUNDLE_RE.match(os.readlink(link)):
        raise InstallError(f"{src} holds no skb-cni suite ({link} should link to .skb-<version>-<hash>): "
                           "run make build, or pass the dir the suite was installed or staged in")
    return os.readlink(link)


def launchers(src):
    """Our launchers in a staged or installed bin dir (not LICENSE, README.md, nor another plugin)."""
    return sorted(n for n in os.listdir(src) if not n.startswith(".") and is_our_launcher(os.path.join(src, n)))


def launcher_bundle(path):
    """The bundle dir name a launcher of ours starts, or None (an unstaged launcher: it follows .skb)."""
    try:
        with open(path, "rb") as f:
            data = f.read(LAUNCHER_MAX_SIZE)
    except OSError:
        return None
    at = data.find(BUNDLE_MARK)
    if at < 0:
        return None
    start = at + len(BUNDLE_MARK)
    name = data[start:start + BUNDLE_SLOT + 1].split(b"\0", 1)[0].decode("ascii", "replace")
    return name if BUNDLE_RE.match(name) else None


def is_our_launcher(path):
    """A regular file that is one of our static launchers (not a Go plugin of the same name)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > LAUNCHER_MAX_SIZE:
            return False
        with open(path, "rb") as f:
            return LAUNCHER_MARK in f.read()
    except OSError:
        return False


# ------------------------------------------------------------------------------------ durable writes

def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def os_error_text(e):
    """``<file>: <cause>`` for an OSError, including shutil.copytree's Error, whose one argument is a list
    of (src, dst, why) with ``why`` a string like "[Errno 28] No space left on device: '<dst>'"."""
    if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) and e.args[0]:
        _, dst, why = e.args[0][0]
        m = re.match(r"\[Errno \d+\] (.*?)(?:: '.*')?$", str(why))
        more = f" (and {len(e.args[0]) - 1} more)" if len(e.args[0]) > 1 else ""
        return f"{dst}: {m.group(1) if m else why}{more}"
    if e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e)


def copy_tree_durably(src, dst):
    """Copy the bundle src to dst (a temporary name), each file and dir fsync'd: contents and symbolic
    links only. Modes are the ones src's MANIFEST lists (dirs 755), whatever umask extracted src; no
    extended attributes are copied (an image's SELinux label must not follow its files onto the node: they
    take their directory's). On failure (a full disk), dst is removed and the error is an InstallError
    naming the file and the cause."""
    try:
        modes = _manifest_modes(src)
        _copy_plain(src, dst)
        for rel, path in tree_files(dst):
            if not os.path.islink(path):
                if rel in modes:
                    os.chmod(path, modes[rel])
                fsync_path(path)
        for dirpath, _, _ in os.walk(dst):
            os.chmod(dirpath, 0o755)
            fsync_path(dirpath)
    except OSError as e:
        shutil.rmtree(dst, ignore_errors=True)
        raise InstallError(f"cannot copy the bundle {src} to {dst}: {os_error_text(e)}") from None


def _copy_plain(src, dst):
    os.mkdir(dst, 0o700)
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        out = dst if rel == "." else os.path.join(dst, rel)
        for name in dirnames + filenames:
            s, d = os.path.join(dirpath, name), os.path.join(out, name)
            if os.path.islink(s):
                os.symlink(os.readlink(s), d)
            elif os.path.isdir(s):
                os.mkdir(d, 0o700)
            else:
                shutil.copyfile(s, d)
        dirnames[:] = [n for n in dirnames if not os.path.islink(os.path.join(dirpath, n))]


def _manifest_modes(bundle_dir):
    """{relative path: mode} of the regular files bundle_dir's MANIFEST lists ({} when it has none: the
    copy then fails its verification)."""
    try:
        with open(os.path.join(bundle_dir, "MANIFEST")) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    return {f[2]: f[1] for f in map(_file_mode, lines) if f}


def replace_file(src, dest_dir, name):
    """Put a copy of src at dest_dir/name by rename(2): a runtime sees the old file or the new one."""
    tmp = os.path.join(dest_dir, f"{TMP_PREFIX}{os.getpid()}.{name}")
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o755)
        fsync_path(tmp)
    except OSError as e:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise InstallError(f"cannot copy {src} to {dest_dir}: {os_error_text(e)}") from None
    crash_point("launcher-written")
    os.rename(tmp, os.path.join(dest_dir, name))


def write_file_atomically(path, data, mode=0o644):
    """Write ``data`` (bytes) to ``path`` through a temporary file in the same dir, fsync'd, then renamed."""
    d, name = os.path.split(path)
    tmp = os.path.join(d, f".{name}{CONF_TMP_INFIX}{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        # The installer's own write-everything loop, not skb.linux.files.write_all: it imports nothing of
        # skb but itself (build/bundle.py runs it on the build host's Python), and it stops half-way for
        # the crash test.
        view = memoryview(data)
        first = len(data) // 2   # written first, so that a test can kill us right after it
        while first:
            n = os.write(fd, view[:first])
            view, first = view[n:], first - n
        crash_point("config-half-written")
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        os.unlink(tmp)  # e.g. a full disk: leave no temporary file behind
        raise
    else:
        os.close(fd)
    os.rename(tmp, path)
    fsync_path(d)


def remove_dir(dest, name):
    """Rename away first, so a crash never leaves a half-deleted dir under a bundle's name."""
    trash = os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.trash-{name.lstrip('.')}")
    os.rename(os.path.join(dest, name), trash)
    shutil.rmtree(trash)


def remove_any(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def mapped_by_someone(path):
    """True when a process (that we can see) has a file of ``path`` mapped: a plugin still running from it."""
    prefix = os.path.realpath(path).rstrip("/") + "/"  # maps name files by their resolved paths
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                if prefix in f.read():
                    return True
        except OSError:
            continue
    return False


class DirLock:
    """flock on the directory itself: one installer at a time per dir, and no lock file left behind."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)

    def __enter__(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self.fd

    def __exit__(self, *exc):
        os.close(self.fd)
