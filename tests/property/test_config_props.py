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


def add(args, conf):
    prev = parse_prev_result(conf.cni_version, conf.prev_result)
    return prev if prev is not None else Result(conf.cni_version)


PLUGIN = skel.Plugin("prop", "property-test double", add=add, delete=lambda a, c: None, check=lambda a, c: None)
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "", "CNI_PATH": "/x"}

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
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
    "runtimeConfig": json_values, "args": json_values, "skbDebugLog": st.just(5) | st.none(),
    "prevResult": prev_results | json_values})


def check(out):
    assert "Traceback" not in out.stdout and "Traceback" not in out.stderr, out.stderr
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
