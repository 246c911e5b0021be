"""The installer image (deploy/Containerfile) builds with podman from nothing but the frozen suite, and
running it against a node's directories (here: temporary dirs in the sandbox) installs a suite that a
runtime then uses for real.
"""
import json
import os
import shutil
import io
import tarfile
import time

import pytest

from tests.e2e import images, state
from tests.e2e.conftest import require, require_cni
from tests.e2e.runtimes import Podman
from tests.helpers import APPLETS

pytestmark = [pytest.mark.e2e, pytest.mark.kernel, pytest.mark.frozen]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "skb.local/e2e/skb-cni:test"
NODE = "/var/lib/skb-node"  # the "node's" /opt/cni/bin and /etc/cni/net.d, on the sandbox's tmpfs
NODE_BIN, NODE_CONF = f"{NODE}/opt/cni/bin", f"{NODE}/etc/cni/net.d"
POD_CIDR = "10.96.0.0/24"


@pytest.fixture
def built_image(sandbox, suite_dir, image_archives, tmp_path):
    """podman build of deploy/Containerfile, in a context holding the installed suite as dist/bin."""
    require("podman", "conmon", "runc")
    ctx = tmp_path / "ctx"
    shutil.copytree(suite_dir, ctx / "dist" / "bin", symlinks=True)
    shutil.copytree(os.path.join(ROOT, "deploy"), ctx / "deploy")
    podman = require_cni(Podman(sandbox, suite_dir).setup())
    start = time.monotonic()
    podman("build", "-q", "--network", "none", "-f", str(ctx / "deploy" / "Containerfile"), "-t", IMAGE, str(ctx),
           timeout=50)
    print(f"podman build: {time.monotonic() - start:.2f}s")
    return podman


def node_mounts():
    return ["-v", f"{NODE_BIN}:/host/opt/cni/bin", "-v", f"{NODE_CONF}:/host/etc/cni/net.d"]


def test_image_holds_only_the_suite_and_installs_a_working_one(sandbox, built_image, image_archives, suite_dir):
    podman = built_image
    # FROM scratch: the image's only files are the suite and the template.
    cid = podman("create", IMAGE).stdout.strip()
    exported = podman("export", cid, text=False).stdout
    podman("rm", cid)
    with tarfile.open(fileobj=io.BytesIO(exported)) as tar:
        files = [m.name for m in tar.getmembers() if not m.isdir()]
    assert files and all(f.startswith("opt/skb-cni/") for f in files), [f for f in files if not f.startswith("opt/")]

    # Run it as the DaemonSet does (minus --wait) against the node's dirs.
    os.makedirs(sandbox.path(NODE_BIN))
    os.makedirs(sandbox.path(NODE_CONF))
    r = podman("run", "--rm", "--network", "none", *node_mounts(), IMAGE, "--bin-dir", "/host/opt/cni/bin",
               "--conf-dir", "/host/etc/cni/net.d", "--template", "/opt/skb-cni/10-skb.conflist.template",
               "--pod-cidr", POD_CIDR)
    print(r.stderr)
    bundle = os.readlink(os.path.join(suite_dir, ".skb"))
    assert sandbox.listdir(NODE_BIN) == sorted([".skb", bundle, *APPLETS])
    assert os.readlink(sandbox.path(f"{NODE_BIN}/.skb")) == bundle
    conf = json.loads(sandbox.read(f"{NODE_CONF}/10-skb.conflist"))
    assert conf["plugins"][0]["ipam"]["ranges"] == [[{"subnet": POD_CIDR}]]
    again = podman("run", "--rm", "--network", "none", *node_mounts(), IMAGE, "--bin-dir", "/host/opt/cni/bin",
                   "--conf-dir", "/host/etc/cni/net.d", "--pod-cidr", POD_CIDR)
    assert "already installed" in again.stderr and "up to date" in again.stderr

    # The node's runtime uses what was installed: a container on network "skb" gets an address from the
    # node's pod CIDR through the installed ptp and host-local, and reaches its gateway.
    node = Podman(sandbox, NODE_BIN, conf_dir=NODE_CONF, conf_name="node.conf").setup()
    node.load(image_archives["busybox"])
    out = node("run", "--rm", "--pull=never", "--network", "skb", "--cgroup-parent", sandbox.cgroup_parent,
               "--cap-add", "NET_RAW", images.BUSYBOX_REF, "sh", "-c",
               "ip -4 -o addr show eth0 && ping -c 1 -W 2 10.96.0.1").stdout
    assert "inet 10.96.0.2/24" in out and "1 packets received" in out
    state.assert_clean(sandbox, "skb")


def test_image_default_command_waits_and_uninstalls_on_stop_when_asked(sandbox, built_image):
    """The image's default command (the DaemonSet's): install, then keep running; SIGTERM leaves the config
    in place (a rolling update) unless SKB_UNINSTALL_ON_STOP=true (removing skb-cni from the cluster)."""
    podman = built_image
    os.makedirs(sandbox.path(NODE_BIN))
    os.makedirs(sandbox.path(NODE_CONF))
    conflist = sandbox.path(f"{NODE_CONF}/10-skb.conflist")
    for uninstall in ("false", "true"):
        podman("run", "-d", "--name", "installer", "--network", "none", "--cgroup-parent", sandbox.cgroup_parent,
               "-e", f"SKB_POD_CIDR={POD_CIDR}", "-e", f"SKB_UNINSTALL_ON_STOP={uninstall}", *node_mounts(), IMAGE)
        # Until the first install is done and the signal handlers are set (as PID 1 of its container, an
        # earlier SIGTERM would be ignored, and podman stop would SIGKILL it after -t seconds).
        deadline = time.monotonic() + 20
        while "watching" not in podman("logs", "installer").stderr and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.path.exists(conflist)
        assert podman("inspect", "installer", "--format", "{{.State.Running}}").stdout.strip() == "true"
        podman("stop", "-t", "5", "installer")
        assert podman("inspect", "installer", "--format", "{{.State.ExitCode}}").stdout.strip() == "0"
        print(podman("logs", "installer").stderr)
        podman("rm", "installer")
        assert os.path.exists(conflist) == (uninstall == "false")
    assert sandbox.listdir(NODE_BIN)  # the plugins stay for pods still running
