"""Property: a configuration key spelled in another case behaves exactly as its canonical spelling.

Go's decoder matches keys case-insensitively (Unicode simple folding: "ſ" is an "s", "K" a "k"), so
runtimes and operators write `IPMasq`, `datadir`, `Subnet`. For every key of every plugin's
configuration (found by walking a configuration that sets them all), one spelling is drawn, and the six
commands (ADD, CHECK, STATUS, DEL, then ADD, GC, DEL, and VERSION) run with it must give what they give
with the canonical spelling: the exit codes and outputs, and, read back independently after each ADD,
GC and DEL, the kernel
state of the node and of the pod (`ip -j`), the firewall (iptables-save, nft) and the files (host-local's
dataDir, the debug plugin's records). Where Debian ships the Go plugin (ptp with its host-local, and
loopback; cniVersion 1.0.0, their newest), the same holds for it with the same spelling: Go reads the
key as we do.
"""
import json
import os
import re
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.helpers import GO_BIN_DIR, cni_env, run_plugin
from tests.integration.ptp_support import iptables_rules, netns_state, nft_masq_rules

pytestmark = pytest.mark.kernel

NETNS = "kspell"
CID, IFNAME = "c1", "eth0"
# DEL comes before GC (GC would otherwise clean up what DEL missed), then a second ADD for GC to act on.
COMMANDS = ("ADD", "CHECK", "STATUS", "DEL", "ADD", "GC", "DEL", "VERSION")
GO_COMMANDS = ("ADD", "CHECK", "DEL", "VERSION")    # Debian's 1.1.1 plugins speak at most 1.0.0

ROUTE = {"dst": "10.99.0.0/16", "gw": "10.31.0.1", "mtu": 1300, "advmss": 1200, "priority": 7, "table": 254,
         "scope": 0}


def ipam(tmp):
    return {"type": "host-local", "dataDir": f"{tmp}/data", "resolvConf": f"{tmp}/resolv.conf",
            "routes": [dict(ROUTE)],
            "subnet": "10.31.0.0/24", "rangeStart": "10.31.0.20", "rangeEnd": "10.31.0.30", "gateway": "10.31.0.1",
            "ranges": [[{"subnet": "10.32.0.0/24", "rangeStart": "10.32.0.40", "rangeEnd": "10.32.0.50",
                         "gateway": "10.32.0.1"}]]}


def common(tmp, plugin):
    """The keys every plugin shares. GC's list names our attachment with another ifname: it is not valid,
    so GC releases what it holds (nothing would happen if the list were not read)."""
    return {"cniVersion": "1.1.0", "name": "kspell", "type": plugin, "skbDebugLog": f"{tmp}/skb.jsonl",
            "cni.dev/valid-attachments": [{"containerID": CID, "ifname": "eth9"}]}


def ptp_conf(tmp):
    return dict(common(tmp, "ptp"), ipam=ipam(tmp), ipMasq=True, ipMasqBackend="nftables", mtu=1400,
                dns={"nameservers": ["10.31.0.53"], "domain": "k.example", "search": ["k.example"],
                     "options": ["ndots:2"]})


def host_local_conf(tmp):
    return dict(common(tmp, "host-local"), ipam=ipam(tmp),
                runtimeConfig={"ipRanges": [[{"subnet": "10.33.0.0/24", "rangeStart": "10.33.0.7",
                                              "rangeEnd": "10.33.0.9", "gateway": "10.33.0.1"}]],
                               "ips": ["10.33.0.8"]},
                args={"cni": {"ips": ["10.31.0.25"]}})


def loopback_conf(tmp):
    return dict(common(tmp, "loopback"),
                prevResult={"cniVersion": "1.1.0", "ips": [{"address": "10.40.0.2/24"}]})


def debug_conf(tmp):
    hook = lambda name: [["sh", "-c", f"echo $CNI_COMMAND >> {tmp}/{name}"]]  # noqa: E731
    return dict(common(tmp, "debug"), cniOutput=f"{tmp}/text.log", captureFile=f"{tmp}/capture.jsonl",
                addHooks=hook("add"), delHooks=hook("del"), checkHooks=hook("check"),
                inject={"ADD": {"result": {"cniVersion": "1.1.0", "ips": [{"address": "10.41.0.2/24"}]},
                                "stderr": "added"},
                        "STATUS": {"error": {"code": 50, "msg": "busy", "details": "try later"}, "delayMs": 1}})


