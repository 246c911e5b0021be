"""skb.install.conflist's pure parts: pod CIDRs, template values and rendering, the conflist check, which
configs count as another network's; and that deploy/ agrees with the installer it runs."""
import json
import os
import re
import shlex

import pytest

from skb.install import conflist
from skb.install import files
from skb.tool.main import build_parser
from skb.install.files import InstallError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")


# ------------------------------------------------------------------------------------ pod CIDRs

@pytest.mark.parametrize("text, want", [
    ("10.244.1.0/24", ["10.244.1.0/24"]),
    ("10.244.1.0/24\n", ["10.244.1.0/24"]),
    ("10.244.1.0/24 fd00:10:244:1::/64", ["10.244.1.0/24", "fd00:10:244:1::/64"]),  # jsonpath {[*]}
    ("10.244.1.0/24,fd00:10:244:1::/64", ["10.244.1.0/24", "fd00:10:244:1::/64"]),
    ('["10.244.1.0/24","fd00::/64"]', ["10.244.1.0/24", "fd00::/64"]),  # jsonpath {.spec.podCIDRs}
    ("fd00::/64 10.0.0.0/16", ["fd00::/64", "10.0.0.0/16"]),
    ("10.244.1.0/30 fd00::/126", ["10.244.1.0/30", "fd00::/126"]),   # the smallest: a gateway and one pod
])
def test_parse_pod_cidrs(text, want):
    assert [str(n) for n in conflist.parse_pod_cidrs(text)] == want


@pytest.mark.parametrize("text, words", [
    ("", ["is empty"]),
    ("  \n", ["is empty"]),
    ("10.244.1.5/24", ["'10.244.1.5/24'", "CIDR", "host bits"]),
    ("10.244.1.0", ["'10.244.1.0' has no prefix length"]),
    ("banana", ["'banana'"]),
    ("10.0.0.0/24 10.1.0.0/24", ["two IPv4", "one pod CIDR per address family"]),
])
def test_parse_pod_cidrs_errors(text, words):
    with pytest.raises(InstallError) as e:
        conflist.parse_pod_cidrs(text, "SKB_POD_CIDR")
    assert str(e.value).startswith("SKB_POD_CIDR")
    for w in words:
        assert w in str(e.value)


def test_template_values_single_and_dual_stack():
    v4 = conflist.template_values(conflist.parse_pod_cidrs("10.244.1.0/24"))
    assert v4["POD_CIDR"] == "10.244.1.0/24"
    assert json.loads(v4["POD_RANGES"]) == [[{"subnet": "10.244.1.0/24"}]]
    assert json.loads(v4["POD_ROUTES"]) == [{"dst": "0.0.0.0/0"}]
    dual = conflist.template_values(conflist.parse_pod_cidrs("fd00::/64,10.244.1.0/24"), {"MTU": "1450"})
    assert dual["POD_CIDR"] == "fd00::/64"
    assert json.loads(dual["POD_RANGES"]) == [[{"subnet": "fd00::/64"}], [{"subnet": "10.244.1.0/24"}]]
    assert json.loads(dual["POD_ROUTES"]) == [{"dst": "::/0"}, {"dst": "0.0.0.0/0"}]
    assert dual["MTU"] == "1450"
    assert conflist.template_values() == {}


# ------------------------------------------------------------------------------------ rendering

