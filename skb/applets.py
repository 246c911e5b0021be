"""The multi-call entry point: one frozen bundle serves every plugin and the ``skb`` command.

The installed ``loopback``, ``ptp``, ``host-local``, ``debug`` and ``skb`` are small launchers that run the
bundle as ``skb-cni <applet> [args...]``; a script or symlink named after an applet works too. Only the
chosen applet's module is imported: every import here is paid on every plugin call.
"""
import sys

from skb.cni.versions import VERSION_REPLY   # (imports nothing; every applet loads it anyway)

APPLETS = {
    "loopback": "skb_plugins.loopback.loopback",
    "ptp": "skb_plugins.ptp.ptp",
    "host-local": "skb_plugins.hostlocal_ipam.hostlocal",
    "debug": "skb_plugins.debug.debug",
    "skb": "skb.tool.main",
}
# IPAM plugins of this bundle that another plugin of it may run in its own process.
IN_PROCESS_IPAM = ("host-local",)


def _fast_version():
    import os  # already loaded by the interpreter's start-up in the frozen bundle
    # With SKB_DEBUG_LOG set, or stdout closed, the dispatcher handles VERSION: it records the call and
    # reports an answer it cannot deliver.
    return (os.environ.get("CNI_COMMAND") == "VERSION" and not os.environ.get("SKB_DEBUG_LOG")
            and sys.stdout is not None)


def main(argv=None):
    argv = sys.argv if argv is None else argv
    prog = argv[0].rsplit("/", 1)[-1] if argv else ""
    if prog in APPLETS:
        name, args = prog, argv[1:]
    elif len(argv) > 1 and argv[1] in APPLETS:
        name, args = argv[1], argv[2:]
    else:
        sys.stderr.write("usage: skb-cni APPLET [ARGS...]\napplets: " + ", ".join(sorted(APPLETS)) + "\n")
        return 2
    if name != "skb" and _fast_version():
        # Every plugin gives the same answer: reply before loading any plugin code. podman asks each
        # plugin of each network before every command, so this path is hot. (With SKB_DEBUG_LOG set the
        # call goes through the dispatcher, which records it.)
        sys.stdout.write(VERSION_REPLY)
        return 0
    module = __import__(APPLETS[name], fromlist=["main"])
    if name != "skb":
        # IPAM delegation may run these in-process when CNI_PATH resolves to this very bundle (see
        # skb.plugin.delegate); the library learns of them here and never imports a plugin itself.
        from skb.plugin import skel  # already loaded: every plugin module runs through skel
        skel.IN_PROCESS.update((n, APPLETS[n]) for n in IN_PROCESS_IPAM)
    return module.main(args)


if __name__ == "__main__":
    sys.exit(main())
