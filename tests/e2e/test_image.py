"""The installer image (deploy/Containerfile) builds with podman from nothing but the frozen suite, and run
as deploy/daemonset.yaml runs it (its args, env, ConfigMap, securityContext and ServiceAccount, the
node's dirs bound to temporary dirs in the sandbox, a stand-in API server for the node's pod CIDRs), it
installs a suite that a runtime then uses for real, and uninstalls.

Building and running the image needs no CNI support in podman (podman 5 on Debian 13 has none: only the
step where the node's own podman starts a container on the installed network is skipped there).
"""
import io
import json
import os
import shutil
import tarfile
import time

import pytest
import yaml

from tests.e2e import images, state
from tests.e2e.conftest import require
from tests.e2e.runtimes import Podman
from tests.fake_kube_api import FakeAPI
from tests.helpers import APPLETS

pytestmark = [pytest.mark.e2e, pytest.mark.kernel, pytest.mark.frozen]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "skb.local/e2e/skb-cni:test"
NODE = "/var/lib/skb-node"  # the "node's" /opt/cni/bin and /etc/cni/net.d, on the sandbox's tmpfs
NODE_BIN, NODE_CONF = f"{NODE}/opt/cni/bin", f"{NODE}/etc/cni/net.d"
POD_CIDR = "10.96.0.0/24"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture
def built_image(sandbox, suite_dir, tmp_path):
    """podman build of deploy/Containerfile, in a context holding the installed suite as dist/bin."""
    require("podman", "conmon", "runc")
    ctx = tmp_path / "ctx"
    shutil.copytree(suite_dir, ctx / "dist" / "bin", symlinks=True)
    shutil.copytree(os.path.join(ROOT, "deploy"), ctx / "deploy")
    shutil.copy(os.path.join(ROOT, "LICENSE"), ctx / "LICENSE")
    podman = Podman(sandbox, suite_dir).setup()
    start = time.monotonic()
    podman("build", "-q", "--network", "none", "-f", str(ctx / "deploy" / "Containerfile"), "-t", IMAGE, str(ctx),
           timeout=50)
    print(f"podman build: {time.monotonic() - start:.2f}s")
    return podman


