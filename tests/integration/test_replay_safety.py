"""Review 15: a replay never acts on the node's real state without --live, whatever the record says.

A record is untrusted input. A replayed DEL (its netns empty or gone) runs as a container of its own, so a
live attachment with the recorded container ID keeps its veth, routes, reservation and rules; a GC is
refused (it would release what was added since); a CHECK whose netns exists is refused like an ADD or DEL;
the debug plugin's hooks (root commands) are refused, in any key spelling, and CNI_NETNS_OVERRIDE is never
taken from a record. Record files named in any spelling, and those of the doctor's own calls, go aside.
What is printed is escaped; a closed pipe and a huge COLUMNS end quietly; log and replay number alike.
Every check reads the node back: files on disk, ``ip -j``, iptables/nft."""
import json
import os
import subprocess

import pytest

from tests.helpers import cni_env, ip_json, link_flags, run_plugin
from tests.integration.ptp_support import masq_chain_rules, nft_masq_rules, reservations

NET = "ptpnet"


@pytest.fixture
def skb(bin_dir):
    return os.path.join(bin_dir, "skb")


def run(skb, *args, env=None, timeout=120):
    e = {"PATH": os.environ["PATH"]}
    e.update(env or {})
    p = subprocess.run([skb, *args], env=e, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    return p


def ptp_conf(log, data, version="1.0.0", **extra):
    return {"cniVersion": version, "name": NET, "type": "ptp", "ipMasq": True, "skbDebugLog": str(log),
            "ipam": {"type": "host-local", "subnet": "10.79.0.0/24", "dataDir": str(data)}, **extra}


def node_state(data):
    """What ptp and host-local keep on the node, read back: reservations, masquerade rules, host routes
    into the pod range, host veths."""
    routes = sorted(r["dst"] for r in ip_json("route", "show") if r.get("dst", "").startswith("10.79."))
    veths = sorted(link["ifname"] for link in ip_json("link", "show") if link["ifname"].startswith("veth"))
    return reservations(str(data), NET), masq_chain_rules(), nft_masq_rules(), routes, veths


def numbered(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


def number_of(log, command, plugin="ptp"):
    return next(str(i) for i, r in enumerate(numbered(log), 1) if r["command"] == command and r["plugin"] == plugin)


def write_records(path, *recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def record(command, stdin, netns="", cid="c1", **env):
    return {"time": "t", "plugin": "debug", "command": command, "stdin": json.dumps(stdin), "exitCode": 0,
            "stdout": "", "stderr": "",
            "env": {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": "eth0",
                    "CNI_PATH": "/opt/cni/bin", **env}}


# ---------------------------------------------------------------------------------------------------
# 1. DEL

@pytest.mark.kernel
@pytest.mark.parametrize("recorded_netns", ["", "/run/netns/skb-gone-1234"])
def test_a_replayed_del_never_tears_down_the_live_attachment(skb, bin_dir, make_netns, tmp_path, recorded_netns):
    """ctr-like: ADD web, DEL web with an empty (or since gone) netns, web started again under the same
    container ID. Replaying the recorded DEL removed the live web's veth, route and reservation."""
    log, data = tmp_path / "calls.jsonl", tmp_path / "ipam"
    conf, ptp = ptp_conf(log, data), os.path.join(bin_dir, "ptp")
    first, again = make_netns(), make_netns()
    assert run_plugin(ptp, cni_env("ADD", "web", f"/run/netns/{first}", path=bin_dir), conf).rc == 0
    assert run_plugin(ptp, cni_env("DEL", "web", recorded_netns, path=bin_dir), conf).rc == 0
    assert run_plugin(ptp, cni_env("ADD", "web", f"/run/netns/{again}", path=bin_dir), conf).rc == 0
    live = node_state(data)
    pod = ip_json("addr", "show", "eth0", netns=again)
    assert len(live[0]) == 1 and live[3] and live[4], live
    p = run(skb, "replay", str(log), "-n", number_of(log, "DEL"), "--json", "--cni-path", bin_dir)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert node_state(data) == live and ip_json("addr", "show", "eth0", netns=again) == pod
    assert "--live acts on it" in json.loads(p.stdout)["netnsNote"]
    # --live acts on the recorded attachment, as the operator asked: web's reservation and veth go
    p = run(skb, "replay", str(log), "-n", number_of(log, "DEL"), "--live", "--cni-path", bin_dir)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert node_state(data)[0] == {} and not node_state(data)[4]


# ---------------------------------------------------------------------------------------------------
# 2. GC and STATUS

@pytest.mark.kernel
def test_a_replayed_gc_is_refused_without_live(skb, bin_dir, make_netns, tmp_path):
    log, data = tmp_path / "calls.jsonl", tmp_path / "ipam"
    conf, ptp = ptp_conf(log, data, "1.1.0"), os.path.join(bin_dir, "ptp")
    a, b = make_netns(), make_netns()
    assert run_plugin(ptp, cni_env("ADD", "a", f"/run/netns/{a}", path=bin_dir), conf).rc == 0
    gc = dict(conf, **{"cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}]})
    assert run_plugin(ptp, cni_env("GC", "", "", "", path=bin_dir), gc).rc == 0
    assert run_plugin(ptp, cni_env("ADD", "b", f"/run/netns/{b}", path=bin_dir), conf).rc == 0   # added since
    state = node_state(data)
    assert sorted(state[0]) == ["10.79.0.2", "10.79.0.3"], state
    p = run(skb, "replay", str(log), "-n", number_of(log, "GC"), "--cni-path", bin_dir)
    assert p.returncode == 2 and "GC" in p.stderr and "--live" in p.stderr and "added since" in p.stderr, p.stderr
    assert node_state(data) == state
    p = run(skb, "replay", str(log), "-n", number_of(log, "GC"), "--live", "--cni-path", bin_dir)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert sorted(node_state(data)[0]) == ["10.79.0.2"]        # --live: for real, as the refusal said


def test_a_status_still_replays(skb, bin_dir, tmp_path):
    log = write_records(tmp_path / "s.jsonl", record("STATUS", {"cniVersion": "1.1.0", "name": "n", "type": "debug"}))
    p = run(skb, "replay", str(log), "--json", env={"CNI_PATH": bin_dir})
    assert p.returncode == 0 and json.loads(p.stdout)["same"] is True, p.stdout + p.stderr


# ---------------------------------------------------------------------------------------------------
# 3. hooks, CNI_NETNS_OVERRIDE, CHECK in an existing netns

@pytest.mark.kernel
@pytest.mark.parametrize("key", ["checkHooks", "CHECKHOOKS", "checkhoo\u212as"])   # (U+212A folds to k, as in Go)
def test_a_check_with_hooks_in_the_nodes_netns_is_refused(skb, bin_dir, tmp_path, key):
    """Review 15: CNI_NETNS=/proc/1/ns/net, CNI_NETNS_OVERRIDE=1 and a hook took the node's lo down."""
    hook = [["ip", "link", "set", "lo", "down"]]
    rec = record("CHECK", {"cniVersion": "1.0.0", "name": "n", "type": "debug", key: hook},
                 netns="/proc/1/ns/net", CNI_NETNS_OVERRIDE="1")
    log = write_records(tmp_path / "check.jsonl", rec)
    assert "UP" in link_flags("lo")
    try:
        p = run(skb, "replay", str(log), env={"CNI_PATH": bin_dir})
        assert p.returncode == 2 and key in p.stderr and "--live" in p.stderr, p.stderr
        assert "UP" in link_flags("lo")
        # --live runs the hooks the operator read, but never with the record's CNI_NETNS_OVERRIDE: the
        # debug plugin's guard keeps them out of the node's own netns
        p = run(skb, "replay", str(log), "--live", env={"CNI_PATH": bin_dir})
        assert p.returncode in (0, 1), p.stdout + p.stderr
        assert "UP" in link_flags("lo"), p.stdout
        assert "CNI_NETNS_OVERRIDE" in p.stdout          # named as not taken from the record
    finally:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=False)


@pytest.mark.kernel
def test_an_add_with_hooks_is_refused_and_runs_nothing(skb, bin_dir, tmp_path):
    marker = tmp_path / "pwned"
    stdin = {"cniVersion": "1.0.0", "name": "n", "type": "debug",
             "ipam": {"type": "debug", "AddHooks": [["sh", "-c", f"echo x > {marker}"]]},
             "addHooks": [["sh", "-c", f"echo x > {marker}"]]}
    log = write_records(tmp_path / "h.jsonl", record("ADD", stdin, netns="/run/netns/skb-gone-5678"))
    p = run(skb, "replay", str(log), env={"CNI_PATH": bin_dir})
    assert p.returncode == 2 and "addHooks" in p.stderr and "AddHooks" in p.stderr, p.stderr
    p = run(skb, "replay", str(log), "--scratch", env={"CNI_PATH": bin_dir})     # a netns contains no command
    assert p.returncode == 2 and not marker.exists()


@pytest.mark.kernel
def test_a_check_in_an_existing_netns_is_refused_without_live(skb, bin_dir, make_netns, tmp_path):
    ns = make_netns()
    out = tmp_path / "out.txt"
    stdin = {"cniVersion": "1.0.0", "name": "n", "type": "debug", "cniOutput": str(out)}
    log = write_records(tmp_path / "c.jsonl", record("CHECK", stdin, netns=f"/run/netns/{ns}"))
    p = run(skb, "replay", str(log), env={"CNI_PATH": bin_dir})
    assert p.returncode == 2 and f"/run/netns/{ns} still exists" in p.stderr and "--live" in p.stderr, p.stderr
    p = run(skb, "replay", str(log), "--scratch", "--json", env={"CNI_PATH": bin_dir})
    assert p.returncode == 0 and json.loads(p.stdout)["env"]["CNI_NETNS"] != f"/run/netns/{ns}", p.stderr
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------
# 4. record files in any spelling

@pytest.mark.kernel
def test_record_files_in_any_spelling_are_diverted(skb, bin_dir, tmp_path):
    cap, text, dbg = tmp_path / "realcapture.jsonl", tmp_path / "anywhere", tmp_path / "debug.jsonl"
    stdin = {"cniVersion": "1.0.0", "name": "n", "type": "debug", "CaptureFile": str(cap), "CNIOUTPUT": str(text),
             "SKBDEBUGLOG": str(dbg)}
    rec = record("ADD", stdin, netns="/run/netns/skb-gone-9")
    rec["stdout"] = json.dumps({"cniVersion": "1.0.0"})
    log = write_records(tmp_path / "case.jsonl", rec)
    p = run(skb, "replay", str(log), "--json", env={"CNI_PATH": bin_dir})
    assert p.returncode == 0, p.stdout + p.stderr
    assert not cap.exists() and not text.exists() and not dbg.exists()
    assert "CaptureFile, CNIOUTPUT, SKBDEBUGLOG" in json.loads(p.stdout)["logNote"]


# ---------------------------------------------------------------------------------------------------
# 5. the doctor's own calls record themselves nowhere

def _doctor_setup(tmp_path, bin_dir):
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    files = [tmp_path / "cap.jsonl", tmp_path / "out.txt", tmp_path / "dbg.jsonl"]
    (conf_dir / "10-pods.conflist").write_text(json.dumps({"cniVersion": "1.1.0", "name": "pods", "plugins": [
        {"type": "debug", "captureFile": str(files[0]), "CniOutput": str(files[1]), "skbDebugLog": str(files[2])}]}))
    args = ["doctor", "--json", "--conf-dir", str(conf_dir), "--bin-dir", bin_dir, "--containerd-config=",
            "--crio-config=", "--crio-config-dir=", "--cache-dir", str(tmp_path / "cache")]
    return args, files


def test_doctor_status_appends_to_no_call_log(skb, bin_dir, tmp_path):
    args, files = _doctor_setup(tmp_path, bin_dir)
    env_log = tmp_path / "env.jsonl"
    p = run(skb, *args, env={"SKB_DEBUG_LOG": str(env_log)})      # VERSION and STATUS of the debug plugin
    assert json.loads(p.stdout)["checked"], p.stdout
    assert not any(f.exists() for f in files + [env_log]), [f for f in files + [env_log] if f.exists()]


@pytest.mark.kernel
def test_doctor_probe_appends_to_no_call_log(skb, bin_dir, tmp_path):
    args, files = _doctor_setup(tmp_path, bin_dir)
    p = run(skb, *args, "--probe", timeout=300)
    assert "probe-skipped" not in p.stdout, p.stdout
    assert not any(f.exists() for f in files), [f for f in files if f.exists()]


# ---------------------------------------------------------------------------------------------------
# 6-8. what replay prints: escaped, a width clamped, a closed pipe, numbering as skb log's

def _fake_plugin(tmp_path):
    fake = tmp_path / "fake"
    fake.write_text("#!/bin/sh\ncat >/dev/null\nprintf '\\033]52;c;cHduZWQ=\\007 not json\\n'\n"
                    "printf '\\033[2K\\r#9 fake record\\t.\\n' >&2\nexit 0\n")
    fake.chmod(0o755)
    return fake


def test_replay_shows_no_control_character_raw(skb, tmp_path):
    rec = record("STATUS", {"cniVersion": "1.1.0", "name": "n", "type": "debug"})
    rec.update(stdout="\x1b[31mred\x9b2J", time="\x1b]0;title\x07", plugin="debug")
    log = write_records(tmp_path / "e.jsonl", rec)
    p = run(skb, "replay", str(log), "--plugin", str(_fake_plugin(tmp_path)), env={"COLUMNS": "160"})
    assert p.returncode == 1, p.stdout + p.stderr
    for raw in ("\x1b", "\x07", "\x9b", "\r"):
        assert raw not in p.stdout and raw not in p.stderr, repr(raw)
    assert "\\x1b]52;c;cHduZWQ=\\x07" in p.stdout and "\\x1b[2K\\r#9 fake record\t." in p.stdout
    p = run(skb, "replay", str(log), "--plugin", str(_fake_plugin(tmp_path)), env={"COLUMNS": "30"})
    assert "\x1b" not in p.stdout and "\\x1b[31mred\\x9b2J" in p.stdout


def test_replay_clamps_a_huge_width(skb, tmp_path):
    log = write_records(tmp_path / "s.jsonl", record("STATUS", {"cniVersion": "1.1.0", "name": "n", "type": "debug"}))
    p = run(skb, "replay", str(log), "--plugin", str(_fake_plugin(tmp_path)), env={"COLUMNS": "99999999999"})
    assert p.returncode == 1 and "MemoryError" not in p.stderr and " | replayed" in p.stdout, p.stderr
    assert max(len(line) for line in p.stdout.splitlines()) < 1000


def test_log_and_replay_number_records_alike_past_a_long_line(skb, tmp_path):
    from skb.tool.log import LINE_LIMIT
    recs = [record("STATUS", {"cniVersion": "1.1.0", "name": "n", "type": "debug"}) for _ in range(4)]
    for i, r in enumerate(recs):
        r["stdout"] = f"number {i}"
    recs[1]["stderr"] = "x" * (LINE_LIMIT + (3 << 20))    # far longer than the limit
    recs[2]["stderr"] = "x" * (LINE_LIMIT - 200)           # just longer, whole in one read
    log = tmp_path / "long.jsonl"
    with open(log, "w") as f:
        for r in recs:
            line = json.dumps(r)
            f.write(line + "\n")
    assert len(json.dumps(recs[2])) > LINE_LIMIT
    p = run(skb, "log", str(log))
    shown = [line.split()[0] for line in p.stdout.splitlines() if line.startswith("#")]
    assert shown == ["#1", "#2"] and p.stderr.count("skipped") == 2, p.stdout + p.stderr
    out = json.loads(run(skb, "replay", str(log), "-n", "2", "--json", "--plugin", "/bin/true").stdout)
    assert out["record"] == 2 and out["recorded"]["stdout"] == "number 3"


def _spy(tmp_path):
    """A plugin that notes each call in a file of its own (no record key: the doctor leaves it alone)."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen.txt"
    bin_dir.mkdir()
    spy = bin_dir / "spy"
    spy.write_text(f"#!/bin/sh\ncat >/dev/null\necho \"$CNI_COMMAND $CNI_CONTAINERID $CNI_ARGS\" >> {seen}\n"
                   "case \"$CNI_COMMAND\" in\n"
                   "VERSION) echo '{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}';;\n"
                   "ADD) echo '{\"code\":11,\"msg\":\"no IPs left\"}'; exit 1;;\nesac\nexit 0\n")
    spy.chmod(0o755)
    return str(bin_dir), seen


def _doctor_args(tmp_path, bin_dir, version):
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "10-pods.conflist").write_text(json.dumps({"cniVersion": version, "name": "pods",
                                                           "plugins": [{"type": "spy"}]}))
    return ["doctor", "--json", "--conf-dir", str(conf_dir), "--bin-dir", bin_dir, "--containerd-config=",
            "--crio-config=", "--crio-config-dir=", "--cache-dir", str(tmp_path / "cache")]


def test_doctor_sends_status_only_from_1_1_0(skb, tmp_path):
    """(What test_doctor's test_status_ok_and_not_sent_before_1_1_0 saw in a captureFile, which the
    doctor's calls no longer write.)"""
    bin_dir, seen = _spy(tmp_path)
    p = run(skb, *_doctor_args(tmp_path, bin_dir, "1.1.0"))
    assert json.loads(p.stdout)["problems"] == [], p.stdout
    assert sorted(line.split()[0] for line in seen.read_text().splitlines()) == ["STATUS", "VERSION"]  # (at once)
    seen.unlink()
    run(skb, *_doctor_args(tmp_path, bin_dir, "1.0.0"))
    assert [line.split()[0] for line in seen.read_text().splitlines()] == ["VERSION"]


@pytest.mark.kernel
def test_doctor_probe_adds_with_cri_args_and_dels_after_a_failed_add(skb, tmp_path):
    """(What test_doctor's test_probe_add_failure_and_cri_args saw in a captureFile.)"""
    bin_dir, seen = _spy(tmp_path)
    p = run(skb, *_doctor_args(tmp_path, bin_dir, "1.0.0"), "--probe", timeout=300)
    f = next(f for f in json.loads(p.stdout)["problems"] if f["code"] == "probe-failed")
    assert f["what"].startswith("ADD of the pod network fails") and "no IPs left" in f["evidence"]
    calls = [line.split() for line in seen.read_text().splitlines() if not line.startswith("VERSION")]
    assert [c[0] for c in calls] == ["ADD", "DEL"]
    args = dict(kv.split("=") for kv in calls[0][2].split(";"))
    assert args["IgnoreUnknown"] == "1" and args["K8S_POD_INFRA_CONTAINER_ID"] == calls[0][1]
