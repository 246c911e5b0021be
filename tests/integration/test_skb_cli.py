"""The skb command as an operator runs it: the cnitool-compatible runner, scratch namespaces, replay,
help and colour. The debug plugin stands in for a network where no kernel is needed."""
import base64
import json
import os
import re
import select
import subprocess
import tempfile

import pytest

from skb.tool import libcni
from tests.helpers import cni_env, ip_json, link_flags, run_plugin

SUBCOMMANDS = ["version", "log", "add", "check", "del", "status", "gc", "netns", "doctor", "replay", "warm",
               "install", "uninstall", "explain"]


@pytest.fixture
def skb(bin_dir):
    return os.path.join(bin_dir, "skb")


def run(skb, *args, env=None, input=None):
    e = {"PATH": os.environ["PATH"]}
    e.update(env or {})
    p = subprocess.run([skb, *args], env=e, capture_output=True, text=True, input=input, timeout=120)
    return p


class Node:
    """A conf dir, a cache dir and a capture file in tmp_path; the bin dir of the suite."""

    def __init__(self, tmp_path, bin_dir):
        self.conf = tmp_path / "net.d"
        self.conf.mkdir()
        self.cache = tmp_path / "cache"
        self.capture = tmp_path / "capture.jsonl"
        self.text = tmp_path / "cni_output.txt"
        self.bin_dir = bin_dir

    def write(self, name, obj):
        (self.conf / name).write_text(obj if isinstance(obj, str) else json.dumps(obj))

    def flags(self, *extra):
        return ["--conf-dir", str(self.conf), "--cni-path", self.bin_dir, "--cache-dir", str(self.cache), *extra]

    def calls(self):
        if not self.capture.exists():
            return []
        return [json.loads(line) for line in self.capture.read_text().splitlines()]

    def dbg(self, **extra):
        d = {"type": "debug", "captureFile": str(self.capture), "cniOutput": str(self.text)}
        d.update(extra)
        return d


@pytest.fixture
def node(tmp_path, bin_dir):
    return Node(tmp_path, bin_dir)


ETH0_RESULT = {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "sandbox": "/x"}],
               "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 0}]}


# ---------------------------------------------------------------------------------------------------
# help and colour

def test_help_has_examples_for_every_subcommand(skb):
    p = run(skb, "--help")
    assert p.returncode == 0 and "examples:" in p.stdout
    for sub in SUBCOMMANDS:
        p = run(skb, sub, "--help")
        assert p.returncode == 0, sub
        assert "example" in p.stdout and f"skb {sub}" in p.stdout.split("example", 1)[1], sub


def test_no_subcommand_prints_help(skb):
    p = run(skb)
    assert p.returncode == 2 and "usage: skb" in p.stdout


def test_colour_only_on_request_or_a_terminal(skb, node):
    flags = ["--conf-dir", str(node.conf), "--bin-dir", node.bin_dir, "--containerd-config=",
             "--crio-config=", "--crio-config-dir=", "--cache-dir", str(node.cache), "--no-version"]
    plain = run(skb, "doctor", *flags)
    assert "\033[" not in plain.stdout and "no-config" in plain.stdout   # piped: no colour
    coloured = run(skb, "doctor", *flags, "--color", "always")
    assert "\033[31m" in coloured.stdout
    assert run(skb, "--color", "always", "doctor", *flags).stdout == coloured.stdout
    tty = subprocess.run(["script", "-qec", " ".join([skb, "doctor", *flags]), "/dev/null"], capture_output=True,
                         text=True, env={"PATH": os.environ["PATH"], "TERM": "xterm"}, timeout=60)
    assert "\033[31m" in tty.stdout
    no_color = subprocess.run(["script", "-qec", " ".join([skb, "doctor", *flags]), "/dev/null"], capture_output=True,
                              text=True, env={"PATH": os.environ["PATH"], "TERM": "xterm", "NO_COLOR": "1"}, timeout=60)
    assert "\033[3" not in no_color.stdout
    # no-color.org: only a NO_COLOR that is set and not empty turns colour off (review 15)
    empty = subprocess.run(["script", "-qec", " ".join([skb, "doctor", *flags]), "/dev/null"], capture_output=True,
                           text=True, env={"PATH": os.environ["PATH"], "TERM": "xterm", "NO_COLOR": ""}, timeout=60)
    assert "\033[31m" in empty.stdout


def test_help_lists_each_command_once_with_warm(skb):
    out = run(skb, "--help").stdout
    section = out.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^    (\S+)", section, re.M)      # wrapped help text is indented deeper
    assert sorted(listed) == sorted(SUBCOMMANDS), listed
    assert len(listed) == len(set(listed))
    for sub in SUBCOMMANDS:
        assert out.count(f"\n    {sub} ") == 1, sub


