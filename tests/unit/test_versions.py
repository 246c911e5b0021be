"""skb.cni.versions and skb.cni.digest: exact answers and exact error objects (code, msg, details)."""
import hashlib

import pytest

from skb.cni import digest, versions
from skb.cni.errors import CNIError

SUPPORTED = "supported versions: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"
PARTS = 'a CNI version has at most three dot-separated numbers, e.g. "1.1.0"'


def error(fn, *args):
    with pytest.raises(CNIError) as ei:
        fn(*args)
    return ei.value.to_dict()


@pytest.mark.parametrize("text,want", [("", (0, 1, 0)), ("1", (1, 0, 0)), ("1.1", (1, 1, 0)), ("0.4.0", (0, 4, 0)),
                                       ("+1.-2.03", (1, -2, 3)), ("10.20.30", (10, 20, 30))])
def test_parse_version(text, want):
    assert versions.parse_version(text) == want


@pytest.mark.parametrize("value,want", [
    (5, {"code": 6, "msg": "invalid version: expected a string, found the number 5",
         "details": 'a CNI version looks like "1.1.0"'}),
    ("1.2.3.4", {"code": 6, "msg": 'invalid version "1.2.3.4": too many parts', "details": PARTS}),
    ("1.x", {"code": 6, "msg": 'invalid version "1.x": "x" is not an integer', "details": PARTS}),
    ("1.²", {"code": 6, "msg": 'invalid version "1.²": "²" is not an integer', "details": PARTS}),
])
def test_parse_version_errors(value, want):
    assert error(versions.parse_version, value) == want


@pytest.mark.parametrize("text", ["1.1.0", "1", "0.4", "10.0.01"])
def test_check_version_string_takes_versions(text):
    assert versions.check_version_string(text) is None


@pytest.mark.parametrize("text,where,msg", [
    ("1..1", None, 'invalid cniVersion: "1..1" is not a version string'),
    ("1.1.0.0", None, 'invalid cniVersion: "1.1.0.0" is not a version string'),
    ("v1", "prevResult.cniVersion", 'invalid prevResult.cniVersion: "v1" is not a version string'),
    ("1.٣", None, 'invalid cniVersion: "1.٣" is not a version string'),
])
def test_check_version_string_errors(text, where, msg):
    args = (text,) if where is None else (text, where)
    assert error(versions.check_version_string, *args) == {"code": 6, "msg": msg,
                                                           "details": 'a CNI version is written like "1.1.0"'}


@pytest.mark.parametrize("v,family", [(None, "020"), ("", "020"), ("0.2.0", "020"), ("0.3.0", "040"), ("0.4.0", "040"),
                                      ("1.0.0", "100"), ("1.1.0", "100")])
def test_version_family(v, family):
    assert versions.version_family(v) == family


@pytest.mark.parametrize("v,found", [(0, "the number 0"), (False, "false"), ([], "a list"), ({}, "an object"),
                                     ("9.9.9", 'the string "9.9.9"'), ("1.1", 'the string "1.1"')])
def test_version_family_refuses_anything_else(v, found):
    assert error(versions.version_family, v) == {"code": 1, "msg": f"unsupported CNI version {found}", "details": SUPPORTED}


def test_the_version_reply_lists_every_version():
    assert versions.VERSION_REPLY == ('{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1",'
                                      '"0.4.0","1.0.0","1.1.0"]}\n')


@pytest.mark.parametrize("data", ["", "abc", "é", b"\x00\xff"])
def test_sha512_hex_on_first_use_and_after(data, monkeypatch):
    """The C module is loaded on the first call (none loaded yet) and kept for the next ones."""
    monkeypatch.setattr(digest, "_sha512", None)
    want = hashlib.sha512(data.encode() if isinstance(data, str) else data).hexdigest()
    assert digest.sha512_hex(data) == want
    loaded = digest._sha512
    assert loaded is not None
    assert digest.sha512_hex(data) == want and digest._sha512 is loaded
