"""Delegating to an IPAM plugin (reference-plugins.md §1 "Delegation", cni-spec.md §4.1).

The plugin named by ``ipam.type`` is looked up in CNI_PATH as libcni's FindInPath does (first regular
file of that name, in order; same error texts), and run with the caller's environment (CNI_COMMAND
overridden) and the caller's complete, unmodified stdin. Its stderr is passed on to ours; its stdout is
its result (ADD) or its error object, which we raise with the delegate's own code, msg and details.

The in-process fast path: when the plugin found is our own ``host-local`` launcher for this very frozen
bundle, spawning it would start the same Python program again (~15-25 ms). Instead its ``PLUGIN`` runs
here through ``skel.run`` with the same environment and stdin, and its stdout, stderr and exit code are
read exactly as a child's would be. "Our own" is decided by identity, not by name: the file must be a
launcher (same inode as, or byte-identical to, the launcher of that name next to our bundle) and its
directory's ``.skb`` must resolve to the bundle running now, because that is what the launcher would
exec. A foreign ``host-local`` earlier in CNI_PATH is exec'd. ``SKB_IPAM_EXEC=1`` forces exec; a debug
log (``SKB_DEBUG_LOG``/``skbDebugLog``) does too, so the delegate logs its own call as it would alone.
``SKB_IPAM_TRACE=1`` notes on stderr which way each delegation went.
"""
import os
import sys

from skb.cni import jsonio
from skb.cni import netconf as config
from skb.cni.errors import CNIError, INTERNAL, INVALID_CONFIG
from skb.cni.result import parse_result
from skb.plugin import skel

__all__ = ["find_in_path", "add", "delete", "check", "status", "gc", "plugin_type"]


def plugin_type(conf):
    """``ipam.type`` of the configuration ("" when absent). A wrong JSON type is a code-7 error."""
    ipam = config.get(conf.raw, "ipam", dict, "", default={})
    return config.get(ipam, "type", str, "ipam", default="")


def _go_list(items):
    return "[" + " ".join(items) + "]"


def find_in_path(plugin, paths):
    """The path of the executable for ``plugin`` (libcni FindInPath). Errors are code 7: the ``type``
    names a plugin this node does not have."""
    if not plugin:
        raise CNIError(INVALID_CONFIG, "no plugin name provided",
                       'set ipam.type in the network configuration, e.g. "ipam": {"type": "host-local", ...}')
    if "/" in plugin:
        raise CNIError(INVALID_CONFIG, f"invalid plugin name: {plugin}",
                       "ipam.type is a plugin name looked up in CNI_PATH, not a path")
    if not paths:
        raise CNIError(INVALID_CONFIG, "no paths provided", "CNI_PATH lists no directory")
    for d in paths:
        candidate = os.path.join(d, plugin)
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if st.st_mode & 0o170000 == 0o100000:
            return candidate
    raise CNIError(INVALID_CONFIG, f'failed to find plugin "{plugin}" in path {_go_list(paths)}',
                   f"ipam.type {plugin!r} is not installed in any CNI_PATH directory")


# --------------------------------------------------------------------------------------------------
# The in-process fast path

_OWN = {}   # path -> bool, within one process


def _bundle_dir():
    """The directory of the running frozen bundle (``<bindir>/.skb-<version>-<hash>``), or None when we
    run from source."""
    if not getattr(sys, "frozen", False):
        return None
    return os.path.dirname(os.path.realpath(sys.executable))


def is_own_build(path, applet):
    """True when executing ``path`` would run ``applet`` of the very bundle this process runs."""
    cached = _OWN.get(path)
    if cached is not None:
        return cached
    _OWN[path] = result = _is_own_build(path, applet)
    return result


def _is_own_build(path, applet):
    bundle = _bundle_dir()
    if bundle is None or os.path.basename(path) != applet:
        return False
    try:
        # The launcher execs realpath(<its dir>/.skb): it must be us.
        if os.path.realpath(os.path.join(os.path.dirname(path), ".skb")) != bundle:
            return False
        ours = os.path.join(os.path.dirname(bundle), applet)
        st, st_ours = os.stat(path), os.stat(ours)
        if (st.st_dev, st.st_ino) == (st_ours.st_dev, st_ours.st_ino):
            return True
        if st.st_size != st_ours.st_size or st.st_size > 1 << 20:
            return False
        with open(path, "rb") as f, open(ours, "rb") as g:
            return f.read() == g.read()
    except OSError:
        return False


def _in_process(path, conf, environ):
    if environ.get("SKB_IPAM_EXEC") == "1" or environ.get("SKB_DEBUG_LOG") or conf.debug_log:
        return None
    name = os.path.basename(path)
    module = skel.IN_PROCESS.get(name)
    if module is None or not is_own_build(path, name):
        return None
    return __import__(module, fromlist=["PLUGIN"]).PLUGIN


# --------------------------------------------------------------------------------------------------
# Running the delegate