@pytest.mark.parametrize("sub", ["log", "doctor", "replay", "add", "version", "warm", "install", "netns"])
def test_a_bad_flag_prints_the_commands_own_usage(skb, sub):
    p = run(skb, sub, "--no-such-flag", *(["x"] if sub in ("log", "replay") else []),
            *(["n", "ns"] if sub == "add" else []), *(["status"] if sub == "warm" else []),
            *(["list"] if sub == "netns" else []))
    assert p.returncode == 2, p
    assert p.stderr.startswith(f"usage: skb {sub} "), p.stderr
    assert f"skb {sub}: error: unrecognized arguments: --no-such-flag" in p.stderr


@pytest.mark.parametrize("args, words", [
    (["netns", "add"], "skb netns: error: netns add needs at least one NAME"),
    (["netns", "del"], "skb netns: error: netns del needs at least one NAME"),
    (["replay", "x.jsonl", "-n", "0"], "argument -n/--number: '0': records are numbered from 1"),
    (["replay", "x.jsonl", "--timeout", "0"], "argument --timeout: '0': expected a number of seconds above 0"),
    (["log", "x.jsonl", "-n", "-1"], "argument -n/--lines: '-1': expected a count"),
    (["log", "x.jsonl", "-n", "0"], "-n 0 shows no record"),
    (["add", "n", "ns", "--timeout", "nan"], "argument --timeout: 'nan': expected a number of seconds above 0"),
    (["add", "n", "ns", "--timeout", "-1"], "argument --timeout: '-1': expected a number of seconds above 0"),
    (["add", "n", "ns", "--timeout", "soon"], "argument --timeout: 'soon' is not a number"),
    (["install", "--no-config", "--interval", "0"], "argument --interval: '0': expected a number of seconds above 0"),
    (["install", "--no-config", "--interval", "-5"], "argument --interval: '-5'"),
    (["install", "--no-config", "--api-wait", "inf"], "argument --api-wait: 'inf'"),
    (["install", "--no-config", "--uninstall-on-stop"], "--uninstall-on-stop acts when a --wait install is stopped"),
])
def test_a_bad_value_is_a_usage_error(skb, tmp_path, args, words):
    if args[0] == "install":
        args = args + ["--from", str(tmp_path), "--bin-dir", str(tmp_path / "bin")]
    p = run(skb, *args)
    assert p.returncode == 2, p
    assert words in p.stderr and "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "bin")


def test_log_n_0_with_follow_shows_only_new_calls(skb, tmp_path):
    log = tmp_path / "calls.jsonl"
    log.write_text(json.dumps({"command": "ADD", "plugin": "ptp", "env": {}}) + "\n")
    p = subprocess.Popen([skb, "log", str(log), "-f", "-n", "0"], stdout=subprocess.PIPE, text=True)
    try:
        ready = []
        for _ in range(20):                   # a DEL a second until one is new to it (it may start slowly)
            with open(log, "a") as f:
                f.write(json.dumps({"command": "DEL", "plugin": "ptp", "env": {}}) + "\n")
            ready, _, _ = select.select([p.stdout], [], [], 1)
            if ready:
                break
        line = p.stdout.readline() if ready else "(nothing within 20 s)"
    finally:
        p.kill()
        p.wait()
    assert " DEL" in line and " ADD" not in line, line


