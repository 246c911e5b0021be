"""The skb command given what a stressed or hostile node holds (review 15): JSON nested too deep for the
interpreter, cache records of the wrong types. Every case ends in a one-line error or a finding, never an
internal error, and never after it changed the node."""
import base64
import json
import os
import subprocess

import pytest

from tests.integration.test_doctor import Setup, codes, doctor, find, lo_conflist
from tests.integration.test_skb_cli import Node, run, skb  # noqa: F401 (fixture)


@pytest.fixture
def node(tmp_path, bin_dir):
    return Node(tmp_path, bin_dir)


def deep(depth):
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [300, 500, 900])
def test_a_conflist_nested_too_deep_is_a_load_error_not_a_crash(skb, node, tmp_path, bin_dir, depth):
    """Depth 500 ended the doctor and skb add with "internal error: RecursionError", and one such file
    took the whole doctor run: no finding at all."""
    node.write("05-deep.conflist", '{"cniVersion": "1.0.0", "name": "deep", "plugins": [{"type": "debug", "x": '
               + deep(depth) + "}]}")
    p = run(skb, "add", "deep", "/run/netns/none", *node.flags())
    assert p.returncode == 1 and "internal error" not in p.stderr, p.stderr
    assert "nesting too deep" in p.stderr, p.stderr
    (tmp_path / "doctor").mkdir()
    setup = Setup(tmp_path / "doctor", bin_dir)
    setup.write("05-deep.conflist", (node.conf / "05-deep.conflist").read_text())
    setup.write("10-lo.conflist", lo_conflist())
    out = doctor(skb, setup)
    assert "internal-error" not in codes(out) and out["checked"], out
    assert any("nesting too deep" in f["evidence"] for f in out["all"]), out


def test_cap_args_nested_too_deep_are_refused_before_the_add(skb, node, tmp_path):
    """--cap-args 600 deep crashed skb add after the ADD had run: its plugin's work stayed, with no cache
    record for a DEL to find."""
    node.write("10-dbg.conflist", {"cniVersion": "1.0.0", "name": "dbg", "plugins": [node.dbg()]})
    p = run(skb, "add", "dbg", "/run/netns/none", *node.flags("--cap-args", '{"a": ' + deep(600) + "}"))
    assert p.returncode == 1 and "CAP_ARGS nests arrays and objects more than 200 levels deep" in p.stderr, p.stderr
    assert node.calls() == [] and not (node.cache / "results").exists()


@pytest.mark.parametrize("field, value", [("cniArgs", 5), ("cniArgs", "ab"), ("cniArgs", [[1, 2]]),
                                          ("capabilityArgs", [1]), ("netns", 5), ("ifName", 5), ("config", 5),
                                          ("containerId", {"a": 1})])
def test_a_cache_record_of_wrong_types_is_skipped_by_gc(skb, node, field, value):
    """Go's libcni skips a record it cannot unmarshal; ours ended the whole gc with an internal error, so no
    other attachment was collected (and the doctor recommends skb gc)."""
    node.write("10-dbg.conflist", {"cniVersion": "1.1.0", "name": "dbg", "plugins": [node.dbg()]})
    results = node.cache / "results"
    results.mkdir(parents=True)
    good = {"kind": "cniCacheV1", "containerId": "gone", "ifName": "eth0", "networkName": "dbg",
            "netns": "/run/netns/gone", "config": base64.b64encode(b"{}").decode()}
    (results / "dbg-gone-eth0").write_text(json.dumps(good))
    (results / "dbg-bad-eth0").write_text(json.dumps({**good, "containerId": "bad", field: value}))
    p = run(skb, "gc", "dbg", *node.flags())
    assert p.returncode == 0 and "internal error" not in p.stderr, p.stderr
    dels = [c for c in node.calls() if c.get("command") == "DEL"]
    assert [c["env"]["CNI_CONTAINERID"] for c in dels] == ["gone"], node.calls()


def test_a_runtime_config_nested_too_deep_is_invalid_not_a_crash(skb, tmp_path, bin_dir):
    setup = Setup(tmp_path, bin_dir)
    setup.write("10-lo.conflist", lo_conflist())
    setup.containerd = str(setup.write("config.toml", "x = " + deep(2000) + "\n", setup.tmp))
    f = find(doctor(skb, setup), "runtime-config-invalid")[0]
    assert "nested too deep" in f["evidence"], f


