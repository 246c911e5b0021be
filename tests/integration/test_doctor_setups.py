"""skb doctor on broken set-ups seen in the field (issue 21): a pod range that overlaps the node's own
network, configuration errors found without --probe, a plugin that is a dangling link, a runtime reading
an empty conf dir while /etc/cni/net.d holds the network, one cause reported once, and --probe's sysctl
false positive. Node checks run in sandbox namespaces; mounts only in a mount namespace of the test's own."""
import json
import os
import shlex
import subprocess

import pytest

from skb.tool import libcni
from tests.integration.test_doctor import (CONTAINERD_V2, codes, doctor, find, in_netns, lo_conflist, setup,  # noqa: F401
                                           skb, sysctl)
from tests.integration.test_ptp_hostclash import Node


@pytest.fixture
def node():
    n = Node()
    yield n
    n.close()


def ptp_pods(setup, *ranges, data=None, **ipam):
    ipam = dict({"type": "host-local", "ranges": [[r] for r in ranges], "dataDir": str(data or setup.tmp / "ipam")},
                **ipam)
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "ptp", "ipam": ipam}]})


def problems(out):
    """(severity, code) of the problems, but forwarding-off: the sandbox host (the node) has it off."""
    return [(f["severity"], f["code"]) for f in out["problems"] if f["code"] != "forwarding-off"]


# ---------------------------------------------------------------------------------------------------
# the pod range against the node's own network

@pytest.mark.kernel
def test_pod_range_overlapping_the_node(skb, setup, node):
    """The issue's node: eth0 10.244.1.5/24, router 10.244.1.1, pod range 10.244.1.0/24. The doctor used
    to say "no problems found" there, with and without --probe."""
    ptp_pods(setup, {"subnet": "10.244.1.0/24"})
    before = node.state()
    out = doctor(skb, setup, prefix=in_netns(node.ns))
    overlap = find(out, "pod-range-overlap")
    assert len(overlap) == 1 and overlap[0]["severity"] == "error"
    f = overlap[0]
    assert f["what"] == 'the pod range 10.244.1.0/24 of network "pods" (10-pods.conflist) overlaps the node\'s own network'
    assert "eth0 has 10.244.1.5/24 (an address host-local may hand out)" in f["evidence"]
    assert "the node routes through default via 10.244.1.1 dev eth0" in f["evidence"]
    assert ("skb's ptp refuses every ADD: the gateway 10.244.1.1 is the next hop of the host route default via "
            "10.244.1.1 dev eth0") in f["evidence"]
    # The probe's scratch node has none of the node's addresses: its ADD passes there, and says only that
    out = doctor(skb, setup, "--probe", prefix=in_netns(node.ns))
    assert problems(out) == [("error", "pod-range-overlap")], out["problems"]
    assert find(out, "probe")[0]["what"].startswith("probe ADD ok in its scratch node only (the error above is about "
                                                    "this node)")
    assert node.state() == before and node.reaches("10.244.1.1")


@pytest.mark.kernel
def test_pod_range_overlapping_the_node_ipv6_and_a_range_that_does_not(skb, setup, node):
    ptp_pods(setup, {"subnet": "fd44::/64"})
    f = find(doctor(skb, setup, prefix=in_netns(node.ns)), "pod-range-overlap")[0]
    assert "eth0 has fd44::5/64" in f["evidence"] and "default via fd44::1 dev eth0" in f["evidence"]
    ptp_pods(setup, {"subnet": "10.66.0.0/24"}, {"subnet": "fd66::/64"})
    assert "pod-range-overlap" not in codes(doctor(skb, setup, prefix=in_netns(node.ns)))


# ---------------------------------------------------------------------------------------------------
# configuration errors, without --probe

def test_ptp_without_ipam(skb, setup):
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "ptp"}]})
    f = find(doctor(skb, setup), "config-invalid")[0]
    assert f["severity"] == "error" and f["what"] == 'ptp in network "pods" (10-pods.conflist) has no "ipam" section'
    assert '"ipam": {"type": "host-local"' in f["fix"]
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": {"ranges": [[{"subnet": "10.66.0.0/24"}]]}}]})
    f = find(doctor(skb, setup), "config-invalid")[0]
    assert f["what"] == 'ptp in network "pods" (10-pods.conflist) has an "ipam" without "type"'


