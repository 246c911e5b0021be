"""skb replay's rule for an ADD replayed as a container of its own: only what the new container ID makes
anew is set aside (MACs, the host veth's name, and an address the allocator chose); a requested address, or
an IPAM plugin's own result, is compared as it is."""
import json

from skb.tool.replay import _generated_aside, _requested

PTP = {"cniVersion": "1.0.0", "interfaces": [{"name": "veth1234", "mac": "aa:bb:cc:dd:ee:01"},
                                             {"name": "eth0", "mac": "aa:bb:cc:dd:ee:02", "sandbox": "/x"}],
       "ips": [{"interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"}]}


def _other(address="10.1.0.6/16", sandbox_name="eth0"):
    r = json.loads(json.dumps(PTP))
    r["interfaces"][0].update(name="veth9999", mac="aa:bb:cc:dd:ee:03")
    r["interfaces"][1].update(name=sandbox_name, mac="aa:bb:cc:dd:ee:04")
    r["ips"][0]["address"] = address
    return r


def test_what_a_new_container_id_makes_is_set_aside():
    assert _generated_aside(PTP, True) == _generated_aside(_other(), True)


def test_a_real_difference_stays_one():
    assert _generated_aside(PTP, True) != _generated_aside(_other("10.2.0.6/16"), True)   # another subnet
    assert _generated_aside(PTP, True) != _generated_aside(_other(sandbox_name="eth1"), True)
    assert _generated_aside(PTP, False) != _generated_aside(_other(), False)   # a requested address


def test_an_ipam_plugins_result_is_compared_the_same_way_but_never_hides_a_gateway_or_broadcast():
    hl = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}]}
    assert _generated_aside(hl, True) == _generated_aside(
        {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.6/16", "gateway": "10.1.0.1"}]}, True)
    for bad in ("10.1.0.1/16", "10.1.255.255/16", "10.1.0.0/16"):    # the gateway, the broadcast, the network
        other = {"cniVersion": "1.0.0", "ips": [{"address": bad, "gateway": "10.1.0.1"}]}
        assert _generated_aside(hl, True) != _generated_aside(other, True), bad


def test_requests_are_seen_wherever_a_runtime_puts_them():
    assert _requested("IgnoreUnknown=1;IP=10.1.0.15", "{}")
    assert _requested("", json.dumps({"args": {"cni": {"ips": ["10.1.0.15"]}}}))
    assert _requested("", json.dumps({"runtimeConfig": {"ips": ["10.1.0.15"]}}))
    assert not _requested("K8S_POD_NAME=x", json.dumps({"name": "n", "type": "ptp"}))


# review 15: the record keys as the plugins read them (Go's case folding), hooks, what reaches a terminal

def test_record_files_are_diverted_in_any_spelling_and_escape():
    from skb.tool.replay import divert_records
    stdin = ('{"CaptureFile":"/var/log/cap","type":"debug","CNIOUTPUT":"\\/anywhere","s\u212abdebuglog":"/l",'
             '"captureFile":"/var/log/cap2"}')
    env = {"SKB_DEBUG_LOG": "/var/log/x"}
    out, keys = divert_records(stdin, env, "/tmp/aside")
    pairs = json.loads(out, object_pairs_hook=lambda p: p)
    assert [v for k, v in pairs if k != "type"] == ["/tmp/aside/captureFile", "/tmp/aside/cniOutput",
                                                    "/tmp/aside/skbDebugLog", "/tmp/aside/captureFile"]
    assert env["SKB_DEBUG_LOG"] == "/tmp/aside/SKB_DEBUG_LOG" and "CNIOUTPUT" in keys
    same = '{"cniVersion":"1.0.0", "skbDebugLog": "/l",  "x": 1}'
    assert divert_records(same, {}, "/t")[0] == '{"cniVersion":"1.0.0", "skbDebugLog": "/t/skbDebugLog",  "x": 1}'


def test_hooks_are_found_in_any_spelling_at_any_depth():
    from skb.tool.replay import hooks_in
    assert hooks_in('{"ADDHOOKS": [["x"]], "ipam": {"delHoo\u212as": [["y"]]}, "checkHooks": []}') == \
        ["delHoo\u212as", "ADDHOOKS"]
    assert hooks_in('{"type": "debug", "addHooks": null}') == [] and hooks_in("not json") == []


def test_control_characters_are_made_visible():
    from skb.tool.style import visible
    assert visible("a\x1b]52;c;x\x07\r\x9b\u202e\tb\nc", "\n\t") == "a\\x1b]52;c;x\\x07\\r\\x9b\\u202e\tb\nc"
    assert visible("a\tb\n", "") == "a\\tb\\n" and visible(None) == "" and visible("plain é") == "plain é"
