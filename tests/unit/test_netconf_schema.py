"""The typed decoder (skb.cni.netconf) on a schema made inside each test: every kind's value and exact
error object (code, msg, details), Go's key lookup, nulls, strict objects, commands and required keys.

The schema is built when a test runs, not when this file is imported: building it is the decoder's
code too (``Key``, ``Kind``, ``obj``, ``list_of``, a subclass's table of keys)."""
import pytest

from skb.cni import netconf
from skb.cni.errors import CNIError
from skb.cni.netconf import BOOL, INT, OBJECT, PATH, RAW, STR, STRINGS, Key, Kind, list_of, obj

BASE = {"name": "n", "cniVersion": "1.0.0"}


def schema():
    seen = []

    class Leaf(netconf.Conf):
        KEYS = (Key("subnet", "subnet", STR, required=True, commands=("ADD",)), Key("gw", "gw", STR, default=""))
        __slots__ = ("subnet", "gw")

        def check(self, decoding, where):
            seen.append((type(self).__name__, decoding.command, where))

    class Strict(netconf.Conf):
        STRICT = True
        KEYS = (Key("a", "a", INT, default=0), Key("b", "b", BOOL))
        __slots__ = ("a", "b")

    class Sample(netconf.NetConf):
        KEYS = (Key("flag", "flag", BOOL, default=False, lenient=("DEL",)),
                Key("mtu", "mtu", INT, default=0, commands=("ADD", "CHECK")),
                Key("raw", "raw", RAW), Key("map", "map", OBJECT), Key("list", "list", STRINGS),
                Key("path", "path", PATH, default=""), Key("strict", "strict", obj(Strict)),
                Key("leaf", "leaf", obj(Leaf, resets=True)), Key("leaves", "leaves", list_of(obj(Leaf), "a list of leaves")),
                Key("plain", "plain", list_of(INT)), Key("must", "must", STR, required=True, commands=("CHECK",)))
        __slots__ = ("flag", "mtu", "raw", "map", "list", "path", "strict", "leaf", "leaves", "plain", "must")

        def check(self, decoding, where):
            seen.append(("Sample", decoding.command, where))

    return Sample, seen


def load(extra, command="ADD"):
    sample, seen = schema()
    return netconf.load(dict(BASE, **extra), sample, command), seen


def error(extra, command="ADD"):
    with pytest.raises(CNIError) as ei:
        load(extra, command)
    return ei.value.to_dict()


def test_every_kind_decodes_its_value_and_check_sees_the_command_and_the_path():
    c, seen = load({"flag": True, "mtu": 1400.0, "raw": [1, {"x": None}], "map": {"k": "v"}, "list": ["a", "b"],
                    "path": "/var/x", "strict": {"a": 5, "B": False}, "leaf": {"subnet": "s0"},
                    "leaves": [{"subnet": "s1", "gw": "g1"}, {"subnet": "s2"}], "plain": [1, 2.0]})
    assert (c.flag, c.mtu, c.raw, c.map, c.list, c.path) == (True, 1400, [1, {"x": None}], {"k": "v"}, ("a", "b"),
                                                             "/var/x")
    assert (c.strict.a, c.strict.b, c.leaf.subnet, c.leaf.gw) == (5, False, "s0", "")
    assert [(x.subnet, x.gw) for x in c.leaves] == [("s1", "g1"), ("s2", "")] and c.plain == [1, 2]
    assert seen == [("Leaf", "ADD", "leaf"), ("Leaf", "ADD", "leaves[0]"), ("Leaf", "ADD", "leaves[1]"),
                    ("Sample", "ADD", "")]
    assert repr(c.strict) == "Strict(a=5, b=False)" and repr(c) == "Sample(name='n', cniVersion='1.0.0', type='')"


def test_defaults_when_absent():
    c, _ = load({})
    assert (c.flag, c.mtu, c.raw, c.map, c.list, c.path, c.strict, c.leaf, c.leaves, c.plain) == \
        (False, 0, None, None, None, "", None, None, None, None)
    assert not hasattr(c, "must")           # read by CHECK only
    assert repr(c.__class__.__mro__[0]) and c.notes == []


def test_key_and_kind_defaults():
    k = Key("x", "x", STR)
    assert (k.name, k.attr, k.kind, k.default, k.commands, k.required, k.lenient) == ("x", "x", STR, None, None, False,
                                                                                      ())
    assert repr(k) == "Key('x')"
    fn = lambda v, w, d, o: v  # noqa: E731
    assert (Kind(fn).fn, Kind(fn).resets) == (fn, False)
    assert (obj(netconf.Conf).resets, obj(netconf.Conf, resets=True).resets, list_of(STR).resets) == (False, True, True)