@pytest.mark.parametrize("rng, reason", [
    ({"subnet": "10.66.0.0/33"}, "ipam.ranges[0][0].subnet '10.66.0.0/33' is not a network in CIDR notation"),
    ({"subnet": "10.66.0.5/24"}, "ipam.ranges[0][0].subnet 10.66.0.5/24 has host bits set: the network is 10.66.0.0/24"),
    ({"subnet": "10.66.0.0/31"}, "ipam.ranges[0][0].subnet 10.66.0.0/31 is too small"),
    ({"subnet": "fd66::/127"}, "ipam.ranges[0][0].subnet fd66::/127 is too small"),
    ({"subnet": "10.66.0.0/24", "gateway": "10.67.0.1"}, "ipam.ranges[0][0].gateway 10.67.0.1 is outside its subnet"),
    ({"subnet": "10.66.0.0/24", "rangeStart": "10.66.0.50", "rangeEnd": "10.66.0.20"},
     "ipam.ranges[0][0].rangeStart 10.66.0.50 is after its rangeEnd 10.66.0.20"),
    ({"subnet": "10.66.0.0/24", "rangeEnd": "10.66.1.9"}, "ipam.ranges[0][0].rangeEnd 10.66.1.9 is outside its subnet"),
])
def test_host_local_ranges_it_refuses(skb, setup, rng, reason):
    ptp_pods(setup, rng)
    f = find(doctor(skb, setup), "config-invalid")[0]
    assert f["what"] == 'host-local (IPAM of ptp) in network "pods" (10-pods.conflist) refuses its ranges'
    assert reason in f["evidence"], f["evidence"]


def test_a_range_host_local_refuses_is_one_finding_not_a_status_failure_too(skb, setup):
    """One cause, one finding: STATUS of a 1.1.0 network fails on the same host-local config error."""
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.66.0.0/32"}]],
                                 "dataDir": str(setup.tmp / "ipam")}}]})
    out = doctor(skb, setup)
    assert problems(out) == [("error", "config-invalid")], out["problems"]
    [status] = find(out, "status-failed")              # still shown, as a note that points at the cause
    assert status["severity"] == "note" and "config-invalid" in status["what"], status


def test_host_local_without_ranges_and_a_good_one(skb, setup):
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local"}}]})
    assert "no IP ranges specified" in find(doctor(skb, setup), "config-invalid")[0]["evidence"]
    ptp_pods(setup, {"subnet": "10.66.0.0/24", "rangeStart": "10.66.0.10", "gateway": "10.66.0.1"})
    assert problems(doctor(skb, setup)) == []


def in_mount_ns(*commands):
    """argv running ``commands`` (shell lines) then the rest of argv in a mount namespace of its own."""
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            " && ".join(list(commands) + ['exec "$@"']), "sh")


@pytest.mark.kernel
def test_data_dir_on_a_read_only_mount(skb, setup):
    data = setup.tmp / "ipam"
    data.mkdir()
    ptp_pods(setup, {"subnet": "10.66.0.0/24"}, data=data)
    ro = in_mount_ns(f"mount --bind {shlex.quote(str(data))} {shlex.quote(str(data))}",
                     f"mount -o remount,bind,ro {shlex.quote(str(data))}")
    out = doctor(skb, setup, prefix=ro)
    f = find(out, "config-invalid")[0]
    assert f["what"] == 'host-local\'s dataDir for network "pods" (10-pods.conflist) is on a read-only mount'
    assert f"{data}/pods (the mount of {data} is read-only)" in f["evidence"]
    out = doctor(skb, setup, "--probe", prefix=ro)
    assert problems(out) == [("error", "config-invalid")], json.dumps(out["problems"], indent=1)  # one cause
    assert not any(n["what"].startswith("probe ADD ok") for n in out["notes"]), out["notes"]
    assert any(n["code"] == "probe-failed" and "read-only" in n["evidence"].lower() for n in out["notes"]), out["notes"]


@pytest.mark.kernel
def test_data_dir_on_a_read_only_mount_is_one_finding_with_status_too(skb, setup):
    """At cniVersion 1.1.0 the doctor also runs STATUS, which fails on that mount (EROFS): the same cause."""
    data = setup.tmp / "ipam"
    data.mkdir()
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [{"type": "ptp", "ipam": {
        "type": "host-local", "ranges": [[{"subnet": "10.66.0.0/24"}]], "dataDir": str(data)}}]})
    ro = in_mount_ns(f"mount --bind {shlex.quote(str(data))} {shlex.quote(str(data))}",
                     f"mount -o remount,bind,ro {shlex.quote(str(data))}")
    out = doctor(skb, setup, prefix=ro)
    assert problems(out) == [("error", "config-invalid")], json.dumps(out["problems"], indent=1)
    status = find(out, "status-failed")[0]
    assert status["severity"] == "note" and "EROFS" in status["evidence"], status


