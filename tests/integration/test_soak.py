"""Soak: randomly mutated configurations against every installed plugin and every command.

Each iteration picks a plugin (loopback, ptp with host-local, host-local, debug), mutates a working
configuration (a value's JSON type swapped, a path-valued key pointed at a FIFO, a device, a directory,
a symlink, a dangling link or a relative path, strings with lone surrogates or NULs, integers too long
for Python's int(), the cniVersion changed, a key dropped) and runs ADD, CHECK, DEL, STATUS, GC and
VERSION on one attachment in a scratch netns, each call under a hard timeout. Asserted for every call:
no hang, no traceback, stdout empty or one JSON object, exit 0 or 1, error codes from the spec's set.
After DEL, nothing is left: no link in the sandbox host or the scratch netns, no reservation file
anywhere under the soak's directory, no masquerade rule (read back with ip -j, the file system,
iptables-save and nft), no file created in the calls' working directory.

The sequence is fixed by SKB_SOAK_SEED (default below) and bounded by SKB_SOAK_SECONDS (default 45) and
SKB_SOAK_ITERATIONS: a failure prints the seed and the iteration, so it replays exactly.
"""
import ipaddress
import json
import os
import random
import subprocess
import time
import uuid

import pytest

from tests.helpers import cni_env, ip_json
from tests.integration.ptp_support import iptables_rules, nft_masq_rules

pytestmark = [pytest.mark.kernel, pytest.mark.frozen]

SEED = int(os.environ.get("SKB_SOAK_SEED", "1313"))
OUTSIDE = ("/", "/dev")  # where no call may create anything (its files go under the test's tmp_path)
SECONDS = float(os.environ.get("SKB_SOAK_SECONDS", "45"))
ITERATIONS = int(os.environ.get("SKB_SOAK_ITERATIONS", "100000"))
CALL_TIMEOUT = 15
# The spec's well-known codes, and 100+ (plugin-specific, e.g. host-local's "no address" 101); never
# 999, which this suite uses for an unexpected exception (a bug).
SPEC_CODES = {1, 2, 3, 4, 5, 6, 7, 11, 50, 51}


def spec_code(code):
    return code in SPEC_CODES or (isinstance(code, int) and not isinstance(code, bool) and 100 <= code < 999)
VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
HUGE = "__SOAK_HUGE__"
COMMANDS = ("ADD", "CHECK", "DEL", "STATUS", "GC", "VERSION")


def base_config(plugin, root):
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.55.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": f"{root}/ipam", "resolvConf": f"{root}/resolv.conf"}
    c = {"cniVersion": "1.1.0", "name": "soak", "type": plugin, "skbDebugLog": f"{root}/debug.jsonl"}
    if plugin == "ptp":
        c.update(ipam=ipam, ipMasq=True, mtu=1400)
    elif plugin == "host-local":
        c.update(ipam=ipam)
    elif plugin == "debug":
        c.update(cniOutput=f"{root}/out.txt", captureFile=f"{root}/capture.jsonl")
    return c


PATH_KEYS = {"loopback": [("skbDebugLog",)],
             "ptp": [("skbDebugLog",), ("ipam", "dataDir"), ("ipam", "resolvConf")],
             "host-local": [("skbDebugLog",), ("ipam", "dataDir"), ("ipam", "resolvConf")],
             "debug": [("skbDebugLog",), ("cniOutput",), ("captureFile",)]}


def make_specials(root):
    os.makedirs(f"{root}/adir", exist_ok=True)
    os.mkfifo(f"{root}/fifo")
    with open(f"{root}/regular", "w") as f:
        f.write("nameserver 10.55.0.53\n")
    os.symlink(f"{root}/regular", f"{root}/link-regular")
    os.symlink(f"{root}/gone/x", f"{root}/link-dangling")
    os.symlink(f"{root}/adir", f"{root}/link-dir")
    with open(f"{root}/resolv.conf", "w") as f:
        f.write("nameserver 10.55.0.53\nsearch soak.example\n")
    return [f"{root}/fifo", "/dev/zero", "/dev/null", "/dev/full", f"{root}/adir", f"{root}/regular",
            f"{root}/link-regular", f"{root}/link-dangling", f"{root}/link-dir", "relative/path", "x",
            f"{root}/a\0b", f"{root}/s\ud800", "", "/", "/proc/self/fd/1"]


def leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,), v
            yield from leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield path + (i,), v
            yield from leaves(v, path + (i,))


def set_at(obj, path, value):
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value


def drop_at(obj, path):
    for p in path[:-1]:
        obj = obj[p]
    del obj[path[-1]]


