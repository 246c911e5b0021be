"""A scratch node: a forked child with a network namespace and a mount namespace of its own, where plugins
run as on a node without changing it (the doctor's --probe, a replay). Whatever a plugin does to "the
host" there (veth ends, bridges, routes, sysctls such as net.ipv4.ip_forward, masquerade rules) vanishes
with the child; the directories it writes (host-local's dataDir, /var/lib/cni, /run/cni, where Go's
tuning keeps its backups) are covered by overlays whose writes go to a private tmpfs: the
node's files stay visible, none is changed. A plugin that writes elsewhere still reaches the node. Where a directory cannot be
isolated so, nothing runs and the reason is the answer."""
import errno
import json
import os
import select
import signal
import time

from skb.cni.errors import CNIError
from skb.linux import scratch_netns
from skb.linux.files import write_all
from skb.linux.netlink import RtNetlink

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
REPLY_LIMIT = 1 << 20
# What plugins write besides the dataDirs their configurations name (libcni's cache and host-local's
# default store; Go tuning's /run/cni, iptables' lock): covered in every scratch node.
COVERED = ("/var/lib/cni", "/run/cni")


class Isolation(Exception):
    """The node cannot be kept unchanged; the message says what could not be isolated."""


def _mount(source, target, fstype, flags, data=None):
    enc = (lambda s: s.encode() if s is not None else None)
    try:
        scratch_netns.libc("mount")(enc(source), enc(target), enc(fstype), flags, enc(data))
    except OSError as e:
        raise Isolation(f"cannot mount {fstype or 'over'} {target}: {os.strerror(e.errno)}") from None


def enter(scratch, label="skb-scratch"):
    """In the child: a new netns and mount namespace; a private tmpfs on ``scratch`` for namespaces and
    state."""
    try:
        scratch_netns.libc("unshare")(CLONE_NEWNS | CLONE_NEWNET)
    except OSError as e:
        raise Isolation("cannot create the scratch node's namespaces (needs root): "
                        f"{os.strerror(e.errno)}") from None
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    with RtNetlink(label="the scratch node") as nl:
        nl.link_set_up("lo")                 # a node's lo is up
    try:
        _mount("sysfs", "/sys", "sysfs", 0)   # /sys/class/net of the scratch node
    except Isolation:
        pass
    _mount(label, scratch, "tmpfs", 0, "mode=0755")


def isolate(path, scratch, n, label="skb-scratch", required=True):
    """Cover ``path`` (or its nearest existing ancestor) with an overlay whose writes go to the scratch tmpfs;
    read-only again when the directory is on a read-only mount (an ADD must fail as on the node). Not
    ``required`` (one of COVERED): nothing where it cannot be covered."""
    at = os.path.abspath(path)
    while not os.path.isdir(at):
        at = os.path.dirname(at)
    if not required and (at == "/" or scratch.startswith(at.rstrip("/") + "/")):
        return
    if scratch.startswith(at.rstrip("/") + "/"):
        raise Isolation(f"cannot isolate {path}: the scratch node's own directory {scratch} is under {at} "
                        "(set TMPDIR to a directory elsewhere)")
    if at == "/" or any(c in at for c in ",:\\"):
        raise Isolation(f"cannot isolate {path}: its nearest existing directory is {at}")
    upper, work = os.path.join(scratch, f".state{n}", "upper"), os.path.join(scratch, f".state{n}", "work")
    os.makedirs(upper)
    os.makedirs(work)
    read_only = os.statvfs(at).f_flag & os.ST_RDONLY
    _mount(label, at, "overlay", 0, f"lowerdir={at},upperdir={upper},workdir={work}")
    if read_only:       # the plugins must fail there as they would on the node
        _mount(None, at, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    try:                # a cwd at or under the covered directory still names what is under the mount
        os.chdir(os.getcwd())
    except OSError:
        pass


def run(fn, allowed, what):
    """``fn()`` in a forked child (a process group of its own), which should ``enter`` a scratch node first:
    its JSON-able answer, or {"skipped": why} when it could not isolate the node, failed, or did not answer
    within ``allowed`` seconds (then its group is killed)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setpgid(0, 0)
            try:
                reply = fn()
            except (Isolation, scratch_netns.NetnsAdminError, CNIError, OSError) as e:
                reply = {"skipped": str(e)}
            except BaseException as e:     # the child must always answer and exit
                reply = {"skipped": f"{type(e).__name__}: {e}"}
            write_all(w, json.dumps(reply).encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + allowed
    chunks, size = [], 0
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > REPLY_LIMIT:
                raise TimeoutError
    except TimeoutError:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        return {"skipped": f"{what} did not finish within {allowed:.0f} s; it was killed"}
    finally:
        os.close(r)
        _reap(pid)
    try:
        return json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {"skipped": f"{what} ended without a report"}


def _reap(pid):
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        except OSError as e:
            if e.errno != errno.EINTR:
                return
