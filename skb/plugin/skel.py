"""The dispatcher every plugin runs: env and stdin in, one result or one error out.

A plugin hands ``run`` a ``Plugin``: its verbs and the class of its configuration. Everything
protocol-shaped lives here, so a plugin file holds only its networking story. Each verb gets one
``Call``: the CNI_* arguments, the configuration decoded into its typed value, the stdin bytes, the
bound IPAM delegate (for a plugin that delegates), and for ADD the undo stack. What the dispatcher
guarantees, and why, is in docs/ARCHITECTURE.md#the-life-of-one-call.
"""
import os
import sys

from skb import __version__
from skb.cni import netconf as config
from skb.cni import env
from skb.cni import jsonio
from skb.cni.versions import VERSION_REPLY
from skb.cni.errors import CNIError, INTERNAL, IO_FAILURE, DECODE, INVALID_ENV

__all__ = ["Plugin", "Call", "UndoStack", "run", "main", "IN_PROCESS"]

# Plugin name -> module (with a ``PLUGIN``) that IPAM delegation may run in this process instead of
# exec'ing the same bundle again. Filled by the applet entry (skb.applets); empty when a plugin module
# is used on its own (tests, from source), so delegation then always execs.
IN_PROCESS = {}


class Plugin:
    """A plugin's identity, verbs and configuration. Each verb takes one ``Call``: ``add`` returns a
    result object with ``to_dict(version)``; the others return None. A missing ``status`` or ``gc``
    succeeds with no output, as Go's skel does. ``config`` is the plugin's ``netconf.NetConf`` subclass;
    ``ipam``, for a plugin that delegates to an IPAM plugin, makes the call's bound delegate from it."""

    __slots__ = ("name", "about", "add", "delete", "check", "status", "gc", "config", "ipam")

    def __init__(self, name, about, add, delete, check, status=None, gc=None, config=config.NetConf, ipam=None):
        self.name = name
        self.about = about
        self.add = add
        self.delete = delete
        self.check = check
        self.status = status
        self.gc = gc
        self.config = config
        self.ipam = ipam


class Call:
    """One invocation, as every verb sees it: ``args`` (skb.cni.env.CmdArgs: the CNI_* variables),
    ``conf`` (the configuration, decoded for this command), ``stdin`` (its bytes as received: a delegate
    gets them unchanged), ``environ``, ``ipam`` (the bound IPAM delegate, or None) and, for ADD, ``undo``
    (the transaction's UndoStack; None for the other commands)."""

    __slots__ = ("plugin", "args", "conf", "stdin", "environ", "ipam", "undo")

    def __init__(self, plugin, args, conf, stdin, environ, undo=None):
        self.plugin = plugin
        self.args = args
        self.conf = conf
        self.stdin = stdin
        self.environ = environ
        self.undo = undo
        self.ipam = plugin.ipam(self) if plugin.ipam is not None else None

    @property
    def command(self):
        return self.args.command


class UndoStack:
    """The undo stack of one ADD: every side effect registers its undo right after it succeeds; a failure
    (of the verb, of the result's rendering, or of its delivery) unwinds them all, newest first, so a failed
    ADD leaves nothing behind. An undo that fails does not stop the others; what could not be undone is
    written to stderr and added to the error's ``details``, so the runtime's log says what was left."""

    __slots__ = ("_steps",)

    def __init__(self):
        self._steps = []

    def push(self, what, fn, *args):
        """Register ``fn(*args)`` as the undo of the step just done; ``what`` names it for messages."""
        self._steps.append((what, fn, args))

    def __len__(self):
        return len(self._steps)

    def descriptions(self):
        return [what for what, _fn, _args in self._steps]

    def unwind(self, error=None):
        """Run every undo, newest first; return the list of (what, exception) that failed."""
        failed = []
        while self._steps:
            what, fn, args = self._steps.pop()
            try:
                fn(*args)
            except Exception as e:  # keep undoing the rest
                failed.append((what, e))
        if failed:
            text = "; ".join(f"{what}: {e}" for what, e in failed)
            sys.stderr.write(f"skb-cni: the failed ADD could not undo everything: {text}\n")
            details = getattr(error, "details", None)
            if isinstance(details, str):
                note = f"cleanup after the failure also failed ({text}); a DEL will retry it"
                error.details = f"{details}; {note}" if details else note
        return failed