@pytest.mark.parametrize("extra,want", [
    ({"flag": "yes"}, "invalid field flag: expected a boolean, found the string \"yes\""),
    ({"mtu": True}, "invalid field mtu: expected an integer, found true"),
    ({"mtu": 1.5}, "invalid field mtu: expected an integer, found the number 1.5"),
    ({"map": []}, "invalid field map: expected an object, found a list"),
    ({"list": "a"}, "invalid field list: expected a list of strings, found the string \"a\""),
    ({"list": ["a", 5]}, "invalid field list[1]: expected a string, found the number 5"),
    ({"strict": 5}, "invalid field strict: expected an object, found the number 5"),
    ({"leaves": {}}, "invalid field leaves: expected a list of leaves, found an object"),
    ({"leaves": [{"subnet": "s"}, 5]}, "invalid field leaves[1]: expected an object, found the number 5"),
    ({"leaves": [{"subnet": "s"}, {"subnet": None}]}, "missing field leaves[1].subnet"),
    ({"plain": 5}, "invalid field plain: expected a list, found the number 5"),
    ({"plain": [1, "2"]}, "invalid field plain[1]: expected an integer, found the string \"2\""),
    ({"strict": {"a": "x"}}, "invalid field strict.a: expected an integer, found the string \"x\""),
])
def test_a_value_of_the_wrong_kind_is_code_7_naming_the_field_and_the_fix(extra, want):
    field = want.split()[2].rstrip(":") if want.startswith("invalid") else want.split()[2]
    fix = f"fix {field} in the network configuration" if want.startswith("invalid") else \
        f"add {field} to the network configuration"
    assert error(extra) == {"code": 7, "msg": want, "details": fix}


@pytest.mark.parametrize("extra,where", [({"STRICT": {"a": 1, "c": [1]}}, "strict")])
def test_an_unknown_key_of_a_strict_object_is_code_2(extra, where):
    assert error(extra) == {"code": 2, "msg": 'strict.c: unsupported field (value [1])', "details": "strict may hold a, b"}


def test_an_unknown_key_of_a_strict_top_level_object_names_the_configuration():
    class Top(netconf.NetConf):
        STRICT = True
        KEYS = (Key("x", "x", INT, default=0),)
        __slots__ = ("x",)
    with pytest.raises(CNIError) as ei:
        netconf.parse(dict(BASE, x=1), Top).decode("ADD")
        Top.decode_object({"y": True}, "", netconf.Decoding("ADD", []))
    assert ei.value.to_dict() == {"code": 2, "msg": "y: unsupported field (value true)", "details":
                                  "the configuration may hold cniVersion, name, type, prevResult, skbDebugLog, "
                                  "cni.dev/valid-attachments, cni.dev/attachments, x"}


def test_a_required_key_is_required_only_by_the_commands_that_read_it():
    assert error({}, "CHECK") == {"code": 7, "msg": "missing field must", "details": "add must to the network configuration"}
    c, _ = load({"leaf": {"gw": "g"}}, "DEL")          # DEL reads no subnet: not required
    assert c.leaf.gw == "g" and not hasattr(c.leaf, "subnet")
    assert error({"leaf": {"gw": "g"}}) == {"code": 7, "msg": "missing field leaf.subnet",
                                            "details": "add leaf.subnet to the network configuration"}
    c, _ = load({"must": "m", "mtu": 9}, "CHECK")
    assert (c.must, c.mtu) == ("m", 9)


def test_null_resets_what_go_resets_and_leaves_the_rest():
    c, _ = load({"leaf": {"subnet": "s"}, "LEAF": None, "strict": {"a": 1}, "Strict": None, "plain": [1], "PLAIN": None,
                 "flag": True, "Flag": None, "map": {"a": 1}, "MAP": None, "raw": 1, "RAW": None})
    assert (c.leaf, c.strict.a, c.plain, c.flag, c.map, c.raw) == (None, 1, None, True, None, None)


def test_a_second_spelling_of_an_object_is_merged_into_the_first():
    c, seen = load({"leaf": {"subnet": "s", "gw": "g"}, "LEAF": {"gw": "h"}, "strict": {"a": 1}, "STRICT": {"b": True}})
    assert (c.leaf.subnet, c.leaf.gw, c.strict.a, c.strict.b) == ("s", "h", 1, True)


def test_a_lenient_key_is_remarked_on_for_the_command_it_is_lenient_for():
    c, _ = load({"flag": 5}, "DEL")
    assert c.flag is False and c.notes == ["ignoring flag: invalid field flag: expected a boolean, found the number 5"]


@pytest.mark.parametrize("key", ["must", "MUST"])
def test_plugin_keys_are_decoded_on_every_decode_of_a_new_schema(key):
    for _ in range(2):
        c, _seen = load({key: "m"}, "CHECK")
        assert c.must == "m"


