"""A throwaway machine for real container runtimes: fresh net, mount and pid namespaces.

``Sandbox`` starts ``unshare --net --mount --pid --fork --mount-proc --kill-child`` with catatonit as the
namespace's PID 1 (it reaps the orphans runtimes leave: shims, conmon, container processes). Inside, before
anything runs, private tmpfs are mounted on every place a runtime writes or looks for plugins:

- ``/run`` (sockets, netns bind mounts, runtime state), ``/var/lib`` (``cni``, ``containers``,
  ``containerd``: IPAM store, result cache, image stores), ``/var/tmp``, ``/opt`` (so ``/opt/cni/bin``,
  where ``ctr run --cni`` looks for plugins with no way to say otherwise, can be our bin dir);
- ``/etc/cni/net.d``, ``/etc/containers``, ``/etc/containerd``: only the configuration a test writes;
- the standard plugin dirs (``/usr/lib/cni``, ``/usr/libexec/cni``, ``/usr/local/lib/cni``, ...) that
  exist here, empty: no Go plugin can stand in for one of ours (``/opt`` is a tmpfs already).

The netns is the sandbox's "host": its interfaces, routes, sysctls and firewall rules vanish with it.
Commands run inside through ``nsenter`` into all three namespaces; files inside are reached from the test
process through ``/proc/<pid 1>/root`` (the sandbox's mount namespace, seen from outside). Stopping
SIGKILLs unshare, which SIGKILLs the namespace's PID 1, and the kernel then kills every process in the
pid namespace. Each sandbox owns a cgroup parent (``/skb-e2e-<hex>``): containers are put under it and
it is removed, in every hierarchy, when the sandbox stops.
"""
import json
import os
import shlex
import signal
import subprocess
import time
import uuid

CGROUP_ROOT = "/sys/fs/cgroup"
HIDDEN_PLUGIN_DIRS = ("/usr/lib/cni", "/usr/libexec/cni", "/usr/local/lib/cni", "/usr/local/libexec/cni", "/opt/cni/bin")
PRIVATE_DIRS = ("/run", "/var/lib", "/var/tmp", "/opt", "/etc/cni/net.d", "/etc/containers", "/etc/containerd")
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxError(Exception):
    pass


def _setup_script(binds):
    mounts = []
    for d in PRIVATE_DIRS + HIDDEN_PLUGIN_DIRS:
        # A dir under one already covered is empty on the tmpfs (/opt/cni/bin under /opt): nothing to mount
        # on, and nothing to hide.
        if os.path.isdir(d) and not any(d.startswith(m + "/") for m in mounts):
            mounts.append(d)
    lines = ["set -eu", "mount --make-rprivate /"]
    lines += [f"mount -t tmpfs -o mode=0755 skb-e2e {shlex.quote(d)}" for d in mounts]
    for target, source in binds.items():
        lines += [f"mkdir -p {shlex.quote(target)}",
                  f"mount --bind -o ro {shlex.quote(source)} {shlex.quote(target)}"]
    lines += ["mkdir -p /run/netns /run/lock /var/lib/cni /var/lib/containers /var/lib/containerd",
              "ip link set lo up",
              "echo ready > /run/skb-e2e-ready",
              "exec sleep 2147483647"]
    return "\n".join(lines)


class Sandbox:
    def __init__(self, binds=None):
        """``binds``: {path inside: host dir} bind-mounted read-only after the tmpfs are in place."""
        self.id = uuid.uuid4().hex[:10]
        self.cgroup_parent = f"/skb-e2e-{self.id}"
        self._binds = dict(binds or {})
        self.proc = None
        self.pid1 = None

    # ------------------------------------------------------------------------------------- lifecycle

    def start(self, timeout=10):
        script = _setup_script(self._binds)
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
             "catatonit", "--", "/bin/sh", "-c", script],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={"PATH": SBIN_PATH}, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SandboxError(f"sandbox exited at start-up: {self.proc.stderr.read().decode(errors='replace')}")
            if self.pid1 is None:
                try:
                    with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                        kids = f.read().split()
                    self.pid1 = int(kids[0]) if kids else None
                except OSError:
                    pass
            if self.pid1 is not None and os.path.exists(self.path("/run/skb-e2e-ready")):
                return self
            time.sleep(0.02)
        self.stop()
        raise SandboxError("sandbox not ready in time")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)  # --kill-child: its PID 1, then the whole pid namespace
            self.proc.wait()
        if self.pid1 is not None:  # PID 1 gone = every process of the namespace gone
            deadline = time.monotonic() + 10
            while os.path.exists(f"/proc/{self.pid1}") and time.monotonic() < deadline:
                time.sleep(0.02)
        self.remove_cgroups()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------------------------------------------- inside

    def path(self, inner):
        """The sandbox's file ``inner`` as this process reaches it."""
        return f"/proc/{self.pid1}/root{inner}"

    def nsenter(self):
        """Into the sandbox, in a session of its own (as a service manager starts a runtime, and as an
        operator's shell runs one): its process group and session are then visible in the sandbox's pid
        namespace, which warm start needs to serve its calls (docs/WARM.md)."""
        return ["nsenter", "-t", str(self.pid1), "--net", "--mount", "--pid", "--", "setsid", "--wait"]

    def run(self, cmd, check=True, timeout=60, env=None, input=None, text=True):
        """Run ``cmd`` inside the sandbox; stdout/stderr captured."""
        full_env = {"PATH": SBIN_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        full_env.update(env or {})
        proc = subprocess.run(self.nsenter() + list(cmd), capture_output=True, timeout=timeout, env=full_env,
                              input=input, text=text, cwd="/")
        if check and proc.returncode != 0:
            raise SandboxError(f"{' '.join(cmd)}: exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def popen(self, cmd, env=None, log=None):
        """Start a daemon inside the sandbox; its output goes to ``log`` (a path inside), if given."""
        full_env = {"PATH": SBIN_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        full_env.update(env or {})
        out = open(self.path(log), "ab") if log else subprocess.DEVNULL
        try:
            return subprocess.Popen(self.nsenter() + list(cmd), env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, cwd="/")
        finally:
            if log:
                out.close()

    def write(self, inner, text, mode=0o644):
        path = self.path(inner)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)

    def read(self, inner):
        with open(self.path(inner)) as f:
            return f.read()

    def ip(self, *args, netns=None):
        cmd = ["ip"] + (["-n", netns] if netns else []) + ["-j"] + list(args)
        out = self.run(cmd).stdout
        return json.loads(out) if out.strip() else []

    def listdir(self, inner):
        try:
            return sorted(os.listdir(self.path(inner)))
        except FileNotFoundError:
            return []

    # ------------------------------------------------------------------------------------- cgroups

    def cgroup_dirs(self):
        """Every directory of our cgroup parent, in every hierarchy, deepest first."""
        found = []
        name = self.cgroup_parent.strip("/")
        for hier in sorted(os.listdir(CGROUP_ROOT)):
            top = os.path.join(CGROUP_ROOT, hier, name)
            if not os.path.isdir(top) or os.path.islink(os.path.join(CGROUP_ROOT, hier)):
                continue
            for dirpath, _dirs, _files in os.walk(top):
                found.append(dirpath)
        return sorted(found, key=lambda p: -p.count("/"))

    def remove_cgroups(self, timeout=10):
        deadline = time.monotonic() + timeout
        left = self.cgroup_dirs()
        while left:
            for d in left:
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError:
                    pass  # still has a task that is dying: try again
            left = self.cgroup_dirs()
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if left:
            raise SandboxError(f"cgroups left behind: {left}")
