"""The fields libcni reads from a plugin object (types.PluginConf) when a key is spelled several ways: Go's
decoder, as docs/REFERENCE.md#decoding-a-configuration states it (tests/property/test_key_spellings.py holds
Debian's Go plugins to the same rule): every spelling is decoded in document order, so the last one wins
whether or not it is the exact one; null changes nothing for a string or a struct and resets a map; a
repeated struct or map is decoded into the first one's value; a type error in any spelling fails."""
import json

import pytest

from skb.tool import libcni
from skb.tool.libcni import LibcniError


def conf(*pairs):
    """A plugin object with its keys in this order (a dict literal cannot hold two spellings' order)."""
    return libcni.plugin_conf_from_bytes(json.dumps(dict(pairs)).encode())


@pytest.mark.parametrize("pairs,want", [
    ((("type", "exact"), ("TYPE", "last")), "last"),      # the exact spelling first: the later one wins
    ((("Type", "first"), ("type", "exact")), "exact"),
    ((("type", "a"), ("Type", "b"), ("tYPE", "c")), "c"),
    ((("type", "kept"), ("Type", None)), "kept"),          # null leaves a string as it was
    ((("typ\u0435", "other"), ("type", "t")), "t"),       # a Cyrillic e is another key
])
def test_the_last_spelling_of_a_string_field_wins(pairs, want):
    assert conf(*pairs).type == want


def test_name_and_version_follow_the_same_rule():
    c = conf(("type", "t"), ("name", "a"), ("NAME", "b"), ("cniVersion", "1.0.0"), ("CNIVER\u017fION", "0.4.0"))
    assert (c.name, c.cni_version) == ("b", "0.4.0")    # the long s folds to s, as in Go


@pytest.mark.parametrize("pairs,want", [
    ((("ipam", {"type": "a"}), ("IPAM", {"type": "b"})), "b"),
    ((("IPAM", {"type": "a"}), ("ipam", {"dataDir": "/x"})), "a"),      # merged: the first one's type stays
    ((("ipam", {"type": "a", "TYPE": "b"}), ("Ipam", {"Type": None})), "b"),
    ((("ipam", {"type": "a"}), ("IPAM", None)), "a"),                   # null leaves a struct as it was
])
def test_a_repeated_struct_field_is_merged(pairs, want):
    assert conf(("type", "t"), *pairs).ipam_type == want


@pytest.mark.parametrize("pairs,want", [
    ((("capabilities", {"portMappings": True}), ("Capabilities", {"bandwidth": True})),
     {"portMappings": True, "bandwidth": True}),
    ((("capabilities", {"portMappings": True}), ("CAPABILITIES", {"portMappings": False})), {"portMappings": False}),
    ((("capabilities", {"portMappings": True}), ("CAPABILITIES", None)), {}),            # null resets a map
    ((("capabilities", None), ("Capabilities", {"mac": True})), {"mac": True}),
])
def test_a_repeated_map_field_keeps_the_earlier_entries(pairs, want):
    assert conf(("type", "t"), *pairs).capabilities == want


@pytest.mark.parametrize("pairs,msg", [
    ((("Type", 5), ("type", "t")), "number into Go struct field PluginConf.type of type string"),  # any spelling
    ((("type", "t"), ("IPAM", {"type": "a"}), ("ipam", {"TYPE": 5})),
     "number into Go struct field IPAM.ipam.type of type string"),
    ((("type", "t"), ("Capabilities", {"mac": "yes"})), "string into Go struct field PluginConf.capabilities of type bool"),
    ((("NAME", 1), ("type", 2)), "number into Go struct field PluginConf.name of type string"),  # the first one met
])
def test_a_type_error_in_any_spelling_fails(pairs, msg):
    with pytest.raises(LibcniError) as e:
        conf(*pairs)
    assert str(e.value) == f"error parsing configuration: json: cannot unmarshal {msg}"
