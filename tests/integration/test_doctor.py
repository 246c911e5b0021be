"""skb doctor: every diagnosis, each from a broken set-up built in temp dirs (and, for the node checks,
in sandbox namespaces). Runtime configuration paths are always given, so the machine's /etc is never read."""
import json
import os
import shutil
import subprocess

import pytest

from skb.tool import libcni
from tests.helpers import GO_BIN_DIR

HOST_LOCAL_POD = {"type": "host-local", "subnet": "10.66.0.0/24"}


@pytest.fixture
def skb(bin_dir):
    return os.path.join(bin_dir, "skb")


class Setup:
    def __init__(self, tmp_path, bin_dir):
        self.tmp = tmp_path
        self.conf = tmp_path / "net.d"
        self.conf.mkdir()
        self.bins = [bin_dir]
        self.cache = tmp_path / "cache"
        self.containerd = ""
        self.crio = ""
        self.crio_dir = ""

    def write(self, name, obj, where=None):
        path = (where or self.conf) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(obj if isinstance(obj, str) else json.dumps(obj, indent=2))
        return path

    def args(self, *extra, dirs=True):
        out = [f"--containerd-config={self.containerd}", f"--crio-config={self.crio}",
               f"--crio-config-dir={self.crio_dir}", "--cache-dir", str(self.cache), *extra]
        if dirs:
            out = ["--conf-dir", str(self.conf), "--bin-dir", ":".join(self.bins)] + out
        return out


@pytest.fixture
def setup(tmp_path, bin_dir):
    return Setup(tmp_path, bin_dir)


def doctor(skb, setup, *extra, dirs=True, prefix=(), env=None, timeout=180):
    p = subprocess.run([*prefix, skb, "doctor", "--json", *setup.args(*extra, dirs=dirs)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert "Traceback" not in p.stderr, p.stderr
    out = json.loads(p.stdout)
    out["rc"] = p.returncode
    out["all"] = out["problems"] + out["notes"]
    return out


def codes(out, severity=None):
    return [f["code"] for f in out["all"] if severity in (None, f["severity"])]


def find(out, code):
    found = [f for f in out["all"] if f["code"] == code]
    assert found, f"no {code} finding in {json.dumps(out['all'], indent=1)}"
    return found


def lo_conflist(name="lo-net", version="1.0.0"):
    return {"cniVersion": version, "name": name, "plugins": [{"type": "loopback"}]}


# ---------------------------------------------------------------------------------------------------
# a healthy node, and the report format

def test_healthy_setup_has_no_problems(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    out = doctor(skb, setup)
    assert out["rc"] == 0 and out["problems"] == [], out["problems"]
    note = find(out, "default-network")[0]
    assert note["what"] == 'pod network: "lo-net" from 10-lo.conflist'
    assert out["checked"] == [{"source": "flags", "confDir": str(setup.conf), "binDirs": setup.bins,
                               "defaultNetwork": "", "origin": "--conf-dir/--bin-dir"}]


def test_text_report_is_one_line_per_problem_then_a_summary(skb, setup):
    setup.write("10-a.conflist", {"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "nosuch"}]})
    setup.write("20-b.conflist", "{,}")
    p = subprocess.run([skb, "doctor", *setup.args()], capture_output=True, text=True)
    lines = p.stdout.splitlines()
    assert p.returncode == 1
    problems = [line for line in lines if line.startswith(("error", "warning"))]
    assert len(problems) == 2
    assert all("| evidence:" in line and "| fix:" in line for line in problems)
    assert lines[-1].startswith("skb doctor: 2 errors, 0 warnings") and str(setup.conf) in lines[-1]


# ---------------------------------------------------------------------------------------------------
# the conf dir

def test_no_config_dir(skb, setup):
    setup.conf.rmdir()
    out = doctor(skb, setup)
    f = find(out, "no-config")[0]
    assert out["rc"] == 1 and f["severity"] == "error" and "does not exist" in f["what"]


def test_no_config_file(skb, setup):
    setup.write("README", "nothing to see")
    out = doctor(skb, setup)
    f = find(out, "no-config")[0]
    assert f["what"] == f"no network configuration in {setup.conf}"
    assert "README" in f["evidence"] and "cni config uninitialized" in f["evidence"]


def test_conflist_under_a_wrong_extension(skb, setup):
    setup.write("10-pods.yaml", lo_conflist("pods"))
    setup.write("20-old.conflist.bak", lo_conflist("old"))
    setup.write("30-lo.conflist", lo_conflist())
    out = doctor(skb, setup)
    wrong = {f["where"].rsplit("/", 1)[1]: f for f in find(out, "wrong-extension")}
    assert wrong["10-pods.yaml"]["severity"] == "warning" and "rename it to 10-pods.conflist" in wrong["10-pods.yaml"]["fix"]
    assert wrong["20-old.conflist.bak"]["severity"] == "note"   # a backup: worth knowing, not a problem


def test_the_only_config_under_a_wrong_extension_is_one_finding_with_the_right_name(skb, setup):
    """10-pods.conflist.yaml was a wrong-extension warning saying "rename it to 10-pods.conflist.conflist",
    and a no-config error besides, for the one cause (review 16)."""
    setup.write("10-pods.conflist.yaml", lo_conflist("pods"))
    out = doctor(skb, setup)
    assert "wrong-extension" not in codes(out)
    f = find(out, "no-config")[0]
    assert f["what"] == f"no network configuration in {setup.conf}: 10-pods.conflist.yaml is ignored for its extension"
    # (" (or point ... at /etc/cni/net.d)" follows on a machine whose /etc/cni/net.d holds configurations)
    assert f["fix"].split(" (or ")[0] == f"mv -n -- {setup.conf}/10-pods.conflist.yaml {setup.conf}/10-pods.conflist", f["fix"]
    subprocess.run(f["fix"].split(" (or ")[0], shell=True, check=True)           # as printed
    out = doctor(skb, setup)
    assert "no-config" not in codes(out) and "wrong-extension" not in codes(out), out


def test_conflist_in_a_conf_file(skb, setup):
    setup.write("10-pods.conf", lo_conflist("pods"))
    out = doctor(skb, setup)
    f = find(out, "wrong-extension")[0]
    assert f["severity"] == "error" and "missing 'type'" in f["evidence"] and "10-pods.conflist" in f["fix"]


def test_conflist_without_plugins(skb, setup):
    setup.write("10-single.conflist", {"cniVersion": "1.0.0", "name": "single", "type": "loopback"})
    out = doctor(skb, setup)
    f = find(out, "no-plugins")[0]
    assert f["severity"] == "error"
    assert "no 'plugins' key" in f["evidence"] and "no plugin configs found" in f["evidence"]
    assert "10-single.conf" in f["fix"]


def test_conflist_with_plugins_in_its_subdirectory_is_fine(skb, setup):
    setup.write("10-agg.conflist", {"cniVersion": "1.0.0", "name": "agg"})
    setup.write("agg/10-lo.conf", {"type": "loopback"})
    out = doctor(skb, setup)
    assert out["problems"] == []


def test_invalid_json_with_line_and_column(skb, setup):
    setup.write("10-pods.conflist", '{\n  "cniVersion": "1.0.0",\n  "name": "pods",\n  "plugins": [{"type": "loopback"}],\n}\n')
    out = doctor(skb, setup)
    f = find(out, "invalid-json")[0]
    assert f["severity"] == "error" and f["what"] == "10-pods.conflist is not valid JSON"
    assert f["evidence"].startswith("line 4, column 36: trailing comma after the last key (JSON allows none)")
    assert f["fix"] == f"fix line 4 of {setup.conf}/10-pods.conflist"


def test_other_load_errors_use_libcnis_words(skb, setup):
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [{"ipam": {}}]})
    f = find(doctor(skb, setup), "load-error")[0]
    assert f["evidence"] == "failed to parse plugin config 0: error parsing configuration: missing 'type'"


def test_which_file_wins_and_which_are_shadowed(skb, setup):
    setup.write("05-pods.conf", {"cniVersion": "1.0.0", "name": "pods", "type": "loopback"})
    setup.write("10-pods.conflist", lo_conflist("pods"))
    setup.write("20-other.conflist", lo_conflist("other"))
    out = doctor(skb, setup)
    assert find(out, "default-network")[0]["what"] == 'pod network: "pods" from 05-pods.conf'
    shadowed = find(out, "shadowed")
    warning = [f for f in shadowed if f["severity"] == "warning"]
    assert len(warning) == 1 and warning[0]["what"].startswith("05-pods.conf is shadowed")  # .conflist first
    several = find(out, "several-networks")[0]
    assert several["severity"] == "warning" and out["rc"] == 1
    assert several["what"] == (f'2 networks are configured in {setup.conf}: pods get only "pods" (05-pods.conf), '
                               "the others are ignored")
    assert 'ignored: 20-other.conflist ("other")' in several["evidence"] and "podman reads all" in several["evidence"]


# ---------------------------------------------------------------------------------------------------
# plugins

def test_plugin_missing(skb, setup):
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "nosuch"}, {"type": "loopback", "ipam": {"type": "no-ipam"}}]})
    out = doctor(skb, setup)
    missing = find(out, "plugin-missing")
    assert [f["what"] for f in missing] == ['plugin "nosuch" (plugin) is not installed',
                                            'plugin "no-ipam" (IPAM of loopback) is not installed']
    assert missing[0]["evidence"].startswith(f'failed to find plugin "nosuch" in path [{setup.bins[0]}]')