def test_render_default_template():
    conf = conflist.render(conflist.DEFAULT_TEMPLATE,
                            conflist.template_values(conflist.parse_pod_cidrs("10.244.1.0/24 fd00::/64"),
                                                     {"MTU": "1460"}))
    assert conf["cniVersions"] == ["1.0.0", "1.1.0"] and conf["plugins"][0]["mtu"] == 1460
    assert conf["name"] == conflist.DEFAULT_NETWORK == "skb"
    assert [p["type"] for p in conf["plugins"]] == ["ptp", "loopback"]
    ipam = conf["plugins"][0]["ipam"]
    assert ipam["type"] == "host-local"
    assert ipam["ranges"] == [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00::/64"}]]
    assert ipam["routes"] == [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]


def test_render_names_a_missing_pod_cidr_and_how_to_give_it():
    with pytest.raises(InstallError) as e:
        conflist.render(conflist.DEFAULT_TEMPLATE, {}, "the built-in template")
    assert "${POD_RANGES}" in str(e.value) and "--pod-cidr" in str(e.value) and "SKB_POD_CIDR" in str(e.value)


def test_render_names_a_missing_set_variable():
    with pytest.raises(InstallError) as e:
        conflist.render('{"name": "x", "mtu": ${MY_MTU}}', {}, "t.json")
    assert "t.json uses ${MY_MTU}" in str(e.value) and "--set NAME=VALUE" in str(e.value)
    with pytest.raises(InstallError) as e:
        conflist.render('{"name": "x", "mtu": ${MTU}}', {}, "t.json")
    assert "t.json uses ${MTU}" in str(e.value) and "--mtu" in str(e.value)


# ------------------------------------------------------------------------------------ the node's MTU

ROUTE_HEAD = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"


def fake_proc(tmp_path, route="", ipv6_route="", mtus=None):
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "net" / "route").write_text(ROUTE_HEAD + route)
    (tmp_path / "proc" / "net" / "ipv6_route").write_text(ipv6_route)
    for iface, mtu in (mtus or {}).items():
        (tmp_path / "sys" / "class" / "net" / iface).mkdir(parents=True)
        (tmp_path / "sys" / "class" / "net" / iface / "mtu").write_text(f"{mtu}\n")
    return str(tmp_path / "proc"), str(tmp_path / "sys")


def v4(iface, dest="00000000", flags="0003", metric=0, mask="00000000"):
    return f"{iface}\t{dest}\t0102000A\t{flags}\t0\t0\t{metric}\t{mask}\t0\t0\t0\n"


def v6(iface, dest="0" * 32, plen="00", metric="00000400", flags="00450003"):
    return f"{dest} {plen} {'0' * 32} 00 fe800000000000000000000000000001 {metric} 00000000 00000000 {flags} {iface}\n"


def test_default_route_mtu_picks_the_lowest_metric_ipv4_default(tmp_path):
    from skb.install import node
    proc, sys_dir = fake_proc(tmp_path, v4("eth1", metric=200) + v4("eth0", metric=100)
                              + v4("eth2", dest="0000A8C0", mask="00FFFFFF"),
                              mtus={"eth0": 1460, "eth1": 9000})
    assert node.default_route_mtu(proc, sys_dir) == ("eth0", 1460)


def test_default_route_mtu_ipv6_only_node_and_none(tmp_path):
    from skb.install import node
    # IPv6: the kernel's unreachable default on lo is skipped
    proc, sys_dir = fake_proc(tmp_path, "", v6("lo", metric="ffffffff", flags="00200200") + v6("ens3"),
                              mtus={"ens3": 1500})
    assert node.default_route_mtu(proc, sys_dir) == ("ens3", 1500)
    empty = tmp_path / "empty"
    empty.mkdir()
    proc, sys_dir = fake_proc(empty, v4("eth0", dest="0000A8C0", mask="00FFFFFF"))
    assert node.default_route_mtu(proc, sys_dir) == (None, None)
    down = tmp_path / "down"
    down.mkdir()
    proc, sys_dir = fake_proc(down, v4("eth0", flags="0002"))   # not RTF_UP
    assert node.default_route_mtu(proc, sys_dir) == (None, None)


def test_render_refuses_what_is_not_json_once_filled():
    with pytest.raises(InstallError) as e:
        conflist.render('{"name": ${X}}', {"X": "not json"}, "t.json")
    assert "t.json is not JSON once filled in" in str(e.value)


