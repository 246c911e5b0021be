"""Start the real runtimes inside a ``Sandbox``, each with a private configuration, socket and state.

containerd: its config (TOML) names a socket, root and state under the sandbox's tmpfs, cgroupfs (no
systemd), the native snapshotter (the image store is a tmpfs), and for the CRI plugin our installed bin
dir as ``bin_dir``, ``/etc/cni/net.d`` (a sandbox tmpfs) as ``conf_dir``, the locally built pause image and
``restrict_oom_score_adj = true`` (runc otherwise fails in this VM: "can't get final child's PID from
pipe"). Every plugin that would look at the machine's disks or devices is disabled.

podman: ``containers.conf`` with ``network_backend = "cni"``, ``cni_plugin_dirs`` = our bin dir,
``network_config_dir``, cgroupfs, the file events logger; ``storage.conf`` with vfs under the sandbox's
``/var/lib/containers``. Both are passed by environment variable too, so no file of the machine's is read.
"""
import json
import os
import time

from tests.e2e import images

CONTAINERD_DIR = "/run/skb-e2e/containerd"
CONTAINERD_SOCK = f"{CONTAINERD_DIR}/containerd.sock"
CNI_CONF_DIR = "/etc/cni/net.d"

CONTAINERD_TOML = """\
version = 2
root = "/var/lib/containerd"
state = "{state}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.overlayfs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  disable_cgroup = false
  max_concurrent_downloads = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin_dir}"
    conf_dir = "{conf_dir}"
    max_conf_num = 1
"""


class Containerd:
    def __init__(self, sb, bin_dir, env=None):
        self.sb = sb
        self.bin_dir = bin_dir
        self.env = dict(env or {})
        self.proc = None
        self.log = f"{CONTAINERD_DIR}/containerd.log"
        self.sock = CONTAINERD_SOCK

    def start(self, timeout=20):
        sb = self.sb
        sb.write(f"{CONTAINERD_DIR}/config.toml", CONTAINERD_TOML.format(
            state=f"{CONTAINERD_DIR}/state", sock=self.sock, pause=images.PAUSE_REF, bin_dir=self.bin_dir,
            conf_dir=CNI_CONF_DIR))
        self.proc = sb.popen(["containerd", "--config", f"{CONTAINERD_DIR}/config.toml", "--log-level", "debug"],
                             log=self.log, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited {self.proc.returncode}:\n{self.log_text()[-4000:]}")
            if os.path.exists(sb.path(self.sock)) and self.ctr("version", check=False).returncode == 0:
                return self
            time.sleep(0.05)
        raise RuntimeError(f"containerd did not answer in {timeout}s:\n{self.log_text()[-4000:]}")

    def log_text(self):
        try:
            return self.sb.read(self.log)
        except OSError:
            return ""

    def ctr(self, *args, namespace="default", check=True, timeout=60):
        return self.sb.run(["ctr", "--address", self.sock, "--namespace", namespace] + list(args),
                           check=check, timeout=timeout)

    def import_image(self, archive_inner, namespace="default"):
        return self.ctr("image", "import", "--snapshotter", "native", archive_inner, namespace=namespace)

    def grpc_target(self):
        """The socket as the test process reaches it (through /proc/<pid 1>/root)."""
        return "unix://" + self.sb.path(self.sock)


PODMAN_DIR = "/run/skb-e2e/podman"

CONTAINERS_CONF = """\
[containers]
log_driver = "k8s-file"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{dir}/events.log"
runtime = "runc"
tmp_dir = "/run/libpod"
infra_image = "{pause}"

[network]
network_backend = "cni"
cni_plugin_dirs = {bin_dirs}
network_config_dir = "{conf_dir}"
default_network = "skb-e2e-unused"
"""

STORAGE_CONF = """\
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
"""

POLICY_JSON = '{"default": [{"type": "insecureAcceptAnything"}]}\n'
REGISTRIES_CONF = "unqualified-search-registries = []\n"


class Podman:
    """podman with its own containers.conf (``conf_name`` in /etc/containers: several can share one
    sandbox's image store, each with its own plugin and network config dirs)."""

    def __init__(self, sb, bin_dir, env=None, conf_dir=CNI_CONF_DIR, conf_name="containers.conf", extra_bin_dirs=()):
        self.sb = sb
        self.bin_dirs = [bin_dir, *extra_bin_dirs]
        self.conf_dir = conf_dir
        self.conf_path = f"/etc/containers/{conf_name}"
        self.env = {"CONTAINERS_CONF": self.conf_path,
                    "CONTAINERS_STORAGE_CONF": "/etc/containers/storage.conf",
                    "CONTAINERS_REGISTRIES_CONF": "/etc/containers/registries.conf"}
        self.env.update(env or {})

    def setup(self):
        sb = self.sb
        sb.write(self.conf_path, CONTAINERS_CONF.format(
            dir=PODMAN_DIR, pause=images.PAUSE_REF, bin_dirs=json.dumps(self.bin_dirs), conf_dir=self.conf_dir))
        sb.write("/etc/containers/storage.conf", STORAGE_CONF)
        sb.write("/etc/containers/policy.json", POLICY_JSON)
        sb.write("/etc/containers/registries.conf", REGISTRIES_CONF)
        os.makedirs(sb.path(PODMAN_DIR), exist_ok=True)
        return self

    def cni_unsupported(self):
        """None when this podman runs CNI plugins, else why not: podman >= 5 is built with netavark only
        unless its packager enabled CNI (Debian 13's says "cni support is not enabled in this build, only
        netavark"). Asked with the test's own containers.conf, so the answer is the backend the test uses."""
        r = self("network", "ls", "--format", "{{.Name}}", check=False)
        if r.returncode == 0:
            return None
        version = self("--version", check=False).stdout.strip() or "podman"
        if "cni" in r.stderr.lower() and ("not enabled" in r.stderr or "not supported" in r.stderr):
            return f"{version} has no CNI backend: {r.stderr.strip().splitlines()[-1]}"
        raise RuntimeError(f"podman network ls failed (exit {r.returncode}): {r.stderr.strip()}")

    def __call__(self, *args, check=True, timeout=60, text=True):
        return self.sb.run(["podman"] + list(args), check=check, timeout=timeout, env=self.env, text=text)

    def load(self, archive_inner):
        return self("load", "-q", "-i", archive_inner)