def test_plugin_not_executable(skb, setup, tmp_path):
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "tool").write_text("#!/bin/sh\n")
    (bins / "tool").chmod(0o644)
    setup.bins = [str(bins)]
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "tool"}]})
    f = find(doctor(skb, setup), "plugin-not-executable")[0]
    assert f["fix"] == f"chmod 755 {bins}/tool" and "0o644" in f["evidence"]


def _fake_plugin(d, name, script):
    d.mkdir(exist_ok=True)
    path = d / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def test_version_unsupported(skb, setup, tmp_path):
    _fake_plugin(tmp_path / "bin", "old", 'echo \'{"cniVersion":"0.4.0","supportedVersions":["0.3.1","0.4.0"]}\'\n')
    setup.bins.append(str(tmp_path / "bin"))
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "old"}]})
    f = find(doctor(skb, setup), "version-unsupported")[0]
    assert f["what"].startswith('plugin old does not support config version "1.0.0"')
    assert "['0.3.1', '0.4.0']" in f["evidence"] and "0.4.0" in f["fix"]
    assert "version-unsupported" not in codes(doctor(skb, setup, "--no-version"))


def test_version_failed(skb, setup, tmp_path):
    _fake_plugin(tmp_path / "bin", "broken", "echo garbage; exit 1\n")
    setup.bins.append(str(tmp_path / "bin"))
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "broken"}]})
    f = find(doctor(skb, setup), "version-failed")[0]
    assert "error parsing its diagnostic message" in f["evidence"] and "podman and CRI-O (which validate every plugin with VERSION) drop" in f["evidence"]


@pytest.mark.gobin
def test_go_plugin_that_predates_1_1_0(skb, setup):
    setup.bins = [GO_BIN_DIR]
    setup.write("10-pods.conflist", lo_conflist("pods", "1.1.0"))
    f = find(doctor(skb, setup), "version-unsupported")[0]
    assert f["what"].startswith('plugin loopback does not support config version "1.1.0"')
    setup.write("10-pods.conflist", lo_conflist("pods", "1.0.0"))
    assert "version-unsupported" not in codes(doctor(skb, setup))


# ---------------------------------------------------------------------------------------------------
# where runtimes look

CONTAINERD_V2 = """version = 2
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{bin}"
  conf_dir = "{conf}"
"""
CONTAINERD_V3 = """version = 3
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{bin}", "/usr/lib/cni"]
  conf_dir = "{conf}"
"""


def test_dirs_from_containerd_config(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V2.format(bin=setup.bins[0], conf=setup.conf),
                                       setup.tmp))
    out = doctor(skb, setup, dirs=False)
    assert out["checked"][0]["source"] == "containerd" and out["checked"][0]["confDir"] == str(setup.conf)
    assert out["checked"][0]["binDirs"] == setup.bins and out["rc"] == 0
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V3.format(bin=setup.bins[0], conf=setup.conf),
                                       setup.tmp))
    assert doctor(skb, setup, dirs=False)["checked"][0]["binDirs"] == [setup.bins[0], "/usr/lib/cni"]