@pytest.mark.parametrize("conf, words", [
    ([], "a conflist is a JSON object"),
    ({"name": "n", "plugins": [{"type": "ptp"}]}, "field cniVersion"),
    ({"cniVersion": "1.0.0", "name": "", "plugins": [{"type": "ptp"}]}, "field name"),
    ({"cniVersion": "1.0.0", "name": "n", "type": "ptp"}, "field plugins must be a non-empty list"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": []}, "field plugins"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ptp"}, {"ipam": {}}]}, "plugins[1] needs"),
])
def test_check_conflist(conf, words):
    with pytest.raises(InstallError) as e:
        conflist.check_conflist(conf, "src")
    assert words in str(e.value)


# ------------------------------------------------------------------------------------ whose config

def write(path, obj):
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))


def test_config_conflicts(tmp_path):
    d = str(tmp_path)
    assert conflist.config_conflicts(d, "10-skb.conflist", "skb") == []
    write(tmp_path / "10-skb.conflist", {"name": "skb"})  # ours (an older version): no conflict
    assert conflist.config_conflicts(d, "10-skb.conflist", "skb") == []
    write(tmp_path / "99-later.conflist", {"name": "other"})  # sorts after ours: not used by CRI
    write(tmp_path / "01-notes.txt", "not a config extension")
    write(tmp_path / ".10-skb.conflist.skb-tmp.99", "{half")  # a killed run's temporary file: never loaded
    assert conflist.config_conflicts(d, "10-skb.conflist", "skb") == []
    write(tmp_path / ".05-hidden.conflist", {"name": "other"})  # libcni loads dotfiles too
    [p] = conflist.config_conflicts(d, "10-skb.conflist", "skb")
    assert ".05-hidden.conflist (network 'other') comes before" in p
    os.unlink(tmp_path / ".05-hidden.conflist")

    write(tmp_path / "10-skb.conflist", {"name": "cbr0"})
    [p] = conflist.config_conflicts(d, "10-skb.conflist", "skb")
    assert "10-skb.conflist holds network 'cbr0', not 'skb'" in p
    write(tmp_path / "10-skb.conflist", "{trailing,")
    [p] = conflist.config_conflicts(d, "10-skb.conflist", "skb")
    assert "10-skb.conflist is invalid JSON at line 1, column 2: Expecting property name" in p and "not a configuration of network 'skb'" in p
    os.unlink(tmp_path / "10-skb.conflist")
    os.symlink("/nonexistent", tmp_path / "10-skb.conflist")
    [p] = conflist.config_conflicts(d, "10-skb.conflist", "skb")
    assert "10-skb.conflist is a dangling symbolic link, not a configuration of network 'skb'" in p
    os.unlink(tmp_path / "10-skb.conflist")
    write(tmp_path / "05-broken.conflist", '{"cniVersion": "1.0.0",')
    [p] = conflist.config_conflicts(d, "10-skb.conflist", "skb")
    assert "05-broken.conflist is invalid JSON at line 1, column 24" in p and "; it comes before 10-skb.conflist" in p
    assert "None" not in p
    os.unlink(tmp_path / "05-broken.conflist")
    write(tmp_path / "10-skb.conflist", "{trailing,")

    os.unlink(tmp_path / "10-skb.conflist")
    write(tmp_path / "05-flannel.conflist", {"name": "cbr0"})
    [p] = conflist.config_conflicts(d, "10-skb.conflist", "skb")
    assert "05-flannel.conflist (network 'cbr0') comes before 10-skb.conflist" in p and "--conf-name" in p
    assert conflist.config_conflicts(d, "00-skb.conflist", "skb") == []

    os.unlink(tmp_path / "05-flannel.conflist")
    write(tmp_path / "05-old.conflist", {"name": "skb", "plugins": [{"type": "bridge"}]})  # our name, not ours
    ours = conflist.conf_bytes({"name": "skb", "plugins": [{"type": "ptp"}]})
    [p] = conflist.config_conflicts(d, "10-skb.conflist", "skb", ours)
    assert "05-old.conflist also defines network 'skb', with other contents, and comes before 10-skb.conflist" in p
    write(tmp_path / "05-old.conflist", ours.decode())  # a byte-for-byte copy of ours: the runtime gets ours
    assert conflist.config_conflicts(d, "10-skb.conflist", "skb", ours) == []


