"""Review 16: the debug plugin captures a call its environment fails (a bad CNI_IFNAME or container id:
what it exists to reveal), and the debug log holds only the runtime's calls: ptp's own IPAM call (exec'd
or in-process) writes no record of its own, so `skb log` and `skb replay -n N` number the runtime's calls."""
import json
import os
import subprocess

import pytest

from tests.helpers import cni_env, run_plugin
from tests.integration.ptp_support import Ptp, nspath, ptp_conf, reservations


@pytest.fixture
def debug(bin_dir):
    return os.path.join(bin_dir, "debug")


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ---------------------------------------------------------------------------------------------------
# the debug plugin: a call refused for its environment is captured

@pytest.mark.parametrize("bad", [{"ifname": "bad if"}, {"containerid": "bad id"}, {"netns": ""},
                                 {"command": "DEL", "containerid": ""}, {"path": ""}])
def test_a_call_the_environment_fails_is_captured(debug, tmp_path, bad):
    cap = tmp_path / "cap.jsonl"
    stdin = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "debug", "captureFile": str(cap)})
    kw = dict({"command": "ADD", "containerid": "c1", "netns": "/run/netns/a"}, **bad)
    env = cni_env(kw.pop("command"), **kw)
    r = run_plugin(debug, env, stdin)
    assert r.rc == 1 and r.json["code"] == 4 and "cniVersion" not in r.json, r
    [rec] = records(cap)
    assert rec["plugin"] == "debug" and rec["command"] == env["CNI_COMMAND"] and rec["stdin"] == stdin
    assert rec["exitCode"] == 1 and json.loads(rec["stdout"]) == r.json
    assert rec["env"] == {k: v for k, v in env.items() if k.startswith("CNI_")}


def test_the_env_log_of_such_a_call_holds_its_stdin_too(debug, tmp_path):
    log = tmp_path / "env.jsonl"
    stdin = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "debug"})
    r = run_plugin(debug, cni_env("ADD", netns="/x", ifname="bad if", SKB_DEBUG_LOG=str(log)), stdin)
    assert r.rc == 1 and r.json["code"] == 4
    [rec] = records(log)
    assert rec["stdin"] == stdin and rec["exitCode"] == 1


def test_version_and_a_missing_command_are_still_not_captured(debug, tmp_path):
    """Neither reads stdin (a runtime may leave it open), so neither can know of captureFile."""
    cap = tmp_path / "cap.jsonl"
    stdin = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "debug", "captureFile": str(cap)})
    r = run_plugin(debug, {"CNI_COMMAND": "VERSION"}, stdin)
    assert r.rc == 0 and "supportedVersions" in r.json
    r = run_plugin(debug, {"PATH": "/usr/bin:/bin"}, stdin)
    assert r.rc == 0 and r.stdout == "" and "CNI debug plugin" in r.stderr
    assert not cap.exists()


# ---------------------------------------------------------------------------------------------------
# the debug log: one record per runtime call

def _logged(kind, log):
    """(conf extras, env extras) recording to ``log`` through the configuration or the environment."""
    return ({"skbDebugLog": str(log)}, {}) if kind == "skbDebugLog" else ({}, {"SKB_DEBUG_LOG": str(log)})


@pytest.mark.kernel
@pytest.mark.parametrize("kind", ["skbDebugLog", "SKB_DEBUG_LOG"])
@pytest.mark.parametrize("ipam_exec", [False, True])
def test_a_ptp_call_is_one_record(bin_dir, make_netns, tmp_path, kind, ipam_exec):
    log, data = tmp_path / "calls.jsonl", str(tmp_path / "ipam")
    extra_conf, extra_env = _logged(kind, log)
    if ipam_exec:
        extra_env["SKB_IPAM_EXEC"] = "1"
    ptp = Ptp(os.path.join(bin_dir, "ptp"), bin_dir, extra_env)
    conf = ptp_conf(data, v4="10.61.0.0/30", **extra_conf)     # one address besides the gateway
    ns1, ns2 = make_netns(), make_netns()
    add = ptp.add(conf, nspath(ns1), containerid="p1")
    assert add.rc == 0, add
    assert ptp.check(conf, nspath(ns1), add.json, containerid="p1").rc == 0
    full = ptp.add(conf, nspath(ns2), containerid="p2")        # host-local fails: the range is full
    assert full.rc == 1 and "no IP addresses available" in full.json["msg"], full
    assert ptp.delete(conf, nspath(ns1), containerid="p1").rc == 0
    assert reservations(data) == {}
    recs = records(log)
    assert [(r["plugin"], r["command"], r["env"]["CNI_CONTAINERID"], r["exitCode"]) for r in recs] == [
        ("ptp", "ADD", "p1", 0), ("ptp", "CHECK", "p1", 0), ("ptp", "ADD", "p2", 1), ("ptp", "DEL", "p1", 0)]
    # what IPAM answered is in ptp's own record: the address it gave, the error it refused with
    assert json.loads(recs[0]["stdout"])["ips"][0]["address"] == "10.61.0.2/30"
    assert json.loads(recs[2]["stdout"]) == full.json
    p = subprocess.run([os.path.join(bin_dir, "skb"), "log", str(log)], capture_output=True, text=True, timeout=60)
    numbered = [line.split()[0] for line in p.stdout.splitlines() if line.startswith("#")]
    assert p.returncode == 0 and numbered == ["#1", "#2", "#3", "#4"], p.stdout + p.stderr


@pytest.mark.parametrize("kind", ["skbDebugLog", "SKB_DEBUG_LOG"])
def test_a_runtime_calling_host_local_itself_gets_its_record(bin_dir, tmp_path, kind):
    log = tmp_path / "calls.jsonl"
    extra_conf, extra_env = _logged(kind, log)
    conf = {"cniVersion": "1.0.0", "name": "hl", "type": "host-local",
            "ipam": {"type": "host-local", "subnet": "10.62.0.0/24", "dataDir": str(tmp_path / "ipam")}, **extra_conf}
    env = cni_env("ADD", netns="/run/netns/x", path=bin_dir, **extra_env)
    hl = os.path.join(bin_dir, "host-local")
    assert run_plugin(hl, env, conf).rc == 0
    assert run_plugin(hl, dict(env, CNI_COMMAND="DEL"), conf).rc == 0
    assert [(r["plugin"], r["command"]) for r in records(log)] == [("host-local", "ADD"), ("host-local", "DEL")]


@pytest.mark.kernel
@pytest.mark.frozen
def test_the_frozen_build_runs_its_host_local_in_process_under_a_debug_log(bin_dir, make_netns, tmp_path):
    """A debug log no longer changes how the call runs (it forced an exec, so that host-local logged itself)."""
    log, data = tmp_path / "calls.jsonl", str(tmp_path / "ipam")
    ptp = Ptp(os.path.join(bin_dir, "ptp"), bin_dir, {"SKB_DEBUG_LOG": str(log), "SKB_IPAM_TRACE": "1"})
    ns = make_netns()
    conf = ptp_conf(data)
    r = ptp.add(conf, nspath(ns))
    assert r.rc == 0 and "skb-cni: IPAM ADD host-local: in-process" in r.stderr, r
    d = ptp.delete(conf, nspath(ns))
    assert d.rc == 0 and "skb-cni: IPAM DEL host-local: in-process" in d.stderr, d
    assert [(x["plugin"], x["command"]) for x in records(log)] == [("ptp", "ADD"), ("ptp", "DEL")]