def test_containerd_and_crio_disagree(skb, setup, tmp_path):
    other = tmp_path / "crio-net.d"
    other.mkdir()
    setup.write("10-lo.conflist", lo_conflist())
    setup.write("10-lo.conflist", lo_conflist(), other)
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V2.format(bin=setup.bins[0], conf=setup.conf),
                                       setup.tmp))
    crio_dir = tmp_path / "crio.conf.d"
    setup.crio = str(setup.write("crio.conf", '[crio.network]\nnetwork_dir = "/etc/cni/net.d/"\n', tmp_path))
    setup.write("10-net.conf", f'[crio.network]\nnetwork_dir = "{other}/"\nplugin_dirs = ["{setup.bins[0]}/"]\n',
                crio_dir)   # the drop-in overrides crio.conf
    setup.crio_dir = str(crio_dir)
    out = doctor(skb, setup, dirs=False)
    f = find(out, "runtime-dirs-disagree")
    assert len(f) == 1 and f[0]["what"] == f"containerd reads CNI configs from {setup.conf} but CRI-O from {other}/"
    assert "crio.conf.d/10-net.conf" in f[0]["evidence"]
    assert [v["source"] for v in out["checked"]] == ["containerd", "CRI-O"]


def test_flags_that_differ_from_the_runtime(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V2.format(bin="/opt/cni/bin", conf="/etc/cni/net.d"),
                                       setup.tmp))
    out = doctor(skb, setup)
    whats = [f["what"] for f in find(out, "runtime-dirs-disagree")]
    assert f"flags reads CNI configs from {setup.conf} but containerd from /etc/cni/net.d" in whats
    assert any("runs plugins from" in w for w in whats)


def test_crio_default_network_by_name(skb, setup, tmp_path):
    setup.write("10-lo.conflist", lo_conflist())
    setup.write("20-pods.conflist", lo_conflist("pods"))
    setup.crio = str(setup.write("crio.conf", f'[crio.network]\nnetwork_dir = "{setup.conf}"\nplugin_dirs = '
                                              f'["{setup.bins[0]}"]\ncni_default_network = "pods"\n', tmp_path))
    out = doctor(skb, setup, dirs=False)
    assert find(out, "default-network")[0]["what"] == 'pod network: "pods" from 20-pods.conflist'
    setup.write("crio.conf", f'[crio.network]\nnetwork_dir = "{setup.conf}"\nplugin_dirs = ["{setup.bins[0]}"]\n'
                             'cni_default_network = "nope"\n', tmp_path)
    f = find(doctor(skb, setup, dirs=False), "no-config")[0]
    assert f["what"] == 'CRI-O wants the network "nope" and no file defines it'


def test_unparseable_runtime_config(skb, setup):
    """containerd does not start with it: an error, and the only one (no other directories are guessed at)."""
    setup.write("10-lo.conflist", lo_conflist())
    setup.containerd = str(setup.write("config.toml", "version = = 2\n", setup.tmp))
    assert find(doctor(skb, setup), "runtime-config-invalid")[0]["severity"] == "error"
    out = doctor(skb, setup, dirs=False)
    assert [f["code"] for f in out["problems"]] == ["runtime-config-invalid"] and out["checked"] == []
    assert "containerd does not start with it" in out["problems"][0]["evidence"] and out["rc"] == 1


# ---------------------------------------------------------------------------------------------------
# the node (in sandbox namespaces: a fresh netns stands for a broken node)

def in_netns(ns):
    return ("ip", "netns", "exec", ns)


@pytest.mark.kernel
def test_host_lo_down(skb, setup, make_netns):
    setup.write("10-lo.conflist", lo_conflist())
    ns = make_netns()          # its lo starts DOWN: the node after a bad loopback DEL
    f = find(doctor(skb, setup, prefix=in_netns(ns)), "host-lo-down")[0]
    assert f["severity"] == "error" and f["fix"].startswith("ip link set lo up")
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    assert "host-lo-down" not in codes(doctor(skb, setup, prefix=in_netns(ns)))


def sysctl(ns, name, value):
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{name}={value}"], check=True)


