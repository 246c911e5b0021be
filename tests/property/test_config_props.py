"""Property: whatever arrives on stdin, a plugin answers with exit 0 or one spec-shaped error.

Runs the real dispatcher with a plugin whose ADD does what a chained plugin does with its input (parse the
prevResult in the config's version and print it back), so config parsing, prevResult parsing and result
conversion are all exercised. No input may give a traceback, code 999, or anything but one JSON object.
"""
import json

from hypothesis import given, settings, strategies as st

from skb.plugin import skel
from skb.cni.result import Result, parse_prev_result

SPEC_CODES = {1, 2, 3, 4, 5, 6, 7, 11}
VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def add(call):
    conf = call.conf
    prev = parse_prev_result(conf.cni_version, conf.prev_result)
    return prev if prev is not None else Result(conf.cni_version)


PLUGIN = skel.Plugin("prop", "property-test double", add=add, delete=lambda call: None, check=lambda call: None)
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "", "CNI_PATH": "/x"}

# Text with lone surrogates (json.dumps writes them as \\ud800 escapes, valid JSON) and NULs, and integers
# near and past Python's int-string limit: the input classes of issue 13.
odd_text = st.text(st.characters(exclude_categories=()) | st.sampled_from("\0\ud800\udfff\udc80"), max_size=12)
scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12) | odd_text)
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                                       max_size=4), max_leaves=20)
addresses = st.sampled_from(["10.1.0.5/24", "fd00::5/64", "10.1.0.5", "300.1.1.1/8", "::1/128", "", "x/1"])
ip_entries = st.fixed_dictionaries({"address": addresses}, optional={
    "gateway": st.sampled_from(["10.1.0.1", "fd00::1", "nope"]) | json_values,
    "interface": st.integers(-2, 3) | json_values, "version": st.sampled_from(["4", "6", "5"]) | json_values})
prev_results = st.fixed_dictionaries({}, optional={
    "cniVersion": st.sampled_from(VERSIONS + ["", "9.9.9"]) | json_values,
    "ips": st.lists(ip_entries, max_size=3) | json_values,
    "ip4": st.fixed_dictionaries({"ip": addresses}) | json_values,
    "interfaces": st.lists(st.fixed_dictionaries({"name": st.text(max_size=5) | json_values}), max_size=2),
    "routes": st.lists(st.fixed_dictionaries({"dst": addresses}), max_size=2) | json_values,
    "dns": st.fixed_dictionaries({}, optional={"nameservers": st.lists(st.text(max_size=5)) | json_values})})
configs = st.fixed_dictionaries({}, optional={
    "cniVersion": st.sampled_from(VERSIONS + ["", "1.1", "v1.0.0"]) | json_values,
    "name": st.sampled_from(["net", "a b", ""]) | json_values,
    "type": st.just("prop") | json_values,
    "runtimeConfig": json_values, "args": json_values,
    "skbDebugLog": st.just(5) | st.none() | st.sampled_from(["rel/log", "/tmp/a\0b", "", "/dev/zero"]),
    "prevResult": prev_results | json_values})


def check(out):
    assert "Traceback" not in out.stdout and "Traceback" not in out.stderr, out.stderr
    out.stdout.encode("utf-8")  # printable: no lone surrogate survives into the answer
    if out.code == 0:
        if out.stdout:  # ADD and VERSION print a result; the others print nothing
            assert isinstance(json.loads(out.stdout), dict)
        return
    assert out.code == 1
    err = json.loads(out.stdout)
    assert err["code"] in SPEC_CODES, err
    assert isinstance(err["msg"], str) and err["msg"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data):
    check(skel.run(PLUGIN, ENV, data))


@settings(max_examples=400, deadline=None)
@given(configs)
def test_config_shaped_objects(obj):
    check(skel.run(PLUGIN, ENV, json.dumps(obj).encode()))


@settings(max_examples=100, deadline=None)
@given(configs, st.sampled_from(["DEL", "CHECK", "STATUS", "GC", "VERSION", "BOGUS"]))
def test_other_commands(obj, command):
    check(skel.run(PLUGIN, dict(ENV, CNI_COMMAND=command), json.dumps(obj).encode()))


@settings(max_examples=150, deadline=None)
@given(configs, st.integers(1, 6000), st.booleans(), st.sampled_from(["top", "prev", "list"]))
def test_huge_integers_anywhere(obj, digits, negative, where):
    """Integers with up to 6000 digits (Python refuses more than 4300 in int()): accepted, or a decode
    error located at the number, never "line 1, column 1"."""
    number = ("-" if negative else "") + "7" * digits
    text = json.dumps(obj)[:-1] + (", " if obj else "") + {
        "top": f'"huge": {number}}}', "prev": f'"prevResult": {{"cniVersion": "1.0.0", "dns": {{"x": {number}}}}}}}',
        "list": f'"l": [1, {number}]}}'}[where]
    out = skel.run(PLUGIN, ENV, text.encode())
    check(out)
    if digits > 4300 and "Infinity" not in text:   # (json.dumps writes inf as Infinity: an earlier error)
        err = json.loads(out.stdout)
        assert err["code"] == 6 and "number too long" in err["msg"]
        assert err["msg"].endswith(f"line 1, column {text.find(number) + 1}"), (err, text.find(number))
