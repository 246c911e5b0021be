"""Shared test helpers: run a plugin as a runtime would, read kernel state independently of our code."""
import json
import os
import subprocess
import sys

from skb.applets import APPLETS

GO_BIN_DIR = "/usr/lib/cni"


def in_sandbox():
    """True when this process runs inside tests/sandbox: its netns differs from the one tests/sandbox
    recorded before unsharing (SKB_OUTER_NETNS) and, where readable, from PID 1's, unless PID 1 is the
    sandbox's own (its pid namespace differs from the recorded SKB_OUTER_PIDNS)."""
    outer = os.environ.get("SKB_OUTER_NETNS", "")
    own = os.stat("/proc/self/ns/net")
    if not outer or outer == f"{own.st_dev}:{own.st_ino}":
        return False
    try:
        init = os.stat("/proc/1/ns/net")
    except OSError:  # some machines deny even root a look at PID 1's namespaces
        return True
    if (own.st_dev, own.st_ino) != (init.st_dev, init.st_ino):
        return True
    outer_pid = os.environ.get("SKB_OUTER_PIDNS", "")
    pid = os.stat("/proc/self/ns/pid")
    return bool(outer_pid) and outer_pid != f"{pid.st_dev}:{pid.st_ino}"


def source_bin_dir(path):
    """Write one executable wrapper per applet into ``path``, running the source tree (not the frozen
    build). ``-I`` keeps the caller's environment out of the interpreter, as a runtime's would be."""
    os.makedirs(path, exist_ok=True)
    for name in APPLETS:
        exe = os.path.join(path, name)
        with open(exe, "w") as f:
            f.write(f"#!{sys.executable} -I\nimport sys\nfrom skb.applets import main\n"
                    f"sys.exit(main([{name!r}] + sys.argv[1:]))\n")
        os.chmod(exe, 0o755)
    return path


class Run:
    """The outcome of one plugin call: exit code, raw stdout/stderr, and stdout parsed as JSON."""

    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.json = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return f"Run(rc={self.rc}, stdout={self.stdout!r}, stderr={self.stderr!r})"


def cni_env(command, containerid="ctr1", netns="", ifname="eth0", args="", path="/nonexistent", **extra):
    """The six CNI_* variables, all set (empty when unused) as libcni sets them."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command, "CNI_CONTAINERID": containerid,
           "CNI_NETNS": netns, "CNI_IFNAME": ifname, "CNI_ARGS": args, "CNI_PATH": path}
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def run_plugin(exe, env, stdin=b"", timeout=30):
    """Run a plugin executable with exactly ``env`` and ``stdin`` (dict, str or bytes)."""
    if isinstance(stdin, dict):
        stdin = json.dumps(stdin)
    if isinstance(stdin, str):
        stdin = stdin.encode()
    proc = subprocess.run([exe], env=env, input=stdin, capture_output=True, timeout=timeout)
    proc.stdout = proc.stdout.decode(errors="replace")
    proc.stderr = proc.stderr.decode(errors="replace")
    return Run(proc)


def ip_json(*args, netns=None):
    """``ip -j ARGS`` (optionally inside a named netns) parsed: the independent oracle of kernel state."""
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["-j"] + list(args)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out) if out.strip() else []


def link_flags(ifname, netns=None):
    return ip_json("link", "show", "dev", ifname, netns=netns)[0]["flags"]
