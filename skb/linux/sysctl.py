"""Sysctls: read and write ``/proc/sys/...``.

Which netns a ``/proc/sys/net/...`` file belongs to is decided when it is *opened*, by the netns of the
opening thread (not by any netlink socket). So to change a container's sysctl, open it inside
``skb.linux.netns.enter(ns)``; the node's (ip_forward, a host veth's accept_ra) outside.

Names: ``net.ipv4.ip_forward`` or ``net/ipv4/ip_forward`` (a leading ``/proc/sys/`` is accepted too).
Whichever separator comes first decides: a name whose first separator is a slash is used verbatim; a name
whose first separator is a dot has its dots and slashes swapped (as Go's pkg/utils/sysctl and sysctl(8)
do). So an interface name containing dots (a VLAN ``eth0.100``) must be written with slashes:
``net/ipv4/conf/eth0.100/rp_filter``, or ``net.ipv4.conf.eth0/100.rp_filter``.
"""
import errno
import os

from skb.cni.errors import CNIError, INTERNAL, errno_reason

_ROOT = "/proc/sys/"


def path(name):
    """The /proc/sys path of a sysctl name (see the module docstring for dots and slashes)."""
    if name.startswith(_ROOT):
        return name
    name = name.lstrip("/")
    dot, slash = name.find("."), name.find("/")
    if dot != -1 and (slash == -1 or dot < slash):
        name = name.translate({ord("."): "/", ord("/"): "."})
    return _ROOT + name


def read(name):
    """The value, without the final newline. CNIError names the sysctl and the netns on failure."""
    try:
        fd = os.open(path(name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 65536)
        finally:
            os.close(fd)
    except OSError as e:
        raise _error(f"cannot read sysctl {name}", e) from None
    return data.decode().rstrip("\n")


def write(name, value):
    """Set a sysctl unless it already has that value; return True when something changed (the caller
    then knows there is something to undo). Values compare by whitespace-separated fields, so "1 2"
    equals the kernel's "1\\t2"."""
    value = str(value)
    if read(name).split() == value.split():
        return False
    try:
        fd = os.open(path(name), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise _error(f'cannot set sysctl {name} to "{value}"', e) from None
    return True


def write_together(pairs):
    """Set several sysctls, each unless it already has its value: every file is opened for writing before
    any is written, so that one that cannot be (a read-only /proc/sys, a missing sysctl) fails the whole
    before anything changed. The names of those that changed."""
    todo, fds = [(n, str(v)) for n, v in pairs if read(n).split() != str(v).split()], []
    try:
        for name, value in todo:
            try:
                fds.append(os.open(path(name), os.O_WRONLY | os.O_CLOEXEC))
            except OSError as e:
                raise _error(f'cannot set sysctl {name} to "{value}"', e) from None
        for (name, value), fd in zip(todo, fds):
            try:
                os.write(fd, value.encode())
            except OSError as e:
                raise _error(f'cannot set sysctl {name} to "{value}"', e) from None
    finally:
        for fd in fds:
            os.close(fd)
    return [name for name, _ in todo]


class SysctlError(CNIError):
    """A sysctl that could not be read or written; ``errno`` tells why (ENOENT: no such sysctl)."""

    def __init__(self, msg, details, err):
        CNIError.__init__(self, INTERNAL, msg, details)
        self.errno = err


def _error(what, e):
    # Local import, on this error path only (to name the netns in the message): a plugin that sets
    # sysctls has loaded skb.linux.netns anyway; the skb command's readers need not.
    from skb.linux.netns import current_label
    reason = errno_reason(e.errno)
    hint = ""
    if e.errno == errno.ENOENT:
        hint = "no such sysctl in this netns (a missing interface, or a module not loaded, e.g. ipv6 disabled?)"
    elif e.errno in (errno.EACCES, errno.EPERM):
        hint = "writing sysctls needs root; /proc/sys may also be mounted read-only"
    return SysctlError(f"{what} in netns {current_label()}: {reason}", hint, e.errno)