def _environ(command, args, environ):
    """The caller's environment with CNI_COMMAND overridden (libcni's DelegateArgs). The other CNI_*
    variables are the call's own (``args``): equal to the process environment's when we run as a
    process, and right too when a plugin runs in-process with an environment of its own (tests)."""
    env = dict(os.environ if environ is None else environ)
    env["CNI_COMMAND"] = command
    for var, value in (("CNI_CONTAINERID", args.container_id), ("CNI_NETNS", args.netns),
                       ("CNI_IFNAME", args.ifname), ("CNI_ARGS", args.args)):
        env[var] = value
    if [p for p in env.get("CNI_PATH", "").split(":") if p] != list(args.path):
        env["CNI_PATH"] = ":".join(args.path)
    if args.netns_override and env.get("CNI_NETNS_OVERRIDE", "").lower() not in ("1", "true"):
        env["CNI_NETNS_OVERRIDE"] = "1"
    return env


def _execute(command, args, conf, stdin, environ):
    """Run the IPAM plugin for ``command``; return its stdout (bytes) on success, raise its error."""
    plugin = plugin_type(conf)
    path = find_in_path(plugin, args.path)
    env = _environ(command, args, environ)
    inproc = _in_process(path, conf, env)
    if env.get("SKB_IPAM_TRACE") == "1":   # for tests: which path was taken
        _pass_stderr(f"skb-cni: IPAM {command} {plugin}: {'in-process' if inproc else 'exec ' + path}\n".encode())
    if inproc is not None:
        out = skel.run(inproc, env, stdin)
        code = out.code
        stdout = out.stdout.encode() if isinstance(out.stdout, str) else out.stdout
        stderr = out.stderr.encode() if isinstance(out.stderr, str) else out.stderr
    else:
        from skb.linux import proc  # only the exec path needs it (the in-process path is hot)
        try:
            code, stdout, stderr = proc.run(path, [path], env, stdin)
        except proc.SpawnError as e:
            raise CNIError(INTERNAL, f"netplugin failed with no error message: fork/exec {path}: "
                                     f"{(e.strerror or str(e)).lower()}",
                           f"the IPAM plugin {plugin!r} could not be started; check the file is an "
                           "executable for this machine") from None
    if code == 0:
        if stderr:
            _pass_stderr(stderr)
        return stdout
    raise _delegate_error(plugin, code, stdout, stderr)


def _pass_stderr(data):
    try:
        sys.stderr.flush()
        os.write(2, data)
    except OSError:
        pass


def _delegate_error(plugin, code, stdout, stderr):
    """The delegate's error object as a CNIError (its code, msg and details), else libcni's wording."""
    how = f"exit status {code}" if code > 0 else f"signal {-code}"
    text = stdout.strip()
    if not text:
        if stderr.strip():
            return CNIError(INTERNAL, f"netplugin failed: {stderr.decode(errors='replace')!r}: {how}",
                            f"the IPAM plugin {plugin!r} failed without an error object on stdout")
        return CNIError(INTERNAL, f"netplugin failed with no error message: {how}",
                        f"the IPAM plugin {plugin!r} failed and printed nothing")
    if stderr:
        _pass_stderr(stderr)
    try:
        obj = jsonio.loads(text)
    except ValueError as e:
        return CNIError(INTERNAL, f"netplugin failed but error parsing its diagnostic message "
                                  f"{text.decode(errors='replace')!r}: {e}",
                        f"the IPAM plugin {plugin!r} printed something that is not a CNI error object")
    if not isinstance(obj, dict):
        obj = {}
    ecode = obj.get("code")
    msg = obj.get("msg")
    details = obj.get("details")
    if not isinstance(ecode, int) or isinstance(ecode, bool) or ecode <= 0:
        ecode = INTERNAL
    if not isinstance(msg, str) or not msg:
        msg = f"the IPAM plugin {plugin!r} failed ({how}) with an error object without a message"
    return CNIError(ecode, msg, details if isinstance(details, str) else "")


def add(args, conf, stdin, environ=None):
    """IPAM ADD: the delegate's result as a ``skb.cni.result.Result`` (a result without cniVersion is read
    in the configuration's version, as libcni does)."""
    out = _execute("ADD", args, conf, stdin, environ)
    plugin = plugin_type(conf)
    try:
        try:
            obj = jsonio.loads(out) if out.strip() else None
        except ValueError as e:
            raise CNIError(INTERNAL, f"IPAM plugin {plugin!r} printed an unreadable result: {e}",
                           out.decode(errors="replace")[:200]) from None
        if obj is None:
            raise CNIError(INTERNAL, f"IPAM plugin {plugin!r} printed no result",
                           "an IPAM ADD must print its result on stdout")
        return parse_result(obj, conf.cni_version, where=f"IPAM result of {plugin}")
    except CNIError:
        # The delegate succeeded, so it holds a reservation the caller never learns about: release it.
        try:
            _execute("DEL", args, conf, stdin, environ)
        except CNIError:
            pass
        raise


def delete(args, conf, stdin, environ=None):
    _execute("DEL", args, conf, stdin, environ)


def check(args, conf, stdin, environ=None):
    _execute("CHECK", args, conf, stdin, environ)


def status(args, conf, stdin, environ=None):
    _execute("STATUS", args, conf, stdin, environ)


def gc(args, conf, stdin, environ=None):
    _execute("GC", args, conf, stdin, environ)


def stdin_of(conf):
    """The caller's stdin bytes, passed unmodified to the delegate (the spec's rule); a configuration
    built in memory (tests) has none, and is re-encoded."""
    return conf.data or jsonio.dumps(conf.raw).encode()
