"""Finding and running a plugin: the one invocation layer (Go's ``pkg/invoke``), used by IPAM delegation
(``skb.plugin.delegate``) and by the runtime side (``skb.tool.libcni``: ``skb add``, the doctor, replay).

- ``find_in_path``: libcni's FindInPath, with its error texts (docs/REFERENCE.md#finding-a-plugin). A
  plugin name is a bare file name: empty, ``.``, ``..``, a ``/`` or a NUL byte is refused before any
  directory is looked at, so a configuration or a record can never name a program outside the plugin
  directories.
- ``environ``: the environment of a call (the caller's, with the six ``CNI_*`` variables set).
- ``execute``: run the plugin with a ``spawn`` function given by the caller (``skb.linux.proc.run`` on
  a plugin's call path; the ``skb`` command's runner adds a timeout), and turn a failure into the
  plugin's own error object, or into libcni's words for what happened (docs/REFERENCE.md#plugin-errors).
- ``decode_result``: a plugin's stdout as a result object, a missing ``cniVersion`` being the
  configuration's (docs/REFERENCE.md#results-without-a-version).

This module is on a plugin's call path (delegation): it imports nothing beyond what the plugin runtime
has already loaded (``os``, ``skb.cni.jsonio``, ``skb.cni.errors``), and no program-spawning module: the
spawner is a parameter, so the protocol layer does not depend on the Linux layer.
"""
import os

from skb.cni import jsonio
from skb.cni.errors import CNIError, INVALID_CONFIG, go_quote  # (re-exported: the skb command quotes with it)
from skb.cni.netconf import lookup_default  # a struct field as Go's decoder finds it

__all__ = ["PluginNotFound", "PluginFailed", "ResultUnreadable", "check_name", "find_in_path", "environ", "exit_text",
           "plugin_error", "execute", "decode_result", "json_kind", "go_quote"]


class PluginNotFound(CNIError):
    """``find_in_path`` failed; ``msg`` is libcni's text. Code 7: the configuration names a plugin
    this node does not have (or a name that is not a plugin name)."""

    __slots__ = ()

    def __init__(self, msg):
        CNIError.__init__(self, INVALID_CONFIG, msg)


class PluginFailed(CNIError):
    """A plugin ran and failed: its error (``plugin_error``), with its ``stdout``, ``stderr`` and exit
    ``status`` (an exit code, negative for a signal) kept for a caller that reports more."""

    __slots__ = ("stdout", "stderr", "status")

    def __init__(self, error, stdout, stderr, status):
        CNIError.__init__(self, error.code, error.msg, error.details)
        self.stdout = stdout
        self.stderr = stderr
        self.status = status


class ResultUnreadable(CNIError):
    """A plugin succeeded but its stdout is not a result object; ``msg`` says why, in Go's words."""

    __slots__ = ()


def check_name(plugin):
    """Refuse anything but a bare file name (libcni refuses a path separator; ``.``, ``..`` and NUL are
    refused too: they name a directory, or nothing, never a plugin)."""
    if not isinstance(plugin, str) or not plugin:
        raise PluginNotFound("no plugin name provided")
    if "/" in plugin or "\0" in plugin or plugin in (".", ".."):
        raise PluginNotFound(f"invalid plugin name: {plugin}")


def find_in_path(plugin, paths):
    """The path of the first ``<dir>/<plugin>`` that is a regular file (symlinks followed), in the order
    of ``paths``; the execute bit is not checked (a non-executable file is found, and then fails to
    run), as in libcni. Empty entries of ``paths`` are skipped (libcni would look in the working
    directory). Raises PluginNotFound."""
    check_name(plugin)
    if not paths:
        raise PluginNotFound("no paths provided")
    for d in paths:
        if not d or "\0" in d:
            continue
        candidate = os.path.normpath(d + "/" + plugin)  # Go's filepath.Join cleans the path
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if st.st_mode & 0o170000 == 0o100000:   # S_ISREG, without importing stat
            return candidate
    raise PluginNotFound(f'failed to find plugin "{plugin}" in path [{" ".join(paths)}]')


def environ(base, command, container_id="", netns="", ifname="", args="", path=""):
    """The environment of one plugin call: ``base`` (a mapping: the caller's environment) with the six
    ``CNI_*`` variables set, as libcni's Args.AsEnv and DelegateArgs build it."""
    env = dict(base)
    env["CNI_COMMAND"] = command
    env["CNI_CONTAINERID"] = container_id
    env["CNI_NETNS"] = netns
    env["CNI_IFNAME"] = ifname
    env["CNI_ARGS"] = args
    env["CNI_PATH"] = path
    return env


