"""Review 16, in-process: the debug plugin keeps the stdin of a call the environment fails (so its
captureFile records it), and a call a plugin of the suite delegates to its IPAM writes no debug log record
of its own (a log holds only the runtime's calls)."""
import io
import json

import pytest

from skb.cni.env import CmdArgs
from skb.plugin import delegate, skel
from skb_plugins.debug import debug

CAPTURE = "/tmp/review16/cap.jsonl"
STDIN = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "debug", "captureFile": CAPTURE}).encode()
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/a", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "", "CNI_PATH": "/opt/cni/bin"}


@pytest.mark.parametrize("bad", [{"CNI_IFNAME": "bad if"}, {"CNI_CONTAINERID": "bad id"}, {"CNI_NETNS": ""},
                                 {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": ""}])
def test_a_call_the_environment_fails_keeps_its_stdin_for_the_capture(bad):
    out, _rec = debug.run(dict(ENV, **bad), STDIN)
    assert out.code == 1 and json.loads(out.stdout)["code"] == 4
    assert out.stdin == STDIN and debug.capture_path(out) == CAPTURE
    assert json.loads(skel.debug_record(debug.Recorder({}, b"").plugin(), dict(ENV, **bad), out, 0.0))["stdin"] == \
        STDIN.decode()


class Unreadable(io.BytesIO):
    """A stdin that must not be read (a runtime may leave it open)."""

    def read(self, *_a):
        raise AssertionError("stdin was read")

    buffer = property(lambda self: self)

    def isatty(self):
        return False


@pytest.mark.parametrize("environ,code", [({"CNI_COMMAND": "VERSION"}, None), ({}, None),
                                          (dict(ENV, CNI_CONTAINERID="bad id"), 4)])
def test_version_a_missing_command_and_a_stdin_not_in_hand_are_not_read(environ, code, monkeypatch):
    """What the dispatcher does with a stdin it was not handed already is unchanged: VERSION and a missing
    CNI_COMMAND never read it, nor does a call the environment fails (as Go's skel)."""
    out = skel.run(debug.Recorder({}, b"").plugin(), environ, Unreadable())
    assert out.stdin == b""
    assert (json.loads(out.stdout)["code"] if code else out.code) == (code or 0)
    monkeypatch.setattr("sys.stdin", Unreadable())
    if environ.get("CNI_COMMAND", "") in ("", "VERSION"):
        assert debug._stdin_for(environ) is debug.sys.stdin      # the debug plugin leaves it to skel


def test_a_delegated_call_writes_no_debug_log_record():
    out = skel.Outcome(0, "{}\n")
    out.debug_log = "/var/log/skb.jsonl"
    assert skel.debug_log_path({"SKB_DEBUG_LOG": "/var/log/env.jsonl"}, out) == ("skbDebugLog", "/var/log/skb.jsonl")
    args = CmdArgs("ADD", "c1", "/run/netns/a", "eth0", "", ["/opt/cni/bin"])
    for base in ({"SKB_DEBUG_LOG": "/var/log/env.jsonl"}, {"SKB_DEBUG_LOG": "/l", delegate.DEPTH_VAR: "2"}):
        env = delegate._environ("ADD", args, base)         # what an IPAM plugin of ours runs with
        assert skel.debug_log_path(env, out) is None and skel.debug_log_path(env, skel.Outcome(0, "")) is None
    # the runtime's own call of host-local (no delegation), or a depth that is no number: recorded
    assert skel.debug_log_path({"SKB_DEBUG_LOG": "/l", delegate.DEPTH_VAR: "x"}, skel.Outcome(0, "")) == \
        ("SKB_DEBUG_LOG", "/l")
    assert skel.debug_log_path({"SKB_DEBUG_LOG": "/l", delegate.DEPTH_VAR: "0"}, skel.Outcome(0, "")) == \
        ("SKB_DEBUG_LOG", "/l")


def test_a_debug_log_no_longer_forces_exec(monkeypatch):
    """The delegate writes no record, so a debug log has no reason to change how it runs: our own
    host-local runs in-process with or without one; SKB_IPAM_EXEC=1 still execs it."""
    monkeypatch.setitem(skel.IN_PROCESS, "host-local", "skb_plugins.hostlocal_ipam.hostlocal")
    monkeypatch.setattr(delegate, "is_own_build", lambda path, name: True)
    path = "/opt/cni/bin/host-local"
    for environ in ({}, {"SKB_DEBUG_LOG": "/var/log/skb.jsonl"}):
        assert delegate._in_process(path, environ) is not None
    assert delegate._in_process(path, {"SKB_IPAM_EXEC": "1", "SKB_DEBUG_LOG": "/l"}) is None
