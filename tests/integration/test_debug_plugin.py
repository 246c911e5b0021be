"""The debug plugin as a runtime calls it: its records, its pass-through and its injected behaviour."""
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from skb.cni import result as cniresult
from tests.helpers import cni_env, link_flags, run_plugin

VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
RECORD_KEYS = {"time", "plugin", "command", "env", "stdin", "exitCode", "stdout", "stderr", "durationMs"}


@pytest.fixture
def debug(bin_dir):
    return os.path.join(bin_dir, "debug")


def conf(version="1.1.0", **extra):
    c = {"cniVersion": version, "name": "dbgnet", "type": "debug"}
    c.update(extra)
    return c


def prev_for(version):
    """A prevResult in ``version``'s own shape (docs/REFERENCE.md#result-shapes)."""
    if version in ("0.1.0", "0.2.0"):
        return {"cniVersion": version, "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1",
                                               "routes": [{"dst": "0.0.0.0/0"}]}, "dns": {"nameservers": ["10.1.0.1"]}}
    ips = [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1}]
    out = {"cniVersion": version,
           "interfaces": [{"name": "veth1", "mac": "aa:bb:cc:dd:ee:ff"},
                          {"name": "eth0", "mac": "11:22:33:44:55:66", "sandbox": "/run/netns/x"}],
           "ips": ips, "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}], "dns": {"nameservers": ["10.1.0.1"]}}
    if version.startswith("0."):
        ips[0]["version"] = "4"
    else:
        out["interfaces"][1]["mtu"] = 1400
    return out


# ---------------------------------------------------------------------------------------------------
# records

def test_version_lists_every_spec_version(debug):
    r = run_plugin(debug, {"CNI_COMMAND": "VERSION"})
    assert r.rc == 0 and r.json["supportedVersions"] == VERSIONS


def test_cni_output_is_the_reference_text_record(debug, tmp_path):
    out = tmp_path / "cni_output.txt"
    stdin = '{"cniOutput":"%s","cniVersion":"1.1.0","name":"test","type":"debug"}' % out
    env = cni_env("ADD", containerid="ctrA", netns="/var/run/netns/x", args="IgnoreUnknown=1;K8S_POD_NAME=p",
                  path="/opt/cni/bin")
    r = run_plugin(debug, env, stdin)
    assert r.rc == 0, r
    assert out.read_text() == (
        "CmdAdd\nContainerID: ctrA\nNetns: /var/run/netns/x\nIfName: eth0\nArgs: IgnoreUnknown=1;K8S_POD_NAME=p\n"
        f"Path: /opt/cni/bin\nStdinData: {stdin}\n----------------------\n")
    assert oct(out.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("command,header", [("DEL", "CmdDel"), ("CHECK", "CmdCheck"), ("STATUS", "CmdStatus"),
                                            ("GC", "CmdGC")])
def test_cni_output_header_per_command(debug, tmp_path, command, header):
    out = tmp_path / "o.txt"
    r = run_plugin(debug, cni_env(command, netns="/run/netns/x"), conf(cniOutput=str(out)))
    assert (r.rc, r.stdout) == (0, ""), r
    assert out.read_text().startswith(header + "\n")


def test_cni_output_appends_one_block_per_call(debug, tmp_path):
    out = tmp_path / "o.txt"
    for command in ("ADD", "CHECK", "DEL"):
        run_plugin(debug, cni_env(command, netns="/run/netns/x"), conf(cniOutput=str(out)))
    text = out.read_text()
    assert [line for line in text.splitlines() if line.startswith("Cmd")] == ["CmdAdd", "CmdCheck", "CmdDel"]
    assert text.count("----------------------\n") == 3


def test_capture_records_every_call_as_json_lines(debug, tmp_path):
    cap = tmp_path / "capture.jsonl"
    stdin = json.dumps(conf("1.0.0", captureFile=str(cap)), indent=1)   # verbatim, newlines and all
    env = cni_env("ADD", containerid="c9", netns="/run/netns/x", args="IgnoreUnknown=1", CNI_NETNS_OVERRIDE="1")
    r = run_plugin(debug, env, stdin)
    assert r.rc == 0
    run_plugin(debug, cni_env("DEL", containerid="c9"), conf("1.0.0", captureFile=str(cap)))
    recs = [json.loads(line) for line in cap.read_text().splitlines()]
    assert [x["command"] for x in recs] == ["ADD", "DEL"]
    add = recs[0]
    assert set(add) == RECORD_KEYS and add["plugin"] == "debug"
    assert add["env"] == {k: v for k, v in env.items() if k.startswith("CNI_")}
    assert add["stdin"] == stdin and add["exitCode"] == 0 and json.loads(add["stdout"]) == {"cniVersion": "1.0.0"}
    assert add["durationMs"] >= 0 and add["time"]
    assert oct(cap.stat().st_mode & 0o777) == "0o600"


def test_capture_has_the_skel_debug_log_record(debug, bin_dir, tmp_path):
    """One record format for the suite: a loopback call logged by skel has the same keys."""
    log = tmp_path / "skel.jsonl"
    run_plugin(os.path.join(bin_dir, "loopback"), cni_env("FOO", SKB_DEBUG_LOG=str(log)), conf(type="loopback"))
    cap = tmp_path / "cap.jsonl"
    run_plugin(debug, cni_env("FOO"), conf(captureFile=str(cap)))
    skel_rec, debug_rec = json.loads(log.read_text()), json.loads(cap.read_text())
    assert set(skel_rec) == set(debug_rec) == RECORD_KEYS
    assert skel_rec["exitCode"] == debug_rec["exitCode"] == 1   # unknown command, code 4
    assert json.loads(debug_rec["stdout"])["code"] == 4


def test_capture_of_a_call_rejected_before_the_plugin_runs(debug, tmp_path):
    cap = tmp_path / "cap.jsonl"
    r = run_plugin(debug, cni_env("ADD", netns="/run/netns/x"),
                   {"cniVersion": "9.9.9", "name": "bad name!", "type": "debug", "captureFile": str(cap)})
    assert r.rc == 1 and r.json["code"] == 7
    rec = json.loads(cap.read_text())
    assert rec["exitCode"] == 1 and json.loads(rec["stdout"])["msg"] == "invalid characters found in network name"


def test_capture_and_debug_log_to_the_same_file_write_once(debug, tmp_path):
    cap = tmp_path / "cap.jsonl"
    run_plugin(debug, cni_env("ADD", netns="/x", SKB_DEBUG_LOG=str(cap)), conf(captureFile=str(cap), skbDebugLog=str(cap)))
    assert len(cap.read_text().splitlines()) == 1


def test_concurrent_calls_do_not_interleave_records(debug, tmp_path):
    cap, out = tmp_path / "cap.jsonl", tmp_path / "out.txt"

    def one(i):
        return run_plugin(debug, cni_env("ADD", containerid=f"c{i}", netns="/x"),
                          conf(captureFile=str(cap), cniOutput=str(out), pad="x" * 3000)).rc

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(one, range(24))) == {0}
    recs = [json.loads(line) for line in cap.read_text().splitlines()]
    assert sorted(r["env"]["CNI_CONTAINERID"] for r in recs) == sorted(f"c{i}" for i in range(24))
    assert out.read_text().count("CmdAdd\n") == 24


# ---------------------------------------------------------------------------------------------------
# results

@pytest.mark.parametrize("version", VERSIONS)
def test_prev_result_passes_through_unchanged(debug, version):
    prev = prev_for(version)
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf(version, prevResult=prev))
    assert r.rc == 0, r
    assert r.json == prev
    assert r.stderr == ""


