"""The multi-call entry point: one frozen bundle serves every plugin and the ``skb`` command.

The installed ``loopback``, ``ptp``, ``host-local``, ``debug`` and ``skb`` are small launchers that run the
bundle as ``skb-cni <applet> [args...]``; a script or symlink named after an applet works too. Only the
chosen applet's module is imported: every import here is paid on every plugin call.
"""
import sys

APPLETS = {
    "loopback": "skb_plugins.loopback.plugin",
    "ptp": "skb_plugins.ptp.plugin",
    "host-local": "skb_plugins.hostlocal_ipam.plugin",
    "debug": "skb_plugins.debug.plugin",
    "skb": "skb.cli",
}


def _fast_version():
    import os  # already loaded by the interpreter's start-up in the frozen bundle
    return os.environ.get("CNI_COMMAND") == "VERSION" and not os.environ.get("SKB_DEBUG_LOG")


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
        from skb.version import VERSION_REPLY
        sys.stdout.write(VERSION_REPLY)
        return 0
    module = __import__(APPLETS[name], fromlist=["main"])
    return module.main(args)


if __name__ == "__main__":
    sys.exit(main())
