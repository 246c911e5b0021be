"""The typed decoder (skb.cni.netconf): keys matched and ordered as Go's encoding/json matches them, each
key read only by the commands that declare it, lenient keys remarked on and ignored.

What Go does was observed with Debian's ptp and host-local (tests/integration/test_del_matches_add.py
and tests/property/test_key_spellings.py compare with them); here the decoder alone, on small schemas."""
import pytest

from skb.cni import netconf as config
from skb.cni.errors import CNIError
from skb.cni.netconf import BOOL, INT, STR, STRINGS, Key, list_of, obj


class Inner(config.Conf):
    KEYS = (Key("type", "type", STR, default=""), Key("dataDir", "data_dir", STR, default=""))
    __slots__ = ("type", "data_dir")


class Leaf(config.Conf):
    KEYS = (Key("subnet", "subnet", STR, required=True),)
    __slots__ = ("subnet",)


class Sample(config.NetConf):
    KEYS = (Key("ipMasq", "ip_masq", BOOL, default=False, lenient=("DEL",)),
            Key("mtu", "mtu", INT, default=0, commands=("ADD",)),
            Key("ipam", "ipam", obj(Inner)),
            Key("list", "list", STRINGS),
            Key("ranges", "ranges", list_of(obj(Leaf)), default=()),
            Key("kelvinKey", "kelvin", STR, default=""))
    __slots__ = ("ip_masq", "mtu", "ipam", "list", "ranges", "kelvin")


def load(text, command="ADD"):
    return config.load(text.encode(), Sample, command)


def err(text, command="ADD"):
    with pytest.raises(CNIError) as ei:
        load(text, command)
    return ei.value


BASE = '"name": "n", "cniVersion": "1.0.0"'


@pytest.mark.parametrize("key", ["ipMasq", "ipmasq", "IPMASQ", "IpMaSq", "ipMa\u017fq"])
def test_a_key_is_matched_with_go_folding(key):
    assert load('{%s, "%s": true}' % (BASE, key)).ip_masq is True


@pytest.mark.parametrize("key", ["\u212aelvinKey", "kelvin\u212aey", "KELVINKEY"])
def test_the_kelvin_sign_folds_to_k(key):
    assert load('{%s, "%s": "x"}' % (BASE, key)).kelvin == "x"


@pytest.mark.parametrize("key", ["\u0131pMasq", "\u0130pMasq", "ipMasq ", "ip_masq", "ipMasq\u200b", "ipMa\u00dfq"])
def test_other_characters_do_not_fold_to_a_key(key):
    """The dotless and dotted I, a trailing space, an underscore, a zero-width space, an sharp s: no match."""
    assert load('{%s, "%s": true}' % (BASE, key)).ip_masq is False


@pytest.mark.parametrize("text,want", [
    ('"ipMasq": false, "IPMASQ": true', True),               # the last spelling wins, exact or not
    ('"IPMASQ": true, "ipMasq": false', False),
    ('"ipMasq": true, "ipmasq": false, "ipMasq": true', True),  # a repeated key counts at its last place
    ('"ipMasq": true, "ipmasq": null', True),                # null leaves a boolean as it was
])
def test_of_several_spellings_the_last_wins_as_in_go(text, want):
    assert load('{%s, %s}' % (BASE, text)).ip_masq is want


def test_null_resets_a_list_and_leaves_a_number():
    c = load('{%s, "list": ["a"], "LIST": null, "mtu": 1400, "MTU": null}' % BASE)
    assert c.list is None and c.mtu == 1400


def test_a_repeated_object_is_merged_into_the_first_and_a_list_replaced():
    c = load('{%s, "ipam": {"type": "host-local", "dataDir": "/a"}, "IPAM": {"dataDir": "/b"},'
             ' "ranges": [{"subnet": "x"}, {"subnet": "y"}], "Ranges": [{"subnet": "z"}]}' % BASE)
    assert (c.ipam.type, c.ipam.data_dir) == ("host-local", "/b")
    assert [r.subnet for r in c.ranges] == ["z"]


def test_keys_of_nested_objects_and_paths_in_messages():
    assert load('{%s, "IPAM": {"TYPE": "t", "datadir": "/d"}}' % BASE).ipam.data_dir == "/d"
    e = err('{%s, "ranges": [{"subnet": "x"}, {"Subnet": 5}]}' % BASE)
    assert (e.code, e.msg) == (7, "invalid field ranges[1].subnet: expected a string, found the number 5")
    e = err('{%s, "ranges": [{"subnet": "x"}, {}]}' % BASE)
    assert (e.code, e.msg) == (7, "missing field ranges[1].subnet")
    e = err('{%s, "ipam": []}' % BASE)
    assert e.msg == "invalid field ipam: expected an object, found a list"


def test_a_key_is_decoded_only_for_the_commands_that_read_it():
    c = load('{%s, "mtu": "not a number"}' % BASE, "DEL")
    assert not hasattr(c, "mtu")                  # not decoded for DEL: reading it would be a bug
    assert err('{%s, "mtu": "x"}' % BASE).msg == 'invalid field mtu: expected an integer, found the string "x"'
    assert load('{%s, "mtu": 1400.0}' % BASE).mtu == 1400


def test_a_lenient_key_is_ignored_with_a_remark():
    c = load('{%s, "ipMasq": "yes"}' % BASE, "DEL")
    assert c.ip_masq is False and c.notes == ['ignoring ipMasq: invalid field ipMasq: expected a boolean, '
                                              'found the string "yes"']
    assert err('{%s, "ipMasq": "yes"}' % BASE, "ADD").code == 7


def test_a_decoded_configuration_is_read_only():
    c = load('{%s}' % BASE)
    with pytest.raises(AttributeError):
        c.mtu = 5


def test_unknown_keys_are_ignored_as_go_does():
    assert load('{%s, "something": {"else": 1}}' % BASE).ip_masq is False


def test_common_keys_are_folded_too():
    c = config.load(b'{"NAME": "n", "CNIVERSION": "1.0.0", "Type": "ptp", "PrevResult": {"a": 1}}')
    assert (c.name, c.cni_version, c.type, c.prev_result) == ("n", "1.0.0", "ptp", {"a": 1})


@pytest.mark.parametrize("length,ok", [(255, True), (256, False)])
def test_the_longest_network_name_for_add(length, ok):
    text = '{"name": "%s"}' % ("n" * length)
    if ok:
        assert config.load(text.encode()).name == "n" * length
    else:
        with pytest.raises(CNIError) as ei:
            config.load(text.encode())
        assert ei.value.code == 7 and "longer than 255" in ei.value.msg
    assert config.load(text.encode(), command="DEL").name == "n" * length     # DEL takes any length