def _about(plugin):
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
    """What one call produced: exit code, stdout, stderr, the decoded config (if it got that far), the
    raw stdin and ``skbDebugLog`` (for the debug log), and for a successful ADD ``undo``, its UndoStack
    still armed until the answer is delivered (``settle``)."""

    __slots__ = ("code", "stdout", "stderr", "conf", "stdin", "undo", "debug_log")

    def __init__(self, code, stdout, stderr="", conf=None, stdin=b""):
        self.code = code
        self.stdout = stdout
        self.stderr = stderr
        self.conf = conf
        self.stdin = stdin
        self.undo = None
        self.debug_log = ""     # skbDebugLog, when the call records to it

    def settle(self, delivered, why=""):
        """The answer was delivered (the ADD stands) or not (``why``): then the ADD is undone, and the
        call fails. Returns the sentence saying what became of the ADD, for stderr ("" if none)."""
        undo, self.undo = self.undo, None
        if undo is None or delivered:
            return ""
        self.code = 1
        failed = undo.unwind()
        if failed:
            return f"{why}; undoing the ADD failed too ({'; '.join(f'{w}: {e}' for w, e in failed)}): call DEL again"
        return f"{why}; the ADD was undone"


def _transaction(plugin, call):
    """ADD as one transaction: the verb under a fresh undo stack, then its result rendered in the
    configuration's version, once, inside it. A failure of either unwinds the stack. Returns the line to
    print and the stack, still armed: an answer that cannot be delivered undoes the ADD (Outcome.settle)."""
    undo = call.undo = UndoStack()
    try:
        result = plugin.add(call)
    except BaseException as e:
        undo.unwind(e)
        raise
    try:
        return jsonio.dumps(result.to_dict(call.conf.cni_version)) + "\n", undo
    except CNIError as e:           # a result the configuration's version cannot hold
        error = CNIError(e.code, e.msg, e.details or "the result cannot be written")
    except Exception as e:          # a bug: code 999, the traceback on stderr
        import traceback            # (this error path only)
        error = CNIError(INTERNAL, f"internal error in the {plugin.name} plugin writing its result: "
                                   f"{type(e).__name__}: {e}", "this is a bug in skb-cni; the traceback is on stderr")
        error.trace = traceback.format_exc()
    except BaseException as e:
        undo.unwind(e)
        raise
    if not undo.unwind(error):
        error.details += "; the ADD was undone"
    raise error


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
        except CNIError:
            # stdin is not read for a call the environment fails (as in Go's skel), but a caller that read
            # it already (the debug plugin, whose records quote it) keeps it: that call is recorded whole.
            if isinstance(stdin, (bytes, str)):
                out.stdin = stdin
            raise
        if args.command == env.VERSION:
            # Like Go's skel, VERSION does not read stdin (a runtime may leave it open).
            out.stdout = VERSION_REPLY
            return out
        data = stdin if isinstance(stdin, (bytes, str)) else read_stdin(stdin)
        out.stdin = data
        conf = out.conf = config.parse(data, plugin.config, args.command)
        out.debug_log = conf.debug_log
        if conf.cni_version in config.SUPPORTED_VERSIONS:
            version = conf.cni_version
        verb = {env.ADD: plugin.add, env.DEL: plugin.delete, env.CHECK: plugin.check,
                env.STATUS: plugin.status, env.GC: plugin.gc}.get(args.command, False)
        if verb is False:
            raise CNIError(INVALID_ENV, f"unknown CNI_COMMAND: {args.command}",
                           f"CNI_COMMAND must be one of {', '.join(env.COMMANDS)} (upper case)")
        config.check_version(conf, args.command)
        conf.decode(args.command)
        if conf.notes:
            out.stderr += "".join(f"{plugin.name}: {note}; {args.command} goes on\n" for note in conf.notes)
        if conf.debug_log and not _debug_log_usable(conf, args.command, out):
            out.debug_log = ""
        if verb is not None:
            call = Call(plugin, args, conf, data if isinstance(data, bytes) else data.encode(), environ)
            if args.command == env.ADD:
                out.stdout, out.undo = _transaction(plugin, call)
            else:
                verb(call)
    except CNIError as e:
        out.code, out.stdout = 1, jsonio.dumps(e.to_dict(version)) + "\n"
        out.stderr += getattr(e, "trace", "")
    except Exception as e:  # never a traceback on stdout: report what failed, keep the trace on stderr
        import traceback    # (this error path only)
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        err = CNIError(INTERNAL, f"internal error in the {plugin.name} plugin: {what}",
                       "this is a bug in skb-cni; the traceback is on stderr")
        out.code, out.stdout, out.stderr = 1, jsonio.dumps(err.to_dict(version)) + "\n", traceback.format_exc()
    return out