def test_prev_result_keeps_keys_a_parser_would_drop(debug):
    prev = dict(prev_for("1.0.0"), vendorExtra={"k": 1})
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf("1.0.0", prevResult=prev))
    assert r.json == prev


def test_prev_result_without_version_takes_the_configs(debug):
    prev = prev_for("0.4.0")
    del prev["cniVersion"]
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf("0.4.0", prevResult=prev))
    assert r.json == dict(prev, cniVersion="0.4.0")


def test_prev_result_in_another_version_is_converted(debug):
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf("1.1.0", prevResult=prev_for("0.4.0")))
    assert r.rc == 0 and r.json["cniVersion"] == "1.1.0"
    assert r.json["ips"] == [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1}]
    assert "converted" in r.stderr
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf("0.2.0", prevResult=prev_for("1.0.0")))
    assert r.json == {"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1",
                                                     "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
                      "dns": {"nameservers": ["10.1.0.1"]}}


@pytest.mark.parametrize("version", VERSIONS[2:])
def test_alone_answers_a_minimal_valid_result(debug, version):
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf(version))
    assert r.rc == 0, r
    assert r.json == ({"cniVersion": version} if version.startswith("1.") else {"cniVersion": version, "dns": {}})
    parsed = cniresult.parse_result(r.json)   # a valid result of its version
    assert parsed.cni_version == version and not parsed.ips


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", None])
def test_alone_in_a_version_that_needs_an_address_is_an_error(debug, version, tmp_path):
    """A 0.1.0/0.2.0 result must hold an IP address: never a silently emptied result (as Go: code 1).
    The failure comes before the hooks run."""
    mark = tmp_path / "hook-ran"
    c = conf(version, addHooks=[["touch", str(mark)]])
    if version is None:
        del c["cniVersion"]       # no cniVersion means 0.1.0
    r = run_plugin(debug, cni_env("ADD", netns="/proc/self/ns/net"), c)
    assert r.rc == 1 and r.json["code"] == 1 and "no valid IP addresses" in r.json["msg"], r
    assert r.json["cniVersion"] == (version or "0.1.0") and not mark.exists()


