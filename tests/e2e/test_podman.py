"""podman 4.3 (CNI backend) runs containers on our installed frozen plugins, inside a sandbox.

What podman does with them (docs/REFERENCE.md#how-runtimes-call-plugins): VERSION on every plugin of every conflist before it
trusts a network, ADD with CNI_IFNAME=eth0 and a /run/netns path, DEL with prevResult on cleanup, and DEL
at once after a failed ADD.
"""
import json
import time

import pytest

from tests.e2e import images, state
from tests.e2e.conftest import require, require_cni
from tests.e2e.runtimes import Podman
from tests.e2e.state import CAPTURE, CALL_LOG

pytestmark = [pytest.mark.e2e, pytest.mark.kernel, pytest.mark.frozen]

# What podman 4.3.1's libcni (containernetworking/cni v1.1) knows how to read a result in.
PODMAN_CNI_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0")


EXTRA_BIN = "/run/skb-e2e/extra-bin"
# A plugin whose VERSION answer leaves out 1.0.0: the control that shows podman really drops a network
# on a negative probe (so a listed network means its probes passed).
REFUSER = """#!/bin/sh
echo '{"cniVersion":"0.4.0","supportedVersions":["0.3.1","0.4.0"]}'
"""


@pytest.fixture
def podman(sandbox, suite_dir, image_archives):
    require("podman", "conmon", "runc")
    sandbox.write(f"{EXTRA_BIN}/refuser", REFUSER, mode=0o755)
    p = require_cni(Podman(sandbox, suite_dir, env={"SKB_DEBUG_LOG": CALL_LOG}, extra_bin_dirs=[EXTRA_BIN]).setup())
    p.load(image_archives["busybox"])
    return p


def run_args(sb, network, *extra):
    return ["run", "--pull=never", "--network", network, "--cgroup-parent", sb.cgroup_parent, *extra]


def container_ip(podman, name, network):
    info = json.loads(podman("inspect", name).stdout)[0]
    return info["NetworkSettings"]["Networks"][network]["IPAddress"]


def test_version_probes_accept_every_cni_version(sandbox, podman, suite_dir):
    """One network per spec version podman reads: each is listed (podman runs VERSION on each of its
    plugins and silently drops the network when one fails or does not list the conflist's version) and a
    container on it gets its address. A network with a plugin that leaves the version out is dropped."""
    names = {v: f"v{v.replace('.', '')}" for v in PODMAN_CNI_VERSIONS}
    for i, v in enumerate(PODMAN_CNI_VERSIONS):
        state.write_conflist(sandbox, state.conflist(names[v], f"10.77.{i}.0/24", version=v))
    refused = state.conflist("refused", "10.78.0.0/24")
    refused["plugins"].append({"type": "refuser"})
    state.write_conflist(sandbox, refused)
    listed = podman("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert sorted(n for n in listed if n.startswith("v")) == sorted(names.values())
    assert "refused" not in listed

    # the probe exactly as podman sends it, to each of our plugins
    env = {"CNI_COMMAND": "VERSION", "CNI_PATH": "dummy", "CNI_NETNS": "dummy", "CNI_IFNAME": "dummy"}
    for plugin in ("ptp", "host-local", "loopback", "debug"):
        r = sandbox.run([f"{suite_dir}/{plugin}"], env=env, input='{"cniVersion":"1.0.0"}')
        assert set(PODMAN_CNI_VERSIONS) <= set(json.loads(r.stdout)["supportedVersions"]), (plugin, r.stdout)

    for i, v in enumerate(PODMAN_CNI_VERSIONS):
        out = podman(*run_args(sandbox, names[v], "--rm"), images.BUSYBOX_REF, "ip", "-4", "-o", "addr", "show",
                     "eth0").stdout
        assert f"inet 10.77.{i}.2/24" in out, (v, out)
        adds = state.calls(sandbox, CAPTURE, command="ADD")
        assert adds[-1]["exitCode"] == 0 and json.loads(adds[-1]["stdin"])["cniVersion"] == v
        state.assert_clean(sandbox, names[v])


def test_ptp_chain_gets_an_address_and_carries_traffic(sandbox, podman):
    """ptp + host-local, then loopback and debug in the chain: two containers, each reachable from the
    sandbox host and from the other; removing them leaves nothing behind."""
    net = "pods"
    state.write_conflist(sandbox, state.conflist(net, "10.88.0.0/24"))
    start = time.monotonic()
    for name in ("c1", "c2"):
        podman(*run_args(sandbox, net, "-d", "--name", name, "--cap-add", "NET_RAW"), images.BUSYBOX_REF,
               "sleep", "600")
    print(f"two podman run -d: {time.monotonic() - start:.2f}s")
    ip1, ip2 = container_ip(podman, "c1", net), container_ip(podman, "c2", net)
    assert {ip1, ip2} == {"10.88.0.2", "10.88.0.3"}
    assert len(state.cached_results(sandbox)) == 2 and len(state.reservations(sandbox, net)) == 2

    # what the runtime got back through the whole chain
    adds = state.calls(sandbox, CAPTURE, command="ADD")
    assert len(adds) == 2 and all(r["exitCode"] == 0 for r in adds)
    prev = json.loads(adds[0]["stdin"])["prevResult"]
    assert prev["ips"][0]["address"].endswith("/24") and prev["interfaces"]
    # (no host-local: ptp's IPAM call is not the runtime's, and writes no record of its own)
    assert [r["plugin"] for r in state.calls(sandbox, command="ADD")] == ["ptp", "loopback", "debug"] * 2

    # host <-> container, container <-> container
    for ip in (ip1, ip2):
        sandbox.run(["busybox", "ping", "-c", "1", "-W", "2", ip])
    podman("exec", "c1", "ping", "-c", "1", "-W", "2", ip2)
    podman("exec", "c2", "ping", "-c", "1", "-W", "2", ip1)
    podman("exec", "c1", "ping", "-c", "1", "-W", "2", "10.88.0.1")  # its gateway: the host end
    assert "UP" in podman("exec", "c1", "ip", "-o", "link", "show", "lo").stdout

    podman("rm", "-f", "-t", "0", "c1", "c2")
    dels = state.calls(sandbox, CAPTURE, command="DEL")
    assert len(dels) == 2 and all(r["exitCode"] == 0 for r in dels)
    state.assert_clean(sandbox, net)


def test_injected_add_failure_surfaces_and_is_cleaned_up(sandbox, podman):
    """The debug plugin fails ADD after ptp and host-local succeeded: podman's error carries our message,
    its DEL undoes the rest, and no container is left."""
    net = "failing"
    msg = "skb-e2e injected ADD failure 4711"
    state.write_conflist(sandbox, state.conflist(net, "10.89.0.0/24", debug={
        "inject": {"ADD": {"error": {"code": 7, "msg": msg, "details": "from the e2e test"}}}}))
    r = podman(*run_args(sandbox, net, "--rm", "--name", "f1"), images.BUSYBOX_REF, "true", check=False)
    assert r.returncode != 0
    assert msg in r.stderr, r.stderr
    adds = state.calls(sandbox, CAPTURE, command="ADD")
    assert len(adds) == 1 and adds[0]["exitCode"] == 1
    assert state.calls(sandbox, command="DEL", plugin="ptp"), "podman runs DEL after a failed ADD"
    assert "f1" not in podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
    state.assert_clean(sandbox, net)
