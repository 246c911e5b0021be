"""skb explain's catalogue (skb.tool.catalogue): each entry recognised in real messages, as kubelet,
containerd, CRI-O, podman, libcni, a plugin or a network add-on printed them, with the layers of a wrapping
message explained in order and the answer naming the values the message carried. The messages collected
from public reports are in explain_messages.json, each with its source; a few more are below."""
import json
import os
import re

import pytest

from skb.cni.errors import CNIError
from skb.tool import explain
from skb.tool.catalogue import ENTRIES
from skb.tool.catalogue.entry import PLACEHOLDERS, compile_shape

COLLECTED = json.load(open(os.path.join(os.path.dirname(__file__), "explain_messages.json"), encoding="utf-8"))
FAMILIES = {"kubelet", "containerd", "CRI-O", "podman", "libcni", "reference plugins", "host-local", "flannel",
            "Calico", "AWS VPC CNI", "Multus"}

REAL = [
    # kubelet, containerd 1.6+: the CRI status (kubernetes issues, rke2#4476)
    ('E0416 22:26:30.150357   10125 kubelet.go:2373] "Container runtime network not ready" networkReady="NetworkReady='
     'false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"',
     ["not-ready-status", "cni-plugin-not-initialized"]),
    # kubelet with dockershim (kubeadm#1031)
    ("runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is "
     "not ready: cni config uninitialized", ["not-ready-status", "cni-config-uninitialized"]),
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
    ("error parsing configuration list: no 'plugins' key", ["config-parse", "no-plugins-key"]),
    ("no plugin configs found", ["no-plugins-key"]),
    # ptp delegating to a missing IPAM (reference transcripts)
    ('{"code":999,"msg":"failed to find plugin \\"nosuchipam\\" in path [/usr/lib/cni]"}', ["plugin-not-found"]),
    # containerd, the result without an IP on eth0
    ('failed to find network info for sandbox "0a7c5d1f8b9e"', ["network-info"]),
    # kubelet with dockershim, a sandbox that died (antrea#831)
    ('failed to set up sandbox container "195c83fcdef364849d0ca34d5bc9f74a18985f09173c004c7f60398c2114887c" network '
     'for pod "heimdall-scheduled-tasks-1591923600-k7nd8": NetworkPlugin cni failed to set up pod '
     '"heimdall-scheduled-tasks-1591923600-k7nd8_jenkins" network: failed to Statfs "/proc/12764/ns/net": no such '
     'file or directory', ["sandbox-setup", "kubelet-cni-setup", "statfs-proc"]),
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
     "(add): CmdAdd (shim): CNI request failed with status 400", ["sandbox-setup", "plugin-failed", "multus-shim"]),
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
     "result: decoding version from network config: unexpected end of JSON input", ["sandbox-destroy", "cached-result"]),
    # a plugin dying without output (calico cni-plugin#909)
    ('failed to set up sandbox container "3fe33199939736653d0eb5ffb41ffd4a94630cbf0ee1d9ffa39e1fef7cb40a83" network '
     'for pod "kafka-0": networkPlugin cni failed to set up pod "kafka-0_default" network: netplugin failed with no '
     "error message", ["sandbox-setup", "kubelet-cni-setup", "netplugin-no-message"]),
    ('plugin type="ptp" failed (add): netplugin failed with no error message: fork/exec /opt/cni/bin/ptp: '
     "permission denied", ["plugin-failed", "netplugin-no-message", "exec-failed"]),
    ("cni config load failed: failed to load CNI config list file /etc/cni/net.d/10-x.conflist: error parsing "
     "configuration list: unexpected end of JSON input",
     ["cni-config-load-failed", "load-config-file", "config-parse"]),
    # containerd's reload of a conflist cut short (containerd#8662), a conflist saved as .conf (containerd#8514)
    ('level=error msg="failed to reload cni configuration after receiving fs change event(\\"/etc/cni/net.d/10-calico.'
     'conflist\\": WRITE)" error="cni config load failed: failed to load CNI config list file /etc/cni/net.d/10-calico.'
     'conflist: error parsing configuration list: unexpected end of JSON input: invalid cni config: failed to load cni '
     'config', ["cni-config-load-failed", "load-config-file", "config-parse"]),
    ('"lastCNILoadStatus": "cni config load failed: failed to load CNI config file /etc/cni/test/10-containerd-net.'
     "conf: error parsing configuration: missing 'type': invalid cni config: failed to load cni config\"",
     ["cni-config-load-failed", "load-config-file", "config-parse"]),
    # kubelet's own CNI code skipping a file with a trailing comma (kubernetes#53536)
    ("cni.go:119] Error loading CNI config file /etc/cni/net.d/10-calico.conf: error parsing configuration: invalid "
     "character '}' looking for beginning of object key string", ["load-config-skipped", "config-parse"]),
    # CRI-O's journal (flannel#2064), and CRI-O's line without the journal's prefix (cri-o#9439)
    ('Nov 24 23:43:08 master.lab crio[26766]: time="2024-11-24 23:43:08.876402310-07:00" level=warning msg="Error '
     'validating CNI config file /etc/cni/net.d/10-flannel.conflist: [failed to find plugin \\"portmap\\" in path '
     '[/opt/cni/bin/]]"', ["crio-validate", "plugin-not-found"]),
    ('level=warning msg="Error validating CNI config file /etc/cni/net.d/10-crio-bridge.conflist: [failed to find '
     'plugin \\"bridge\\" in path [/var/lib/rancher/k3s/data/cni]]"', ["cni-validate", "plugin-not-found"]),
    # kubelet's probes: the node's traffic to a pod (kubernetes#115469, goldpinger#117, kubernetes#88555 in Go's
    # older unquoted form, lanzafame/ipfs-cluster-k8s#5)
    ('Warning  Unhealthy  21m (x44 over 2d1h)  kubelet  Liveness probe failed: Get "http://10.244.54.71:18051/'
     'healthcheck": context deadline exceeded (Client.Timeout exceeded while awaiting headers)', ["kubelet-probe"]),
    ('Readiness probe failed: Get "http://172.16.1.4:8080/healthz": dial tcp 172.16.1.4:8080: i/o timeout '
     "(Client.Timeout exceeded while awaiting headers)", ["kubelet-probe"]),
    ("Readiness probe failed: Get http://10.48.8.31:80/wp-login.php: net/http: request cancelled (Client.Timeout "
     "exceeded while awaiting headers)", ["kubelet-probe"]),
    ('Readiness probe failed: Get "http://10.1.70.53:9094/id": dial tcp 10.1.70.53:9094: connect: connection refused',
     ["kubelet-probe"]),
]