def mutate(rng, plugin, conf, specials, root):
    """1 to 3 random mutations of ``conf`` (in place); returns their descriptions.

    No mutation may send a plugin to write outside ``root``: the plugins take a lone surrogate as U+FFFD
    (as Go does) and create what a valid dataDir or record path names, so a character inserted into an
    absolute path goes after ``root/`` when the path is under it and before its first "/" otherwise (a
    relative path: refused), and dataDir is never "/" (host-local would make "/<network>")."""
    done = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["swap", "path", "path", "surrogate", "huge", "version", "drop", "nul"])
        paths = [p for p, _ in leaves(conf)]
        p = None
        if not paths:
            break
        if kind == "swap":
            p = rng.choice(paths)
            set_at(conf, p, rng.choice([5, -1, 2 ** 70, 1.5, True, False, None, "x", [], {}, ["a"], {"k": 1}]))
        elif kind == "path":
            p = rng.choice(PATH_KEYS[plugin])
            if len(p) == 2 and not isinstance(conf.get(p[0]), dict):
                continue
            set_at(conf, p, rng.choice([v for v in specials if not (p == ("ipam", "dataDir") and v == "/")]))
        elif kind in ("surrogate", "nul"):
            strings = [p for p, v in leaves(conf) if isinstance(v, str)]
            p = rng.choice(strings) if strings and rng.random() < 0.8 else ("x",)
            bad = rng.choice(["\ud800", "\udfff", "\udc80", "a\ud83db"]) if kind == "surrogate" else "\0"
            old = conf.get("x", "") if p == ("x",) else dict(leaves(conf))[p]
            if old.startswith(root + "/"):
                i = rng.randint(len(root) + 1, len(old))
            elif old.startswith("/"):
                i = 0
            else:
                i = rng.randint(0, len(old))
            set_at(conf, p, old[:i] + bad + old[i:])
        elif kind == "huge":
            p = rng.choice(paths)
            set_at(conf, p, HUGE)
        elif kind == "version":
            conf["cniVersion"] = rng.choice(VERSIONS + ["", "v1.0.0", "1.1", "9.9.9", "1.1.0\ud800", 1.0, None])
        elif kind == "drop":
            p = rng.choice(paths)
            drop_at(conf, p)
        done.append(f"{kind}:{p if kind != 'version' else conf.get('cniVersion')!r}")
    return done


def to_text(rng, conf):
    text = json.dumps(conf)
    digits = rng.choice([4000, 4301, 5000, 20000])
    return text.replace(json.dumps(HUGE), ("-" if rng.random() < 0.3 else "") + "9" * digits)


