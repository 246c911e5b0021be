"""Which network namespace a plugin may act on: the host-netns guard.

A plugin runs in the runtime's netns (normally the node's). If CNI_NETNS names that same namespace, by
whatever path (``/proc/self/ns/net``, ``/proc/1/ns/net``, a bind mount of it, or ``/proc/<pid>/ns/net``
after the container's PID was reused by a host process), acting on it breaks the node: the reference
loopback's DEL set the node's ``lo`` DOWN exactly that way. So before changing anything:

- ADD and CHECK refuse such a target with code 8 and say why;
- DEL changes nothing there and succeeds (the runtime's cleanup must not fail on it). DEL also refuses
  to act through a ``/proc/<pid>/...`` path: PID reuse means it cannot be proven to still be the
  container's namespace (runtimes that use that form, like ``ctr``, send DEL with an empty CNI_NETNS).

The target is compared by identity (device and inode of the nsfs file) with the plugin's own netns and
with PID 1's (the node's, when the plugin runs in a runtime's child netns of the node).

``CNI_NETNS_OVERRIDE=1`` (or ``true``) disables the guard, for the rare runtime that really wants a
plugin to configure its own namespace. It is the Go library's variable, so runtimes that already set it
keep working.
"""
import os
import sys

from skb.linux import netns
from skb.cni.errors import CNIError, INVALID_NETNS


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


def _is_proc_path(path):
    return path.startswith("/proc/") and not path.startswith(("/proc/self/", "/proc/thread-self/"))


def open_target(args):
    """Open CNI_NETNS for ``args.command``, or return None when DEL must leave it alone.

    ADD/CHECK: a missing namespace, a path that is not a netns, and a protected netns are errors.
    DEL: an empty, missing or protected CNI_NETNS, a path that is no longer a netns, or a /proc/<pid>
    path, gives None (do nothing).
    """
    if args.command == "DEL":
        if not args.netns:
            return None
        if _is_proc_path(args.netns) and not args.netns_override:
            note(f"DEL: not acting through {args.netns}: a /proc/<pid> path may name another namespace "
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
        note(f"DEL: CNI_NETNS {args.netns} is {which}; changing nothing there")
        return None
    raise CNIError(INVALID_NETNS, f"CNI_NETNS {args.netns!r} is {which}; refusing to {args.command} there",
                   "a container's namespace is never the node's: this is a stale /proc/<pid>/ns/net path (PID "
                   "reused) or a runtime bug. A runtime that really means it can set CNI_NETNS_OVERRIDE=1.")


def note(msg):
    sys.stderr.write(f"skb-cni: {msg}\n")