@pytest.mark.parametrize("text, keys", REAL, ids=[k[0] + ":" + t[:40] for t, k in REAL])
def test_real_messages(text, keys):
    assert [layer.key for layer in explain.match(text)] == keys


@pytest.mark.parametrize("item", COLLECTED, ids=[f"{i}:{m['family']}" for i, m in enumerate(COLLECTED)])
def test_collected_messages(item):
    """Each message collected from a public report: the entries, in order, and the values of the message
    (plugin, versions, paths, names) in the answer."""
    layers = explain.match(item["message"])
    assert [layer.key for layer in layers] == item["explains"]
    text = "\n".join(explain._paragraph(layer) for layer in layers)
    for value in item["mentions"]:
        assert value in text, (value, text)
    assert not re.search(r"\{[a-z_0-9]+\}", text), text          # no placeholder left unfilled


def test_the_collection_covers_every_runtime_and_plugin_family():
    assert len(COLLECTED) >= 40 and len({m["message"] for m in COLLECTED}) == len(COLLECTED)
    assert FAMILIES <= {m["family"] for m in COLLECTED}
    assert all(m["source"].startswith("https://") for m in COLLECTED)


def test_every_entry_has_a_real_message():
    covered = {k for m in COLLECTED for k in m["explains"]} | {k for _t, keys in REAL for k in keys}
    assert {e.key for e in ENTRIES} - covered == {"skb-refused-overlap", "skb-address-in-use"}   # ours: below