@pytest.mark.kernel
def test_forwarding_off_and_strict_rp_filter(skb, setup, make_netns):
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": dict(HOST_LOCAL_POD, ranges=[[{"subnet": "fd66::/64"}]])}]})
    ns = make_netns()
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    sysctl(ns, "net.ipv4.ip_forward", 0)
    sysctl(ns, "net.ipv6.conf.all.forwarding", 0)
    sysctl(ns, "net.ipv4.conf.all.rp_filter", 1)
    out = doctor(skb, setup, prefix=in_netns(ns))
    fwd = find(out, "forwarding-off")
    assert [f["what"] for f in fwd] == ["IPv4 forwarding is off on the node", "IPv6 forwarding is off on the node"]
    rp = find(out, "rp-filter-strict")[0]
    # a node on no network but its pods': ptp's traffic passes strict filtering (README): a note, not a warning
    assert rp["severity"] == "note" and "net.ipv4.conf.all.rp_filter = 1" in rp["evidence"], rp
    assert "ptp's own traffic passes it" in rp["evidence"] and rp["fix"].startswith("nothing"), rp
    # a pod on two routed networks: its replies from the second one leave by the first one's veth
    def pods2(subnet):
        setup.write("11-pods2.conflist", {"cniVersion": "1.0.0", "name": "pods2", "plugins": [
            {"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]]}}]})
    pods2("10.67.0.0/24")
    cache = libcni.CNIConfig([], str(setup.cache))
    res = libcni.cniresult.parse_result({"cniVersion": "1.0.0"})
    for net, ifname in (("pods", "eth0"), ("pods2", "net1")):
        cache.cache_add(res, b"{}", net, libcni.RuntimeConf("two-homed", "/run/netns/x", ifname))
    rp = find(doctor(skb, setup, prefix=in_netns(ns)), "rp-filter-strict")[0]
    assert rp["severity"] == "warning" and "pod two-homed on several routed networks" in rp["evidence"], rp
    pods2("fd67::/64")      # an IPv6-only second network: rp_filter is IPv4's only
    assert find(doctor(skb, setup, prefix=in_netns(ns)), "rp-filter-strict")[0]["severity"] == "note"
    shutil.rmtree(setup.cache / "results")
    # a node with two uplinks (any prefix, /32 too): a reply may leave by another one than its request came in by
    for i, prefix in ((1, 24), (2, 32)):
        subprocess.run(["ip", "-n", ns, "link", "add", f"home{i}", "type", "veth", "peer", "name", f"home{i}p"],
                       check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", f"10.7{i}.0.2/{prefix}", "dev", f"home{i}"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", f"home{i}", "up"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", f"home{i}p", "up"], check=True)
        rp = find(doctor(skb, setup, prefix=in_netns(ns)), "rp-filter-strict")[0]
        assert rp["severity"] == ("warning" if i == 2 else "note"), rp
    assert "several uplinks (home1, home2)" in rp["evidence"] and "rp_filter=2" in rp["fix"], rp
    subprocess.run(["ip", "-n", ns, "link", "add", "cni0", "type", "bridge"], check=True)   # not an uplink
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.88.0.1/16", "dev", "cni0"], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "cni0", "up"], check=True)
    rp = find(doctor(skb, setup, prefix=in_netns(ns)), "rp-filter-strict")[0]
    assert "several uplinks (home1, home2)" in rp["evidence"], rp
    # ... but a bridge with a port of the node's own (a NIC, here a veth whose peer stays on the node) is one
    subprocess.run(["ip", "-n", ns, "link", "add", "nic0", "type", "veth", "peer", "name", "nic0p"], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "nic0", "master", "cni0", "up"], check=True)
    rp = find(doctor(skb, setup, prefix=in_netns(ns)), "rp-filter-strict")[0]
    assert "several uplinks (cni0, home1, home2)" in rp["evidence"], rp
    sysctl(ns, "net.ipv4.ip_forward", 1)
    sysctl(ns, "net.ipv6.conf.all.forwarding", 1)
    sysctl(ns, "net.ipv4.conf.all.rp_filter", 2)
    out = doctor(skb, setup, prefix=in_netns(ns))
    assert not {"forwarding-off", "rp-filter-strict"} & set(codes(out))
    # an uplink's own strict setting drops the same replies (the kernel takes the larger of all and the
    # interface): review 15 found the doctor silent with all = 0 and home2's = 1
    sysctl(ns, "net.ipv4.conf.all.rp_filter", 0)
    sysctl(ns, "net.ipv4.conf.home2.rp_filter", 1)
    rp = find(doctor(skb, setup, prefix=in_netns(ns)), "rp-filter-strict")[0]
    assert rp["severity"] == "warning" and "net.ipv4.conf.home2.rp_filter = 1 (an uplink)" in rp["evidence"], rp


@pytest.mark.kernel
def test_rp_filter_on_a_pods_host_side_interface(skb, setup, make_netns):
    """The host-side interface is read from the cached result of an attachment."""
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": HOST_LOCAL_POD}]})
    ns = make_netns()
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "-n", ns, "link", "add", "vethabc", "type", "veth", "peer", "name", "vethabc-p"], check=True)
    sysctl(ns, "net.ipv4.ip_forward", 1)
    sysctl(ns, "net.ipv4.conf.vethabc.rp_filter", 1)
    cache = libcni.CNIConfig([], str(setup.cache))
    res = libcni.cniresult.parse_result({"cniVersion": "1.0.0", "interfaces": [{"name": "vethabc"},
                                         {"name": "eth0", "sandbox": "/run/netns/x"}]})
    cache.cache_add(res, b"{}", "pods", libcni.RuntimeConf("c1", "/run/netns/x", "eth0"))
    rp = find(doctor(skb, setup, prefix=in_netns(ns)), "rp-filter-strict")[0]
    assert "net.ipv4.conf.vethabc.rp_filter = 1 (host side of a pod)" in rp["evidence"]


def test_routing_is_not_checked_without_routed_networks(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    assert not {"forwarding-off", "rp-filter-strict"} & set(codes(doctor(skb, setup)))


# ---------------------------------------------------------------------------------------------------
# leaked host-local reservations

def _store(setup, network, version, data):
    setup.write("10-pods.conflist", {"cniVersion": version, "name": network, "plugins": [
        {"type": "ptp", "ipam": dict(HOST_LOCAL_POD, dataDir=str(data))}]})
    store = data / network
    store.mkdir(parents=True)
    (store / "lock").write_text("")
    (store / "last_reserved_ip.0").write_text("10.66.0.4")
    live = "/proc/1/ns/net"      # a namespace that lives as long as the test does
    stale = setup.tmp / "stale-netns"
    stale.write_text("")        # what a namespace mounted on a file leaves when it goes (a crash, a reboot)
    cni = libcni.CNIConfig([], str(setup.cache))
    res = libcni.cniresult.parse_result({"cniVersion": "1.0.0", "ips": [{"address": "10.66.0.3/24"}]})
    for ip, cid, netns in [("10.66.0.2", "no-cache", None), ("10.66.0.3", "alive", live),
                           ("10.66.0.4", "dead", str(setup.tmp / "gone-netns")), ("10.66.0.5", "stale", str(stale))]:
        (store / ip).write_text(f"{cid}\r\neth0")
        if netns:
            cni.cache_add(res, b"{}", network, libcni.RuntimeConf(cid, netns, "eth0"))
    (store / "10.66.0.9").write_text("legacy-id")   # the old format: container id only
    return store


def test_leaked_reservations_and_the_gc_fix(skb, setup):
    store = _store(setup, "pods", "1.1.0", setup.tmp / "ipam")
    f = find(doctor(skb, setup), "leaked-reservation")[0]
    assert f["severity"] == "warning" and f["what"] == '4 leaked host-local reservations in network "pods"'
    assert "10.66.0.2 (container no-cache, eth0: no cached result)" in f["evidence"]
    assert f"10.66.0.4 (container dead, eth0: netns {setup.tmp}/gone-netns is gone)" in f["evidence"]
    assert f"10.66.0.5 (container stale, eth0: netns {setup.tmp}/stale-netns is gone)" in f["evidence"]
    assert "10.66.0.9 (container legacy-id, no ifname: no cached result)" in f["evidence"]
    assert "10.66.0.3" not in f["evidence"] and str(store) in f["evidence"]
    assert f["fix"].startswith("skb gc pods --keep-live")


def test_leak_fix_without_gc_support_names_the_files(skb, setup):
    store = _store(setup, "pods", "1.0.0", setup.tmp / "ipam")
    f = find(doctor(skb, setup), "leaked-reservation")[0]
    assert f["fix"].startswith(f"skb gc pods --keep-live --conf-dir {setup.conf} --cni-path {':'.join(setup.bins)} "
                               f"--cache-dir {setup.cache} DELs those with a gone netns; GC of the others needs "
                               "cniVersion 1.1.0"), f["fix"]
    assert f"cd {store} && rm -- 10.66.0.2 10.66.0.9" in f["fix"]


def test_leaks_with_an_empty_cache_are_not_fixed_by_a_gc_that_refuses(skb, setup):
    """Review 16: with no cached attachment at all the fix was skb gc --keep-live, which refuses such a cache
    (it would free the live pods' addresses too)."""
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": dict(HOST_LOCAL_POD, dataDir=str(setup.tmp / "ipam"))}]})
    store = setup.tmp / "ipam" / "pods"
    store.mkdir(parents=True)
    (store / "10.66.0.2").write_text("gone\r\neth0")
    f = find(doctor(skb, setup), "leaked-reservation")[0]
    assert "skb gc" not in f["fix"], f["fix"]
    assert f["fix"].startswith(f"{setup.cache}/results holds no cached attachment, so nothing here tells live pods "
                               "from dead ones: if the runtime keeps its libcni cache elsewhere, run skb doctor "
                               "--cache-dir DIR"), f["fix"]
    assert f["fix"].endswith(f"once the containers are confirmed gone: cd {store} && rm -- 10.66.0.2"), f["fix"]


@pytest.mark.kernel
def test_skb_gc_as_the_doctor_says_frees_the_leaks(skb, setup):
    """The fix is run as printed (plus the bin dir): review 15 found it left out the conf dir and the cache
    dir the doctor read, and `skb gc --keep-live` with an empty cache then freed the live pods' addresses."""
    import shlex
    _store(setup, "pods", "1.1.0", setup.tmp / "ipam")
    fix = find(doctor(skb, setup), "leaked-reservation")[0]["fix"]
    command = shlex.split(fix.split(" (", 1)[0])
    assert command[:4] == ["skb", "gc", "pods", "--keep-live"] and "--cache-dir" in command, fix
    assert "--cni-path" in command and "--conf-dir" in command, fix
    # the same gc with a cache dir that is not the runtime's (as skb gc's default was here) refuses
    p = subprocess.run([skb, *command[1:command.index("--cache-dir")], "--cache-dir", str(setup.tmp / "elsewhere")],
                       capture_output=True, text=True, env={"PATH": os.environ["PATH"], "CNI_PATH": "/nowhere"})
    assert p.returncode == 1 and "holds no cached attachment at all" in p.stderr and "--cache-dir" in p.stderr, p
    assert sorted(f for f in os.listdir(setup.tmp / "ipam" / "pods") if f.startswith("10.")) == \
        ["10.66.0.2", "10.66.0.3", "10.66.0.4", "10.66.0.5", "10.66.0.9"]
    p = subprocess.run([skb, *command[1:]], capture_output=True, text=True,   # as printed, whatever the env says
                       env={"PATH": os.environ["PATH"], "CNI_PATH": "/nowhere", "NETCONFPATH": "/nowhere"})
    assert p.returncode == 0, p.stderr
    assert "leaked-reservation" not in codes(doctor(skb, setup))
    left = sorted(f for f in os.listdir(setup.tmp / "ipam" / "pods") if f.startswith("10."))
    assert left == ["10.66.0.3"]


# ---------------------------------------------------------------------------------------------------
# --probe (scratch netns in the sandbox)

def probe(skb, setup, *extra):
    return doctor(skb, setup, "--probe", *extra)


def _netns_names():
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


@pytest.mark.kernel
def test_probe_ok_with_ptp_and_host_local(skb, setup):
    data = setup.tmp / "ipam"
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": dict(HOST_LOCAL_POD, dataDir=str(data))}, {"type": "loopback"}]})
    before = _netns_names()
    out = probe(skb, setup)
    note = find(out, "probe")[0]
    assert note["what"] == "probe ADD ok: eth0 got 10.66.0.2/24"
    assert "probe-no-ip" not in codes(out) and "probe-failed" not in codes(out)
    assert not data.exists()                      # the store lives in the probe's own overlay, never on the node
    assert _netns_names() == before               # the scratch netns is gone
    assert not setup.cache.exists()               # the probe keeps its cache to itself


@pytest.mark.kernel
@pytest.mark.parametrize("result", [
    None,                                                             # debug alone: no IP at all
    {"cniVersion": "1.0.0", "interfaces": [{"name": "veth1"}, {"name": "eth0", "sandbox": "/x"}],
     "ips": [{"address": "10.66.0.2/24", "interface": 0}]},          # the address is on the host side
    {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}], "ips": [{"address": "10.66.0.2/24", "interface": 3}]},
])
def test_probe_result_without_an_ip_on_eth0(skb, setup, result):
    plugin = {"type": "debug"}
    if result:
        plugin["inject"] = {"ADD": {"result": result}}
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [plugin]})
    f = find(probe(skb, setup), "probe-no-ip")[0]
    assert f["severity"] == "error" and "failed to find network info for sandbox" in f["evidence"]


