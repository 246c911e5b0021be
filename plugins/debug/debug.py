"""debug: record every call, pass the chain's result through, and misbehave on request.

Put it anywhere in a conflist to see what a runtime really sends, or alone to stand in for a network
while testing a runtime. Configuration keys (besides ``cniVersion``, ``name``, ``type``):

``cniOutput`` (string)
    File to which the text record of each call is appended (created 0644), in the reference debug
    plugin's format, so existing scripts keep working::

        CmdAdd
        ContainerID: ctr1
        Netns: /run/netns/x
        IfName: eth0
        Args: IgnoreUnknown=1
        Path: /opt/cni/bin
        StdinData: {"cniOutput":"/tmp/out.txt","cniVersion":"1.1.0","name":"n","type":"debug"}
        ----------------------

    The first line is ``CmdAdd``, ``CmdDel`` or ``CmdCheck`` as in the reference, and ``CmdStatus`` or
    ``CmdGC`` for the two verbs the reference does not record.
``captureFile`` (string)
    File to which one JSON line per call is appended (created 0600): ``time``, ``plugin``, ``command``,
    ``env`` (every ``CNI_*`` variable), ``stdin`` (verbatim), ``exitCode``, ``stdout``, ``stderr``,
    ``durationMs``, and ``trace`` (``traceparent``, ``tracestate``) when the runtime passed W3C trace
    context in ``TRACEPARENT``/``TRACESTATE``. It is the record of the suite's debug log (``skbDebugLog`` /
    ``SKB_DEBUG_LOG``, which this plugin honours too), so ``skb log`` lists and ``skb replay`` re-runs
    calls from either. Calls that fail before the configuration is read are captured as long as stdin is
    a JSON object naming the file. VERSION calls do not read stdin (a runtime may leave it open), so
    only ``SKB_DEBUG_LOG`` records them.
``addHooks``, ``delHooks``, ``checkHooks`` (lists of argv lists)
    As in the reference: commands run inside ``CNI_NETNS`` (inheriting the plugin's environment), e.g.
    ``[["sh", "-c", "ip link set $CNI_IFNAME promisc on"]]``. Failures are only reported on stderr. They
    are skipped when the namespace cannot be opened or is the node's own (see ``skb.linux.guard``).
``inject`` (object)
    Behaviour per command, keyed by the ``CNI_COMMAND`` it applies to (``ADD``, ``DEL``, ``CHECK``,
    ``STATUS``, ``GC``); each value may hold:

    - ``delayMs`` (number): sleep this long before answering (after the records are written);
    - ``error`` (object): fail with this CNI error: ``code`` (integer, default 999), ``msg`` (string),
      ``details`` (string, optional);
    - ``result`` (ADD only): answer with this instead: an object is printed as JSON exactly as given
      (no version conversion, so it can be deliberately wrong), a string is printed verbatim (to test
      how a runtime handles output that is not JSON);
    - ``stderr`` (string): write this to stderr.

    Example: succeed STATUS, fail ADD with code 7 after half a second::

        "inject": {"ADD": {"delayMs": 500, "error": {"code": 7, "msg": "no addresses left"}}}

Behaviour:

- ADD outputs ``prevResult`` unchanged when it is in the configuration's ``cniVersion`` (a missing
  ``cniVersion`` in it is filled in); a prevResult in another version is converted to the
  configuration's. Alone it answers a minimal valid result: ``{"cniVersion": V}`` for 1.x and
  ``{"cniVersion": V, "dns": {}}`` for 0.3.0-0.4.0. A 0.1.0/0.2.0 result must hold an IP address, so
  alone in those versions ADD fails (code 1, as Go's debug plugin does) rather than answer an empty one.
- The known keys are checked: ``cniOutput`` and ``captureFile`` must be absolute paths of regular files
  (created if missing; never a FIFO, a device or a directory), the hooks lists of argv lists; anything
  else is code 7 naming the key, before the call does anything.
- DEL never fails, unless ``inject.DEL.error`` says so: a malformed ``inject`` (ignored as a whole), a
  malformed key (ignored), an unusable record file or a failing hook is reported on stderr and DEL
  succeeds. (The protocol errors every plugin reports, such as a missing CNI_CONTAINERID or stdin that
  is not JSON, still apply.)
- CHECK, STATUS and GC succeed with no output (the reference prints an empty result on DEL and CHECK;
  runtimes ignore it, the spec expects none).
"""
import os
import sys

from skb.cni import jsonio
from skb.cni import netconf
from skb.plugin import skel
from skb.cni.errors import CNIError, DECODE, INCOMPATIBLE_VERSION, INTERNAL, INVALID_CONFIG, UNSUPPORTED_FIELD

_COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC")
_TEXT_HEADER = {"ADD": "CmdAdd", "DEL": "CmdDel", "CHECK": "CmdCheck", "STATUS": "CmdStatus", "GC": "CmdGC"}
_HOOKS = {"ADD": "addHooks", "DEL": "delHooks", "CHECK": "checkHooks"}
_INJECT_KEYS = ("delayMs", "error", "result", "stderr")


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
    from skb.cni import result
    own = prev.get("cniVersion")
    if own in (None, "") or own == version:
        try:
            result.parse_result(prev, version, "prevResult")
        except CNIError as e:
            note(f"prevResult does not parse ({e}); passed through unchanged all the same")
        if own == version:
            return prev
        filled = {"cniVersion": version}
        filled.update((k, v) for k, v in prev.items() if k != "cniVersion")
        return filled
    converted = result.parse_result(prev, None, "prevResult").to_dict(version)
    note(f"prevResult is in cniVersion {own!r}; converted to the configuration's {version!r}")
    return converted


# ---------------------------------------------------------------------------------------------------
# inject: validated into plain dicts with known keys

def _check_entry(command, entry):
    where = f"inject.{command}"
    if not isinstance(entry, dict):
        raise CNIError(INVALID_CONFIG, f"{where}: expected an object", f'e.g. "{command}": {{"delayMs": 100}}')
    for key in entry:
        if key not in _INJECT_KEYS:
            raise CNIError(UNSUPPORTED_FIELD, f"{where}.{key}: unsupported field (value {jsonio.dumps(entry[key])})",
                           f"an inject entry may hold {', '.join(_INJECT_KEYS)}")
    delay = entry.get("delayMs")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0):
        raise CNIError(INVALID_CONFIG, f"{where}.delayMs: expected a non-negative number of milliseconds",
                       f"found {jsonio.dumps(delay)}")
    err = entry.get("error")
    if err is not None:
        if not isinstance(err, dict):
            raise CNIError(INVALID_CONFIG, f"{where}.error: expected an object",
                           'e.g. {"code": 7, "msg": "invalid configuration", "details": "..."}')
        code = err.get("code", INTERNAL)
        if isinstance(code, bool) or not isinstance(code, int) or code < 0:
            raise CNIError(INVALID_CONFIG, f"{where}.error.code: expected a non-negative integer",
                           f"found {jsonio.dumps(code)}")
        for key in ("msg", "details"):
            if not isinstance(err.get(key, ""), str):
                raise CNIError(INVALID_CONFIG, f"{where}.error.{key}: expected a string",
                               f"found {jsonio.dumps(err[key])}")
    if "result" in entry:
        if command != "ADD":
            raise CNIError(INVALID_CONFIG, f"{where}.result: only ADD has a result",
                           "inject an error or a delay for the other commands")
        if not isinstance(entry["result"], (dict, str)):
            raise CNIError(INVALID_CONFIG, f"{where}.result: expected an object or a string",
                           f"found {jsonio.dumps(entry['result'])}")
    if not isinstance(entry.get("stderr", ""), str):
        raise CNIError(INVALID_CONFIG, f"{where}.stderr: expected a string", f"found {jsonio.dumps(entry['stderr'])}")
    return entry


def inject_entry(raw, command):
    """The validated ``inject`` entry for ``command`` (empty when none). Every entry is checked so a
    mistake shows on the first ADD rather than on some later DEL."""
    inject = raw.get("inject")
    if inject is None:
        return {}
    if not isinstance(inject, dict):
        raise CNIError(INVALID_CONFIG, "inject: expected an object keyed by command",
                       'e.g. "inject": {"ADD": {"error": {"code": 7, "msg": "boom"}}}')
    for key, entry in inject.items():
        if key not in _COMMANDS:
            raise CNIError(INVALID_CONFIG, f"inject.{key}: not a CNI command",
                           f"inject keys are {', '.join(_COMMANDS)} (upper case, as CNI_COMMAND)")
        _check_entry(key, entry)
    return inject.get(command, {})


# ---------------------------------------------------------------------------------------------------
# the other known keys

def _check_hooks(key, hooks):
    if not (isinstance(hooks, list) and all(isinstance(h, list) and h and all(isinstance(a, str) for a in h)
                                            for h in hooks)):
        raise CNIError(INVALID_CONFIG, f"invalid field {key}: expected a list of argv lists, found "
                                       f"{netconf._describe(hooks)}", f'e.g. "{key}": [["ip", "link"]]')
    return hooks


def settings(raw, strict=True, note=_note):
    """The known keys besides ``inject``, checked: {key: value} for those present. ``strict`` raises the
    first problem (code 7 naming the key); otherwise a bad key is reported through ``note`` and left out."""
    out = {}
    for key in ("cniOutput", "captureFile", "addHooks", "delHooks", "checkHooks"):
        value = raw.get(key)
        if value is None:
            continue
        try:
            out[key] = netconf.check_path(value, key) if key in ("cniOutput", "captureFile") \
                else _check_hooks(key, value)
        except CNIError as e:
            if strict:
                raise
            note(f"ignoring {key}: {e}")
    return out


# ---------------------------------------------------------------------------------------------------
# one call