def _reserve(setup, data, n, live):
    store = data / "pods"
    store.mkdir(parents=True)
    cache = libcni.CNIConfig([], str(setup.cache))
    res = libcni.cniresult.parse_result({"cniVersion": "1.0.0", "ips": [{"address": "10.66.0.2/29"}]})
    alive = "/proc/1/ns/net"      # a namespace that lives as long as the test does
    for i in range(n):
        (store / f"10.66.0.{2 + i}").write_text(f"c{i}\r\neth0")
        if i < live:
            cache.cache_add(res, b"{}", "pods", libcni.RuntimeConf(f"c{i}", alive, "eth0"))


def test_exhausted_range_is_an_error_naming_the_leaks(skb, setup):
    data = setup.tmp / "ipam"
    ptp_pods(setup, {"subnet": "10.66.0.0/29"}, data=data)       # .2-.6: five addresses besides the gateway
    _reserve(setup, data, 5, live=3)
    out = doctor(skb, setup)
    f = find(out, "range-exhausted")[0]
    assert f["severity"] == "error"
    assert f["what"] == 'host-local\'s range set ipam.ranges[0] (10.66.0.1-10.66.0.6) of network "pods" (10-pods.conflist) is exhausted'
    assert f["evidence"].startswith(f"all 5 addresses are reserved in {data}/pods; 2 of them leaked")
    assert "10.66.0.5 (container c3: no cached result)" in f["evidence"]
    # (a 1.0.0 network: skb gc sends its plugins no GC, so the fix is the files, as leaked-reservation's)
    assert f["fix"] == (f"GC needs cniVersion 1.1.0 (the network has 1.0.0); once the containers are confirmed "
                        f"gone: cd {data}/pods && rm -- 10.66.0.5 10.66.0.6"), f["fix"]
    assert "leaked-reservation" not in codes(out)                  # the same cause: in this finding


def test_exhausted_range_without_leaks(skb, setup):
    data = setup.tmp / "ipam"
    ptp_pods(setup, {"subnet": "10.66.0.0/29"}, data=data)
    _reserve(setup, data, 5, live=5)
    f = find(doctor(skb, setup), "range-exhausted")[0]
    assert "none of them is leaked" in f["evidence"] and f["fix"].startswith("give ipam.ranges[0] more addresses")
    (data / "pods" / "10.66.0.6").unlink()
    assert "range-exhausted" not in codes(doctor(skb, setup))


def test_exhausted_range_at_1_1_0_is_one_error_and_its_status_a_note(skb, setup):
    """STATUS answers 50 for the same exhausted range: a second error, whose fix said "often its daemon or its
    datastore is down" (review 16)."""
    data = setup.tmp / "ipam"
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [{"type": "ptp", "ipam": {
        "type": "host-local", "ranges": [[{"subnet": "10.66.0.0/29"}]], "dataDir": str(data)}}]})
    _reserve(setup, data, 5, live=5)
    out = doctor(skb, setup)
    assert problems(out) == [("error", "range-exhausted")], json.dumps(out["problems"], indent=1)
    status = find(out, "status-failed")[0]
    assert status["severity"] == "note" and "for the reason the range-exhausted error gives" in status["what"]


# ---------------------------------------------------------------------------------------------------
# plugins and where the runtime looks

def _pods_conflist(setup):
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.66.0.0/24"}]],
                                 "dataDir": str(setup.tmp / "ipam")}}]})


def test_plugin_that_is_a_dangling_symbolic_link(skb, setup, bin_dir):
    """It used to be reported as plugin-elsewhere, pointing at another implementation (/usr/lib/cni)."""
    bins = setup.tmp / "bin"
    bins.mkdir()
    os.symlink("/nonexistent/skb-cni/ptp", bins / "ptp")
    os.symlink(os.path.join(bin_dir, "host-local"), bins / "host-local")
    setup.bins = [str(bins)]
    _pods_conflist(setup)
    out = doctor(skb, setup)
    f = find(out, "plugin-dangling")[0]
    assert f["severity"] == "error" and f["what"] == 'plugin "ptp" (plugin) is a dangling symbolic link'
    assert f"{bins}/ptp -> /nonexistent/skb-cni/ptp (the target does not exist)" in f["evidence"]
    assert f["fix"].startswith("repair the link") and not [x for x in find(out, "plugin-dangling") if x is not f]
    assert "plugin-elsewhere" not in codes(out) and "plugin-missing" not in codes(out)
    setup.bins = [str(bins), bin_dir]                              # a later bin dir has one: a warning
    f = find(doctor(skb, setup), "plugin-dangling")[0]
    assert f["severity"] == "warning" and f["what"].endswith(f"runs {bin_dir}/ptp instead")


