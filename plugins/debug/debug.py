"""debug: record every call, pass the chain's result through, and misbehave on request.

Its keys (``cniOutput``, ``captureFile``, ``addHooks``/``delHooks``/``checkHooks``, ``inject``) are declared
once in ``DebugConf``; what each does, and how the plugin behaves per command, is in docs/DEBUG.md. DEL
never fails unless ``inject.DEL.error`` says so: a bad key is remarked on and ignored.
"""
import os
import sys

from skb.cni import jsonio
from skb.cni import netconf
from skb.plugin import skel
from skb.cni.errors import CNIError, DECODE, INCOMPATIBLE_VERSION, INTERNAL, INVALID_CONFIG, describe
from skb.cni.netconf import PATH, STR, Key, Kind

_COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC")
_TEXT_HEADER = {"ADD": "CmdAdd", "DEL": "CmdDel", "CHECK": "CmdCheck", "STATUS": "CmdStatus", "GC": "CmdGC"}


def _note(msg):
    sys.stderr.write(f"debug: {msg}\n")


class _Verbatim:
    """A result printed exactly as given (skel calls ``to_dict`` with the configuration's version)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def to_dict(self, version):
        return self.obj


def minimal_result(version):
    """The smallest valid ADD result in ``version``: 1.x needs only cniVersion; Go writes an empty dns for
    0.3/0.4. A 0.1/0.2 result has no place for "no address": that is an error, as in Go."""
    if version in ("0.1.0", "0.2.0"):
        raise CNIError(INCOMPATIBLE_VERSION, "cannot convert: no valid IP addresses",
                       f"a cniVersion {version} result must hold an IP address and the debug plugin alone has "
                       "none: give it a prevResult, or use cniVersion 0.3.0 or later")
    return {"cniVersion": version} if version.startswith("1.") else {"cniVersion": version, "dns": {}}


def pass_through(conf, note=_note):
    """What ADD answers: prevResult as it came, or converted when it is in another version. ``note``
    reports what is worth knowing but not an error."""
    version = conf.cni_version
    prev = conf.prev_result
    if prev is None:
        return minimal_result(version)
    if not isinstance(prev, dict):
        raise CNIError(DECODE, "prevResult: expected an object",
                       "the previous plugin's result (or the runtime's cached one) is not a JSON object")
    from skb.cni import result      # only with a prevResult to read (a debug plugin alone has none)
    own = netconf.lookup_default(prev, "cniVersion")     # (read as Go's decoder reads the key)
    if own in (None, "") or own == version:
        try:
            result.parse_result(prev, version, "prevResult")
        except CNIError as e:
            note(f"prevResult does not parse ({e}); passed through unchanged all the same")
        if own == version:
            return prev
        filled = {"cniVersion": version}
        filled.update((k, v) for k, v in prev.items() if netconf.fold(k) != "cniversion")
        return filled
    converted = result.parse_result(prev, None, "prevResult").to_dict(version)
    note(f"prevResult is in cniVersion {own!r}; converted to the configuration's {version!r}")
    return converted


# ---------------------------------------------------------------------------------------------------
# the keys: every one is checked on every command (a mistake shows on the first ADD rather than on some
# later DEL); DEL reports a bad one on stderr and does without it


# A day: time.sleep refuses what does not fit its clock (1e300 ms was an OverflowError, code 999); no
# test of a runtime's timeout needs longer.
MAX_DELAY_MS = 86_400_000


def _delay(v, where, _d, _old):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_DELAY_MS:
        raise CNIError(INVALID_CONFIG, f"{where}: expected a number of milliseconds from 0 to {MAX_DELAY_MS} (a day)",
                       f"found {jsonio.dumps(v)}")
    return v


def _code(v, where, _d, _old):
    # (a runtime reads the code as Go's uint: one past 2^32-1, as 0, is no error it can report; review 16)
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 0xFFFFFFFF:
        raise CNIError(INVALID_CONFIG, f"{where}: expected an error code, an integer from 1 to 4294967295",
                       f"found {jsonio.dumps(v)}")
    return v


def _answer(v, where, _d, _old):
    if not isinstance(v, (dict, str)):
        raise CNIError(INVALID_CONFIG, f"{where}: expected an object or a string", f"found {jsonio.dumps(v)}")
    return v


class InjectedError(netconf.Conf):
    KEYS = (Key("code", "code", Kind(_code), default=INTERNAL), Key("msg", "msg", STR, default=""),
            Key("details", "details", STR, default=""))
    __slots__ = tuple(k.attr for k in KEYS)


def _error_object(v, where, d, old):
    if not isinstance(v, dict):
        raise CNIError(INVALID_CONFIG, f"{where}: expected an object",
                       'e.g. {"code": 7, "msg": "invalid configuration", "details": "..."}')
    return InjectedError.decode_object(v, where, d, old)


class Injection(netconf.Conf):
    """What to do for one command: ``delayMs``, ``error``, ``result`` (ADD only), ``stderr``."""
    STRICT = True
    KEYS = (Key("delayMs", "delay_ms", Kind(_delay), default=0), Key("error", "error", Kind(_error_object)),
            Key("result", "result", Kind(_answer, resets=True)), Key("stderr", "stderr", STR, default=""))
    __slots__ = tuple(k.attr for k in KEYS)

    def check(self, decoding, where):
        if self.result is not None and not where.endswith(".ADD"):
            raise CNIError(INVALID_CONFIG, f"{where}.result: only ADD has a result",
                           "inject an error or a delay for the other commands")


def _inject(v, where, d, _old):
    """``inject``: an object keyed by CNI_COMMAND (exact, as a map's keys are in Go), each an Injection."""
    if not isinstance(v, dict):
        raise CNIError(INVALID_CONFIG, "inject: expected an object keyed by command",
                       'e.g. "inject": {"ADD": {"error": {"code": 7, "msg": "boom"}}}')
    out = {}
    for key, entry in v.items():
        if key not in _COMMANDS:
            raise CNIError(INVALID_CONFIG, f"inject.{key}: not a CNI command",
                           f"inject keys are {', '.join(_COMMANDS)} (upper case, as CNI_COMMAND)")
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise CNIError(INVALID_CONFIG, f"inject.{key}: expected an object", f'e.g. "{key}": {{"delayMs": 100}}')
        out[key] = Injection.decode_object(entry, f"inject.{key}", d, None)
    return out


def _hooks(v, where, _d, _old):
    if not (isinstance(v, list) and all(isinstance(h, list) and h and all(isinstance(a, str) for a in h)
                                        for h in v)):
        raise CNIError(INVALID_CONFIG, f"invalid field {where}: expected a list of argv lists, found "
                                       f"{describe(v)}", f'e.g. "{where}": [["ip", "link"]]')
    for i, h in enumerate(v):     # (no program takes one: a NUL was a traceback, code 999, review 16)
        for j, a in enumerate(h):
            if "\0" in a:
                raise CNIError(INVALID_CONFIG, f"invalid field {where}[{i}][{j}]: it contains a NUL byte",
                               "a program's arguments cannot hold one: remove it")
    return v


_ALL_LENIENT = dict(lenient=("DEL",))
_HOOKS = Kind(_hooks, resets=True)


class DebugConf(netconf.NetConf):
    KEYS = (Key("cniOutput", "cni_output", PATH, default="", **_ALL_LENIENT),
            Key("captureFile", "capture_file", PATH, default="", **_ALL_LENIENT),
            Key("addHooks", "add_hooks", _HOOKS, **_ALL_LENIENT),
            Key("delHooks", "del_hooks", _HOOKS, **_ALL_LENIENT),
            Key("checkHooks", "check_hooks", _HOOKS, **_ALL_LENIENT),
            Key("inject", "inject", Kind(_inject, resets=True), **_ALL_LENIENT))
    __slots__ = tuple(k.attr for k in KEYS)

    def hooks(self, command):
        return {"ADD": self.add_hooks, "DEL": self.del_hooks, "CHECK": self.check_hooks}.get(command)

    def injection(self, command):
        return (self.inject or {}).get(command)


# ---------------------------------------------------------------------------------------------------
# one call

class Recorder:
    """One invocation as the debug plugin keeps it: the environment and raw stdin it came with, and what
    to print besides skel's output (a verbatim result, injected stderr, remarks)."""

    def __init__(self, environ, stdin):
        self.environ = environ
        self.stdin = stdin if isinstance(stdin, (bytes, str)) else b""
        self.raw_stdout = None
        self.stderr = []
        self.capture_ok = True

    def note(self, msg):
        """A remark for stderr; kept with the call so the capture records it too."""
        self.stderr.append(f"debug: {msg}\n")

    def plugin(self):
        return skel.Plugin("debug", "records each call (cniOutput, captureFile) and injects behaviour (inject)",
                           add=self.add, delete=self.verb, check=self.verb, status=self.verb, gc=self.verb,
                           config=DebugConf)

    # -- verbs
    def add(self, call):
        entry = self._begin(call, act=False)
        answer = None
        if entry is None or (entry.result is None and entry.error is None):
            answer = pass_through(call.conf, self.note)  # a prevResult that cannot be answered: fail before the hooks
        self._act(call, entry)
        if entry is not None and entry.result is not None:
            if isinstance(entry.result, str):
                self.raw_stdout = entry.result
                return _Verbatim({})
            return _Verbatim(entry.result)
        return _Verbatim(answer)

    def verb(self, call):
        self._begin(call)

    # -- shared steps
    def _begin(self, call, act=True):
        """The capture file checked, the text record written, then (``act``) the hooks and the injected
        behaviour (raising its error). Returns the command's Injection (None without)."""
        conf, command = call.conf, call.args.command
        if not conf.capture_file:  # absent, or (DEL) ignored as malformed: nothing to capture to
            self.capture_ok = False
        else:   # written after the call: refuse a file that cannot take it now, not after the fact
            from skb.linux import files     # only with a record file to write
            try:
                os.close(files.open_append(conf.capture_file, "captureFile", 0o600))
            except CNIError as e:
                if command != "DEL":
                    raise
                self.note(f"not capturing this call: {e}")
                self.capture_ok = False
        if conf.cni_output:
            self._write_text_record(conf.cni_output, command, call.args)
        entry = conf.injection(command)
        if act:
            self._act(call, entry)
        return entry

    def _act(self, call, entry):
        hooks = call.conf.hooks(call.args.command)
        if hooks:
            self._run_hooks(hooks, call.args)
        if entry is None:
            return
        if entry.stderr:
            self.stderr.append(entry.stderr)
        if entry.delay_ms:
            import time     # (built into the interpreter) only for an injected delay
            time.sleep(entry.delay_ms / 1000)
        err = entry.error
        if err is not None:
            raise CNIError(err.code, err.msg or "error injected by the debug plugin", err.details)

    def _write_text_record(self, path, command, args):
        stdin = self.stdin.decode("utf-8", "replace") if isinstance(self.stdin, bytes) else self.stdin
        text = (f"{_TEXT_HEADER[command]}\nContainerID: {args.container_id}\nNetns: {args.netns}\n"
                f"IfName: {args.ifname}\nArgs: {args.args}\nPath: {self.environ.get('CNI_PATH', '')}\n"
                f"StdinData: {stdin}\n----------------------\n")
        from skb.linux import files     # only with a record file to write
        try:
            files.append(path, "cniOutput", text.encode("utf-8", "replace"), 0o644)
        except CNIError as e:
            if command != "DEL":
                raise
            self.note(f"cannot append to cniOutput: {e}")

    def _run_hooks(self, hooks, args):
        # Local imports, only for a configuration with hooks: the namespace code, and subprocess (~5 ms,
        # it imports selectors, signal, threading ...), which no other call of this plugin needs.
        from skb.linux import guard
        from skb.linux import netns
        try:
            ns = netns.NetNS.open(args.netns)
        except CNIError as e:
            self.note(f"hooks skipped: {e.msg}")
            return
        with ns:
            which = None if args.netns_override else guard.protected(ns)
            if which:
                self.note(f"hooks skipped: CNI_NETNS {args.netns} is {which}")
                return
            import subprocess   # (see above)
            with netns.enter(ns):
                for argv in hooks:
                    try:
                        p = subprocess.run(argv, env=dict(self.environ), capture_output=True, stdin=subprocess.DEVNULL)
                    except (OSError, ValueError) as e:    # (ValueError: a NUL in its environment, say)
                        self.note(f"hook {argv!r}: {e}")
                        continue
                    if p.returncode:
                        self.note(f"hook {argv!r} exited {p.returncode}: OUTPUT: {p.stdout.decode(errors='replace')} "
                              f"ERR: {p.stderr.decode(errors='replace')}")


def run(environ, stdin):
    """Handle one call in-process: returns (skel.Outcome, Recorder). ``stdin`` is bytes or a file."""
    rec = Recorder(environ, stdin)
    out = skel.run(rec.plugin(), environ, stdin)
    if rec.raw_stdout is not None and out.code == 0:
        out.stdout = rec.raw_stdout
    if rec.stderr:
        out.stderr = "".join(s if s.endswith("\n") else s + "\n" for s in rec.stderr) + out.stderr
    return out, rec


def capture_path(out):
    """``captureFile`` from the decoded configuration or, when skel rejected the call before the plugin's
    keys were read (a bad CNI_IFNAME or container id, a missing variable, a bad name, an unsupported
    version), from its JSON if that is an object (the key found as Go's decoder finds it)."""
    path = getattr(out.conf, "capture_file", None) if out.conf is not None else None
    if path is None and out.stdin:
        try:
            raw = jsonio.loads(out.stdin)
        except ValueError:
            return ""
        path = netconf.lookup_default(raw, "captureFile") if isinstance(raw, dict) else None
    return path if isinstance(path, str) else ""


def _stdin_for(environ):
    """Read stdin up front (the text record quotes it verbatim), except where skel must not or wants to
    report the problem itself: VERSION and a missing command (stdin may stay open), a terminal, a
    closed or unreadable stdin."""
    if environ.get("CNI_COMMAND", "") in ("", "VERSION"):
        return sys.stdin
    try:
        return skel.read_stdin(sys.stdin)
    except CNIError:
        return sys.stdin  # skel reads again and reports the problem with its code


def main(argv=None):
    from time import perf_counter   # (built into the interpreter: as skel.main does)
    started = perf_counter()
    skel.fill_std_fds()
    environ = os.environ
    out, rec = run(environ, _stdin_for(environ))
    capture = capture_path(out) if rec.capture_ok else ""
    skel.finish(rec.plugin(), environ, out, started, [("captureFile", capture)] if capture else [])
