"""containerd 1.6 runs containers on our installed frozen plugins, inside a sandbox: ``ctr run --cni``
and the CRI plugin driven over gRPC as kubelet drives it.

What containerd does with them (docs/REFERENCE.md#how-runtimes-call-plugins): ctr ADDs with CNI_NETNS=/proc/<pid>/ns/net and
DELs with an empty CNI_NETNS; CRI's RunPodSandbox ADDs the pod network and, concurrently, its built-in
loopback (cniVersion 0.3.1, CNI_IFNAME=lo); StopPodSandbox DELs with the netns path, RemovePodSandbox DELs
again with CNI_NETNS="".
"""
import json
import time

import grpc
import pytest

from tests.e2e import images, state
from tests.e2e.conftest import require
from tests.e2e.runtimes import Containerd
from tests.e2e.state import CAPTURE, CALL_LOG

pytestmark = [pytest.mark.e2e, pytest.mark.kernel, pytest.mark.frozen]


@pytest.fixture
def containerd(sandbox, suite_dir, image_archives):
    require("containerd", "ctr", "runc", "containerd-shim-runc-v2")
    c = Containerd(sandbox, suite_dir, env={"SKB_DEBUG_LOG": CALL_LOG}).start()
    try:
        yield c
    finally:
        if c.proc.poll() is None:
            print(c.log_text()[-3000:])


@pytest.fixture
def cri(containerd, image_archives):
    pytest.importorskip("cri_api", reason="the CRI stubs come from PyPI's container-runtime-interface-api "
                                          "(pip install -e '.[test]')")
    from tests.e2e.cri import CRIClient
    containerd.import_image(image_archives["pause"], namespace="k8s.io")
    client = CRIClient(containerd.grpc_target())
    yield client
    client.close()


def ctr_run(containerd, sb, name, *cmd):
    return containerd.ctr("run", "--cni", "--rm", "--snapshotter", "native", "--cgroup", f"{sb.cgroup_parent}/{name}",
                          images.BUSYBOX_REF, name, *cmd, check=False)


# ------------------------------------------------------------------------------------------ ctr run --cni

def test_ctr_run_cni(sandbox, containerd, image_archives):
    """ctr finds our plugins in /opt/cni/bin (its only plugin dir; the sandbox binds our suite there): the
    container gets its address, reaches the sandbox host through ptp, and --rm's DEL with an empty
    CNI_NETNS removes everything."""
    net = "ctrnet"
    state.write_conflist(sandbox, state.conflist(net, "10.90.0.0/24"))
    containerd.import_image(image_archives["busybox"])
    start = time.monotonic()
    r = ctr_run(containerd, sandbox, "c1", "sh", "-c", "ip -4 -o addr show eth0 && ping -c 1 -W 2 10.90.0.1")
    print(f"ctr run --cni --rm: {time.monotonic() - start:.2f}s")
    assert r.returncode == 0, r.stderr
    assert "inet 10.90.0.2/24" in r.stdout
    assert "1 packets received" in r.stdout

    adds, dels = (state.calls(sandbox, CAPTURE, command=c) for c in ("ADD", "DEL"))
    assert len(adds) == 1 and adds[0]["exitCode"] == 0
    assert adds[0]["env"]["CNI_NETNS"].startswith("/proc/") and adds[0]["env"]["CNI_CONTAINERID"] == "default-c1"
    assert len(dels) == 1 and dels[0]["exitCode"] == 0 and dels[0]["env"]["CNI_NETNS"] == ""
    state.assert_clean(sandbox, net)