@pytest.mark.parametrize("command", ["DEL", "CHECK", "STATUS", "GC"])
def test_other_commands_succeed_silently(debug, command):
    r = run_plugin(debug, cni_env(command, netns="/x"), conf(prevResult=prev_for("1.1.0")))
    assert (r.rc, r.stdout) == (0, "")


# ---------------------------------------------------------------------------------------------------
# injected behaviour

def test_succeed_status_but_fail_add_with_code_7(debug):
    c = conf(inject={"ADD": {"error": {"code": 7, "msg": "no addresses left", "details": "range 10.1.0.0/24"}}})
    r = run_plugin(debug, cni_env("STATUS"), c)
    assert (r.rc, r.stdout) == (0, "")
    r = run_plugin(debug, cni_env("ADD", netns="/x"), c)
    assert r.rc == 1
    assert r.json == {"cniVersion": "1.1.0", "code": 7, "msg": "no addresses left", "details": "range 10.1.0.0/24"}


@pytest.mark.parametrize("command", ["CHECK", "STATUS", "GC", "DEL"])
def test_inject_error_for_each_command(debug, command):
    r = run_plugin(debug, cni_env(command, netns="/x"), conf(inject={command: {"error": {"code": 50, "msg": "busy"}}}))
    assert r.rc == 1 and (r.json["code"], r.json["msg"]) == (50, "busy")


def test_inject_error_code_defaults_to_999(debug):
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf(inject={"ADD": {"error": {"msg": "x"}}}))
    assert r.json["code"] == 999


def test_inject_delay(debug):
    c = conf(inject={"ADD": {"delayMs": 400}})
    started = time.monotonic()
    r = run_plugin(debug, cni_env("ADD", netns="/x"), c)
    assert r.rc == 0 and time.monotonic() - started >= 0.4
    # Only ADD waits: with an ADD delay far beyond the timeout, DEL still completes (no timing bound).
    c = conf(inject={"ADD": {"delayMs": 600000}})
    assert run_plugin(debug, cni_env("DEL"), c, timeout=60).rc == 0


def test_inject_result_object_is_printed_as_given(debug):
    given = {"cniVersion": "0.4.0", "ips": [{"address": "10.9.0.2/24"}], "odd": True}
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf("1.1.0", prevResult=prev_for("1.1.0"),
                                                           inject={"ADD": {"result": given}}))
    assert r.rc == 0 and r.json == given


def test_inject_result_string_is_printed_verbatim(debug):
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf(inject={"ADD": {"result": "this is not JSON"}}))
    assert (r.rc, r.stdout) == (0, "this is not JSON")


def test_inject_stderr(debug):
    r = run_plugin(debug, cni_env("CHECK", netns="/x"), conf(inject={"CHECK": {"stderr": "warming up"}}))
    assert r.rc == 0 and "warming up" in r.stderr


@pytest.mark.parametrize("inject,code,words", [
    ("nope", 7, "inject: expected an object"),
    ({"add": {}}, 7, "inject.add: not a CNI command"),
    ({"ADD": {"delay": 5}}, 2, "inject.ADD.delay: unsupported field"),
    ({"ADD": {"delayMs": -1}}, 7, "inject.ADD.delayMs"),
    ({"ADD": {"delayMs": 1e300}}, 7, "inject.ADD.delayMs: expected a number of milliseconds from 0 to"),  # review 15
    ({"ADD": {"error": {"code": "7"}}}, 7, "inject.ADD.error.code"),
    ({"CHECK": {"result": {}}}, 7, "inject.CHECK.result: only ADD has a result"),
    ({"DEL": {"error": 5}}, 7, "inject.DEL.error"),
])
def test_bad_inject_config_names_the_field(debug, inject, code, words):
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf(inject=inject))
    assert r.rc == 1 and r.json["code"] == code and words in r.json["msg"], r


