"""The dispatcher every plugin runs: env and stdin in, one result or one error out.

A plugin hands ``run`` a ``Plugin`` with its callbacks; everything protocol-shaped lives here so a
plugin file holds only its networking story. Guarantees:
- errors are one JSON object on stdout (``cniVersion``, ``code``, ``msg``, ``details``), exit 1;
- an unexpected exception becomes code 999 naming what failed; a traceback goes to stderr only;
- the result is printed in the config's cniVersion;
- with ``skbDebugLog`` in the config or ``SKB_DEBUG_LOG`` in the environment, each call is appended to
  that file as one JSON line (command, CNI_* env, stdin, exit code, stdout) so it can be replayed.
"""
import os
import sys

from skb.cni import netconf as config
from skb.cni import env
from skb.cni import jsonio
from skb.cni.versions import VERSION_REPLY
from skb.cni.errors import CNIError, INTERNAL, IO_FAILURE, DECODE, INVALID_ENV

__all__ = ["Plugin", "run", "main", "IN_PROCESS"]

# Plugin name -> module (with a ``PLUGIN``) that IPAM delegation may run in this process instead of
# exec'ing the same bundle again. Filled by the applet entry (skb.applets); empty when a plugin module
# is used on its own (tests, from source), so delegation then always execs.
IN_PROCESS = {}


class Plugin:
    """A plugin's identity and callbacks. Each callback takes ``(args, conf)``: ``add`` returns a
    result object with ``to_dict(version)``; the others return None. A missing ``status`` or ``gc``
    succeeds with no output, as Go's skel does."""

    __slots__ = ("name", "about", "add", "delete", "check", "status", "gc")

    def __init__(self, name, about, add, delete, check, status=None, gc=None):
        self.name = name
        self.about = about
        self.add = add
        self.delete = delete
        self.check = check
        self.status = status
        self.gc = gc


def _about(plugin):
    from skb import __version__
    return (f"CNI {plugin.name} plugin, skb-cni {__version__}: {plugin.about}\n"
            f"CNI protocol versions supported: {', '.join(config.SUPPORTED_VERSIONS)}\n"
            "It is run by a container runtime with CNI_COMMAND and the other CNI_* variables set and the "
            "network configuration on stdin; see 'skb --help' to run it by hand.\n")


def _read_stdin(stdin):
    if stdin.isatty():
        raise CNIError(DECODE, "no network configuration on stdin (it is a terminal)",
                       "pipe the plugin's JSON configuration to stdin, as a runtime does")
    try:
        return stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read()
    except OSError as e:
        raise CNIError(IO_FAILURE, f"error reading from stdin: {e.strerror or e}") from None


class Outcome:
    """What one call produced: exit code, stdout, stderr, the parsed config (if it got that far) and
    the raw stdin (for the debug log)."""

    __slots__ = ("code", "stdout", "stderr", "conf", "stdin")

    def __init__(self, code, stdout, stderr="", conf=None, stdin=b""):
        self.code = code
        self.stdout = stdout
        self.stderr = stderr
        self.conf = conf
        self.stdin = stdin


def run(plugin, environ, stdin):
    """Handle one call. ``stdin`` is the config (bytes or str) or a file to read it from, read only
    when the command needs it. Never raises."""
    out = Outcome(0, "")
    version = config.LATEST
    try:
        try:
            args = env.from_environ(environ)
        except env.MissingCommand:
            out.stderr = _about(plugin)
            return out
        if args.command == env.VERSION:
            # Like Go's skel, VERSION does not read stdin (a runtime may leave it open).
            out.stdout = VERSION_REPLY
            return out
        out.stdin = stdin if isinstance(stdin, (bytes, str)) else _read_stdin(stdin)
        conf = out.conf = config.parse(out.stdin)
        version = conf.cni_version
        callback = {env.ADD: plugin.add, env.DEL: plugin.delete, env.CHECK: plugin.check,
                    env.STATUS: plugin.status, env.GC: plugin.gc}.get(args.command, False)
        if callback is False:
            raise CNIError(INVALID_ENV, f"unknown CNI_COMMAND: {args.command}",
                           f"CNI_COMMAND must be one of {', '.join(env.COMMANDS)} (upper case)")
        config.check_version(conf, args.command)
        if callback is not None:
            result = callback(args, conf)
            if args.command == env.ADD:
                out.stdout = jsonio.dumps(result.to_dict(conf.cni_version)) + "\n"
    except CNIError as e:
        out.code, out.stdout = 1, jsonio.dumps(e.to_dict(version)) + "\n"
    except Exception as e:  # never a traceback on stdout: report what failed, keep the trace on stderr
        import traceback
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        err = CNIError(INTERNAL, f"internal error in the {plugin.name} plugin: {what}",
                       "this is a bug in skb-cni; the traceback is on stderr")
        out.code, out.stdout, out.stderr = 1, jsonio.dumps(err.to_dict(version)) + "\n", traceback.format_exc()
    return out


def debug_log_path(environ, conf):
    if conf is not None and conf.debug_log:
        return conf.debug_log
    return environ.get("SKB_DEBUG_LOG", "")


def append_debug_log(path, plugin, environ, out, duration):
    import time
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "plugin": plugin.name,
        "command": environ.get("CNI_COMMAND", ""),
        "env": {k: v for k, v in environ.items() if k.startswith("CNI_")},
        "stdin": out.stdin.decode("utf-8", "replace") if isinstance(out.stdin, bytes) else out.stdin,
        "exitCode": out.code,
        "stdout": out.stdout,
        "stderr": out.stderr,
        "durationMs": round(duration * 1000, 3),
    }
    line = (jsonio.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line)  # one write with O_APPEND: concurrent plugin calls don't interleave lines
    finally:
        os.close(fd)


def main(plugin, environ=None):
    """Process entry point: run one call, print, and exit without interpreter teardown."""
    from time import perf_counter  # builtin module, already loaded
    environ = os.environ if environ is None else environ
    started = perf_counter()
    out = run(plugin, environ, sys.stdin)
    if out.stdout:
        sys.stdout.write(out.stdout)
    if out.stderr:
        sys.stderr.write(out.stderr)
    path = debug_log_path(environ, out.conf)
    if path:
        try:
            append_debug_log(path, plugin, environ, out, perf_counter() - started)
        except OSError as e:
            sys.stderr.write(f"skb-cni: cannot write the debug log {path}: {e.strerror or e}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (module GC, atexit): nothing is left to do and it costs milliseconds.
    os._exit(out.code)