def daemonset():
    with open(os.path.join(ROOT, "deploy", "daemonset.yaml"), encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return {d["kind"]: d for d in docs}


def test_image_holds_only_the_suite_and_its_licenses(built_image, suite_dir):
    podman = built_image
    cid = podman("create", IMAGE).stdout.strip()
    exported = podman("export", cid, text=False).stdout
    podman("rm", cid)
    with tarfile.open(fileobj=io.BytesIO(exported)) as tar:
        files = [m.name for m in tar.getmembers() if not m.isdir()]
        bundle = os.readlink(os.path.join(suite_dir, ".skb"))
        notice = tar.extractfile(f"opt/skb-cni/bin/{bundle}/NOTICE").read()
        license_ = tar.extractfile("opt/skb-cni/LICENSE").read()
    # FROM scratch: the image's only files are the suite, its licenses and the template.
    assert files and all(f.startswith("opt/skb-cni/") for f in files), [f for f in files if not f.startswith("opt/")]
    assert b"Apache License" in license_ and b"PyInstaller" in notice
    # Its platform is the one the DaemonSet selects.
    inspect = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
    selector = daemonset()["DaemonSet"]["spec"]["template"]["spec"]["nodeSelector"]
    assert (inspect["Os"], inspect["Architecture"]) == (selector["kubernetes.io/os"], selector["kubernetes.io/arch"])


def test_image_run_as_the_daemonset_runs_it_installs_and_uninstalls(sandbox, built_image, image_archives, suite_dir,
                                                                    tmp_path):
    podman = built_image
    manifests = daemonset()
    pod = manifests["DaemonSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    sec = container["securityContext"]
    # The node's pod CIDR comes from the API, asked from inside the sandbox's netns (the pod's hostNetwork).
    api = FakeAPI(str(tmp_path), netns=f"/proc/{sandbox.pid1}/ns/net")
    api.nodes["node-1"] = {"podCIDRs": [POD_CIDR]}
    cm = tmp_path / "configmap"
    cm.mkdir()
    for name, text in manifests["ConfigMap"]["data"].items():
        (cm / name).write_text(text)
    os.makedirs(sandbox.path(NODE_BIN))
    os.makedirs(sandbox.path(NODE_CONF))
    mounts = {"cni-bin": NODE_BIN, "cni-conf": NODE_CONF, "config": str(cm)}
    volumes = []
    for m in container["volumeMounts"]:
        volumes += ["-v", f"{mounts[m['name']]}:{m['mountPath']}" + (":ro" if m.get("readOnly") else "")]
    volumes += ["-v", f"{api.sa}:{SA_DIR}:ro"]
    env = ["-e", "NODE_NAME=node-1"] + [a for k, v in api.env.items() for a in ("-e", f"{k}={v}")]
    for e in container["env"]:
        if "value" in e:
            value = "true" if e["name"] == "SKB_UNINSTALL_ON_STOP" else e["value"]  # as when removing skb-cni
            env += ["-e", f"{e['name']}={value}"]
    security = ["--user", str(sec["runAsUser"]), "--security-opt", "no-new-privileges"]
    security += ["--read-only"] if sec["readOnlyRootFilesystem"] else []
    security += [a for c in sec["capabilities"]["drop"] for a in ("--cap-drop", c)]
    assert pod["hostNetwork"] is True
    try:
        podman("run", "-d", "--name", "install-cni", "--network", "host", "--cgroup-parent", sandbox.cgroup_parent,
               *security, *volumes, *env, IMAGE, *container["args"])
        deadline = time.monotonic() + 30
        while "watching" not in podman("logs", "install-cni").stderr and time.monotonic() < deadline:
            assert podman("inspect", "install-cni", "--format", "{{.State.Running}}").stdout.strip() == "true", \
                podman("logs", "install-cni").stderr
            time.sleep(0.1)
        log = podman("logs", "install-cni").stderr
        print(log)
        assert f"pod CIDRs of node node-1: {POD_CIDR}" in log
        assert api.requests == [("/api/v1/nodes/node-1", f"Bearer {api.token}")]
        bundle = os.readlink(os.path.join(suite_dir, ".skb"))
        assert sandbox.listdir(NODE_BIN) == sorted([".skb", bundle, *APPLETS])
        conf = json.loads(sandbox.read(f"{NODE_CONF}/10-skb.conflist"))
        assert (conf["cniVersion"], conf["cniVersions"]) == ("1.0.0", ["1.0.0", "1.1.0"])
        assert conf["plugins"][0]["ipam"]["ranges"] == [[{"subnet": POD_CIDR}]]
        assert conf["plugins"][0]["mtu"] == 1500     # the sandbox has no default route

        # The node's runtime uses what was installed: a container on network "skb" gets an address from
        # the node's pod CIDR through the installed ptp and host-local, and reaches its gateway.
        node = Podman(sandbox, NODE_BIN, conf_dir=NODE_CONF, conf_name="node.conf").setup()
        reason = node.cni_unsupported()
        if reason:
            print(f"not run: a container on the installed network ({reason})")
        else:
            node.load(image_archives["busybox"])
            out = node("run", "--rm", "--pull=never", "--network", "skb", "--cgroup-parent", sandbox.cgroup_parent,
                       "--cap-add", "NET_RAW", images.BUSYBOX_REF, "sh", "-c",
                       "ip -4 -o addr show eth0 && ping -c 1 -W 2 10.96.0.1").stdout
            assert "inet 10.96.0.2/24" in out and "1 packets received" in out
            state.assert_clean(sandbox, "skb")

        # Removing skb-cni from the cluster: the pod stops with SKB_UNINSTALL_ON_STOP=true and removes the
        # node's config; then `skb uninstall --purge` (the image's skb) removes the suite.
        podman("stop", "-t", "5", "install-cni")
        assert podman("inspect", "install-cni", "--format", "{{.State.ExitCode}}").stdout.strip() == "0"
        assert not os.path.exists(sandbox.path(f"{NODE_CONF}/10-skb.conflist"))
        assert sandbox.listdir(NODE_BIN)   # the plugins stay for pods still running
        podman("run", "--rm", "--network", "none", *security, *volumes, "--entrypoint", "/opt/skb-cni/bin/skb",
               IMAGE, "uninstall", "--conf-dir", "/host/etc/cni/net.d", "--purge", "--bin-dir", "/host/opt/cni/bin")
        assert sandbox.listdir(NODE_BIN) == []
    finally:
        podman("rm", "-f", "install-cni", check=False)
        api.close()


def test_image_default_command_waits_and_uninstalls_on_stop_when_asked(sandbox, built_image):
    """The image's default command: install, then keep running; SIGTERM leaves the config in place (a
    rolling update) unless SKB_UNINSTALL_ON_STOP=true (removing skb-cni from the cluster)."""
    podman = built_image
    os.makedirs(sandbox.path(NODE_BIN))
    os.makedirs(sandbox.path(NODE_CONF))
    conflist = sandbox.path(f"{NODE_CONF}/10-skb.conflist")
    node_mounts = ["-v", f"{NODE_BIN}:/host/opt/cni/bin", "-v", f"{NODE_CONF}:/host/etc/cni/net.d"]
    for uninstall in ("false", "true"):
        podman("run", "-d", "--name", "installer", "--network", "none", "--cgroup-parent", sandbox.cgroup_parent,
               "-e", f"SKB_POD_CIDR={POD_CIDR}", "-e", f"SKB_UNINSTALL_ON_STOP={uninstall}", *node_mounts, IMAGE)
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