def test_conf_files_in_libcni_order(tmp_path):
    for name in ("20-b.conf", "10-a.conflist", "30-c.json", "05-x.txt", ".00-dot.conflist", ".10-a.conflist.skb-tmp.7"):
        write(tmp_path / name, "{}")
    (tmp_path / "15-dir.conf").mkdir()
    assert conflist.conf_files(str(tmp_path)) == [".00-dot.conflist", "10-a.conflist", "20-b.conf", "30-c.json"]
    assert conflist.conf_files(str(tmp_path / "missing")) == []


def test_temporary_config_names_are_never_loaded_by_libcni():
    tmp = f".10-skb.conflist{files.CONF_TMP_INFIX}1234"
    assert not tmp.endswith(conflist.CONF_EXTENSIONS)


# ------------------------------------------------------------------------------------ deploy/ agrees

def test_deploy_template_is_the_builtin_one():
    with open(os.path.join(DEPLOY, "10-skb.conflist.template")) as f:
        assert f.read() == conflist.DEFAULT_TEMPLATE


def _daemonset_text():
    with open(os.path.join(DEPLOY, "daemonset.yaml")) as f:
        return f.read()


def test_daemonset_configmap_template_is_the_deploy_one():
    lines = _daemonset_text().splitlines()
    start = lines.index("  10-skb.conflist.template: |") + 1
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    assert "\n".join(block).strip() + "\n" == conflist.DEFAULT_TEMPLATE


def _install_args(text, container):
    """The ``args`` list of a container in daemonset.yaml (simple block-list parsing)."""
    lines = text.splitlines()
    i = lines.index(f"        - name: {container}")
    i = next(j for j in range(i, len(lines)) if lines[j].strip() == "args:")
    args = []
    for line in lines[i + 1:]:
        m = re.match(r"^\s+- (.*)$", line)
        if not m or not m.group(1).startswith("--"):
            break
        args.append(m.group(1))
    return args


def test_daemonset_args_are_skb_install_options():
    text = _daemonset_text()
    args = _install_args(text, "install-cni")
    opts = build_parser().parse_args(["install", "--from", "/opt/skb-cni/bin"] + args)
    assert opts.bin_dir == "/host/opt/cni/bin" and opts.conf_dir == "/host/etc/cni/net.d"
    assert opts.pod_cidr_from_api and opts.wait
    assert opts.template == "/etc/skb-cni/10-skb.conflist.template"
    # the volumes those paths live on
    for mount in ("mountPath: /host/opt/cni/bin", "mountPath: /host/etc/cni/net.d", "mountPath: /etc/skb-cni",
                  "path: /opt/cni/bin", "path: /etc/cni/net.d"):
        assert mount in text
    for env in ("NODE_NAME", "SKB_MTU", "SKB_UNINSTALL_ON_STOP"):
        assert f"name: {env}" in text


def test_containerfile_entrypoint_and_cmd_are_skb_install_options():
    with open(os.path.join(DEPLOY, "Containerfile")) as f:
        text = f.read()
    assert re.search(r"^FROM scratch$", text, re.M)
    joined = text.replace("\\\n", " ")
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", joined, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", joined, re.M).group(1))
    assert entry[:2] == ["/opt/skb-cni/bin/skb", "install"]
    opts = build_parser().parse_args(entry[1:] + cmd)
    assert opts.source == "/opt/skb-cni/bin" and opts.wait and opts.pod_cidr_from_api
    assert "COPY LICENSE /opt/skb-cni/LICENSE" in text
    assert opts.template == "/opt/skb-cni/10-skb.conflist.template"
    assert "COPY deploy/10-skb.conflist.template /opt/skb-cni/10-skb.conflist.template" in text
    assert shlex.split("COPY dist/bin/ /opt/skb-cni/bin/")[1] in text