@pytest.mark.kernel
def test_probe_ip_without_interface_index_counts_for_eth0(skb, setup):
    """go-cni files an address with no interface index under the default interface."""
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "debug", "inject": {"ADD": {"result": {"cniVersion": "1.0.0",
                                                        "ips": [{"address": "10.66.0.7/24"}]}}}}]})
    out = probe(skb, setup)
    assert find(out, "probe")[0]["what"] == "probe ADD ok: eth0 got 10.66.0.7/24"
    out = probe(skb, setup, "--probe-ifname", "net1")
    assert find(out, "probe")[0]["what"] == "probe ADD ok: net1 got 10.66.0.7/24"


@pytest.mark.kernel
def test_probe_add_failure_and_cri_args(skb, setup):
    cap = setup.tmp / "cap.jsonl"
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "debug", "captureFile": str(cap),
         "inject": {"ADD": {"error": {"code": 11, "msg": "no IPs left"}}}}]})
    before = _netns_names()
    f = find(probe(skb, setup), "probe-failed")[0]
    assert f["what"].startswith("ADD of the pod network fails") and "no IPs left" in f["evidence"]
    # the probe's calls go into none of the runtime's call logs (review 15); what they were, DEL after the
    # failed ADD and CRI's arguments: test_replay_safety.py::test_doctor_probe_adds_with_cri_args_...
    assert not cap.exists()
    assert _netns_names() == before


def test_probe_without_a_loadable_network(skb, setup):
    """The conf dir's finding says why; the probe adds a note, not a second error for the same cause."""
    setup.write("10-pods.conflist", "{")
    out = doctor(skb, setup, "--probe")
    f = find(out, "probe-skipped")[0]
    assert f["severity"] == "note" and f["what"] == "the probe did not run: no pod network to probe"
    assert "probe-failed" not in codes(out) and "invalid-json" in codes(out, "error")