def test_plugins_installed_elsewhere_are_one_finding(skb, setup, bin_dir, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    _pods_conflist(setup)
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V2.format(bin=empty, conf=setup.conf), setup.tmp))
    out = doctor(skb, setup, dirs=False, env=dict(os.environ, CNI_PATH=bin_dir))
    f = find(out, "plugin-elsewhere")
    assert len(f) == 1 and f[0]["what"] == f'plugins "ptp", "host-local" are not where containerd looks: they are in {bin_dir}'
    assert f[0]["fix"].startswith("set bin_dir in") and f" to {bin_dir} (it holds one directory)" in f[0]["fix"]
    assert "install ptp host-local into" in f[0]["fix"]


@pytest.mark.kernel
def test_runtime_conf_dir_empty_while_etc_cni_net_d_holds_the_network(skb, setup, tmp_path):
    """containerd reads conf_dir /x (empty); the add-on wrote /etc/cni/net.d/10-pods.conflist: name both.
    /etc/cni/net.d is a bind mount of a temp dir, in a mount namespace of this test's own."""
    if not os.path.isdir(libcni.DEFAULT_CONF_DIR):
        pytest.skip(f"{libcni.DEFAULT_CONF_DIR} does not exist on this machine (nothing to mount over)")
    default = tmp_path / "default-net.d"
    default.mkdir()
    (default / "10-pods.conflist").write_text(json.dumps(lo_conflist("pods")))
    empty = tmp_path / "empty-net.d"
    empty.mkdir()
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V2.format(bin=setup.bins[0], conf=empty), setup.tmp))
    prefix = in_mount_ns(f"mount --bind {shlex.quote(str(default))} {libcni.DEFAULT_CONF_DIR}")
    out = doctor(skb, setup, dirs=False, prefix=prefix)
    f = find(out, "no-config")
    assert len(f) == 1 and f[0]["what"] == f"no network configuration in {empty}"
    assert f"{libcni.DEFAULT_CONF_DIR} holds 10-pods.conflist, but containerd reads {empty}" in f[0]["evidence"]
    assert f[0]["fix"].startswith(f'point conf_dir in [plugins."io.containerd.grpc.v1.cri".cni] of {setup.containerd} at '
                                  f"{libcni.DEFAULT_CONF_DIR} and restart containerd")
    empty.rmdir()                                                  # the same when the directory does not exist
    f = find(doctor(skb, setup, dirs=False, prefix=prefix), "no-config")[0]
    assert "does not exist" in f["what"] and "holds 10-pods.conflist" in f["evidence"]


# ---------------------------------------------------------------------------------------------------
# --probe: what the kernel does as a side effect of forwarding is not something the network needs

@pytest.mark.kernel
@pytest.mark.parametrize("forwarding", [0, 1])
def test_probe_does_not_report_accept_redirects(skb, setup, make_netns, forwarding):
    """Switching IPv4 forwarding on clears net.ipv4.conf.all.accept_redirects (the kernel's doing): the
    probe used to report "needs net.ipv4.conf.all.accept_redirects = 0" whenever the node had forwarding
    off, or had it on with accept_redirects on."""
    _pods_conflist(setup)
    ns = make_netns()
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    sysctl(ns, "net.ipv4.ip_forward", forwarding)
    sysctl(ns, "net.ipv4.conf.all.accept_redirects", 1)
    out = doctor(skb, setup, "--probe", prefix=in_netns(ns))
    assert not [f for f in out["all"] if "accept_redirects" in f["what"] + f["evidence"]], out["all"]
    assert "probe-needs" not in codes(out)
    assert ("forwarding-off" in codes(out, "error")) == (forwarding == 0)
    assert find(out, "probe")[0]["what"].startswith("probe ADD ok")


def test_an_entry_named_like_an_address_that_is_no_file_fills_the_range_too(skb, setup):
    """host-local takes such an entry as used; the doctor skipped it, and said "no problems found" with
    --no-status while every ADD failed with code 100 (review 15)."""
    data = setup.tmp / "ipam"
    ptp_pods(setup, {"subnet": "10.66.0.0/29"}, data=data)
    _reserve(setup, data, 4, live=4)
    os.mkfifo(data / "pods" / "10.66.0.6")
    out = doctor(skb, setup, "--no-status")
    f = find(out, "range-exhausted")[0]
    assert f"10.66.0.6 (container (none): not a reservation file the doctor can read" in f["evidence"], f
    assert f"cd {data}/pods && rm -- 10.66.0.6" in f["fix"], f