def test_skb_ptps_own_refusals_are_explained():
    """What skb's ptp prints when it refuses an overlapping range, made by the code that prints it."""
    from skb.linux import hostclash
    from tests.unit.test_hostclash import FakeNetlink, a4, route_msg
    fake = FakeNetlink(routes=[route_msg(2, b"", 0, gateway=a4("10.244.1.1"))], links={2: ("eth0", "veth", None)})
    with pytest.raises(CNIError) as e:
        hostclash.refuse(fake, [("10.244.1.9", "10.244.1.1", "10.244.1.0/24")])
    msg = f'plugin type="ptp" failed (add): {e.value.msg}'
    assert [layer.key for layer in explain.match(msg)] == ["plugin-failed", "skb-refused-overlap"]
    assert explain.match("address 10.22.0.2 is already in use on the host")[0].key == "skb-address-in-use"


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.key for e in ENTRIES])
def test_each_entry_matches_the_shapes_it_cites(entry):
    """Every shape, its placeholders filled with plain values, is matched by its own entry; the texts fill
    without an unknown name."""
    samples = {"rest": "netplugin failed with no error message", "path": "/run/x/y", "dir": "/etc/cni/net.d",
               "dirs": "/opt/cni/bin /usr/lib/cni", "version": "1.0.0", "versions": '"0.3.1" "0.4.0"',
               "ip": "10.1.0.7", "cidr": "10.1.0.1/24", "range": "10.1.0.2-10.1.0.9", "n": "0", "verb": "add",
               "probe": "Liveness", "url": "http://10.1.0.7:8080/healthz", "detail": "connect: connection refused"}
    for shape in entry.shapes:
        text = re.sub(r"<([a-z_]+\d*|\.\.\.)>", lambda m: "; " if m.group(1) == "..." else samples.get(
            re.sub(r"\d+$", "", m.group(1)).rsplit("_", 1)[-1], "x1"), shape)
        found = entry.search(text)
        assert found and found[1] == shape, (shape, text)
        values = explain.Values({k: v for k, v in found[0].groupdict().items() if v})
        if entry.derive:
            values.update(entry.derive(values))
        for t in (entry.title, entry.cause, entry.fix, *entry.checks):
            t.format_map(values)


def test_shapes_compile_strictly():
    assert set(PLACEHOLDERS) >= {"rest", "plugin", "path", "version"}
    with pytest.raises(ValueError):
        compile_shape("failed <nosuch> here")
    with pytest.raises(ValueError):
        compile_shape("<plugin> and <plugin>")
    assert compile_shape("a  b <n>").search("A   b 12").group("n") == "12"


def test_every_pattern_is_bounded_but_a_trailing_rest():
    """DIAGNOSTICS.md: a line of any length is searched in linear time. An unbounded repeat before the end
    of a pattern rescans the rest of the line at each place its start matches: review 15's line of one
    phrase repeated took 19 s at 320 KB through <...> when it was ".*?". Only a trailing <rest> may run to
    the end (once per match), and a run of blanks between two words."""
    unbounded = re.compile(r"(?<!\\)(?:[*+]|\{\d*,\})")
    for entry in ENTRIES:
        for shape, pattern in zip(entry.shapes, entry.patterns):
            text = pattern.pattern
            if text.endswith("(?P<rest>.+)"):
                text = text[:-len("(?P<rest>.+)")]
            # a run of blanks between words ends where the blanks do: linear however often the word before it
            # occurs; escaped characters are literals
            text = re.sub(r"\\.", "", text.replace(r"\s+", ""))
            assert not unbounded.search(text), f"{entry.key}: {shape!r} has an unbounded repeat: {pattern.pattern}"


def test_groups_name_what_they_caught():
    layer, = explain.match('failed to find plugin "ptp" in path [/opt/cni/bin /usr/lib/cni]')
    assert layer.matched() == {"plugin": "ptp", "dirs": "/opt/cni/bin /usr/lib/cni"}
    assert "plugin-missing" in layer.entry.codes and "plugin-elsewhere" in layer.entry.codes
    assert layer.title() == 'the plugin "ptp" is in none of the directories [/opt/cni/bin /usr/lib/cni]'


def test_a_wrapped_message_uses_the_wrappers_values():
    """A version mismatch inside plugin type="flannel": the fix names flannel and both versions."""
    layers = explain.match('plugin type="flannel" failed (add): incompatible CNI versions; config is "0.4.0", '
                           'plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1"]')
    assert layers[1].fix() == ('set "cniVersion": "0.3.1" in the network configuration (the newest flannel speaks), '
                               "or upgrade flannel to a release that speaks 0.4.0")


def test_unknown_text():
    assert explain.match("the quick brown fox") == []


def test_check_commands_quote_what_the_message_carried():
    """A message is text from anywhere: review 15's `failed to find plugin "$(touch${IFS}/tmp/x)"` became
    `command -v $(touch${IFS}/tmp/x)`, which ran when pasted. Values are quoted word by word; a list of
    dirs stays a list."""
    import shlex
    text = 'failed to find plugin "$(touch${IFS}/tmp/x)" in path [/opt/cni/bin /usr/lib/cni]'
    layer = explain.match(text)[0]
    checks = layer.checks()
    assert "command -v '$(touch${IFS}/tmp/x)'; ls /usr/lib/cni /opt/cni/bin" in checks, checks
    assert "ls -l /opt/cni/bin /usr/lib/cni" in checks, checks
    assert shlex.split(checks[1].split(";")[0]) == ["command", "-v", "$(touch${IFS}/tmp/x)"]