# ---------------------------------------------------------------------------------------------------
# --probe never changes the node (the sandbox host stands for it; read independently with ip and /proc)

def _node_state():
    def ip(*args):
        return json.loads(subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout)
    sysctls = {}
    for name in ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/forwarding",
                 "net/ipv4/conf/default/forwarding", "net/ipv4/conf/all/rp_filter"):
        with open("/proc/sys/" + name) as f:
            sysctls[name] = f.read().strip()
    nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    return {"sysctls": sysctls, "links": ip("link", "show"), "addrs": ip("addr", "show"),
            "routes": ip("route", "show", "table", "all"), "netns": _netns_names(),
            "nat": [line for line in nat.splitlines() if not line.startswith("#")]}


@pytest.mark.kernel
def test_probe_never_changes_the_node(skb, setup):
    """ptp switches IPv4 forwarding on at ADD: the probe's ADD does it in its scratch node only, and the
    doctor reports that the node would need it."""
    data = setup.tmp / "ipam"
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipMasq": True, "ipam": dict(HOST_LOCAL_POD, dataDir=str(data))}]})
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        saved = f.read().strip()
    subprocess.run(["sysctl", "-qw", "net.ipv4.ip_forward=0"], check=True)
    try:
        before = _node_state()
        out = probe(skb, setup)
        after = _node_state()
    finally:
        subprocess.run(["sysctl", "-qw", f"net.ipv4.ip_forward={saved}"], check=True)
    assert after == before
    assert not data.exists()
    assert find(out, "probe")[0]["what"] == "probe ADD ok: eth0 got 10.66.0.2/24"
    fwd = find(out, "forwarding-off")[0]
    assert fwd["what"] == "IPv4 forwarding is off on the node" and fwd["severity"] == "error"
    assert "switched net.ipv4.ip_forward from 0 to 1 in its scratch node; on the node it is 0" in fwd["evidence"]
    assert "pods would get no traffic beyond the node" in fwd["evidence"] and out["rc"] == 1
    assert "probe-leftover" not in codes(out)


@pytest.mark.kernel
def test_probe_keeps_existing_reservations_untouched(skb, setup):
    data = setup.tmp / "ipam"
    store = data / "pods"
    store.mkdir(parents=True)
    (store / "10.66.0.2").write_bytes(b"someone\r\neth0")
    (store / "last_reserved_ip.0").write_text("10.66.0.2")
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": dict(HOST_LOCAL_POD, dataDir=str(data))}]})
    snapshot = {p.name: p.read_bytes() for p in store.iterdir()}
    out = probe(skb, setup)
    assert find(out, "probe")[0]["what"] == "probe ADD ok: eth0 got 10.66.0.3/24"   # it saw the reservation
    assert {p.name: p.read_bytes() for p in store.iterdir()} == snapshot


# ---------------------------------------------------------------------------------------------------
# STATUS (cniVersion 1.1.0): the chain as libcni runs it

def test_status_failure_names_plugin_code_and_message(skb, setup):
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [
        {"type": "loopback"},
        {"type": "debug", "inject": {"STATUS": {"error": {"code": 50, "msg": "datastore unreachable"}}}}]})
    out = doctor(skb, setup)
    f = find(out, "status-failed")[0]
    assert out["rc"] == 1 and f["severity"] == "error"
    assert f["what"] == 'plugin debug fails STATUS (network "pods", 10-pods.conflist)'
    assert f["evidence"].startswith("code 50 (the plugin is not available: it cannot ADD): datastore unreachable")
    assert ("NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: datastore "
            "unreachable") in f["evidence"]
    assert "skb status pods" in f["fix"]
    assert "status-failed" not in codes(doctor(skb, setup, "--no-status"))


@pytest.mark.parametrize("plugin", ["#!/nonexistent/sh\nexit 0\n", "", "#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] || exit 1\n"
                                    "echo '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"1.0.0\"]}'\n"],
                         ids=["bad-interpreter", "empty-file", "speaks-1.0.0"])
def test_a_plugin_that_cannot_run_or_speak_the_version_is_one_error_and_status_a_note(skb, setup, tmp_path, plugin):
    """Its VERSION fails (a missing interpreter, an empty file) or lacks 1.1.0: STATUS then fails for that
    very reason, and was a second error whose fix said "often its daemon or its datastore is down" (review 16)."""
    bins = tmp_path / "bins"
    bins.mkdir()
    (bins / "odd").write_text(plugin)
    (bins / "odd").chmod(0o755)
    setup.bins = [str(bins)]
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [{"type": "odd"}]})
    out = doctor(skb, setup)
    errors = [f["code"] for f in out["problems"] if f["severity"] == "error"]
    assert errors == ["version-unsupported" if "supportedVersions" in plugin else "version-failed"], out["problems"]
    [status] = find(out, "status-failed")
    assert status["severity"] == "note" and status["what"].endswith(f"for the reason the {errors[0]} error gives")
    if plugin.startswith("#!/nonexistent"):     # exec said only "no such file or directory", of a file that is there
        assert "(its #! line asks for /nonexistent/sh, which does not exist here)" in find(out, errors[0])[0]["evidence"]


def test_another_plugins_status_failure_is_not_folded_into_a_version_error(skb, setup, tmp_path):
    """Review 16: fakea's own STATUS failure (its datastore) was made a note "for the reason the
    version-unsupported error gives", an error of fakeb's."""
    bins = tmp_path / "bins"
    bins.mkdir()
    (bins / "fakea").write_text("#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] && { echo '{\"cniVersion\":\"1.1.0\","
                                "\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}'; exit 0; }\n"
                                "echo '{\"code\":11,\"msg\":\"datastore down\"}'; exit 1\n")
    (bins / "fakeb").write_text("#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"1.0.0\"]}'\n")
    for f in ("fakea", "fakeb"):
        (bins / f).chmod(0o755)
    setup.bins = [str(bins)]
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [{"type": "fakea"},
                                                                                       {"type": "fakeb"}]})
    out = doctor(skb, setup)
    status = find(out, "status-failed")[0]
    assert status["severity"] == "error" and "datastore down" in status["evidence"], status