# Go's names for the signals a plugin is likely to die of (syscall.Signal.String on Linux); others are
# "signal N". A table rather than the signal module: this file is on the plugin's call path.
_SIGNAL_NAMES = {1: "hangup", 2: "interrupt", 3: "quit", 4: "illegal instruction", 5: "trace/breakpoint trap",
                 6: "aborted", 7: "bus error", 8: "floating point exception", 9: "killed",
                 10: "user defined signal 1", 11: "segmentation fault", 12: "user defined signal 2",
                 13: "broken pipe", 14: "alarm clock", 15: "terminated"}


def exit_text(code):
    """How a process ended, as Go's ``exec.ExitError`` says it: ``exit status 1``, ``signal: killed``.
    ``code`` is an exit code, negative for a signal (as ``skb.linux.proc`` and subprocess report it)."""
    if code < 0:
        return f"signal: {_SIGNAL_NAMES.get(-code) or f'signal {-code}'}"
    return f"exit status {code}"


def json_kind(v):
    """The JSON kind of a decoded value, as Go's decoder names it in type errors."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def plugin_error(stdout, stderr, how):
    """libcni's pluginErr: the error a failed plugin reported (its code, msg and details) or, without
    an error object on stdout, one describing its output. ``how`` is ``exit_text`` of its end. The code
    is 0 when the plugin gave none (Go's zero value): a caller that must report a code picks one."""
    if not stdout:
        if not stderr:
            return CNIError(0, f"netplugin failed with no error message: {how}")
        return CNIError(0, f"netplugin failed: {go_quote(stderr.decode(errors='surrogateescape'))}: {how}")
    try:
        obj = jsonio.loads(stdout)
        if obj is None:
            obj = {}
        if not isinstance(obj, dict):
            raise ValueError(f"json: cannot unmarshal {json_kind(obj)} into Go value of type types.Error")
        code, msg, details = (lookup_default(obj, k) for k in ("code", "msg", "details"))
        if code is not None and (isinstance(code, bool) or not isinstance(code, int) or code < 0):
            raise ValueError(f"json: cannot unmarshal {json_kind(code)} into Go struct field Error.code of type uint")
        for k, v in (("msg", msg), ("details", details)):
            if v is not None and not isinstance(v, str):
                raise ValueError(f"json: cannot unmarshal {json_kind(v)} into Go struct field Error.{k} of type string")
    except ValueError as e:
        return CNIError(0, f"netplugin failed but error parsing its diagnostic message "
                           f"{go_quote(stdout.decode(errors='surrogateescape'))}: {e}")
    return CNIError(code or 0, msg or "", details or "")


def execute(path, env, stdin, spawn):
    """Run the plugin at ``path`` with ``env`` and ``stdin`` (bytes) through ``spawn(path, argv, env,
    stdin) -> (exit code, stdout, stderr)``, which raises OSError when the program cannot start.
    Returns ``(stdout, stderr)`` of a plugin that exited 0; raises PluginFailed otherwise, or a plain
    CNIError in libcni's words (``fork/exec PATH: permission denied``) when it could not start."""
    try:
        code, stdout, stderr = spawn(path, [path], env, stdin)
    except OSError as e:
        reason = os.strerror(e.errno).lower() if e.errno else str(e)
        raise CNIError(0, f"netplugin failed with no error message: fork/exec {path}: {reason}") from None
    if code != 0:
        raise PluginFailed(plugin_error(stdout, stderr, exit_text(code)), stdout, stderr, code)
    return stdout, stderr


def decode_result(stdout, default_version):
    """A successful plugin's stdout as a result object (a dict), its ``cniVersion`` set to
    ``default_version`` (the configuration's) when it has none, as libcni reads it. ``null`` is an empty
    object. Raises ResultUnreadable, whose ``msg`` is the reason in Go's words."""
    if not stdout.strip():
        raise ResultUnreadable(0, "unexpected end of JSON input")
    try:
        raw = jsonio.loads(stdout)
    except ValueError as e:
        raise ResultUnreadable(0, str(e)) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ResultUnreadable(0, f"json: cannot unmarshal {json_kind(raw)} into Go value of type "
                                  "map[string]interface {}")
    version = raw.get("cniVersion")
    if not (isinstance(version, str) and version):
        raw = dict(raw, cniVersion=default_version or "0.1.0")
    return raw
