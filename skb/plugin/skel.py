"""The dispatcher every plugin runs: env and stdin in, one result or one error out.

A plugin hands ``run`` a ``Plugin`` with its callbacks; everything protocol-shaped lives here so a
plugin file holds only its networking story. Guarantees:
- errors are one JSON object on stdout (``cniVersion``, ``code``, ``msg``, ``details``), exit 1;
- an unexpected exception becomes code 999 naming what failed; a traceback goes to stderr only;
- the result is printed in the config's cniVersion, and is made before the call counts as a success: a
  result that cannot be written (say a 0.2.0 result with no address) undoes the ADD with the plugin's
  DEL and is an error; so is an answer that cannot be delivered (stdout closed or broken);
- a closed stdin is a decode error naming it; closed standard descriptors are filled with /dev/null so
  that no file opened later lands on them;
- with ``skbDebugLog`` in the config or ``SKB_DEBUG_LOG`` in the environment, each call is appended to
  that file as one JSON line (command, CNI_* env, stdin, exit code, stdout; ``trace`` with the W3C
  TRACEPARENT/TRACESTATE when the runtime passed them) so it can be replayed. The file is opened
  through skb.linux.files (absolute path, regular file, never blocking); the record is written whatever
  happened to stdout.
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


# A network configuration with its prevResult is a few KiB; a bound keeps /dev/zero on stdin harmless.
STDIN_LIMIT = 16 << 20


def read_stdin(stdin):
    """The bytes of ``stdin`` (a file object, or None when the runtime started us with it closed)."""
    if stdin is None:
        raise CNIError(DECODE, "no network configuration: stdin is closed",
                       "the runtime must pass the plugin's JSON configuration on stdin")
    try:
        if stdin.isatty():
            raise CNIError(DECODE, "no network configuration on stdin (it is a terminal)",
                           "pipe the plugin's JSON configuration to stdin, as a runtime does")
        data = stdin.buffer.read(STDIN_LIMIT + 1) if hasattr(stdin, "buffer") else stdin.read(STDIN_LIMIT + 1)
    except (OSError, ValueError) as e:  # ValueError: a file object closed in this process
        raise CNIError(IO_FAILURE, f"error reading the network configuration from stdin: "
                                   f"{getattr(e, 'strerror', None) or e}") from None
    if len(data) > STDIN_LIMIT:
        raise CNIError(DECODE, f"the network configuration on stdin is larger than {STDIN_LIMIT} bytes",
                       "a CNI configuration is a JSON object of a few KiB")
    return data


class Outcome:
    """What one call produced: exit code, stdout, stderr, the parsed config (if it got that far), the
    raw stdin (for the debug log), and for a successful ADD ``undo`` (runs the plugin's DEL: the answer
    could not be delivered)."""

    __slots__ = ("code", "stdout", "stderr", "conf", "stdin", "undo")

    def __init__(self, code, stdout, stderr="", conf=None, stdin=b""):
        self.code = code
        self.stdout = stdout
        self.stderr = stderr
        self.conf = conf
        self.stdin = stdin
        self.undo = None


def _undo(plugin, args, conf, why):
    """Run the plugin's DEL after its ADD succeeded but its answer cannot be given (``why``): DEL is the
    protocol's own way to undo an ADD, and every plugin's DEL tolerates what is already gone. Returns
    the sentence to add to the error's details."""
    try:
        plugin.delete(args, conf)
    except CNIError as e:
        return f"{why}; undoing the ADD with DEL failed too ({e}): call DEL again"
    except Exception as e:
        return f"{why}; undoing the ADD with DEL failed too ({type(e).__name__}: {e}): call DEL again"
    return f"{why}; the ADD was undone (DEL)"


