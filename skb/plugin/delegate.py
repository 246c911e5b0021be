"""Delegating to an IPAM plugin (docs/REFERENCE.md#delegation).

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
exec. A foreign ``host-local`` earlier in CNI_PATH is exec'd. ``SKB_IPAM_EXEC=1`` forces exec.
``SKB_IPAM_TRACE=1`` notes on stderr which way each delegation went. Either way the delegate writes no
debug log record (``SKB_DEBUG_LOG``/``skbDebugLog``) of its own: it is not a call of the runtime, and the
caller's record holds its outcome (skel.debug_log_path).

Delegation never recurses: an ``ipam.type`` that is this plugin itself (the same name as its ``type``, or
a name that resolves to the same file, or a launcher that would run this very applet of this bundle) is
refused with code 7, and ``SKB_DELEGATION_DEPTH``, incremented for each delegate, bounds a chain that
comes back through other programs (``MAX_DEPTH``).
"""
import os
import sys

from skb.cni import invoke
from skb.cni import netconf as config
from skb.cni.errors import CNIError, INTERNAL, INVALID_CONFIG
from skb.cni.result import parse_result
from skb.plugin import skel

__all__ = ["Delegate", "IPAMRef", "find_in_path"]


class IPAMRef(config.Conf):
    """The ``ipam`` object as a delegating plugin reads it: only ``type`` (the delegate reads the rest)."""
    KEYS = (config.Key("type", "type", config.STR, default=""),)
    __slots__ = ("type",)


IPAM_KEY = config.Key("ipam", "ipam", config.obj(IPAMRef))   # a delegating plugin's configuration has it


def find_in_path(plugin, paths):
    """The path of the executable for ``plugin`` (libcni FindInPath, through ``skb.cni.invoke``). Errors
    are code 7: the ``type`` names a plugin this node does not have, or is not a plugin name."""
    try:
        return invoke.find_in_path(plugin, paths)
    except invoke.PluginNotFound as e:
        if not plugin:
            e.details = 'set ipam.type in the network configuration, e.g. "ipam": {"type": "host-local", ...}'
        elif e.msg.startswith("invalid plugin name"):
            e.details = "ipam.type is a plugin name looked up in CNI_PATH, not a path"
        elif e.msg == "no paths provided":
            e.details = "CNI_PATH lists no directory"
        else:
            e.details = f"ipam.type {plugin!r} is not installed in any CNI_PATH directory"
        raise


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


def _in_process(path, environ):
    if environ.get("SKB_IPAM_EXEC") == "1":
        return None
    name = os.path.basename(path)
    module = skel.IN_PROCESS.get(name)
    if module is None or not is_own_build(path, name):
        return None
    return __import__(module, fromlist=["PLUGIN"]).PLUGIN


# --------------------------------------------------------------------------------------------------
# Running the delegate

# How deep IPAM delegation may nest across processes (docs/REFERENCE.md#delegation). A plugin that
# delegates to itself, directly or through another plugin, would otherwise start copies of itself
# forever (a fork chain that outlives a SIGKILL of the first one). One level is the normal case (ptp ->
# host-local); a few more leave room for an IPAM plugin that delegates in turn.
DEPTH_VAR = skel.DELEGATION_DEPTH
MAX_DEPTH = 4


def _environ(command, args, environ):
    """The caller's environment with CNI_COMMAND overridden (libcni's DelegateArgs). The other CNI_*
    variables are the call's own (``args``): equal to the process environment's when we run as a
    process, and right too when a plugin runs in-process with an environment of its own (tests).
    ``SKB_DELEGATION_DEPTH`` counts the nesting."""
    base = os.environ if environ is None else environ
    path = base.get("CNI_PATH", "")
    if [p for p in path.split(":") if p] != list(args.path):   # keep the caller's spelling if it is the same
        path = ":".join(args.path)
    env = invoke.environ(base, command, args.container_id, args.netns, args.ifname, args.args, path)
    if args.netns_override and env.get("CNI_NETNS_OVERRIDE", "").lower() not in ("1", "true"):
        env["CNI_NETNS_OVERRIDE"] = "1"
    env[DEPTH_VAR] = str(skel.delegation_depth(base) + 1)
    return env