PLUGINS = {"ptp": ptp_conf, "host-local": host_local_conf, "loopback": loopback_conf, "debug": debug_conf}
# Keys whose object is a map, not a struct: their keys are data (Go matches them exactly), not fields;
# and values printed verbatim (the debug plugin's injected result), whose keys are not read at all.
MAPS = {("inject",)}
VERBATIM = {("inject", "ADD", "result")}
# What Debian's Go plugins read; ptp's IPAM keys are read by its Go host-local.
GO_PLUGINS = {"ptp", "loopback"}
NOT_IN_GO = {"ipMasqBackend", "skbDebugLog", "cni.dev/valid-attachments"}


def key_paths(obj, prefix=()):
    """Every key of the configuration, as the path of keys and list indexes that leads to it."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        path = prefix + (k,)
        if isinstance(k, str) and tuple(p for p in prefix if isinstance(p, str)) not in MAPS:
            out.append(path)
        if path not in VERBATIM:
            out += key_paths(v, path)
    return out


def respell(conf, path, spelling):
    """A copy of ``conf`` with the key at ``path`` written ``spelling``, at the same place in its object."""
    conf = json.loads(json.dumps(conf))
    *parents, key = path
    obj = conf
    for p in parents:
        obj = obj[p]
    items = [(spelling if k == key else k, v) for k, v in obj.items()]
    obj.clear()
    obj.update(items)
    return conf


_FOLDS = {"s": "\u017f", "k": "\u212a"}


@st.composite
def spellings(draw, key):
    """Another spelling of ``key`` that Go's decoder folds to it: letters in either case, an "s" as "ſ"
    and a "k" as the Kelvin sign."""
    out = []
    for c in key:
        choices = [c] + ([c.swapcase()] if c.isalpha() else []) + ([_FOLDS[c.lower()]] if c.lower() in _FOLDS else [])
        out.append(draw(st.sampled_from(choices)))
    spelled = "".join(out)
    if spelled == key:
        i = next(i for i, c in enumerate(key) if c.isalpha())
        spelled = key[:i] + key[i].swapcase() + key[i + 1:]
    return spelled


# --------------------------------------------------------------------------------------------------
# one sequence, read back independently

_VETH = re.compile(r"veth[0-9a-f]{8}")
_MAC = re.compile(r"\b[0-9a-f]{2}(?::[0-9a-f]{2}){5}\b")


def _norm(text):
    """Random parts of an output: MAC addresses; veth names (Go's are random)."""
    return _VETH.sub("<veth>", _MAC.sub("<mac>", text))


def _files(tmp):
    out = {}
    for dirpath, dirnames, filenames in os.walk(tmp):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for f in filenames:
            if f.startswith(".") or f == "lock":
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, tmp)
            with open(path, "rb") as fh:
                data = fh.read().decode(errors="replace")
            if f.endswith(".jsonl"):   # the records of each call: without the stdin (it holds the spelling)
                data = [{k: v for k, v in json.loads(line).items() if k not in ("stdin", "time", "durationMs")}
                        for line in data.splitlines()]
                data = json.dumps(data, sort_keys=True)
            elif f == "text.log":
                data = "\n".join(line for line in data.splitlines() if not line.startswith("StdinData:"))
            out[rel] = _norm(data) if isinstance(data, str) else data
    return out


def observe(tmp):
    return {"host": _norm(json.dumps(netns_state())), "pod": _norm(json.dumps(netns_state(NETNS))),
            "iptables": iptables_rules(), "nft": nft_masq_rules(), "files": _files(tmp)}


