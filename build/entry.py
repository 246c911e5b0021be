"""Entry script of the frozen bundle: ``skb-cni <applet> [args...]``, started by the launchers.

Kept to what every call needs: the launcher's bootloader variables are removed so that the processes a
plugin starts (IPAM plugins, ``ip``) inherit the environment exactly as the runtime passed it, then the
applet dispatcher runs, then the process ends with ``os._exit`` once stdout and stderr are flushed:
interpreter finalization (module teardown, a last GC) only costs time in a process that ends anyway.
``os`` and ``sys`` are already loaded by PyInstaller's bootstrap: no import cost here.

``skb-cni --warm-serve KEY BINDIR`` (started by a launcher, never by hand) is the warm-start server
(skb/plugin/warm/); its children run each call through ``run`` below, the same function as here.
"""
import gc
import os
import sys

# A plugin call is a short-lived process that allocates little and exits with os._exit: cyclic garbage
# collection only spends time during the imports.
gc.disable()

for _name in ("_PYI_ARCHIVE_FILE", "_PYI_PARENT_PROCESS_LEVEL", "_PYI_LINUX_PROCESS_NAME"):
    os.environ.pop(_name, None)

# Every module is a .pyc file in _internal/ (noarchive), so Python's own FileFinder can find it directly.
# PyInstaller's path hook would, per package dir, compute relative paths, then per import look in its
# (empty) PYZ before delegating to a FileFinder anyway: measurable Python work on every call.
sys.path_hooks[:] = [h for h in sys.path_hooks if getattr(h, "__qualname__", "") != "PyiFrozenFinder.path_hook"]
sys.path_importer_cache.clear()


def run(argv):
    """Run one applet call to its end: os._exit with its exit code once stdout and stderr are flushed."""
    from skb.applets import main
    try:
        code = main(argv)
    except SystemExit as e:  # argparse --help and friends
        code = e.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message") semantics
        sys.stderr.write(f"{code}\n")
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # a closed or full pipe: the runtime will see the exit code
        code = code or 1
    os._exit(code & 0xFF)


WARM_SERVE = len(sys.argv) > 1 and sys.argv[1] == "--warm-serve"
if WARM_SERVE:
    from skb.applets import APPLETS
    from skb.plugin.warm.server import serve
# (one line for both, so that a warm call's traceback names this line as an exec'd call's does: adopt.py)
serve(sys.argv, run, APPLETS) if WARM_SERVE else run(sys.argv)
