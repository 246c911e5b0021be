"""Finding and running plugin executables as libcni's RawExec does, over ``skb.cni.invoke`` (the lookup,
the environment and the decoding of a failure are the same code IPAM delegation runs)."""
import errno
import os
import signal
import subprocess
import sys
import time

from skb.cni import invoke
from skb.cni.errors import CNIError
from skb.linux import proc
from skb.tool.libcni.errors import LibcniError


def find_in_path(plugin, paths):
    """libcni's FindInPath (``skb.cni.invoke.find_in_path``): the first ``<dir>/<plugin>`` that is a
    regular file; the execute bit is not checked (a non-executable file is found, and then fails to
    run). A name that is not a bare file name is refused."""
    try:
        return invoke.find_in_path(plugin, paths)
    except invoke.PluginNotFound as e:
        raise LibcniError(e.msg) from None


def parse_plugin_error(stdout, stderr, status):
    """libcni's RawExec.pluginErr: the CNIError a failed plugin reported, or one describing its output.
    ``status`` is Go's text for how it ended (``exit status 1``)."""
    return invoke.plugin_error(stdout, stderr, status)


class Timeout(Exception):
    """The plugin was killed after ``timeout`` seconds; what it wrote until then is kept."""

    def __init__(self, stdout, stderr):
        Exception.__init__(self)
        self.stdout = stdout
        self.stderr = stderr


def spawn(path, argv, env, stdin, timeout=None):
    """Run a program: ``(exit code, stdout, stderr)``, the code negative for a signal; OSError when it
    cannot start ("text file busy" retried once a second, five times, as libcni does); Timeout when it
    runs longer than ``timeout`` seconds (then it is killed). Without a timeout this is
    ``skb.linux.proc.run``, what a plugin's own delegation runs."""
    if timeout is None:
        return proc.run(path, argv, env, stdin)
    for attempt in range(6):
        try:
            # A group of its own, so that a timeout (or our own end) takes the plugin's children with it:
            # a hook or a delegate that hangs, a child that keeps its stdout open.
            p = subprocess.Popen(argv, executable=path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, process_group=0)
        except OSError as e:
            if e.errno == errno.ETXTBSY and attempt < 5:
                time.sleep(1)
                continue
            raise
        _LIVE.add(p.pid)
        try:
            out, err = p.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(p)
            try:
                out, err = p.communicate(timeout=2)
            except subprocess.TimeoutExpired:   # a process outside the group holds the pipes: leave them
                out = err = b""
                for f in (p.stdout, p.stderr):
                    f.close()
                p.wait()
            raise Timeout(out or b"", err or b"") from None
        except BaseException:                   # ^C, SIGTERM: the plugin's group ends with us
            _kill_group(p)
            raise
        finally:
            _LIVE.discard(p.pid)
        return p.returncode, out, err


# The process groups of the plugins running now with a timeout (their leaders not reaped yet, so no other
# group can have their number): kill_all() ends them when skb ends, whichever thread started them.
_LIVE = set()


def kill_all():
    for pgid in list(_LIVE):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def _kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.wait()


class RawExec:
    """Runs plugin executables: libcni's RawExec (stderr passed through on success; "text file busy"
    retried, as when a plugin binary is being replaced). ``timeout`` (seconds) kills a plugin that hangs;
    libcni has none of its own, runtimes supply theirs."""

    def __init__(self, stderr=None, timeout=None):
        self.stderr = stderr if stderr is not None else sys.stderr
        self.timeout = timeout
        self.calls = []   # (path, env CNI_* subset, stdin, rc, stdout, stderr): for --verbose and tests

    def exec_plugin(self, path, stdin, environ):
        timeout = self.timeout
        try:
            stdout, stderr = invoke.execute(path, environ, stdin,
                                            lambda path, argv, env, stdin: spawn(path, argv, env, stdin, timeout))
        except Timeout as e:
            self._record(path, environ, stdin, -9, e.stdout, e.stderr)
            raise invoke.plugin_error(e.stdout, e.stderr,
                                      f"signal: killed (no answer within {self.timeout:g} s)") from None
        except invoke.PluginFailed as e:
            self._record(path, environ, stdin, e.status, e.stdout, e.stderr)
            raise
        except CNIError:                     # it could not be started
            self._record(path, environ, stdin, None, b"", b"")
            raise
        self._record(path, environ, stdin, 0, stdout, stderr)
        if stderr and self.stderr:
            self.stderr.write(stderr.decode(errors="replace"))
        return stdout

    def _record(self, path, environ, stdin, rc, stdout, stderr):
        self.calls.append({"path": path, "env": {k: v for k, v in environ.items() if k.startswith("CNI_")},
                           "stdin": stdin, "exitCode": rc, "stdout": stdout, "stderr": stderr})

    def find_in_path(self, plugin, paths):
        return find_in_path(plugin, paths)