def test_ctr_injected_add_failure(sandbox, containerd, image_archives):
    """ctr prints our message, exits non-zero and DELs the network at once (empty CNI_NETNS): nothing of
    ptp's or host-local's is left. Its own objects (the container and its CREATED task) ctr leaves: they
    are removed by hand, as an operator would."""
    net = "ctrfail"
    msg = "skb-e2e injected ADD failure 4712"
    state.write_conflist(sandbox, state.conflist(net, "10.91.0.0/24", debug={
        "inject": {"ADD": {"error": {"code": 7, "msg": msg}}}}))
    containerd.import_image(image_archives["busybox"])
    r = ctr_run(containerd, sandbox, "f1", "true")
    assert r.returncode != 0
    assert msg in r.stderr, r.stderr
    assert [a["exitCode"] for a in state.calls(sandbox, CAPTURE, command="ADD")] == [1]
    dels = state.calls(sandbox, CAPTURE, command="DEL")
    assert [(d["exitCode"], d["env"]["CNI_NETNS"]) for d in dels] == [(0, "")]
    state.assert_clean(sandbox, net)

    assert containerd.ctr("container", "ls", "-q").stdout.split() == ["f1"]
    containerd.ctr("task", "kill", "-s", "KILL", "f1", check=False)
    containerd.ctr("task", "rm", "-f", "f1")
    containerd.ctr("container", "rm", "f1")


# ------------------------------------------------------------------------------------------ CRI

def test_cri_pod_sandbox_lifecycle(sandbox, containerd, cri):
    """RunPodSandbox: the pod network (ptp, ipMasq on) and CRI's own loopback call (0.3.1, lo) both
    succeed; the pod is reachable. StopPodSandbox + RemovePodSandbox (the second DEL has an empty netns):
    no veth, no reservation, no masquerade rule, no cached result, no netns."""
    net = "k8s-pod-network"
    state.write_conflist(sandbox, state.conflist(net, "10.92.0.0/24", ip_masq=True))
    start = time.monotonic()
    pod = cri.run_pod(cri.pod_config("p1", f"{sandbox.cgroup_parent}/p1"))
    print(f"RunPodSandbox: {time.monotonic() - start:.2f}s")
    status = cri.pod_status(pod).status
    assert status.network.ip == "10.92.0.2"

    lo = state.calls(sandbox, command="ADD", ifname="lo")
    assert len(lo) == 1 and lo[0]["plugin"] == "loopback" and lo[0]["exitCode"] == 0
    assert json.loads(lo[0]["stdin"])["cniVersion"] == "0.3.1"
    assert json.loads(lo[0]["stdout"])["cniVersion"] == "0.3.1"
    eth0 = state.calls(sandbox, command="ADD", ifname="eth0")
    assert [r["plugin"] for r in eth0] == ["ptp", "loopback", "debug"]    # (ptp's host-local: no record of its own)
    assert all(r["exitCode"] == 0 for r in eth0)
    assert "K8S_POD_NAME=p1" in eth0[0]["env"]["CNI_ARGS"]
    assert state.reservations(sandbox, net) == ["10.92.0.2"] and state.nat_rules(sandbox)
    assert len(state.cached_results(sandbox)) == 2  # the pod network's and cni-loopback's

    sandbox.run(["busybox", "ping", "-c", "1", "-W", "2", "10.92.0.2"])

    cri.stop_pod(pod)
    cri.remove_pod(pod)
    assert cri.list_pods() == []
    dels = state.calls(sandbox, CAPTURE, command="DEL")
    assert [d["exitCode"] for d in dels] == [0, 0]
    assert dels[0]["env"]["CNI_NETNS"].startswith("/var/run/netns/cni-") and dels[1]["env"]["CNI_NETNS"] == ""
    assert all(r["exitCode"] == 0 for r in state.calls(sandbox, command="DEL"))
    state.assert_clean(sandbox, net)


def test_cri_injected_add_failure(sandbox, containerd, cri):
    """RunPodSandbox fails with our message in its gRPC error; containerd tears the network down and
    nothing of the pod is left."""
    net = "k8s-pod-network"
    msg = "skb-e2e injected ADD failure 4713"
    state.write_conflist(sandbox, state.conflist(net, "10.93.0.0/24", ip_masq=True, debug={
        "inject": {"ADD": {"error": {"code": 7, "msg": msg}}}}))
    with pytest.raises(grpc.RpcError) as err:
        cri.run_pod(cri.pod_config("pf", f"{sandbox.cgroup_parent}/pf"))
    assert msg in err.value.details(), err.value.details()
    assert [a["exitCode"] for a in state.calls(sandbox, CAPTURE, command="ADD")] == [1]
    assert state.calls(sandbox, command="DEL", plugin="ptp"), "containerd runs DEL after a failed ADD"
    assert cri.list_pods() == []
    state.assert_clean(sandbox, net)