# --------------------------------------------------------------------------------------------------
# lookup and folding, as Go's decoder finds a field


def test_fold():
    assert (netconf.fold("ABC"), netconf.fold("\u212aelvin"), netconf.fold("\u00c9A\u017f"), netconf.fold("é")) == \
        ("abc", "kelvin", "\u00c9as", "é")


@pytest.mark.parametrize("raw,want", [({"a": 1}, 1), ({"A": 1}, 1), ({"a": 1, "A": 2}, 2), ({"A": 1, "a": 2}, 2),
                                      ({"a": 1, "b": 2}, 1), ({"b": 2, "\u212a": 3}, 2)])
def test_lookup_the_last_matching_spelling(raw, want):
    assert netconf.lookup(raw, "a" if "\u212a" not in raw else "b") == want


def test_lookup_of_an_absent_key():
    with pytest.raises(KeyError) as ei:
        netconf.lookup({"b": 1, "c": None}, "a")
    assert ei.value.args == ("a",)
    assert netconf.lookup_default({"b": 1, "c": None}, "a", "default") == "default"
    assert netconf.lookup_default({"b": 1}, "a") is None and netconf.lookup_default({"A": 0}, "a", 5) == 0


# --------------------------------------------------------------------------------------------------
# the shared keys and the version gates: exact error objects

NAME_FIX = "use letters, digits, '_', '.' and '-', starting with a letter or digit"


@pytest.mark.parametrize("data,want", [
    (b"[1]", (6, "the network configuration must be a JSON object, found a list",
              'e.g. {"cniVersion": "1.0.0", "name": "mynet", "type": "loopback"}')),
    ({"cniVersion": "1.0.0"}, (7, "missing network name", 'set "name" in the network configuration')),
    ({"name": "n", "cniVersion": 5}, (6, "invalid field cniVersion: expected a string, found the number 5",
                                      'a CNI version is a string such as "1.1.0"')),
    ({"name": "n", "cniVersion": "1..0"}, (6, 'invalid cniVersion: "1..0" is not a version string',
                                           'a CNI version is written like "1.1.0"')),
    ({"name": "a b"}, (7, "invalid characters found in network name", f"name 'a b': {NAME_FIX}")),
    ({"name": 5}, (7, "invalid field name: expected a string, found the number 5",
                   "fix name in the network configuration")),
    (b'{"name": }', (6, "invalid JSON in the network configuration on stdin: expecting value at line 1, column 10",
                     '{"name": }\n         ^')),
])
def test_shared_keys_errors(data, want):
    with pytest.raises(CNIError) as ei:
        netconf.parse(data)
    assert ei.value.to_dict() == dict(zip(("code", "msg", "details"), want))


def test_a_missing_or_empty_cni_version_is_010():
    assert netconf.parse({"name": "n"}).cni_version == "0.1.0" and netconf.parse({"name": "n", "cniVersion": ""}).cni_version == "0.1.0"


@pytest.mark.parametrize("path,where,want", [
    (5, "ipam", ("invalid field ipam.dataDir: expected a file path, found the number 5",
                 "set ipam.dataDir to an absolute path such as /var/log/x, or remove it")),
    ("", "", ('invalid field dataDir: expected a file path, found the string ""',
              "set dataDir to an absolute path such as /var/log/x, or remove it")),
    ("/a\0b", "ipam", ("invalid field ipam.dataDir: the path contains a NUL byte", "remove the \\u0000 from ipam.dataDir")),
    ("rel/x", "ipam", ('invalid field ipam.dataDir: "rel/x" is a relative path', "make ipam.dataDir absolute (starting "
                       "with /): a relative path would be resolved against the runtime's working directory")),
    ("rel", "", ('invalid field dataDir: "rel" is a relative path', "make dataDir absolute (starting with /): a relative "
                 "path would be resolved against the runtime's working directory")),
])
def test_check_path_errors(path, where, want):
    with pytest.raises(CNIError) as ei:
        netconf.check_path(path, "dataDir", where)
    assert ei.value.to_dict() == {"code": 7, "msg": want[0], "details": want[1]}
    assert netconf.check_path("/ok", "dataDir", where) == "/ok"


@pytest.mark.parametrize("version,command,want", [
    ("9.9.9", "ADD", ("incompatible CNI versions", 'config is "9.9.9", plugin supports ["0.1.0" "0.2.0" "0.3.0" '
                      '"0.3.1" "0.4.0" "1.0.0" "1.1.0"]')),
    ("0.3.1", "CHECK", ("config version does not allow CHECK", 'CHECK needs cniVersion "0.4.0" or later; the config '
                        'has "0.3.1"')),
    ("1.0.0", "STATUS", ("config version does not allow STATUS", 'STATUS needs cniVersion "1.1.0" or later; the config '
                         'has "1.0.0"')),
    ("1.0.0", "GC", ("config version does not allow GC", 'GC needs cniVersion "1.1.0" or later; the config has "1.0.0"')),
])
def test_version_gates(version, command, want):
    with pytest.raises(CNIError) as ei:
        netconf.check_version(netconf.parse({"name": "n", "cniVersion": version}), command)
    assert ei.value.to_dict() == {"code": 1, "msg": want[0], "details": want[1]}


