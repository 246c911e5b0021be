"""Config parsing: code 6 for bad JSON (located), 7 for bad fields (named), 1 for versions."""
import json

import pytest

from skb.cni import netconf as config
from skb.cni.errors import CNIError


def err(fn, *a):
    with pytest.raises(CNIError) as ei:
        fn(*a)
    return ei.value


def test_parse_minimal_defaults_to_0_1_0():
    conf = config.parse(b'{"name": "n", "type": "loopback"}')
    assert (conf.name, conf.cni_version, conf.type, conf.prev_result) == ("n", "0.1.0", "loopback", None)


def test_trailing_comma_is_code_6_with_location_and_text():
    e = err(config.parse, b'{\n "cniVersion": "1.0.0",\n "name": "n",\n}')
    assert e.code == 6
    assert "trailing comma" in e.msg and "line 3, column 13" in e.msg
    assert '"name": "n",' in e.details and "^" in e.details


@pytest.mark.parametrize("data", [b"[]", b'"x"', b"null", b"1"])
def test_non_object_is_code_6(data):
    assert err(config.parse, data).code == 6


@pytest.mark.parametrize("data,code,msg", [
    (b'{"type": "x"}', 7, "missing network name"),
    (b'{"name": ""}', 7, "missing network name"),
    (b'{"name": "a b"}', 7, "invalid characters found in network name"),
    (b'{"name": 5}', 7, "invalid field name: expected a string, found the number 5"),
    (b'{"name": "n", "cniVersion": 1.0}', 6, "invalid field cniVersion: expected a string"),  # spec: decode
    (b'{"name": "n", "type": ["x"]}', 7, "invalid field type: expected a string, found a list"),
    (b'{"name": "n", "skbDebugLog": 5}', 7, "invalid field skbDebugLog: expected a string, found the number 5"),
])
def test_field_errors_name_the_field(data, code, msg):
    e = err(config.parse, data)
    assert e.code == code and msg in e.msg


@pytest.mark.parametrize("version", config.SUPPORTED_VERSIONS)
def test_supported_versions_accepted_for_add(version):
    """Each version is read as given and passes the ADD gate: a plugin run through skel answers in it."""
    from skb.cni.result import IPConfig, Result
    from skb.plugin import skel
    conf = config.parse(b'{"name":"n","cniVersion":"%s"}' % version.encode())
    assert conf.cni_version == version and config.check_version(conf, "ADD") is None
    plugin = skel.Plugin("t", "t", add=lambda *a: Result(version, ips=[IPConfig("10.1.0.2/24")]),
                         delete=None, check=None)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}
    out = skel.run(plugin, env, b'{"name":"n","cniVersion":"%s"}' % version.encode())
    assert out.code == 0 and json.loads(out.stdout)["cniVersion"] == version, out.stdout


@pytest.mark.parametrize("version", ["1.1", "0.5.0", "2.0.0", "0.1"])
def test_unsupported_version_is_code_1_listing_supported(version):
    conf = config.parse(b'{"name":"n","cniVersion":"%s"}' % version.encode())
    e = err(config.check_version, conf, "ADD")
    assert e.code == 1 and e.msg == "incompatible CNI versions"
    assert f'config is "{version}"' in e.details and '"0.1.0"' in e.details and '"1.1.0"' in e.details


@pytest.mark.parametrize("version", ["v1.1.0", "1.1.0-rc1", "1.1.0.0", "1..0", "x", " 1.0.0", "1.0.0\n", "١.0.0"])
def test_a_version_that_is_not_a_version_string_is_a_decode_error(version):
    """The spec's own example of code 6: failure to decode version info from a string; every command."""
    e = err(config.parse, ('{"name":"n","cniVersion":%s}' % json.dumps(version)).encode())
    assert e.code == 6 and "is not a version string" in e.msg


@pytest.mark.parametrize("command,version,ok", [
    ("CHECK", "0.3.1", False), ("CHECK", "0.4.0", True), ("STATUS", "1.0.0", False),
    ("STATUS", "1.1.0", True), ("GC", "0.4.0", False), ("GC", "1.1.0", True),
])
def test_command_version_gates(command, version, ok):
    conf = config.parse(b'{"name":"n","cniVersion":"%s"}' % version.encode())
    if ok:
        assert config.check_version(conf, command) is None
    else:
        e = err(config.check_version, conf, command)
        assert e.code == 1 and e.msg == f"config version does not allow {command}"


def test_valid_attachments_for_gc():
    def va(raw):
        return config.load(dict(raw, name="n", cniVersion="1.1.0"), command="GC").valid_attachments()
    # what either key lists is valid: a GC never frees what its own request names (libcni sends both, equal)
    assert va({"cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}],
               "cni.dev/attachments": [{"containerID": "old", "ifname": "eth0"}]}) == {("a", "eth0"), ("old", "eth0")}
    assert va({"cni.dev/valid-attachments": None}) == set()     # null: libcni's empty list (review 15)
    assert va({"cni.dev/valid-attachments": None, "cni.dev/attachments": [{"containerID": "a", "ifname": "e"}]}) \
        == {("a", "e")}
    assert va({"cni.dev/attachments": [{"containerID": "b", "ifname": "net1"}]}) == {("b", "net1")}
    assert va({"CNI.dev/Valid-Attachments": [{"ContainerID": "c", "IFNAME": "e"}]}) == {("c", "e")}   # as Go reads keys
    assert va({"cni.dev/valid-attachments": []}) == set()      # an empty list: nothing is valid
    assert va({}) is None                                       # no list: say nothing (cnitool's gc)
    for bad in ([{"containerID": 5, "ifname": "eth0"}], ["x"], [{"containerID": "a"}]):
        e = err(va, {"cni.dev/valid-attachments": bad})
        assert e.code == 7 and "cni.dev/valid-attachments[0]" in e.msg
    assert not hasattr(config.load({"name": "n", "cni.dev/valid-attachments": ["x"]}, command="DEL"), "valid")