def _debug_log_usable(conf, command, out):
    """``skbDebugLog`` must name a file we can append to (an absolute path, a regular file): refused up
    front, before any work, so the record is not lost after the fact. For DEL only a remark (False: not
    recorded): a debug setting must not block cleanup."""
    from skb.linux import files     # only for a call that sets skbDebugLog
    try:
        os.close(files.open_append(conf.debug_log, "skbDebugLog", 0o600))
    except CNIError as e:
        if command != env.DEL:
            raise
        out.stderr += f"skb-cni: not recording this call: {e}\n"
        return False
    return True


# Set by a plugin of this suite in the environment of the IPAM plugin it runs (skb.plugin.delegate), to
# the nesting depth: it bounds a delegation that comes back through other programs, and it tells the
# delegate that its call is not the runtime's.
DELEGATION_DEPTH = "SKB_DELEGATION_DEPTH"


def delegation_depth(environ):
    """How deep in IPAM delegation this call is: 0 for a call the runtime made."""
    value = environ.get(DELEGATION_DEPTH, "")
    return int(value) if value.isdecimal() and len(value) < 6 else 0


def debug_log_path(environ, out):
    """(key, path) of the debug log for this call, or None. The configuration's ``skbDebugLog`` wins
    over ``SKB_DEBUG_LOG``. A delegated IPAM call writes no record: a log holds only the runtime's calls
    (``skb replay -n 3`` is the runtime's third), and the delegating plugin's record holds what IPAM
    answered (its result in the ADD's, its error as the plugin's own)."""
    if delegation_depth(environ):
        return None
    if out.debug_log:
        return "skbDebugLog", out.debug_log
    path = environ.get("SKB_DEBUG_LOG", "")
    return ("SKB_DEBUG_LOG", path) if path else None


def debug_record(plugin, environ, out, duration):
    import time     # (built into the interpreter; only a recorded call needs it)
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
    from skb.linux import files     # only for a recorded call
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
        if n < len(data):  # (a pipe took part of the answer: one a few KiB long rarely is)
            jsonio.write_all(fd, data[n:])
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
    from time import perf_counter   # (built into the interpreter, and loaded by main() already)
    stdout_closed = sys.stdout is None
    if out.stdout:
        if stdout_closed or not _write_fd(1, out.stdout):
            answer = out.stdout.strip()
            answer = answer if len(answer) <= 2000 else answer[:2000] + "..."
            if out.code == 0 and out.undo is not None:
                out.stderr += f"skb-cni: {out.settle(False, 'the result could not be written to stdout')}\n"
            else:
                out.code = 1
                out.stderr += f"skb-cni: the answer could not be written to stdout: {answer}\n"
    if out.stderr:
        _stderr(out.stderr)
    paths = []
    logged = debug_log_path(environ, out)
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