@pytest.mark.parametrize("extra", [
    {"inject": {"ADD": {"error": {"code": 7, "msg": "x"}}, "CHECK": {"error": {"code": 1, "msg": "y"}}}},
    {"inject": "garbage"},
    {"inject": {"DEL": {"error": "not an object"}}},
    {"cniOutput": "/proc/no/such/dir/out.txt"},
    {"addHooks": "not a list", "delHooks": [["/no/such/binary"]]},
    {"prevResult": "not an object"},
])
def test_del_never_fails_unless_told_to(debug, extra):
    r = run_plugin(debug, cni_env("DEL", netns="/run/netns/gone"), conf(**extra))
    assert (r.rc, r.stdout) == (0, ""), r


@pytest.mark.parametrize("key", ["cniOutput", "captureFile"])
def test_unusable_record_files_fail_add_naming_the_key_but_not_del(debug, tmp_path, key):
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf(**{key: str(tmp_path)}))
    assert r.rc == 1 and r.json["code"] == 7 and key in r.json["msg"] and "a directory" in r.json["msg"], r
    r = run_plugin(debug, cni_env("DEL"), conf(**{key: str(tmp_path)}))
    assert (r.rc, r.stdout) == (0, "") and key in r.stderr, r


@pytest.mark.parametrize("key,value,words", [
    ("cniOutput", 5, "expected a file path, found the number 5"),
    ("captureFile", ["/tmp/x"], "expected a file path, found a list"),
    ("cniOutput", "out.txt", "is a relative path"),
    ("captureFile", "./cap.jsonl", "is a relative path"),
    ("addHooks", "ip link", "expected a list of argv lists"),
    ("checkHooks", [[]], "expected a list of argv lists"),
    ("cniOutput", "/tmp/a\u0000b", "NUL byte"),
])
def test_wrongly_typed_known_keys_are_code_7_naming_the_key(debug, key, value, words, tmp_path):
    r = run_plugin(debug, cni_env("ADD", netns="/x"), conf(**{key: value}))
    assert r.rc == 1 and r.json["code"] == 7 and key in r.json["msg"] and words in r.json["msg"], r


# ---------------------------------------------------------------------------------------------------
# hooks (the reference's addHooks/delHooks/checkHooks): they run inside CNI_NETNS

@pytest.mark.kernel
def test_add_hooks_run_in_the_container_netns(debug, make_netns, tmp_path):
    ns = make_netns()
    mark = tmp_path / "hook-ran"
    c = conf(addHooks=[["ip", "link", "set", "lo", "up"], ["sh", "-c", f'echo "$CNI_IFNAME" > {mark}']],
             delHooks=[["ip", "link", "set", "lo", "down"]])
    r = run_plugin(debug, cni_env("ADD", netns=f"/run/netns/{ns}", ifname="eth7"), c)
    assert r.rc == 0, r
    assert "UP" in link_flags("lo", ns) and mark.read_text() == "eth7\n"
    assert "UP" in link_flags("lo")   # the sandbox host's lo: untouched
    r = run_plugin(debug, cni_env("DEL", netns=f"/run/netns/{ns}"), c)
    assert r.rc == 0 and "UP" not in link_flags("lo", ns)


@pytest.mark.kernel
def test_hooks_never_run_in_the_host_netns(debug):
    c = conf(delHooks=[["ip", "link", "set", "lo", "down"]], addHooks=[["ip", "link", "set", "lo", "down"]])
    for command in ("DEL", "ADD"):
        r = run_plugin(debug, cni_env(command, netns="/proc/self/ns/net"), c)
        assert r.rc == 0 and "hooks skipped" in r.stderr, r
        assert "UP" in link_flags("lo")


@pytest.mark.kernel
def test_failing_hook_is_reported_not_fatal(debug, make_netns):
    ns = make_netns()
    r = run_plugin(debug, cni_env("ADD", netns=f"/run/netns/{ns}"), conf(addHooks=[["sh", "-c", "echo no >&2; exit 3"]]))
    assert r.rc == 0 and "exited 3" in r.stderr and "no" in r.stderr


def test_hooks_skipped_when_netns_is_missing(debug):
    r = run_plugin(debug, cni_env("ADD", netns="/run/netns/never-there"), conf(addHooks=[["true"]]))
    assert r.rc == 0 and "hooks skipped" in r.stderr

