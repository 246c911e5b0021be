"""skb explain's table of messages: each pattern recognised in a real message, as kubelet, containerd,
CRI-O, libcni or a plugin printed it (quoted from public issue reports and from the reference plugins'
observed transcripts), with the layers of a wrapping message explained in order."""
import pytest

from skb.tool import explain

REAL = [
    # kubelet, containerd 1.6+: the CRI status (kubernetes issues, rke2#4476)
    ('E0416 22:26:30.150357   10125 kubelet.go:2373] "Container runtime network not ready" networkReady="NetworkReady='
     'false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"',
     ["not-ready-status", "cni-plugin-not-initialized"]),
    # kubelet with dockershim (kubeadm#1031)
    ("runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is "
     "not ready: cni config uninitialized", ["cni-config-uninitialized"]),
    # CRI-O through kubelet (cri-o#2741)
    ("E0821 08:06:22.143972    1942 kubelet.go:2169] Container runtime network not ready: NetworkReady=false "
     "reason:NetworkPluginNotReady message:Network plugin returns error: Missing CNI default network",
     ["not-ready-status", "missing-default-network"]),
    # a STATUS failure of a CNI 1.1 plugin reaching kubelet the same way
    ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin "
     "returns error: datastore unreachable", ["not-ready-status"]),
    # CRI-O's newer wording (cri-o#4276)
    ("No CNI configuration file in /etc/cni/net.d/. Has your network provider started?", ["no-networks-found"]),
    # kubelet 1.x (luxas/kubernetes-on-arm#160)
    ("cni.go:171] Unable to update cni config: No networks found in /etc/cni/net.d", ["no-networks-found"]),
    # libcni
    ("error parsing configuration list: no 'plugins' key", ["no-plugins-key"]),
    ("no plugin configs found", ["no-plugins-key"]),
    # ptp delegating to a missing IPAM (reference transcripts)
    ('{"code":999,"msg":"failed to find plugin \\"nosuchipam\\" in path [/usr/lib/cni]"}', ["plugin-not-found"]),
    # containerd, the result without an IP on eth0
    ('failed to find network info for sandbox "0a7c5d1f8b9e"', ["network-info"]),
    # kubelet with dockershim, a sandbox that died (antrea#831)
    ('failed to set up sandbox container "195c83fcdef364849d0ca34d5bc9f74a18985f09173c004c7f60398c2114887c" network '
     'for pod "heimdall-scheduled-tasks-1591923600-k7nd8": NetworkPlugin cni failed to set up pod '
     '"heimdall-scheduled-tasks-1591923600-k7nd8_jenkins" network: failed to Statfs "/proc/12764/ns/net": no such '
     'file or directory', ["sandbox-setup", "statfs-proc"]),
    # a plugin on a deleted named netns (reference transcripts)
    ('failed to open netns "/run/netns/nonexistent": failed to Statfs "/run/netns/nonexistent": no such file or '
     'directory', ["statfs"]),
    # containerd's journal, quotes escaped (cilium#30820)
    ('level=error msg="RunPodSandbox for &PodSandboxMetadata{Name:server,Namespace:default,Attempt:0,} failed, error" '
     'error="failed to setup network for sandbox \\"1341f1c7aa620238c4d30e6f28e6bcb9ec8e44fd34d3f81ceaa1498e672054d2'
     '\\": plugin type=\\"cilium-cni\\" failed (add): netplugin failed: \\"ts=1708028912.027259, to retry\\\\n\\""',
     ["sandbox-setup", "plugin-failed", "netplugin-no-message"]),
    # multus (multus-cni#1072): a plugin with a name
    ('failed to setup network for sandbox "11ce5f00d56f": plugin type="multus-shim" name="multus-cni-network" failed '
     "(add): CmdAdd (shim): CNI request failed with status 400", ["sandbox-setup", "plugin-failed"]),
    # the reference plugins on a 1.1.0 config (transcripts)
    ('{"code":1,"msg":"incompatible CNI versions","details":"config is \\"1.1.0\\", plugin supports [\\"0.1.0\\" '
     '\\"0.2.0\\" \\"0.3.0\\" \\"0.3.1\\" \\"0.4.0\\" \\"1.0.0\\"]"}', ["incompatible-versions"]),
    ('plugin loopback does not support config version "1.1.0"', ["incompatible-versions"]),
    # host-local (transcripts)
    ("failed to allocate for range 0: 10.22.0.2 has been allocated to ctr1, duplicate allocation is not allowed",
     ["allocate-range", "duplicate-allocation"]),
    ("failed to allocate for range 0: no IP addresses available in range set: 10.22.0.252-10.22.0.254",
     ["allocate-range", "range-full"]),
    # containerd DEL (a blog post on StopPodSandbox)
    ('StopPodSandbox from runtime service failed: rpc error: code = Unknown desc = failed to destroy network for '
     'sandbox "055b221e44a28ce8d9120f771d5e1ef201f2457ce49c58999a0147104cca2708": failed to get network "cbr0" cached '
     "result: decoding version from network config: unexpected end of JSON input", ["sandbox-destroy"]),
    # a plugin dying without output (calico cni-plugin#909)
    ('failed to set up sandbox container "3fe33199939736653d0eb5ffb41ffd4a94630cbf0ee1d9ffa39e1fef7cb40a83" network '
     'for pod "kafka-0": networkPlugin cni failed to set up pod "kafka-0_default" network: netplugin failed with no '
     "error message", ["sandbox-setup", "netplugin-no-message"]),
    ('plugin type="ptp" failed (add): netplugin failed with no error message: fork/exec /opt/cni/bin/ptp: '
     "permission denied", ["plugin-failed", "netplugin-no-message"]),
    ("cni config load failed: failed to load CNI config list file /etc/cni/net.d/10-x.conflist: error parsing "
     "configuration list: unexpected end of JSON input", ["cni-config-load-failed"]),
]


@pytest.mark.parametrize("text, keys", REAL, ids=[k[0] + ":" + t[:40] for t, k in REAL])
def test_real_messages(text, keys):
    assert [p.key for p, _m in explain.match(text)] == keys


def test_every_pattern_has_a_real_message():
    covered = {k for _t, keys in REAL for k in keys}
    assert covered | {"exec-failed"} == {p.key for p in explain.PATTERNS}
    assert explain.match("fork/exec /opt/cni/bin/ptp: exec format error")[0][0].key == "exec-failed"


def test_groups_name_what_they_caught():
    (p, m), = explain.match('failed to find plugin "ptp" in path [/opt/cni/bin /usr/lib/cni]')
    assert m.group("plugin") == "ptp" and m.group("path") == "/opt/cni/bin /usr/lib/cni"
    assert "plugin-missing" in p.codes and "plugin-elsewhere" in p.codes


def test_unknown_text():
    assert explain.match("the quick brown fox") == []