def render_result(plugin, args, conf, result):
    """The ADD result as the line to print, made before the call counts as a success: a result that
    cannot be written in the configuration's version (or at all) undoes the ADD and is an error."""
    try:
        return jsonio.dumps(result.to_dict(conf.cni_version)) + "\n"
    except CNIError as e:
        raise CNIError(e.code, e.msg, _undo(plugin, args, conf, e.details or "the result cannot be written")) from None
    except Exception as e:
        import traceback
        raise CNIError(INTERNAL, f"internal error in the {plugin.name} plugin writing its result: "
                                 f"{type(e).__name__}: {e}",
                       _undo(plugin, args, conf, "this is a bug in skb-cni; the traceback is on stderr")
                       + "\n" + traceback.format_exc()) from None


def run(plugin, environ, stdin):
    """Handle one call. ``stdin`` is the config (bytes or str) or a file to read it from (None: closed),
    read only when the command needs it. Never raises.

    Errors before the configuration is read carry no cniVersion (there is none to speak yet); after,
    the configuration's, when it is one we speak."""
    out = Outcome(0, "")
    version = None
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
        out.stdin = stdin if isinstance(stdin, (bytes, str)) else read_stdin(stdin)
        conf = out.conf = config.parse(out.stdin)
        if conf.cni_version in config.SUPPORTED_VERSIONS:
            version = conf.cni_version
        callback = {env.ADD: plugin.add, env.DEL: plugin.delete, env.CHECK: plugin.check,
                    env.STATUS: plugin.status, env.GC: plugin.gc}.get(args.command, False)
        if callback is False:
            raise CNIError(INVALID_ENV, f"unknown CNI_COMMAND: {args.command}",
                           f"CNI_COMMAND must be one of {', '.join(env.COMMANDS)} (upper case)")
        config.check_version(conf, args.command)
        config.check_name_length(conf, args.command)
        if conf.debug_log:
            _check_debug_log(conf, args.command, out)
        if callback is not None:
            result = callback(args, conf)
            if args.command == env.ADD:
                out.stdout = render_result(plugin, args, conf, result)
                out.undo = lambda why: _undo(plugin, args, conf, why)
    except CNIError as e:
        out.code, out.stdout = 1, jsonio.dumps(e.to_dict(version)) + "\n"
    except Exception as e:  # never a traceback on stdout: report what failed, keep the trace on stderr
        import traceback
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        err = CNIError(INTERNAL, f"internal error in the {plugin.name} plugin: {what}",
                       "this is a bug in skb-cni; the traceback is on stderr")
        out.code, out.stdout, out.stderr = 1, jsonio.dumps(err.to_dict(version)) + "\n", traceback.format_exc()
    return out


def _check_debug_log(conf, command, out):
    """``skbDebugLog`` must name a file we can append to (an absolute path, a regular file): refused up
    front, before any work, so the record is not lost after the fact. For DEL only a remark: a debug
    setting must not block cleanup."""
    from skb.linux import files
    try:
        os.close(files.open_append(conf.debug_log, "skbDebugLog", 0o600))
    except CNIError as e:
        if command != env.DEL:
            raise
        out.stderr += f"skb-cni: not recording this call: {e}\n"
        conf.debug_log = ""


def debug_log_path(environ, conf):
    """(key, path) of the debug log for this call, or None. The configuration's ``skbDebugLog`` wins
    over ``SKB_DEBUG_LOG``."""
    if conf is not None and conf.debug_log:
        return "skbDebugLog", conf.debug_log
    path = environ.get("SKB_DEBUG_LOG", "")
    return ("SKB_DEBUG_LOG", path) if path else None


def debug_record(plugin, environ, out, duration):
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
    trace = {k: environ[v] for k, v in (("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE")) if environ.get(v)}
    if trace:   # W3C trace context, as newer libcni passes it: matches a call to the runtime's trace
        record["trace"] = trace
    return (jsonio.dumps(record) + "\n").encode("utf-8", "replace")


def append_debug_log(path, plugin, environ, out, duration, key="skbDebugLog"):
    """Append the call's record to ``path`` (one write with O_APPEND: concurrent plugin calls don't
    interleave lines) through the safe open (never a FIFO, a device or a relative path). Raises CNIError."""
    from skb.linux import files
    files.append(path, key, debug_record(plugin, environ, out, duration), 0o600)