def run_sequence(exe, cni_path, conf, tmp, commands, prev_key=None):
    """The commands in order on a fresh pod netns and an empty tmp dir; what each printed, and what was
    left after ADD, GC and DEL. With ``prev_key``, CHECK and DEL get ADD's result under that key, as a
    runtime adds it."""
    for name in os.listdir(tmp):
        p = os.path.join(tmp, name)
        shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    with open(f"{tmp}/resolv.conf", "w") as f:
        f.write("nameserver 10.31.0.54\nsearch r.example\n")
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    seen, added = [], None
    try:
        for command in commands:
            c = dict(conf)
            if command in ("CHECK", "DEL") and added is not None and prev_key:
                c[prev_key] = added
            env = cni_env(command, containerid=CID, netns=f"/run/netns/{NETNS}", ifname=IFNAME, path=cni_path)
            r = run_plugin(exe, env, c)
            if command == "ADD" and r.rc == 0 and r.json is not None:
                added = r.json
            seen.append((command, r.rc, _norm(r.stdout), _norm(r.stderr)))
            if command in ("ADD", "GC", "DEL"):
                seen.append((f"after {command}", observe(tmp)))
    finally:
        env = cni_env("DEL", containerid=CID, netns=f"/run/netns/{NETNS}", ifname=IFNAME, path=cni_path)
        run_plugin(exe, env, conf)            # whatever the sequence left (a failing variant)
        subprocess.run(["ip", "netns", "del", NETNS], check=False)
    return seen


def _go_conf(conf):
    """The configuration for Debian's Go plugins: their newest version (under whatever spelling the key
    has), without the keys they lack."""
    out = {}
    for k, v in conf.items():
        if k in NOT_IN_GO:
            continue
        folded = k.replace("\u017f", "s").replace("\u212a", "k").lower()   # as Go folds it
        if folded == "cniversion":
            v = "1.0.0"
        elif isinstance(v, dict) and folded == "prevresult":
            v = dict(v, cniVersion="1.0.0")
        out[k] = v
    return out


def _first_difference(got, want):
    for g, w in zip(got, want):
        if g != w:
            if isinstance(g[1], dict):
                return {k: (g[1][k], w[1][k]) for k in g[1] if g[1][k] != w[1][k]}
            return g, w
    return f"{len(got)} steps against {len(want)}"


_canonical = {}
PREV = {"ptp"}      # whose CHECK needs the cached result (DEL then gets it too)


def canonical(key, runner):
    if key not in _canonical:
        _canonical[key] = runner()
    return _canonical[key]


CASES = [(plugin, path) for plugin, make in sorted(PLUGINS.items()) for path in key_paths(make("/t"))]
CASES += [("ptp", ("prevResult",))]    # read by CHECK and DEL, where the runtime adds it


def _id(case):
    plugin, path = case
    return plugin + ":" + ".".join(str(p) for p in path)


@pytest.fixture(scope="module")
def spaces(tmp_path_factory):
    """One directory per plugin for all its runs: outputs name its paths, and must compare equal."""
    return {plugin: str(tmp_path_factory.mktemp(plugin)) for plugin in PLUGINS}


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@pytest.mark.parametrize("case", CASES, ids=_id)
@given(data=st.data())
def test_a_key_spelled_otherwise_behaves_as_its_canonical_spelling(bin_dir, spaces, case, data):
    plugin, path = case
    space = spaces[plugin]
    spelling = data.draw(spellings(path[-1]), label="spelling")
    exe = os.path.join(bin_dir, plugin)
    conf = PLUGINS[plugin](space)
    prev = "prevResult" if plugin in PREV else None
    want = canonical(plugin, lambda: run_sequence(exe, bin_dir, conf, space, COMMANDS, prev))
    assert want[0][1] == 0, want[0]       # the canonical ADD itself works
    varied = conf if path == ("prevResult",) else respell(conf, path, spelling)
    if path == ("prevResult",):
        prev = spelling
    got = run_sequence(exe, bin_dir, varied, space, COMMANDS, prev)
    assert got == want, (f"{plugin} with {spelling!r} for {'.'.join(map(str, path))}: first difference "
                         f"{_first_difference(got, want)}")

    if plugin not in GO_PLUGINS or path[0] in NOT_IN_GO or not os.path.isdir(GO_BIN_DIR):
        return
    go = os.path.join(GO_BIN_DIR, plugin)
    go_want = canonical("go " + plugin, lambda: run_sequence(go, GO_BIN_DIR, _go_conf(conf), space, GO_COMMANDS,
                                                            "prevResult" if plugin in PREV else None))
    assert go_want[0][1] == 0, go_want[0]
    go_got = run_sequence(go, GO_BIN_DIR, _go_conf(varied), space, GO_COMMANDS, prev)
    assert go_got == go_want, (f"Go's {plugin} with {spelling!r} for {'.'.join(map(str, path))}: first difference "
                               f"{_first_difference(go_got, go_want)}")