@pytest.mark.parametrize("version,command", [("0.4.0", "CHECK"), ("1.1.0", "STATUS"), ("1.1.0", "GC"), ("0.1.0", "ADD"),
                                             ("0.1.0", "DEL")])
def test_version_gates_let_through(version, command):
    assert netconf.check_version(netconf.parse({"name": "n", "cniVersion": version}), command) is None


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_a_name_too_long_for_add_and_check(command):
    with pytest.raises(CNIError) as ei:
        netconf.load({"name": "n" * 256}, netconf.NetConf, command)
    assert ei.value.to_dict() == {"code": 7, "msg": "invalid field name: longer than 255 characters",
                                  "details": "it has 256; a network name names a directory, so it is at most 255 "
                                             "characters"}


def test_valid_attachments_of_gc():
    att = [{"containerID": "c1", "ifname": "eth0"}, {"CONTAINERID": "c2", "IfName": "eth1"}]
    c = netconf.load(dict(BASE, cniVersion="1.1.0", **{"cni.dev/valid-attachments": att}), netconf.NetConf, "GC")
    assert c.valid_attachments() == {("c1", "eth0"), ("c2", "eth1")}
    c = netconf.load(dict(BASE, cniVersion="1.1.0", **{"cni.dev/attachments": att[:1]}), netconf.NetConf, "GC")
    assert c.valid_attachments() == {("c1", "eth0")}
    assert netconf.load(dict(BASE, cniVersion="1.1.0"), netconf.NetConf, "GC").valid_attachments() is None
    c = netconf.load(dict(BASE, cniVersion="1.1.0", **{"cni.dev/valid-attachments": [], "cni.dev/attachments": att}),
                     netconf.NetConf, "GC")
    assert c.valid_attachments() == {("c1", "eth0"), ("c2", "eth1")}     # either key's list is valid
    with pytest.raises(CNIError) as ei:
        netconf.load(dict(BASE, **{"cni.dev/valid-attachments": [{"ifname": "e"}]}), netconf.NetConf, "GC")
    assert ei.value.msg == "missing field cni.dev/valid-attachments[0].containerID"


def test_keys_after_one_the_command_does_not_read_are_still_decoded():
    c, _ = load({"mtu": "not read by DEL", "flag": True, "list": ["a"]}, "DEL")
    assert (c.flag, c.list) == (True, ("a",)) and not hasattr(c, "mtu")


def test_the_name_is_checked_first_wherever_it_stands():
    assert netconf.parse({"cniVersion": "1.0.0", "type": "t", "name": "n"}).name == "n"
    c = netconf.parse({"type": "t", "prevResult": {}, "cniVersion": "1.0.0", "name": "n"})
    assert (c.name, c.cni_version, c.type, c.prev_result) == ("n", "1.0.0", "t", {})
    with pytest.raises(CNIError) as ei:
        netconf.parse({"cniVersion": 5, "type": 5})
    assert (ei.value.code, ei.value.msg) == (7, "missing network name")


def test_null_resets_a_key_to_its_own_default():
    from skb_plugins.hostlocal_ipam import config as hcfg
    raw = dict(BASE, ipam={"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0"}], "Routes": None})
    assert netconf.load(raw, hcfg.HostLocalConf, "ADD").ipam.routes == ()


def test_an_unknown_nested_key_or_a_lenient_error_does_not_stop_the_keys_after_it():
    c, _ = load({"leaf": {"zzz": 1, "subnet": "s", "gw": "g"}})
    assert (c.leaf.subnet, c.leaf.gw) == ("s", "g")
    c, _ = load({"flag": 5, "list": ["a"]}, "DEL")
    assert (c.flag, c.list) == (False, ("a",))


def test_an_empty_path_is_absent_and_check_path_names_a_top_level_key():
    c, _ = load({"path": ""})
    assert c.path == ""
    with pytest.raises(CNIError) as ei:
        netconf.check_path(5, "skbDebugLog")
    assert ei.value.msg == "invalid field skbDebugLog: expected a file path, found the number 5"


def test_repr_shows_the_keys_decoded_and_set():
    c, _ = load({"leaf": {"subnet": "s"}})
    assert repr(c.leaf) == "Leaf(subnet='s')"
    c, _ = load({"leaf": {"gw": "g"}}, "DEL")
    assert repr(c.leaf) == "Leaf(gw='g')"