class Calls:
    def __init__(self, bin_dir, cwd):
        self.bin_dir = bin_dir
        self.cwd = cwd
        self.problems = []
        self.count = 0
        self.added = {}   # plugin -> successful ADDs (each one's DEL is then checked for leftovers)

    def run(self, plugin, command, text, netns, cid, where, extra_env=None, close_stdout=False):
        """One call; with ``close_stdout`` the plugin starts with fd 1 closed (its answer is lost: an
        ADD must then undo itself) and only its exit code and stderr are checked."""
        env = cni_env(command, containerid=cid, netns=netns, ifname="eth0", path=self.bin_dir)
        env.update(extra_env or {})
        self.count += 1
        try:
            p = subprocess.run([os.path.join(self.bin_dir, plugin)], env=env, input=text.encode("utf-8", "surrogatepass"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=CALL_TIMEOUT, cwd=self.cwd,
                               preexec_fn=(lambda: os.close(1)) if close_stdout else None)
        except subprocess.TimeoutExpired:
            self.problems.append(f"{where} {command}: HANG (> {CALL_TIMEOUT} s)")
            return None, None
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        bad = None
        if p.returncode not in (0, 1):
            bad = f"exit {p.returncode}"
        elif "Traceback" in err or "Traceback" in out:
            bad = "traceback"
        obj = None
        if close_stdout:   # nothing to read on stdout: the exit code and stderr are all there is
            if bad is None and p.returncode != 1:
                bad = "an answer that could not be delivered did not fail the call"
            elif bad is None and "could not be written" not in err:
                bad = "no remark on stderr about the lost answer"
            if bad:
                self.problems.append(f"{where} {command}: {bad}: rc={p.returncode} stderr={err[-500:]!r}")
            return p.returncode, None
        if bad is None and out.strip():
            try:
                obj = json.loads(out)
            except ValueError:
                bad = "stdout is not one JSON object"
            else:
                if not isinstance(obj, dict):
                    bad = "stdout is not a JSON object"
        if bad is None and p.returncode == 1:
            if not obj or not spec_code(obj.get("code")) or not obj.get("msg"):
                bad = "not a spec error"
        if bad is None and p.returncode == 0 and command == "ADD" and not (obj and "cniVersion" in obj):
            bad = "ADD succeeded without a result"
        if command == "ADD" and p.returncode == 0:
            self.added[plugin] = self.added.get(plugin, 0) + 1
        if bad:
            self.problems.append(f"{where} {command}: {bad}: rc={p.returncode} stdout={out[:300]!r} "
                                 f"stderr={err[-500:]!r}")
        return p.returncode, obj


def reservation_files(root):
    """Every file under ``root`` (and host-local's default dataDir) named like an IP address: a
    reservation, wherever dataDir pointed."""
    found = []
    for d, _dirs, files in [w for top in (root, "/var/lib/cni/networks") for w in os.walk(top)]:
        for f in files:
            try:
                ipaddress.ip_address(f)
            except ValueError:
                continue
            found.append(os.path.join(d, f))
    return found


def host_state():
    return {"links": sorted(link["ifname"] for link in ip_json("link", "show")),
            "iptables": iptables_rules(), "nft": nft_masq_rules()}


def test_soak_mutated_configs_against_every_plugin_and_command(bin_dir, tmp_path):
    rng = random.Random(SEED)
    root = str(tmp_path)
    specials = make_specials(root)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    calls = Calls(bin_dir, str(cwd))
    before = host_state()
    outside = {d: set(os.listdir(d)) for d in OUTSIDE}
    deadline = time.monotonic() + SECONDS
    iterations = 0
    while iterations < ITERATIONS and time.monotonic() < deadline and len(calls.problems) < 10:
        iterations += 1
        plugin = rng.choice(["loopback", "ptp", "ptp", "host-local", "debug"])
        conf = base_config(plugin, root)
        what = mutate(rng, plugin, conf, specials, root) if rng.random() < 0.7 else ["none"]
        text = to_text(rng, conf)
        ns = f"soak-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", ns], check=True)
        cid = f"c{iterations}"
        where = f"seed={SEED} iteration={iterations} {plugin} {what}"
        extra = {}
        if rng.random() < 0.15:
            extra["SKB_DEBUG_LOG"] = rng.choice(specials)
            if "\0" in extra["SKB_DEBUG_LOG"] or "\ud800" in extra["SKB_DEBUG_LOG"]:
                extra["SKB_DEBUG_LOG"] = "relative.log"
        try:
            netns = f"/run/netns/{ns}"
            if rng.random() < 0.1:
                # the answer cannot be delivered: the ADD must undo itself, checked before any DEL
                rc, _ = calls.run(plugin, "ADD", text, netns, cid, where + " (stdout closed)", extra, close_stdout=True)
                left = reservation_files(root) + [n["ifname"] for n in ip_json("link", "show", netns=ns)
                                                  if n["ifname"] != "lo"]
                if rc != 1 or left or host_state() != before:
                    calls.problems.append(f"{where}: ADD with stdout closed: rc {rc}, not undone: {left}")
            rc, result = calls.run(plugin, "ADD", text, netns, cid, where, extra)
            if rc == 0 and result is not None:
                check_conf = json.loads(text) if HUGE not in json.dumps(conf) else None
                if isinstance(check_conf, dict):
                    check_conf["prevResult"] = result
                    calls.run(plugin, "CHECK", json.dumps(check_conf), netns, cid, where, extra)
            else:
                calls.run(plugin, "CHECK", text, netns, cid, where, extra)
            for command in ("STATUS", "VERSION"):
                calls.run(plugin, command, text, netns, cid, where, extra)
            rc_del, _ = calls.run(plugin, "DEL", text, netns, cid, where, extra)
            # GC with an empty list of valid attachments releases what DEL might have left: run it after
            # the leftover check, so that it cannot hide one.
            after_links = [link["ifname"] for link in ip_json("link", "show", netns=ns)]
            if [n for n in after_links if n != "lo"]:
                calls.problems.append(f"{where}: DEL (rc {rc_del}) left links in the scratch netns: {after_links}")
            left = reservation_files(root)
            if left:
                calls.problems.append(f"{where}: DEL (rc {rc_del}) left reservations: {left}")
            state = host_state()
            if state != before:
                calls.problems.append(f"{where}: DEL (rc {rc_del}) left host state: "
                                      f"{ {k: v for k, v in state.items() if v != before[k]} }")
            gc = json.loads(text) if HUGE not in json.dumps(conf) else None
            if isinstance(gc, dict):
                gc["cni.dev/valid-attachments"] = []
                calls.run(plugin, "GC", json.dumps(gc), netns, cid, where, extra)
            else:
                calls.run(plugin, "GC", text, netns, cid, where, extra)
        finally:
            for link in ip_json("link", "show", netns=ns):
                if link["ifname"] != "lo":
                    subprocess.run(["ip", "-n", ns, "link", "del", link["ifname"]], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], check=False)
            for f in reservation_files(root):       # keep one failure from cascading into the next
                os.unlink(f)
            now = host_state()
            for name in set(now["links"]) - set(before["links"]):
                subprocess.run(["ip", "link", "del", name], capture_output=True)
        for d, names in outside.items():   # a plugin sent to write outside the test's directory
            new = set(os.listdir(d)) - names
            if new:
                calls.problems.append(f"{where}: created {sorted(new)} in {d} (outside the test's directory)")
                names |= new
        leftover_cwd = os.listdir(cwd)
        if leftover_cwd:
            calls.problems.append(f"{where}: files created in the calls' working directory: {leftover_cwd}")
            for f in leftover_cwd:
                subprocess.run(["rm", "-rf", os.path.join(cwd, f)])
    print(f"soak: seed {SEED}, {iterations} iterations, {calls.count} calls, successful ADDs {calls.added}, "
          f"{len(calls.problems)} problems")
    assert iterations >= 5, "the soak ran too few iterations to mean anything"
    assert not calls.problems, "\n".join(calls.problems[:10])
