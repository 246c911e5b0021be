"""The dispatcher, in-process with a fake plugin: output shapes, codes, no tracebacks on stdout."""
import json

import pytest

from skb.plugin import skel


class FakeResult:
    def to_dict(self, version):
        return {"cniVersion": version, "ips": []}


calls = []


def add(args, conf):
    calls.append(("ADD", args, conf))
    return FakeResult()


def boom(args, conf):
    raise KeyError("oops")


PLUGIN = skel.Plugin("fake", "a test double", add=add, delete=lambda a, c: None, check=lambda a, c: None)
BROKEN = skel.Plugin("broken", "raises", add=boom, delete=boom, check=boom)
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "", "CNI_PATH": "/opt/cni/bin"}


def call(plugin=PLUGIN, stdin=b'{"cniVersion":"1.0.0","name":"n","type":"fake"}', **env):
    e = dict(ENV)
    e.update(env)
    return skel.run(plugin, {k: v for k, v in e.items() if v is not None}, stdin)


def test_add_prints_result_in_config_version():
    out = call(stdin=b'{"cniVersion":"0.3.1","name":"n"}')
    assert out.code == 0 and json.loads(out.stdout) == {"cniVersion": "0.3.1", "ips": []}


def test_version_reply():
    out = call(CNI_COMMAND="VERSION", stdin=b"not read")
    assert json.loads(out.stdout) == {"cniVersion": "1.1.0", "supportedVersions": [
        "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}


def test_no_command_prints_about_on_stderr_exit_0():
    out = skel.run(PLUGIN, {}, b"")
    assert out.code == 0 and out.stdout == "" and "CNI fake plugin" in out.stderr and "1.1.0" in out.stderr


def test_error_json_shape():
    out = call(stdin=b'{"cniVersion":"1.0.0","name":"n",}')
    e = json.loads(out.stdout)
    assert out.code == 1 and e["code"] == 6 and "cniVersion" not in e   # no configuration: no version to speak
    assert "trailing comma" in e["msg"] and "^" in e["details"]


def test_error_uses_config_version_when_known():
    out = call(stdin=b'{"cniVersion":"0.4.0","name":"n"}', CNI_COMMAND="GC")
    assert json.loads(out.stdout) == {"cniVersion": "0.4.0", "code": 1, "msg": "config version does not allow GC",
                                      "details": 'GC needs cniVersion "1.1.0" or later; the config has "0.4.0"'}


def test_unknown_command_after_stdin_validation_like_go():
    assert json.loads(call(CNI_COMMAND="FOO", stdin=b"").stdout)["code"] == 6
    out = json.loads(call(CNI_COMMAND="FOO").stdout)
    assert out["code"] == 4 and out["msg"] == "unknown CNI_COMMAND: FOO"
    assert json.loads(call(CNI_COMMAND="add").stdout)["msg"] == "unknown CNI_COMMAND: add"


def test_missing_gc_and_status_succeed_silently():
    for cmd in ("GC", "STATUS"):
        out = call(CNI_COMMAND=cmd, stdin=b'{"cniVersion":"1.1.0","name":"n"}')
        assert (out.code, out.stdout) == (0, "")


def test_unexpected_exception_is_999_and_traceback_only_on_stderr():
    out = call(BROKEN)
    e = json.loads(out.stdout)
    assert out.code == 1 and e["code"] == 999 and "KeyError" in e["msg"] and "broken" in e["msg"]
    assert "Traceback" in out.stderr and "Traceback" not in out.stdout


def test_env_error_before_stdin():
    out = call(CNI_CONTAINERID="bad id", stdin=b"garbage")
    assert json.loads(out.stdout)["msg"] == "invalid characters in containerID"