def test_the_rm_fix_names_every_leaked_file_quoted_as_a_shell_needs(skb, setup):
    """Past five files it ended in "...", and a tab in the store's path was printed as a space (review 16)."""
    data = setup.tmp / "ip\tam"
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": dict(HOST_LOCAL_POD, dataDir=str(data))}]})
    store = data / "pods"
    store.mkdir(parents=True)
    for i in range(2, 9):
        (store / f"10.66.0.{i}").write_text(f"gone{i}\r\neth0")
    f = find(doctor(skb, setup), "leaked-reservation")[0]
    command = f["fix"].split("confirmed gone: ", 1)[1]
    subprocess.run(["bash", "-c", command], check=True)
    assert sorted(p.name for p in store.iterdir()) == [], command


def test_no_mv_fix_that_would_overwrite(skb, setup):
    """Two files with one stem, or a taken target: the mv fix would overwrite, or move into a directory."""
    setup.write("10-p.yaml", lo_conflist("p"))
    setup.write("10-p.yml", lo_conflist("q"))
    out = doctor(skb, setup)
    assert "mv -n" not in find(out, "no-config")[0]["fix"], out
    assert len(find(out, "wrong-extension")) == 2


def test_status_ok_and_not_sent_before_1_1_0(skb, setup):
    cap = setup.tmp / "cap.jsonl"
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [
        {"type": "debug", "captureFile": str(cap)}]})
    out = doctor(skb, setup)
    assert out["rc"] == 0 and out["problems"] == []
    # the doctor's STATUS goes into none of the runtime's call logs (review 15): which calls it sends is
    # seen by a plugin of the test's own (test_replay_safety.py::test_doctor_sends_status_only_from_1_1_0)
    assert not cap.exists()
    setup.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [
        {"type": "debug", "captureFile": str(cap),
         "inject": {"STATUS": {"error": {"code": 50, "msg": "not ready"}}}}]})
    assert find(doctor(skb, setup), "status-failed")     # it was sent
    setup.write("10-pods.conflist", {"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "debug", "captureFile": str(cap),
         "inject": {"STATUS": {"error": {"code": 50, "msg": "not ready"}}}}]})
    assert doctor(skb, setup)["rc"] == 0 and not cap.exists()


# ---------------------------------------------------------------------------------------------------
# a config without cniVersion

def test_config_without_cniversion(skb, setup):
    setup.write("10-pods.conflist", {"name": "pods", "plugins": [{"type": "loopback"}]})
    out = doctor(skb, setup)
    f = find(out, "no-cniversion")[0]
    assert out["rc"] == 1 and f["severity"] == "warning"
    assert f["what"] == '10-pods.conflist has no "cniVersion": network "pods" is read as 0.1.0'
    assert "no CHECK, STATUS or GC" in f["evidence"] and "lossy" in f["evidence"]
    assert f["fix"].startswith('add "cniVersion": "1.1.0"')       # the newest our loopback speaks
    setup.write("10-pods.conflist", lo_conflist("pods"))
    assert doctor(skb, setup)["rc"] == 0


def test_single_conf_without_cniversion(skb, setup):
    setup.write("10-pods.conf", {"name": "pods", "type": "loopback"})
    assert find(doctor(skb, setup), "no-cniversion")[0]["what"].startswith("10-pods.conf has no")


# ---------------------------------------------------------------------------------------------------
# where the runtime looks for plugins, read by default

def test_runtime_bin_dir_without_the_plugins_says_where_they_are(skb, setup, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    setup.write("10-lo.conflist", lo_conflist())
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V3.replace('"/usr/lib/cni"', f'"{empty}"')
                                       .format(bin=empty, conf=setup.conf), setup.tmp))
    out = doctor(skb, setup)         # flags point at the plugins; containerd would not find them
    f = [f for f in find(out, "plugin-elsewhere") if "containerd" in f["what"]][0]
    assert f["what"] == f'plugin "loopback" (plugin) is not where containerd looks: it is in {setup.bins[0]}'
    assert f["fix"].startswith(f"add {setup.bins[0]} to bin_dirs in "
                               '[plugins."io.containerd.cri.v1.runtime".cni]')
    assert out["rc"] == 1


def test_runtime_config_read_by_default(skb, setup, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    setup.write("10-lo.conflist", lo_conflist())
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V2.format(bin=empty, conf=setup.conf), setup.tmp))
    env = dict(os.environ, CNI_PATH=setup.bins[0])
    out = doctor(skb, setup, dirs=False, env=env)
    assert out["checked"][0]["binDirs"] == [str(empty)]
    f = find(out, "plugin-elsewhere")[0]
    assert f["what"] == f'plugin "loopback" (plugin) is not where containerd looks: it is in {setup.bins[0]}'
    # (bin_dir holds one directory: "add" was a fix no one could follow, review 15)
    assert f"set bin_dir in [plugins.\"io.containerd.grpc.v1.cri\".cni]" in f["fix"], f["fix"]
    assert f" to {setup.bins[0]} (it holds one directory)" in f["fix"], f["fix"]
    assert "plugin-missing" not in codes(out)