def test_a_plugins_message_cannot_drive_the_terminal(skb, node, tmp_path, bin_dir):
    """A plugin's error message with an OSC 52 clipboard write and a line erase was printed raw by skb add
    and the doctor: it is shown escaped."""
    evil = "boom\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2K\rskb doctor: no problems found"
    node.write("10-dbg.conflist", {"cniVersion": "1.1.0", "name": "dbg", "plugins": [
        node.dbg(inject={"ADD": {"error": {"code": 7, "msg": evil}}, "STATUS": {"error": {"code": 7, "msg": evil}}})]})
    p = run(skb, "add", "dbg", "/run/netns/none", *node.flags())
    assert p.returncode == 1 and "\x1b" not in p.stderr and "\r" not in p.stderr, p.stderr
    assert "boom\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2K\\rskb doctor" in p.stderr, p.stderr
    (tmp_path / "doctor").mkdir()
    setup = Setup(tmp_path / "doctor", bin_dir)
    setup.write("10-dbg.conflist", (node.conf / "10-dbg.conflist").read_text())
    text = subprocess.run([skb, "doctor", *setup.args()], capture_output=True, text=True, timeout=120)
    assert "boom\\x1b]52" in text.stdout and "\x1b]52" not in text.stdout and "\r" not in text.stdout, text.stdout


def _processes(word):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if word in f.read().split(b"\0"):
                    out.append(pid)
        except OSError:
            pass
    return out


@pytest.mark.parametrize("then", ["exit 0", "sleep 777"])
def test_a_timeout_ends_the_plugins_children_too(skb, node, tmp_path, then):
    """A plugin whose child keeps stdout open (or that hangs with its child): --timeout killed the plugin
    alone, and the child outlived skb (the doctor's VERSION and STATUS calls run so too)."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    fake = plugins / "hangs"
    fake.write_text(f"#!/bin/sh\nsleep 4321 &\n{then}\n")
    fake.chmod(0o755)
    node.write("10-h.conflist", {"cniVersion": "1.0.0", "name": "h", "plugins": [{"type": "hangs"}]})
    flags = ["--conf-dir", str(node.conf), "--cni-path", str(plugins), "--cache-dir", str(node.cache)]
    p = run(skb, "add", "h", "/run/netns/none", *flags, "--timeout", "1")
    assert p.returncode == 1 and "signal: killed (no answer within 1 s)" in p.stderr, p.stderr
    assert _processes(b"4321") == [], "the plugin's child outlived skb add"


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGQUIT", "SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", ["status", "doctor"])
def test_a_signal_to_skb_ends_the_plugins_it_runs_with_a_timeout(skb, node, tmp_path, sig, command):
    """A plugin run with a timeout (the runner's --timeout, the doctor's own calls) leads a group of its own,
    which a terminal's hang-up, ^\\ or ^C to skb's group no longer reaches: skb ended and the plugin ran on
    (review 15)."""
    import signal
    import time
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hangs").write_text("#!/bin/sh\ntrap '' TERM\nsleep 4322\n")
    (plugins / "hangs").chmod(0o755)
    node.write("10-h.conflist", {"cniVersion": "1.1.0", "name": "h", "plugins": [{"type": "hangs"}]})
    if command == "status":
        args = ["status", "h", "--conf-dir", str(node.conf), "--cni-path", str(plugins), "--timeout", "60"]
    else:
        args = ["doctor", "--conf-dir", str(node.conf), "--bin-dir", str(plugins), "--containerd-config=",
                "--crio-config=", "--crio-config-dir=", "--cache-dir", str(node.cache)]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen([skb, *args], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 30
        while not _processes(b"4322") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes(b"4322"), "the plugin never started"
        os.killpg(p.pid, getattr(signal, sig))
        p.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _processes(b"4322") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes(b"4322") == [], f"the plugin outlived skb {command} after {sig}"
        # and the dirs its calls' records went to are gone with it (the doctor's calls run in threads)
        assert os.listdir(tmp) == [], os.listdir(tmp)
    finally:
        p.kill()
        p.wait()
        for pid in _processes(b"4322"):
            os.kill(int(pid), 9)