def write_debug_logs(plugin, environ, out, duration, paths):
    """Append the record to each (key, path) in ``paths`` once; problems become stderr remarks."""
    done = set()
    for key, path in paths:
        if os.path.normpath(path) in done:
            continue
        done.add(os.path.normpath(path))
        try:
            append_debug_log(path, plugin, environ, out, duration, key)
        except CNIError as e:
            _stderr(f"skb-cni: cannot write the debug log: {e}\n")


class _Stderr:
    """sys.stderr for a plugin call: remarks go out if they can, and a closed or broken stderr (the
    runtime stopped reading) never turns into an exception in the middle of the plugin's work."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def fill_std_fds():
    """A runtime may start us with fd 0, 1 or 2 closed. Put /dev/null there, so that no file this
    process opens later lands on a standard stream (a record written to fd 1, a netns as stdin of ip).
    sys.stdin and sys.stdout stay None then (the dispatcher reports a closed stdin, and an answer it
    cannot deliver); sys.stderr becomes a writer that never raises, whatever happens to fd 2."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                got = os.open("/dev/null", os.O_RDWR)
            except OSError:
                break
            if got != fd:  # a lower one was free: it was filled by this very open
                os.close(got)
    if not isinstance(sys.stderr, _Stderr):
        stream = sys.stderr
        if stream is None:
            try:
                stream = open(2, "w", errors="backslashreplace", closefd=False)
            except OSError:
                stream = None
        if stream is not None:
            sys.stderr = _Stderr(stream)


def _write_fd(fd, text):
    """Write all of ``text`` to ``fd`` as UTF-8 (whatever the locale says); False if it cannot be."""
    data = text.encode("utf-8", "replace")
    try:
        n = os.write(fd, data)
        if n < len(data):
            # Local import, only when a pipe took part of the answer (one a few KiB long rarely is):
            # skb.linux.files is otherwise not loaded by a call that names no file.
            from skb.linux.files import write_all
            write_all(fd, data[n:])
    except OSError:
        return False
    return True


def _stderr(text):
    if sys.stderr is not None:
        try:
            sys.stderr.write(text)
        except (OSError, ValueError):
            pass


def finish(plugin, environ, out, started, extra_logs=()):
    """Deliver one call's outcome: stdout, stderr, the debug records, then exit. An ADD whose answer
    cannot be written to stdout (closed, a broken pipe) is undone: the runtime never learns of it, so
    it would never DEL it. The debug record is written whatever happened."""
    from time import perf_counter
    stdout_closed = sys.stdout is None
    if out.stdout:
        if stdout_closed or not _write_fd(1, out.stdout):
            answer = out.stdout.strip()
            answer = answer if len(answer) <= 2000 else answer[:2000] + "..."
            if out.code == 0 and out.undo is not None:
                note = out.undo("the result could not be written to stdout")
                out.code = 1
                out.stderr += f"skb-cni: {note}\n"
            else:
                out.code = 1
                out.stderr += f"skb-cni: the answer could not be written to stdout: {answer}\n"
    if out.stderr:
        _stderr(out.stderr)
    paths = []
    logged = debug_log_path(environ, out.conf)
    if logged:
        paths.append(logged)
    paths.extend(extra_logs)
    if paths:
        write_debug_logs(plugin, environ, out, perf_counter() - started, paths)
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
    # Skip interpreter teardown (module GC, atexit): nothing is left to do and it costs milliseconds.
    os._exit(out.code)


def main(plugin, environ=None):
    """Process entry point: run one call, deliver it, and exit without interpreter teardown."""
    from time import perf_counter  # builtin module, already loaded
    started = perf_counter()
    fill_std_fds()
    environ = os.environ if environ is None else environ
    finish(plugin, environ, run(plugin, environ, sys.stdin), started)