@pytest.mark.parametrize("speaks", ['["0.3.1", "1.0.0"]', None])
def test_plugin_elsewhere_that_could_not_serve_the_network_is_not_the_fix(skb, setup, tmp_path, speaks):
    """The plugin found outside the runtime's bin dir speaks only up to 1.0.0 (Debian's Go plugins) while the
    network is 1.1.0, or fails VERSION: pointing the runtime there traded one error for three (review 16)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    other = tmp_path / "other-bin"
    other.mkdir()
    answer = (f'echo \'{{"cniVersion":"1.0.0","supportedVersions":{speaks}}}\'' if speaks else "exit 1")
    (other / "loopback").write_text(f"#!/bin/sh\n{answer}\n")
    (other / "loopback").chmod(0o755)
    setup.write("10-lo.conflist", {"cniVersion": "1.1.0", "name": "lo", "plugins": [{"type": "loopback"}]})
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V2.format(bin=empty, conf=setup.conf), setup.tmp))
    out = doctor(skb, setup, dirs=False, env=dict(os.environ, CNI_PATH=str(other)))
    f = find(out, "plugin-elsewhere")[0]
    assert f["what"] == f'plugin "loopback" (plugin) is not where containerd looks: it is in {other}'
    why = ('does not speak cniVersion "1.1.0" of network "lo" (it speaks 0.3.1, 1.0.0)' if speaks
           else "fails VERSION")
    assert f"; but {other}/loopback {why}" in f["evidence"], f["evidence"]
    assert f["fix"] == (f"install loopback that speaks the network's cniVersion into {empty}; the ones in {other} "
                        "would not do"), f["fix"]


def test_crio_drop_in_plugin_dirs(skb, setup, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    setup.write("10-lo.conflist", lo_conflist())
    drop = tmp_path / "crio.conf.d"
    setup.write("01-net.conf", f'[crio.network]\nnetwork_dir = "{setup.conf}"\nplugin_dirs = ["{empty}"]\n', drop)
    setup.crio_dir = str(drop)
    out = doctor(skb, setup)
    f = [f for f in find(out, "plugin-elsewhere") if "CRI-O" in f["what"]][0]
    assert f"plugin_dirs in [crio.network] of {drop}/01-net.conf" in f["fix"]


def test_containerd_section_of_another_version_is_ignored(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    setup.containerd = str(setup.write("config.toml", CONTAINERD_V3.replace("version = 3", "version = 2").format(
        bin=setup.bins[0], conf=setup.conf), setup.tmp))
    f = find(doctor(skb, setup, dirs=False), "runtime-config-ignored")[0]
    assert f["what"].startswith('containerd ignores [plugins."io.containerd.cri.v1.runtime".cni]')


# ---------------------------------------------------------------------------------------------------
# conf dir entries the runtime skips or chokes on

def test_directory_with_a_config_name(skb, setup):
    (setup.conf / "10-net.conflist").mkdir()
    out = doctor(skb, setup)
    f = find(out, "skipped-entry")[0]
    assert f["what"] == "10-net.conflist is a directory: libcni skips it"
    nc = find(out, "no-config")[0]
    assert "10-net.conflist/" in nc["evidence"] and "empty" not in nc["evidence"]


@pytest.mark.parametrize("make, why", [
    (lambda p: os.mkfifo(p), "is a FIFO (named pipe)"),
    (lambda p: os.symlink("/nonexistent/x", p), "is a dangling symbolic link"),
    (lambda p: os.symlink("/dev/zero", p), "is a character device"),
    (lambda p: os.symlink("/tmp", p), "is a symbolic link to a directory"),
])
def test_entries_the_runtime_chokes_on(skb, setup, make, why):
    make(str(setup.conf / "05-bad.conflist"))
    setup.write("10-lo.conflist", lo_conflist())
    out = doctor(skb, setup, timeout=60)
    f = find(out, "unreadable-entry")[0]
    assert f["severity"] == "error" and f["what"] == f"05-bad.conflist {why}" and out["rc"] == 1
    assert find(out, "no-config")[0]["what"] == "the pod network file 05-bad.conflist does not load"


def test_special_files_elsewhere_never_hang(skb, setup):
    os.mkfifo(setup.conf / "README")                                     # not a config name: ignored
    setup.write("10-lo.conflist", lo_conflist())
    os.makedirs(setup.conf / "lo-net")
    os.mkfifo(setup.conf / "lo-net" / "20-extra.conf")                   # libcni appends these plugin files
    out = doctor(skb, setup, timeout=60)
    f = find(out, "unreadable-entry")[0]
    assert f["what"] == "20-extra.conf is a FIFO (named pipe)" and "lo-net" in f["where"]


@pytest.mark.parametrize("flag", ["--containerd-config", "--crio-config", "--conf-dir", "--cache-dir"])
@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "/dev/null"])
def test_special_files_as_paths_never_hang_or_trace(skb, setup, tmp_path, flag, special):
    setup.write("10-lo.conflist", lo_conflist())
    path = special
    if special == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    args = [a for a in setup.args() if not a.startswith(flag + "=")]
    if flag in ("--conf-dir", "--cache-dir"):
        i = args.index(flag)
        args[i + 1] = path
    else:
        args.append(f"{flag}={path}")
    p = subprocess.run([skb, "doctor", "--json", *args], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in p.stderr and p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    if flag == "--conf-dir":
        assert "not a directory" in find({"all": out["problems"]}, "no-config")[0]["what"]
    if flag in ("--containerd-config", "--crio-config") and special != "/dev/null":
        assert "not a regular file" in find({"all": out["problems"]}, "runtime-config-invalid")[0]["evidence"]


def test_odd_runtime_configs(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    for text in ['version = "2"\n', "version = 3\nplugins = 5\n", 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]'
                 '\ncni = "x"\n', 'version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\nbin_dir = 5\nconf_dir = []\n']:
        setup.containerd = str(setup.write("config.toml", text, setup.tmp))
        doctor(skb, setup, dirs=False)
    (setup.tmp / "bad.toml").write_bytes(b"version = 2\n# \xff\xfe\n")
    setup.containerd = str(setup.tmp / "bad.toml")
    assert "not UTF-8" in find(doctor(skb, setup), "runtime-config-invalid")[0]["evidence"]


def test_odd_state_files_never_hang_or_trace(skb, setup):
    _store(setup, "pods", "1.1.0", setup.tmp / "ipam")
    os.mkfifo(setup.tmp / "ipam" / "pods" / "10.66.0.77")
    results = setup.cache / "results"
    os.mkfifo(results / "pods-fifo-eth0")
    (results / "pods-odd-eth0").write_text(json.dumps({
        "kind": "cniCacheV1", "containerId": 5, "networkName": "pods", "ifName": "eth0", "netns": ["x"],
        "result": {"interfaces": "nope"}}))
    (results / "pods-odd2-eth0").write_text(json.dumps({
        "kind": "cniCacheV1", "containerId": "c", "networkName": "pods", "ifName": "eth0",
        "result": {"interfaces": [{"name": "../../../../etc/x"}, {"name": 7}]}}))
    out = doctor(skb, setup, timeout=60)
    assert "leaked-reservation" in codes(out)


def test_names_that_are_not_utf8(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    os.mkfifo(os.path.join(os.fsencode(setup.conf), b"05-\xff.conflist"))
    for json_out in (True, False):
        p = subprocess.run([skb, "doctor", *(["--json"] if json_out else []), *setup.args()], capture_output=True,
                           timeout=60)
        assert p.returncode == 1 and b"Traceback" not in p.stderr, p.stderr
        assert b"05-\\xff.conflist is a FIFO" in p.stdout or b"05-\\udcff.conflist is a FIFO" in p.stdout


def test_bad_probe_timeout(skb, setup):
    setup.write("10-lo.conflist", lo_conflist())
    p = subprocess.run([skb, "doctor", "--probe", "--probe-timeout", "-1", *setup.args()], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "--probe-timeout" in p.stderr and p.stderr.count("\n") == 1