def _same_file(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _running_applet():
    """The applet this frozen bundle runs as (``skb-cni <applet>``, or a link named after it)."""
    argv = sys.argv
    name = os.path.basename(argv[0]) if argv else ""
    return argv[1] if name == "skb-cni" and len(argv) > 1 else name


def _refuse_recursion(plugin, path, args, own_type, environ):
    """Code 7 naming ipam.type when the delegate is this plugin itself (by name, or by the file it
    resolves to), or when delegation is already nested ``MAX_DEPTH`` deep."""
    fix = 'set ipam.type to an IPAM plugin, e.g. "ipam": {"type": "host-local", ...}'
    itself = plugin == own_type
    if not itself and own_type:
        try:
            itself = _same_file(path, invoke.find_in_path(own_type, args.path))
        except CNIError:
            pass
    if not itself and getattr(sys, "frozen", False):
        # A launcher runs the applet named by its real file name, from the bundle its .skb points at.
        real = os.path.realpath(path)
        itself = os.path.basename(real) == _running_applet() and \
            os.path.realpath(os.path.join(os.path.dirname(real), ".skb")) == _bundle_dir()
    if itself:
        raise CNIError(INVALID_CONFIG, f'ipam.type "{plugin}" is this plugin itself ({path}): delegating to it '
                                       "would start it again, forever", fix)
    depth = skel.delegation_depth(os.environ if environ is None else environ)
    if depth >= MAX_DEPTH:
        raise CNIError(INVALID_CONFIG, f'ipam.type "{plugin}": IPAM delegation is already nested {depth} deep '
                                       f"({DEPTH_VAR}={depth}); a plugin delegates to itself through another",
                       fix + "; check the ipam.type of each plugin in the chain")


class Delegate:
    """The IPAM plugin of one call (``skel.Call.ipam``): ``ipam.type`` read once from the decoded
    configuration; the executable found in CNI_PATH, checked against recursion, and the choice between
    running it in-process and exec'ing it made once, on first use; the call's environment (CNI_COMMAND
    overridden) and its stdin bytes passed on unchanged."""

    __slots__ = ("call", "type", "_path", "_inproc")

    def __init__(self, call):
        self.call = call
        ipam = call.conf.ipam
        self.type = ipam.type if ipam is not None else ""
        self._path = None
        self._inproc = None

    def _resolve(self, env):
        if self._path is None:
            call = self.call
            path = find_in_path(self.type, call.args.path)
            _refuse_recursion(self.type, path, call.args, call.conf.type, call.environ)
            self._inproc = _in_process(path, env)
            self._path = path
        return self._path

    def _execute(self, command):
        """Run the IPAM plugin for ``command``; return its stdout (bytes) on success, raise its error."""
        call = self.call
        env = _environ(command, call.args, call.environ)
        path = self._resolve(env)
        inproc, plugin, stdin = self._inproc, self.type, call.stdin
        if env.get("SKB_IPAM_TRACE") == "1":   # for tests: which path was taken
            _pass_stderr(f"skb-cni: IPAM {command} {plugin}: {'in-process' if inproc else 'exec ' + path}\n".encode())
        if inproc is not None:
            out = skel.run(inproc, env, stdin)
            out.settle(True)        # its answer is delivered: to us
            stdout = out.stdout.encode() if isinstance(out.stdout, str) else out.stdout
            stderr = out.stderr.encode() if isinstance(out.stderr, str) else out.stderr
            if out.code == 0:
                if stderr:
                    _pass_stderr(stderr)
                return stdout
            raise _delegate_error(plugin, invoke.plugin_error(stdout, stderr, invoke.exit_text(out.code)), stdout,
                                  stderr)
        # Local import, measured: skb.linux.proc (and select) cost ~0.2 ms (python -X importtime, minimum of
        # 12 runs) that the in-process path, the hot one, never needs.
        from skb.linux import proc
        try:
            stdout, stderr = invoke.execute(path, env, stdin, proc.run)
        except invoke.PluginFailed as e:
            raise _delegate_error(plugin, e, e.stdout, e.stderr) from None
        except CNIError as e:          # it could not be started
            raise CNIError(INTERNAL, e.msg, f"the IPAM plugin {plugin!r} could not be started; check the file is "
                                            "an executable for this machine") from None
        if stderr:
            _pass_stderr(stderr)
        return stdout

    def add(self):
        """IPAM ADD: the delegate's result as a ``skb.cni.result.Result`` (a result without cniVersion is read
        in the configuration's version, as libcni does)."""
        out = self._execute("ADD")
        plugin, version = self.type, self.call.conf.cni_version
        try:
            if not out.strip():
                raise CNIError(INTERNAL, f"IPAM plugin {plugin!r} printed no result",
                               "an IPAM ADD must print its result on stdout")
            try:
                obj = invoke.decode_result(out, version)
            except invoke.ResultUnreadable as e:
                raise CNIError(INTERNAL, f"IPAM plugin {plugin!r} printed an unreadable result: {e.msg}",
                               out.decode(errors="replace")[:200]) from None
            return parse_result(obj, version, where=f"IPAM result of {plugin}")
        except CNIError:
            # The delegate succeeded, so it holds a reservation the caller never learns about: release it.
            try:
                self._execute("DEL")
            except CNIError:
                pass
            raise

    def delete(self):
        self._execute("DEL")

    def check(self):
        self._execute("CHECK")

    def status(self):
        self._execute("STATUS")

    def gc(self):
        self._execute("GC")


def _pass_stderr(data):
    try:
        sys.stderr.flush()
        os.write(2, data)
    except OSError:
        pass


def _delegate_error(plugin, err, stdout, stderr):
    """The delegate's error (``invoke.plugin_error``: its own code, msg and details, else libcni's words
    for how it failed) as this plugin reports it: never code 0, never without a message. Its stderr is
    passed on when its stdout held the error object."""
    if stdout.strip() and stderr:
        _pass_stderr(stderr)
    code, msg, details = err.code, err.msg, err.details
    if code <= 0:
        code = INTERNAL
        if not details:
            details = (f"the IPAM plugin {plugin!r} failed without an error object on stdout" if stderr.strip()
                       else f"the IPAM plugin {plugin!r} failed and printed nothing") if not stdout.strip() else \
                f"the IPAM plugin {plugin!r} printed something that is not a CNI error object"
    if not msg:
        msg = f"the IPAM plugin {plugin!r} failed with an error object without a message"
    return CNIError(code, msg, details)