def test_version(skb):
    p = run(skb, "version")
    assert p.returncode == 0 and "1.1.0" in p.stdout
    assert run(skb, "--version").stdout == p.stdout
    p = run(skb, "version", "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["cniVersions"][-1] == "1.1.0"
    from skb import __version__
    assert out["version"] == __version__ and __version__ in run(skb, "--version").stdout


def test_a_bare_netns_name_is_looked_up_in_run_netns(skb, node, tmp_path):
    """As ip netns names them: never a file of that name in the current directory; a missing one is
    named, with how to make it, before any plugin runs. DEL still runs (a gone netns is what it cleans)."""
    node.write("10-dbg.conflist", {"cniVersion": "1.0.0", "name": "dbg", "plugins": [node.dbg()]})
    name = "skbt-missing-" + os.urandom(4).hex()
    (tmp_path / name).write_text("")                       # a file of that name here: not a netns
    p = subprocess.run([skb, "add", "dbg", name, *node.flags()], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"]}, timeout=60)
    assert p.returncode == 1 and node.calls() == []
    assert f"no network namespace named '{name}': /run/netns/{name} does not exist" in p.stderr
    assert f"skb netns add {name}" in p.stderr and f"give ./{name}" in p.stderr
    assert "container" not in p.stderr
    p = subprocess.run([skb, "del", "dbg", name, *node.flags()], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"]}, timeout=60)
    assert p.returncode == 0, p.stderr
    assert node.calls()[0]["env"]["CNI_NETNS"] == f"/run/netns/{name}"


# ---------------------------------------------------------------------------------------------------
# add / check / del, cnitool-compatible

def test_add_check_del_a_chain(skb, node, tmp_path):
    node.write("10-dbg.conflist", {"cniVersion": "1.1.0", "name": "dbg", "plugins": [
        node.dbg(inject={"ADD": {"result": ETH0_RESULT}}),
        node.dbg(capabilities={"portMappings": True, "mac": False})]})
    ns = str(tmp_path / "fake-netns")   # the debug plugin never opens it
    caps = '{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],"mac":"c2:00:00:00:00:01"}'
    env = {"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=p", "CAP_ARGS": caps}
    p = run(skb, "add", "dbg", ns, *node.flags(), env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == ETH0_RESULT and p.stdout.startswith('{\n    "cniVersion"')  # Go's indent
    cid = libcni.cnitool_container_id(ns)
    adds = node.calls()
    assert [c["command"] for c in adds] == ["ADD", "ADD"]
    assert adds[0]["env"] == {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": cid, "CNI_NETNS": ns, "CNI_IFNAME": "eth0",
                              "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=p", "CNI_PATH": node.bin_dir}
    second = json.loads(adds[1]["stdin"])
    assert second["prevResult"] == ETH0_RESULT and second["name"] == "dbg"
    assert second["runtimeConfig"] == {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
    cache = node.cache / "results" / f"dbg-{cid}-eth0"
    rec = json.loads(cache.read_text())
    assert rec["kind"] == "cniCacheV1" and rec["netns"] == ns and rec["result"] == ETH0_RESULT
    assert json.loads(base64.b64decode(rec["config"]))["name"] == "dbg"
    assert rec["capabilityArgs"] == json.loads(caps)

    p = run(skb, "check", "dbg", ns, *node.flags(), env=env)
    assert (p.returncode, p.stdout) == (0, ""), p.stderr
    checks = node.calls()[2:]
    assert [c["command"] for c in checks] == ["CHECK", "CHECK"]
    assert all(json.loads(c["stdin"])["prevResult"] == ETH0_RESULT for c in checks)

    p = run(skb, "del", "dbg", ns, *node.flags(), env=env)
    assert (p.returncode, p.stdout) == (0, ""), p.stderr
    dels = node.calls()[4:]
    assert [c["command"] for c in dels] == ["DEL", "DEL"]
    assert [json.loads(c["stdin"]).get("capabilities") for c in dels] == [{"portMappings": True, "mac": False}, None]
    assert not cache.exists()
    assert node.text.read_text().count("CmdDel\n") == 2


def test_cnitool_environment(skb, node, tmp_path):
    node.write("10-dbg.conf", {"cniVersion": "0.4.0", "name": "dbg", **node.dbg()})   # a single config
    env = {"NETCONFPATH": str(node.conf), "CNI_PATH": f"/nonexistent:{node.bin_dir}", "CNI_IFNAME": "net1"}
    p = run(skb, "add", "dbg", "relative/ns", "--cache-dir", str(node.cache), env=env)
    assert p.returncode == 0, p.stderr
    call = node.calls()[0]
    absolute = os.path.join(os.getcwd(), "relative/ns")
    assert call["env"]["CNI_IFNAME"] == "net1" and call["env"]["CNI_NETNS"] == absolute
    assert call["env"]["CNI_CONTAINERID"] == libcni.cnitool_container_id(absolute)
    assert call["env"]["CNI_PATH"] == f"/nonexistent:{node.bin_dir}"
    assert json.loads(p.stdout) == {"cniVersion": "0.4.0", "dns": {}}
    p = run(skb, "del", "dbg", "relative/ns", "-i", "eth5", "--cache-dir", str(node.cache), env=env)
    assert node.calls()[1]["env"]["CNI_IFNAME"] == "eth5"   # the flag wins over CNI_IFNAME


@pytest.mark.parametrize("args", ["A=", "A=1;", "=x", "A=1=2"])
def test_cni_args_are_parsed_strictly(skb, node, args):
    node.write("10-dbg.conflist", {"cniVersion": "1.0.0", "name": "dbg", "plugins": [node.dbg()]})
    p = run(skb, "add", "dbg", "/x", *node.flags(), env={"CNI_ARGS": args})
    assert p.returncode == 1 and "invalid CNI_ARGS pair" in p.stderr and node.calls() == []


def test_errors_go_to_stderr_with_the_cni_code(skb, node):
    node.write("10-dbg.conflist", {"cniVersion": "1.0.0", "name": "dbg", "plugins": [
        node.dbg(inject={"ADD": {"error": {"code": 7, "msg": "no addresses", "details": "range full"}}})]})
    p = run(skb, "add", "dbg", "/x", *node.flags())
    assert p.returncode == 1 and p.stdout == ""
    assert 'plugin type="debug" failed (add): no addresses; range full (CNI error code 7)' in p.stderr
    p = run(skb, "add", "nope", "/x", *node.flags())
    assert p.returncode == 1 and f'no net configuration with name "nope" in {node.conf}' in p.stderr
    p = run(skb, "add", "dbg", "/x", *node.flags()[:2], "--cni-path", "/nonexistent")
    assert 'failed to find plugin "debug" in path [/nonexistent]' in p.stderr
    p = run(skb, "add", "dbg", *node.flags())
    assert p.returncode == 2   # argparse: NETNS missing


def test_verbose_lists_each_plugin_run(skb, node):
    node.write("10-dbg.conflist", {"cniVersion": "1.0.0", "name": "dbg", "plugins": [node.dbg(), node.dbg()]})
    p = run(skb, "add", "dbg", "/x", *node.flags("-v"))
    assert p.stderr.count(f"ADD {os.path.join(node.bin_dir, 'debug')} -> exit 0") == 2


def test_check_refused_before_0_4_0(skb, node):
    node.write("10-dbg.conflist", {"cniVersion": "0.3.1", "name": "dbg", "plugins": [node.dbg()]})
    p = run(skb, "check", "dbg", "/x", *node.flags())
    assert p.returncode == 1 and 'configuration version "0.3.1" does not support the CHECK command' in p.stderr


def test_status(skb, node):
    node.write("10-a.conflist", {"cniVersion": "1.1.0", "name": "a", "plugins": [
        node.dbg(), node.dbg(inject={"STATUS": {"error": {"code": 50, "msg": "no free address"}}}), node.dbg()]})
    p = run(skb, "status", "a", *node.flags())
    assert p.returncode == 1 and "no free address (CNI error code 50)" in p.stderr
    assert [c["command"] for c in node.calls()] == ["STATUS", "STATUS"]   # stops at the first error


def test_gc_sends_the_valid_attachments(skb, node, tmp_path, make_netns):
    """--keep-live keeps the attachments whose netns is still a namespace; one whose path is gone, or is the
    empty file a namespace was mounted on (left by a crash or a reboot: review 16), is DELeted."""
    node.write("10-g.conflist", {"cniVersion": "1.1.0", "name": "g", "plugins": [node.dbg()]})
    live = f"/run/netns/{make_netns()}"
    stale = tmp_path / "stale-ns"
    stale.write_text("")
    for ns in (live, str(tmp_path / "gone-ns"), str(stale)):
        assert run(skb, "add", "g", ns, *node.flags()).returncode == 0
    node.capture.unlink()
    p = run(skb, "gc", "g", *node.flags("--keep-live", "--valid", "other:eth1"))
    assert p.returncode == 0, p.stderr
    calls = node.calls()
    assert [c["command"] for c in calls] == ["DEL", "DEL", "GC"]
    assert sorted(c["env"]["CNI_NETNS"] for c in calls[:2]) == [str(tmp_path / "gone-ns"), str(stale)]
    calls = calls[1:]
    gc = json.loads(calls[1]["stdin"])
    want = [{"containerID": "other", "ifname": "eth1"},
            {"containerID": libcni.cnitool_container_id(live), "ifname": "eth0"}]
    assert gc["cni.dev/valid-attachments"] == want and gc["cni.dev/attachments"] == want
    assert gc["name"] == "g" and "prevResult" not in gc
    assert "note" not in p.stderr
    node.capture.unlink()
    p = run(skb, "gc", "g", "ignored-netns", *node.flags())
    assert p.returncode == 0   # cnitool: nothing is valid
    assert "note: the plugins got no list of valid attachments, and skb's host-local releases nothing" in p.stderr
    calls = node.calls()
    assert [c["command"] for c in calls] == ["DEL", "GC"] and "cni.dev/valid-attachments" not in calls[1]["stdin"]
    assert not list((node.cache / "results").iterdir())
    p = run(skb, "gc", "g", *node.flags("--valid", "no-colon"))
    assert p.returncode == 1 and "expected CONTAINERID:IFNAME" in p.stderr


def test_gc_of_a_network_before_1_1_0_says_its_plugins_got_none(skb, node, tmp_path):
    node.write("10-g.conflist", {"cniVersion": "1.0.0", "name": "g", "plugins": [node.dbg()]})
    assert run(skb, "add", "g", str(tmp_path / "gone-ns"), *node.flags()).returncode == 0
    node.capture.unlink()
    p = run(skb, "gc", "g", *node.flags("--keep-live"))
    assert p.returncode == 0, p.stderr
    assert [c["command"] for c in node.calls()] == ["DEL"]
    assert "note: network 'g' has cniVersion 1.0.0: its plugins are sent GC only from 1.1.0 on" in p.stderr


# ---------------------------------------------------------------------------------------------------
# log

def test_log_numbers_records(skb, node):
    node.write("10-dbg.conflist", {"cniVersion": "1.0.0", "name": "dbg", "plugins": [
        node.dbg(inject={"DEL": {"error": {"code": 11, "msg": "later"}}})]})
    run(skb, "add", "dbg", "/x", *node.flags())
    run(skb, "del", "dbg", "/x", *node.flags())
    p = run(skb, "log", str(node.capture))
    lines = p.stdout.splitlines()
    assert lines[0].startswith("#1 ") and " ADD " in lines[0] and " ok " in lines[0]
    assert any(line.startswith("#2 ") and "FAILED (exit 1)" in line for line in lines)
    assert any("stdout:" in line and "later" in line for line in lines)
    p = run(skb, "log", str(node.text))    # the reference debug plugin's text record
    assert p.returncode == 0 and p.stdout.startswith("#1 ? ? ADD container=") and "#2 " in p.stdout


def test_log_json_is_one_line_per_record(skb, node):
    node.write("10-dbg.conflist", {"cniVersion": "1.0.0", "name": "dbg", "plugins": [node.dbg()]})
    run(skb, "add", "dbg", "/x", *node.flags())
    run(skb, "del", "dbg", "/x", *node.flags())
    p = run(skb, "log", "--json", str(node.capture))
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert p.returncode == 0 and [r["number"] for r in lines] == [1, 2]
    assert [r["record"] for r in lines] == node.calls()
    assert json.loads(run(skb, "log", "--json", "-n", "1", str(node.capture)).stdout)["number"] == 2
    follow = subprocess.Popen([skb, "log", "--json", "--follow", str(node.capture)], stdout=subprocess.PIPE,
                              text=True, env={"PATH": os.environ["PATH"]})
    try:
        assert json.loads(follow.stdout.readline())["number"] == 1
        assert json.loads(follow.stdout.readline())["record"]["command"] == "DEL"
        run(skb, "add", "dbg", "/y", *node.flags())
        new = json.loads(follow.stdout.readline())
        assert new["number"] == 3 and new["record"]["env"]["CNI_NETNS"] == "/y"
    finally:
        follow.terminate()
        follow.wait(timeout=30)


# ---------------------------------------------------------------------------------------------------
# against the kernel (inside the sandbox)

@pytest.mark.kernel
def test_netns_add_list_del(skb):
    name = "skbcli-" + os.urandom(3).hex()
    p = run(skb, "netns", "add", name)
    assert p.returncode == 0 and p.stdout.strip() == f"/run/netns/{name}"
    assert name in run(skb, "netns", "list").stdout.split()
    assert name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "UP" not in link_flags("lo", name)               # as ip netns add leaves it
    assert ip_json("link", "show", netns=name)[0]["ifname"] == "lo"
    p = run(skb, "netns", "add", name)
    assert p.returncode == 1 and "exists already" in p.stderr
    assert run(skb, "netns", "del", name).returncode == 0
    assert not os.path.exists(f"/run/netns/{name}")
    p = run(skb, "netns", "del", name)
    assert p.returncode == 1 and "no such file" in p.stderr


@pytest.mark.kernel
def test_add_and_del_loopback_in_a_named_netns(skb, node, bin_dir):
    name = "skbcli-" + os.urandom(3).hex()
    assert run(skb, "netns", "add", name).returncode == 0
    try:
        node.write("10-lo.conflist", {"cniVersion": "1.0.0", "name": "lo-net", "plugins": [{"type": "loopback"}]})
        p = run(skb, "add", "lo-net", name, *node.flags())          # a bare name means /run/netns/NAME
        assert p.returncode == 0, p.stderr
        res = json.loads(p.stdout)
        assert res["interfaces"][0]["sandbox"] == f"/run/netns/{name}"
        assert "UP" in link_flags("lo", name)
        assert run(skb, "check", "lo-net", f"/run/netns/{name}", *node.flags()).returncode == 0
        assert run(skb, "del", "lo-net", name, *node.flags()).returncode == 0
        assert "UP" not in link_flags("lo", name)
        assert "UP" in link_flags("lo")
    finally:
        run(skb, "netns", "del", name)


@pytest.mark.kernel
def test_ptp_host_local_round_trip_and_gc_frees_leaked_addresses(skb, node, tmp_path, make_netns):
    data = tmp_path / "ipam"
    node.write("10-pods.conflist", {"cniVersion": "1.1.0", "name": "pods", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": str(data)}}]})
    a, b = make_netns(), make_netns()
    for ns in (a, b):
        p = run(skb, "add", "pods", ns, *node.flags())
        assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["ips"][0]["address"].startswith("10.77.0.")
    assert sorted(f for f in os.listdir(data / "pods") if f.startswith("10.")) == ["10.77.0.2", "10.77.0.3"]
    subprocess.run(["ip", "netns", "del", b], check=True)     # the container of b dies without a DEL
    p = run(skb, "gc", "pods", *node.flags("--keep-live"))
    assert p.returncode == 0, p.stderr
    assert sorted(f for f in os.listdir(data / "pods") if f.startswith("10.")) == ["10.77.0.2"]
    assert run(skb, "del", "pods", a, *node.flags()).returncode == 0
    assert [f for f in os.listdir(data / "pods") if f.startswith("10.")] == []


# ---------------------------------------------------------------------------------------------------
# replay

def _capture_one(node, debug, command="ADD", netns="/run/netns/gone", **conf):
    c = {"cniVersion": "1.0.0", "name": "r", **node.dbg(), **conf}
    r = run_plugin(debug, cni_env(command, netns=netns, path=node.bin_dir), c)
    return r


def test_replay_same_outcome(skb, node, bin_dir):
    _capture_one(node, os.path.join(bin_dir, "debug"), netns="/x", prevResult=ETH0_RESULT | {"cniVersion": "1.0.0"})
    p = run(skb, "replay", str(node.capture), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["same"] is True and out["replayed"]["exitCode"] == 0 and out["record"] == 1
    assert out["plugin"] == os.path.join(node.bin_dir, "debug")


def test_replay_shows_a_difference_next_to_the_recording(skb, node, bin_dir, tmp_path):
    _capture_one(node, os.path.join(bin_dir, "debug"), netns="/x")
    other = tmp_path / "other-plugin"
    other.write_text('#!/bin/sh\ncat >/dev/null\necho \'{"code":7,"msg":"different"}\'\nexit 1\n')
    other.chmod(0o755)
    p = run(skb, "replay", str(node.capture), "--plugin", str(other), env={"COLUMNS": "140"})
    assert p.returncode == 1
    assert "recorded" in p.stdout and "replayed" in p.stdout and "DIFFERENT" in p.stdout
    row = next(line for line in p.stdout.splitlines() if line.startswith("exit 0"))
    assert " * exit 1" in row   # side by side, marked as different
    p = run(skb, "replay", str(node.capture), "--plugin", str(other), env={"COLUMNS": "60"})
    assert "recorded:" in p.stdout and "replayed:" in p.stdout   # narrow: one above the other


def test_replay_never_appends_to_the_log_it_replays(skb, node, bin_dir, tmp_path):
    debug = os.path.join(bin_dir, "debug")
    _capture_one(node, debug, netns="/x")                         # captureFile and cniOutput
    before = (node.capture.read_bytes(), node.text.read_bytes())
    for record_file in (node.capture, node.text):
        p = run(skb, "replay", str(record_file), "--json")
        assert p.returncode == 0, p.stderr
        assert "went to a temporary file" in json.loads(p.stdout)["logNote"]
        assert (node.capture.read_bytes(), node.text.read_bytes()) == before
    log = tmp_path / "env.jsonl"                                  # SKB_DEBUG_LOG, the operator's setting
    r = run_plugin(debug, cni_env("ADD", netns="/x", path=node.bin_dir, SKB_DEBUG_LOG=str(log)),
                   {"cniVersion": "1.0.0", "name": "r", "type": "debug"})
    assert r.rc == 0 and len(log.read_text().splitlines()) == 1
    p = run(skb, "replay", str(log), "--json", env={"SKB_DEBUG_LOG": str(log)})
    assert p.returncode == 0 and json.loads(p.stdout)["same"] is True, p.stdout + p.stderr
    assert len(log.read_text().splitlines()) == 1
    assert not [d for d in os.listdir(tempfile.gettempdir()) if d.startswith("skb-replay-")]


def test_replay_selects_records(skb, node, bin_dir):
    debug = os.path.join(bin_dir, "debug")
    for command in ("ADD", "CHECK", "DEL"):
        _capture_one(node, debug, command=command, netns="/x")
    out = json.loads(run(skb, "replay", str(node.capture), "-n", "2", "--json").stdout)
    assert out["command"] == "CHECK"
    out = json.loads(run(skb, "replay", str(node.capture), "--command", "ADD", "--json").stdout)
    assert out["command"] == "ADD"
    p = run(skb, "replay", str(node.capture), "-n", "9")
    assert p.returncode == 2 and "there is no record 9" in p.stderr


def test_replay_reads_the_reference_text_record(skb, node, bin_dir):
    _capture_one(node, os.path.join(bin_dir, "debug"), netns="/x")
    p = run(skb, "replay", str(node.text), "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["recorded"] is None and out["replayed"]["exitCode"] == 0
    assert out["plugin"] == os.path.join(node.bin_dir, "debug")
    # an ADD in a scratch netns runs as a container of its own, never as the recorded one
    assert out["env"]["CNI_CONTAINERID"].startswith("skb-replay-") and "not the recorded 'ctr1'" in out["netnsNote"]


@pytest.mark.kernel
def test_replay_in_a_scratch_netns_when_the_captured_one_is_gone(skb, node, bin_dir, make_netns):
    ns = make_netns()
    log = node.capture
    r = run_plugin(os.path.join(bin_dir, "loopback"), cni_env("ADD", netns=f"/run/netns/{ns}", path=bin_dir),
                   {"cniVersion": "1.0.0", "name": "lo-net", "type": "loopback", "skbDebugLog": str(log)})
    assert r.rc == 0
    subprocess.run(["ip", "netns", "del", ns], check=True)
    before = set(os.listdir("/run/netns"))
    p = run(skb, "replay", str(log), "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert out["same"] is True and "is gone" in out["netnsNote"]
    scratch = out["env"]["CNI_NETNS"]
    assert scratch != f"/run/netns/{ns}" and json.loads(out["replayed"]["stdout"])["interfaces"][0]["sandbox"] == scratch
    assert set(os.listdir("/run/netns")) == before          # the scratch netns is gone again
    p = run(skb, "replay", str(log), "--json", "--keep-netns")
    kept = json.loads(p.stdout)["keptNetns"]
    assert os.path.basename(kept) in os.listdir("/run/netns") and "UP" in link_flags("lo", os.path.basename(kept))
    run(skb, "netns", "del", os.path.basename(kept))


def _ptp_add_then_del(bin_dir, tmp_path, ns):
    """A recorded ptp ADD (with ipMasq and a reservation), undone by its DEL, its netns then deleted:
    the node is clean, and the log holds ptp's ADD as record #1 (its host-local writes no record of its
    own). Returns (log, data dir)."""
    data, log = tmp_path / "ipam", tmp_path / "calls.jsonl"
    conf = {"cniVersion": "1.0.0", "name": "ptpnet", "type": "ptp", "ipMasq": True, "skbDebugLog": str(log),
            "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "dataDir": str(data)}}
    env = cni_env("ADD", containerid="replayed1", netns=f"/run/netns/{ns}", path=bin_dir)
    ptp = os.path.join(bin_dir, "ptp")
    assert run_plugin(ptp, env, conf).rc == 0
    assert run_plugin(ptp, dict(env, CNI_COMMAND="DEL"), conf).rc == 0
    return log, data


def _node_state(data):
    """What a ptp ADD leaves on the node, read back independently: reservation files, masquerade
    chains (iptables and nftables), host routes into the pod range."""
    from tests.integration.ptp_support import masq_chain_rules, nft_masq_rules, reservations
    routes = [r for r in ip_json("route", "show") if r.get("dst", "").startswith("10.78.")]
    return reservations(str(data), "ptpnet"), masq_chain_rules(), nft_masq_rules(), routes


@pytest.mark.kernel
def test_a_replayed_add_is_undone_by_its_del(skb, bin_dir, make_netns, tmp_path):
    ns = make_netns()
    log, data = _ptp_add_then_del(bin_dir, tmp_path, ns)
    subprocess.run(["ip", "netns", "del", ns], check=True)
    clean = _node_state(data)
    assert clean[0] == {} and not clean[3]
    p = run(skb, "replay", str(log), "-n", "1", "--json", "--cni-path", bin_dir)
    out = json.loads(p.stdout)
    assert out["command"] == "ADD" and out["replayed"]["exitCode"] == 0, p.stdout + p.stderr
    assert os.path.basename(out["plugin"]) == "ptp"
    assert re.search(r"ran the matching DEL \(container skb-replay-[0-9a-f]{16}, ifname eth0\)", out["cleanupNote"])
    assert "not the recorded 'replayed1'" in out["netnsNote"]
    assert _node_state(data) == clean


@pytest.mark.kernel
def test_a_scratch_replay_never_reaches_a_running_pod(skb, bin_dir, make_netns, tmp_path):
    """Review 13: `--scratch`, which the refusal offers for a pod still running, replayed its ADD with the
    recorded container ID: the ADD failed (the attachment exists) and the DEL that undid it removed the
    running pod's host veth, route, reservation and masquerade rules. A scratch replay of an ADD or DEL now
    runs as a container of its own: the running pod keeps all of it."""
    data, log = tmp_path / "ipam", tmp_path / "calls.jsonl"
    conf = {"cniVersion": "1.0.0", "name": "ptpnet", "type": "ptp", "ipMasq": True, "skbDebugLog": str(log),
            "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "dataDir": str(data)}}
    ns = make_netns()
    env = cni_env("ADD", containerid="live1", netns=f"/run/netns/{ns}", path=bin_dir)
    ptp = os.path.join(bin_dir, "ptp")
    assert run_plugin(ptp, env, conf).rc == 0
    running = _node_state(data)
    links = ip_json("link", "show", netns=ns)
    assert list(running[0]) == ["10.78.0.2"] and running[1] and running[3], running
    p = run(skb, "replay", str(log), "-n", "1", "--json", "--cni-path", bin_dir, "--scratch")    # ptp's ADD
    assert p.returncode in (0, 1) and "skb-replay-" in json.loads(p.stdout)["netnsNote"], p.stdout + p.stderr
    assert _node_state(data) == running and ip_json("link", "show", netns=ns) == links
    assert run_plugin(ptp, dict(env, CNI_COMMAND="DEL"), conf).rc == 0
    assert _node_state(data)[0] == {}


@pytest.mark.kernel
def test_a_replayed_add_into_a_live_netns_is_refused_without_live(skb, bin_dir, make_netns, tmp_path):
    ns = make_netns()
    log, data = _ptp_add_then_del(bin_dir, tmp_path, ns)            # the netns stays: a pod still running
    clean = _node_state(data)
    p = run(skb, "replay", str(log), "-n", "1", "--cni-path", bin_dir)
    assert p.returncode == 2 and f"the recorded netns /run/netns/{ns} still exists" in p.stderr, p.stderr
    assert "--scratch" in p.stderr and "--live" in p.stderr
    assert _node_state(data) == clean and [link["ifname"] for link in ip_json("link", "show", netns=ns)] == ["lo"]
    p = run(skb, "replay", str(log), "-n", "1", "--json", "--cni-path", bin_dir, "--scratch")
    assert p.returncode in (0, 1) and "ran the matching DEL" in json.loads(p.stdout)["cleanupNote"], p.stderr
    assert _node_state(data) == clean
    # the same ADD, but for what its own container ID generates (MACs, host veth name, next address): the same
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["same"] is True and out["generatedAside"] is True, p.stdout
    assert out["recorded"]["stdout"] != out["replayed"]["stdout"]
    p = run(skb, "replay", str(log), "-n", "1", "--cni-path", bin_dir, "--scratch")
    assert p.returncode == 0 and "same outcome as recorded (but for what the replay's own container ID" in p.stdout


def test_netns_list_and_del_with_what_is_no_namespace(skb, tmp_path):
    """A run dir holding a leftover empty file, a FIFO and a directory (review 16): list says which are no
    namespace, and a del naming several removes none when one of them cannot be removed."""
    run_dir = tmp_path / "netns"
    run_dir.mkdir()
    (run_dir / "plain").write_text("")
    os.mkfifo(run_dir / "ff")
    (run_dir / "dd").mkdir()
    p = run(skb, "netns", "list", "--run-dir", str(run_dir))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["dd (not a namespace)", "ff (not a namespace)",
                                     "plain (not a namespace: nothing is mounted on it; skb netns del removes it)"]
    p = run(skb, "netns", "del", "ff", "dd", "plain", "--run-dir", str(run_dir))
    assert p.returncode == 1 and "it is a directory, not a namespace file; nothing was removed" in p.stderr, p.stderr
    assert sorted(os.listdir(run_dir)) == ["dd", "ff", "plain"]
    p = run(skb, "netns", "del", "ff", "nosuch", "--run-dir", str(run_dir))
    assert p.returncode == 1 and "no such file; nothing was removed" in p.stderr, p.stderr
    assert sorted(os.listdir(run_dir)) == ["dd", "ff", "plain"]
    p = run(skb, "netns", "del", "ff", "ff", "--run-dir", str(run_dir))
    assert p.returncode == 1 and "given twice: nothing was removed" in p.stderr, p.stderr
    assert sorted(os.listdir(run_dir)) == ["dd", "ff", "plain"]
    assert run(skb, "netns", "del", "ff", "plain", "--run-dir", str(run_dir)).returncode == 0
    assert os.listdir(run_dir) == ["dd"]


@pytest.mark.kernel
def test_netns_names_with_control_characters(skb, tmp_path):
    """A name that would write escapes to the terminal is refused by add, and listed escaped."""
    run_dir = tmp_path / "netns"
    run_dir.mkdir()
    p = run(skb, "netns", "add", "e\x1b[31m", "--run-dir", str(run_dir))
    assert p.returncode == 1 and "control characters" in p.stderr and "\x1b" not in p.stderr, p.stderr
    assert os.listdir(run_dir) == []
    p = run(skb, "netns", "add", "nb\u00a0sp", "--run-dir", str(run_dir))   # printable, if not ASCII: as ip's
    assert p.returncode == 0, p.stderr
    assert run(skb, "netns", "del", "nb\u00a0sp", "--run-dir", str(run_dir)).returncode == 0
    (run_dir / "e\x1b[31m").write_text("")
    p = run(skb, "netns", "list", "--run-dir", str(run_dir))
    assert "\x1b" not in p.stdout and p.stdout.startswith("e\\x1b[31m"), p.stdout