class Call:
    """One invocation: the environment and raw stdin it came with, and what to print besides skel's
    output (a verbatim result, injected stderr)."""

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
                           add=self.add, delete=self.delete, check=self.check, status=self.status, gc=self.gc)

    # -- callbacks
    def add(self, args, conf):
        entry, keys = self._settings(args, conf)
        self._record(args, keys)
        answer = None
        if "result" not in entry and entry.get("error") is None:
            answer = pass_through(conf, self.note)  # a prevResult that cannot be answered: fail before the hooks
        self._act(args, entry, keys)
        if "result" in entry:
            given = entry["result"]
            if isinstance(given, str):
                self.raw_stdout = given
                return _Verbatim({})
            return _Verbatim(given)
        return _Verbatim(answer)

    def delete(self, args, conf):
        self._begin(args, conf)

    def check(self, args, conf):
        self._begin(args, conf)

    def status(self, args, conf):
        self._begin(args, conf)

    def gc(self, args, conf):
        self._begin(args, conf)

    # -- shared steps
    def _begin(self, args, conf):
        """Check the keys, record, run hooks, then apply the injected behaviour (raising its error)."""
        entry, keys = self._settings(args, conf)
        self._record(args, keys)
        self._act(args, entry, keys)
        return entry

    def _settings(self, args, conf):
        """The inject entry and the other keys, checked; DEL reports problems and carries on."""
        command = args.command
        strict = command != "DEL"
        try:
            entry = inject_entry(conf.raw, command)
        except CNIError as e:
            if strict:
                raise
            self.note(f"ignoring inject ({e}); DEL succeeds")
            entry = {}
        keys = settings(conf.raw, strict, self.note)
        capture = keys.get("captureFile")
        if capture:  # written after the call: refuse a file that cannot take it now, not after the fact
            from skb.linux import files
            try:
                os.close(files.open_append(capture, "captureFile", 0o600))
            except CNIError as e:
                if strict:
                    raise
                self.note(f"not capturing this call: {e}")
                self.capture_ok = False
        return entry, keys

    def _record(self, args, keys):
        path = keys.get("cniOutput")
        if path:
            self._write_text_record(path, args.command, args)

    def _act(self, args, entry, keys):
        hooks = keys.get(_HOOKS.get(args.command, ""))
        if hooks:
            self._run_hooks(hooks, args)
        if entry.get("stderr"):
            self.stderr.append(entry["stderr"])
        if entry.get("delayMs"):
            import time
            time.sleep(entry["delayMs"] / 1000)
        err = entry.get("error")
        if err is not None:
            raise CNIError(err.get("code", INTERNAL), err.get("msg", "error injected by the debug plugin"),
                           err.get("details", ""))

    def _write_text_record(self, path, command, args):
        stdin = self.stdin.decode("utf-8", "replace") if isinstance(self.stdin, bytes) else self.stdin
        text = (f"{_TEXT_HEADER[command]}\nContainerID: {args.container_id}\nNetns: {args.netns}\n"
                f"IfName: {args.ifname}\nArgs: {args.args}\nPath: {self.environ.get('CNI_PATH', '')}\n"
                f"StdinData: {stdin}\n----------------------\n")
        from skb.linux import files
        try:
            files.append(path, "cniOutput", text.encode("utf-8", "replace"), 0o644)
        except CNIError as e:
            if command != "DEL":
                raise
            self.note(f"cannot append to cniOutput: {e}")

    def _run_hooks(self, hooks, args):
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
            import subprocess
            with netns.enter(ns):
                for argv in hooks:
                    try:
                        p = subprocess.run(argv, env=dict(self.environ), capture_output=True, stdin=subprocess.DEVNULL)
                    except OSError as e:
                        self.note(f"hook {argv!r}: {e}")
                        continue
                    if p.returncode:
                        self.note(f"hook {argv!r} exited {p.returncode}: OUTPUT: {p.stdout.decode(errors='replace')} "
                              f"ERR: {p.stderr.decode(errors='replace')}")


def run(environ, stdin):
    """Handle one call in-process: returns (skel.Outcome, Call). ``stdin`` is bytes or a file."""
    call = Call(environ, stdin)
    out = skel.run(call.plugin(), environ, stdin)
    if call.raw_stdout is not None and out.code == 0:
        out.stdout = call.raw_stdout
    if call.stderr:
        out.stderr = "".join(s if s.endswith("\n") else s + "\n" for s in call.stderr) + out.stderr
    return out, call


def capture_path(out):
    """``captureFile`` from the parsed configuration, or from stdin when skel rejected it (a bad name,
    an unsupported version) but it is still a JSON object."""
    raw = out.conf.raw if out.conf is not None else None
    if raw is None and out.stdin:
        try:
            raw = jsonio.loads(out.stdin)
        except ValueError:
            return ""
    path = raw.get("captureFile") if isinstance(raw, dict) else None
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
    from time import perf_counter
    started = perf_counter()
    skel.fill_std_fds()
    environ = os.environ
    out, call = run(environ, _stdin_for(environ))
    capture = capture_path(out) if call.capture_ok else ""
    skel.finish(call.plugin(), environ, out, started, [("captureFile", capture)] if capture else [])
