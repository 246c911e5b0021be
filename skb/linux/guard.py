"""Which network namespace a plugin may act on: the host-netns guard.

A plugin runs in the runtime's netns (normally the node's). If CNI_NETNS names that same namespace, by
whatever path (``/proc/self/ns/net``, ``/proc/1/ns/net``, a bind mount of it, or ``/proc/<pid>/ns/net``
after the container's PID was reused by a host process), acting on it breaks the node: the reference
loopback's DEL set the node's ``lo`` DOWN exactly that way. So before changing anything:

- ADD and CHECK refuse such a target with code 8 and say why;
- DEL changes nothing there and succeeds (the runtime's cleanup must not fail on it). DEL also refuses
  to act through a ``/proc/<pid>/...`` path: PID reuse means it cannot be proven to still be the
  container's namespace (runtimes that use that form, like ``ctr``, send DEL with an empty CNI_NETNS).
  The path is resolved first, as open() would (``..``, symlinks): ``/run/../proc/<pid>/ns/net`` or a
  symlink to ``/proc/<pid>/ns/net`` is such a path too.

The target is compared by identity (device and inode of the nsfs file) with the plugin's own netns and
with PID 1's (the node's, when the plugin runs in a runtime's child netns of the node).

``CNI_NETNS_OVERRIDE=1`` (or ``true``) disables the guard, for the rare runtime that really wants a
plugin to configure its own namespace. It is the Go library's variable, so runtimes that already set it
keep working.
"""
import os
import sys

from skb.linux import netns
from skb.cni.errors import CNIError, INVALID_ENV, INVALID_NETNS


# The pid the caller knows this plugin process by. An exec'd plugin is its own; a warm call's child (a
# fork of the warm-start server, docs/WARM.md) is the launcher the runtime executed, whose pid the server
# has from the kernel (SO_PEERCRED) and sets here before the call begins.
PLUGIN_PID = None


def own_pid():
    """The pid that is this plugin process, as its caller knows it (a warm call's is its launcher's)."""
    return str(PLUGIN_PID or os.getpid())


def _ident(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def protected(ns):
    """Which protected namespace ``ns`` is (a phrase for messages), or None."""
    if netns.is_own(ns):
        return "the plugin's own network namespace (the runtime's, normally the node's)"
    if ns.ident() == _ident("/proc/1/ns/net"):  # unreadable without CAP_SYS_PTRACE over PID 1: then skipped
        return "PID 1's network namespace (the node's)"
    return None


_MAGIC_LINK_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")


def _is_magic_target(target):
    """A /proc magic link's text ("net:[4026531840]", "anon_inode:[eventfd]"): not a path to follow."""
    kind, sep, rest = target.partition(":")
    return bool(sep) and bool(kind) and set(kind) <= _MAGIC_LINK_CHARS and rest.startswith("[")


def other_process(path):
    """The PID of another process whose /proc directory ``path`` goes through, resolved as open() would
    (``..``, ``//`` and symlinks followed, /proc's magic links recognised), or None. Such a path names
    whatever namespace that PID has *now*: after PID reuse, another one. ``/proc/self`` and
    ``/proc/thread-self`` resolve to our own PID: None. Also recognised: ``<procfs>/<pid>/ns/net`` of a
    procfs mounted elsewhere (by its magic link)."""
    own, me = own_pid(), str(os.getpid())
    todo = [c for c in reversed(path.split("/")) if c]
    if not path.startswith("/"):
        todo += [c for c in reversed(os.getcwd().split("/")) if c]
    cur = []
    hops = 0
    while todo:
        c = todo.pop()
        if c == ".":
            continue
        if c == "..":
            if cur:
                cur.pop()
            continue
        cur.append(c)
        if len(cur) >= 2 and cur[0] == "proc" and cur[1].isdigit() and cur[1] != own:
            return int(cur[1])
        try:
            target = os.readlink("/" + "/".join(cur))
        except OSError:
            continue            # not a symlink (or not there: the rest is taken as written)
        if _is_magic_target(target):
            # /proc/<pid>/ns/net or /proc/<pid>/task/<tid>/ns/net, wherever that procfs is mounted
            if len(cur) >= 3 and cur[-2] == "ns":
                pid = cur[-5] if len(cur) >= 5 and cur[-4] == "task" else cur[-3]
                if pid.isdigit() and pid != own:
                    return int(pid)
            return None
        hops += 1
        if hops > 40:
            return None         # a symlink loop: open() fails with ELOOP anyway
        if cur[-1] in ("self", "thread-self") and target.split("/")[0] == me:
            target = own + target[len(me):]  # (a warm call's child: a procfs's self is the caller's plugin)
        cur.pop()
        if target.startswith("/"):
            cur = []
        todo += [x for x in reversed(target.split("/")) if x]
    return None


def open_target(args):
    """Open CNI_NETNS for ``args.command``, or return None when DEL must leave it alone.

    ADD/CHECK: a missing namespace, a path that is not a netns, and a protected netns are errors.
    DEL: an empty, missing or protected CNI_NETNS, a path that is no longer a netns, or a /proc/<pid>
    path, gives None (do nothing).
    """
    if "\0" in args.netns:
        raise CNIError(INVALID_ENV, "invalid CNI_NETNS: it contains a NUL byte",
                       f"CNI_NETNS {args.netns!r} must be the path of a network namespace")
    if args.command == "DEL":
        if not args.netns:
            return None
        if not args.netns_override and other_process(args.netns) is not None:
            note(f"DEL: not acting through {args.netns}: a path through /proc/<pid> may name another namespace "
                 "once the PID is reused")
            return None
        try:
            ns = netns.NetNS.open(args.netns)
        except netns.NetNSNotFound:
            return None
        except CNIError as e:
            # Typically the runtime's bind mount was unmounted and an empty file remains: gone.
            note(f"DEL: nothing to do in {args.netns}: {e.msg}")
            return None
    else:
        ns = netns.NetNS.open(args.netns)
    which = None if args.netns_override else protected(ns)
    if which is None:
        return ns
    ns.close()
    if args.command == "DEL":
        note(f"DEL: CNI_NETNS {args.netns} is {which}; changing nothing inside it (the DEL goes on as for a "
             "namespace already gone: what the attachment has outside it is still removed)")
        return None
    raise CNIError(INVALID_NETNS, f"CNI_NETNS {args.netns!r} is {which}; refusing to {args.command} there",
                   "a container's namespace is never the node's: this is a stale /proc/<pid>/ns/net path (PID "
                   "reused) or a runtime bug. A runtime that really means it can set CNI_NETNS_OVERRIDE=1.")


def note(msg):
    sys.stderr.write(f"skb-cni: {msg}\n")
