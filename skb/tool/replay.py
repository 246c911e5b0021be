"""``skb replay``: run a recorded plugin call again and show its output next to the recorded one.

Records come from the JSON lines of a plugin's debug log (``skbDebugLog`` / ``SKB_DEBUG_LOG``) or of the
debug plugin's ``captureFile`` (the same record), or from the reference debug plugin's ``cniOutput`` text
(which has no recorded output to compare with). The call is made with the record's stdin byte for byte
and the spec's six ``CNI_*`` variables (COMMAND, CONTAINERID, NETNS, IFNAME, ARGS, PATH) as recorded, but
for what the rules below replace; any other ``CNI_*`` variable of a record (``CNI_NETNS_OVERRIDE``, which
lets a call act in the node's own netns) is never taken, and the output names it. The rest of the
environment is this process's, so PATH and friends work.

The plugin is ``--plugin`` (a path, or a name looked up in the CNI path), else the record's plugin,
else the ``type`` in its stdin, looked up in ``--cni-path``, ``$CNI_PATH``, the recorded CNI_PATH, then
``/opt/cni/bin``.

The namespace: an ADD or CHECK whose recorded netns is gone or empty (or any call with ``--scratch``) runs
in a new scratch netns, deleted afterwards unless ``--keep-netns``; the recorded path is replaced by the
scratch one in CNI_NETNS and wherever it is a whole JSON string in stdin (a prevResult's ``sandbox``) and
in the recorded output before comparing. Generated values (a ptp veth's name and MACs) differ from run to
run: the side-by-side view shows which lines differ, and an ADD replayed as a container of its own (below)
counts as the same outcome when only those and, when it was asked for no particular address, its address
within the same subnet (not its gateway, network or broadcast address) differ. A DEL keeps its recorded
netns when gone or empty: that is the situation it must handle.

A replay leaves the node as it found it. Without ``--live`` (or ``--keep-netns``) an ADD, CHECK or DEL runs
in a scratch node (``skb.tool.scratch_node``, as the doctor's --probe): a network namespace of its own as
the plugin's host side, so what it does there (a bridge, sysctls, firewall rules) vanishes with it, and
overlays over /var/lib/cni and every ``dataDir`` its configuration names (review 15: Go's bridge left its
bridge and switched IPv4 forwarding on; a record's dataDir made root-owned directories where it chose).
Warm start is off there. It also runs under a container
ID of its own (``skb-replay-`` and 16 hex digits), not the recorded one: a plugin finds an attachment's
host-side state (its address reservation, host veth, masquerade rules) by network, container ID and
ifname, not by netns, so the recorded ID would let the replay reach a live pod's or a leaked attachment's
state (review 13: a ``--scratch`` replay of a running pod's ADD, undone by its DEL, removed that pod's
veth, route, reservation and rules; review 15: a DEL recorded with an empty netns, as ctr sends it,
removed those of the pod started again under the same ID). A replayed ADD is then followed by the
matching DEL (same stdin and CNI_* variables, in the same scratch netns, before it is deleted), which
releases the address it reserved and removes its host routes and masquerade rules; its outcome is
reported. With ``--keep-netns`` that DEL is not run (the state stays with the kept netns, and the output
says so). An ADD, CHECK or DEL whose recorded netns still exists would act on that pod for real: it is
refused unless ``--live`` (``--scratch`` replays it in a scratch netns instead, under its own container ID).
Refused without ``--live`` whatever the netns: a GC (it releases the reservations and masquerade rules of
every attachment missing from its recorded list, pods added since the recording among them), and a
configuration with the debug plugin's hooks (``addHooks``, ``delHooks``, ``checkHooks``, any spelling, at
any depth: commands run as root, which no netns contains). A STATUS is replayed: it changes nothing.
``--live`` runs the call as recorded, on the node for real.

A replay records nothing: the files where the call would append its own record (``skbDebugLog``, the
debug plugin's ``captureFile`` and ``cniOutput`` in its stdin, in any spelling the plugins read as those,
and ``SKB_DEBUG_LOG``), the record file being replayed among them, are swapped for files in a temporary
directory, removed afterwards. A log then holds only the runtime's calls, and replaying it twice replays
the same record. ``AsideExec`` does the same for the doctor's own calls.

What is printed of a record or of the replayed call shows control characters as escapes (``\\x1b``).

Exit status: 0 when exit code and output match the record (JSON compared parsed), 1 when they differ,
2 when the call could not be replayed.
"""
import json
import os
import sys
import shutil
import tempfile

from skb.tool import libcni
from skb.tool.libcni import rawexec
from skb.tool import scratch_node
from skb.tool.libcni import aside
from skb.tool.libcni.aside import AsideExec, divert_records, swap_string  # noqa: F401 (AsideExec: for the doctor)
from skb.cni import invoke
from skb.cni.netconf import fold
from skb.linux import netns
from skb.linux import scratch_netns
from skb.tool import log
from skb.tool.argtypes import positive_seconds, record_number
from skb.tool.doctor.files import BadFile
from skb.tool.style import Style, visible

_USES_NETNS = ("ADD", "CHECK", "DEL")
MAX_WIDTH = 400      # columns of the side-by-side view at most, whatever COLUMNS says
# The only variables a replay takes from a record: the spec's. Never CNI_NETNS_OVERRIDE (it lets a call
# act in the node's own netns) or anything else a record may carry.
SPEC_ENV = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH")
# The debug plugin's keys whose commands it runs as root (docs/DEBUG.md).
_HOOK_KEYS = ("addHooks", "delHooks", "checkHooks")


class ReplayError(Exception):
    pass


# A debug log bigger than this is not read whole (and /dev/zero never ends).
MAX_RECORD_FILE = 256 << 20
_STRING_FIELDS = ("command", "plugin", "stdin", "stdout", "stderr", "time")


def read_records(path):
    """The records of a debug log, capture or cniOutput file, numbered as ``skb log`` numbers them (its
    reader: a line longer than its LINE_LIMIT is skipped, not counted). The file must be a regular file (a
    FIFO or a device is refused, never read), at most ``MAX_RECORD_FILE`` bytes. A record is untrusted
    input: ``record_problem`` says whether the selected one can be run."""
    try:
        return [rec for _n, rec in log.read_all(path, lambda msg: print(f"skb replay: {msg}", file=sys.stderr),
                                                  MAX_RECORD_FILE)]
    except BadFile as e:
        raise ReplayError(f"cannot read {e} (give a debug log, a captureFile or a cniOutput file)") from None


def record_problem(rec):
    """What makes a decoded record unusable (None when nothing does): ``env`` must be an object whose
    values are strings, the textual fields strings, the exit code an integer."""
    if not isinstance(rec.get("env"), dict):
        return '"env" is not an object'
    for key, value in rec["env"].items():
        if not isinstance(value, str):
            return f"env {key} is not a string"
        try:
            os.fsencode(key + value)     # what the environment of a process can hold
        except UnicodeEncodeError:
            return f"env {key} holds text that is not a file-system string"
    for key in _STRING_FIELDS:
        if rec.get(key) is not None and not isinstance(rec[key], str):
            return f'"{key}" is not a string'
    code = rec.get("exitCode")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        return '"exitCode" is not an integer'
    return None


def _command_of(rec):
    env = rec.get("env") if isinstance(rec.get("env"), dict) else {}
    return rec.get("command") or env.get("CNI_COMMAND")


def select(records, number, command):
    """The ``number``-th record (1-based; negative counts from the end) among those of ``command``, as
    (its number in the file, the record). A record that cannot be run as recorded is refused."""
    pool = [(i, r) for i, r in enumerate(records, 1) if not command or _command_of(r) == command]
    if not pool:
        raise ReplayError("no record" + (f" of a {command} call" if command else "") + " in the file")
    try:
        found = pool[number - 1 if number > 0 else number]
    except IndexError:
        raise ReplayError(f"there is no record {number}: the file has {len(pool)}"
                          + (f" {command} records" if command else " records")) from None
    problem = record_problem(found[1])
    if problem:
        raise ReplayError(f"record #{found[0]} cannot be replayed: {problem}")
    return found


def _stdin_type(stdin):
    try:
        obj = json.loads(stdin)
    except (ValueError, TypeError):
        return ""
    return obj.get("type", "") if isinstance(obj, dict) and isinstance(obj.get("type"), str) else ""


DEFAULT_BIN_DIR = "/opt/cni/bin"


def bin_dirs(opts):
    """The directories a record's plugin may come from: ``--cni-path``, else ``$CNI_PATH``, else this
    suite's own bin dir and /opt/cni/bin. Never the record's CNI_PATH: a record is untrusted input."""
    given = opts.cni_path or os.environ.get("CNI_PATH", "")
    if given:
        return [d for d in given.split(":") if d]
    dirs = []
    if getattr(sys, "frozen", False):   # <bindir>/.skb-<version>-<hash>/skb-cni
        dirs.append(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    if DEFAULT_BIN_DIR not in dirs:
        dirs.append(DEFAULT_BIN_DIR)
    return dirs


def choose_plugin(rec, opts):
    """The program to run: ``--plugin`` (the operator's choice: a path, or a name looked up in the bin
    dirs), else the record's plugin name, else the ``type`` in its stdin. A name from the record must be
    a bare plugin name found in the bin dirs (as libcni requires); anything else is refused."""
    if opts.plugin:
        if "/" in opts.plugin:
            if not os.path.isfile(opts.plugin):
                raise ReplayError(f"--plugin {opts.plugin}: no such file")
            return os.path.abspath(opts.plugin)
        name, source = opts.plugin, "--plugin"
    else:
        name, source = rec.get("plugin") or "", "the record's plugin name"
        if not name:
            name, source = _stdin_type(rec.get("stdin") or ""), 'the "type" in the record\'s stdin'
    if not name:
        raise ReplayError("the record names no plugin: give --plugin PATH")
    dirs = bin_dirs(opts)
    try:
        invoke.check_name(name)
        return libcni.find_in_path(name, dirs)
    except invoke.PluginNotFound as e:
        raise ReplayError(f"{source} {name!r} is not a plain plugin name ({e.msg}): refusing to run it; "
                          "give --plugin PATH to choose the program yourself") from None
    except libcni.LibcniError as e:
        raise ReplayError(f"{e} (give --plugin PATH or --cni-path DIRS)") from None


def _jsonish(text):
    try:
        return json.loads(text) if text and text.strip() else None
    except ValueError:
        return None


def _pretty(text):
    obj = _jsonish(text)
    if obj is not None:
        return json.dumps(obj, indent=2).split("\n")
    return [visible(line, "") for line in text.rstrip("\n").split("\n")] if text else ["(no output)"]


def hooks_in(stdin):
    """The debug plugin's hook keys (any spelling, at any depth: an IPAM section, a conflist's plugins) that
    hold commands in a configuration, as written."""
    wanted = {fold(k) for k in _HOOK_KEYS}
    found = []

    def hook(pairs):
        found.extend(k for k, v in pairs if isinstance(k, str) and fold(k) in wanted and v not in (None, [], "", {}))
        return dict(pairs)
    try:
        json.loads(stdin, object_pairs_hook=hook)
    except RecursionError:      # (a plugin may still read it: fail closed)
        return ["(a configuration nested too deep to look for hooks in)"]
    except (ValueError, TypeError):
        pass
    return list(dict.fromkeys(found))


def refuse_unless_live(command, stdin, opts):
    """A call that would change the node whatever netns and container ID it is given is replayed only with
    ``--live``: a GC (it releases what its recorded list of attachments lacks, which now lacks every pod
    added since), and a configuration with the debug plugin's hooks (commands run as root)."""
    if opts.live:
        return
    if command == "GC":
        raise ReplayError("replaying a GC acts on the node's real state: it releases the address reservations (and "
                          "ptp's masquerade rules) of every attachment missing from its recorded list of valid ones, "
                          "pods added since the recording among them; give --live to run it anyway")
    hooks = hooks_in(stdin)
    if hooks:
        raise ReplayError(f"the record's configuration has hooks ({', '.join(hooks)}): commands the debug plugin "
                          "runs as root, which a scratch netns does not contain; read them in the record (skb log "
                          "-v), and give --live to run them")


def replay(rec, plugin, opts):
    """Run the call; returns a dict describing both outcomes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
    env.update({k: v for k, v in rec["env"].items() if k in SPEC_ENV and "\0" not in v})
    command = env.get("CNI_COMMAND", "")
    dropped = sorted(k for k in rec["env"] if k not in SPEC_ENV and k.startswith("CNI_"))
    # The plugin may run others (IPAM delegation) from CNI_PATH: the recorded one is kept only when it
    # names nothing but the bin dirs.
    dirs = bin_dirs(opts)
    recorded_path = env.get("CNI_PATH", "")
    path_note = ""
    if opts.cni_path or not all(d in dirs for d in recorded_path.split(":") if d):
        env["CNI_PATH"] = ":".join(dirs)
        if recorded_path and not opts.cni_path:
            path_note = f"recorded CNI_PATH {recorded_path} replaced by the bin dirs {env['CNI_PATH']}"
    if dropped:
        path_note += (("; " if path_note else "") + f"not taken from the record: {', '.join(dropped)} "
                      "(only the spec's CNI_* variables)")
    stdin = rec.get("stdin") or ""
    refuse_unless_live(command, stdin, opts)
    old_ns = env.get("CNI_NETNS", "")
    scratch = None
    exists = command in _USES_NETNS and bool(old_ns) and not netns.gone(old_ns)   # (what cannot be told: kept)
    if exists and not opts.live and not opts.scratch:
        raise ReplayError(f"the recorded netns {old_ns} still exists: replaying this {command} would act on that "
                          "pod's network for real; give --scratch to replay it in a scratch netns (as a container "
                          "of its own), or --live to act on the pod")
    wanted = command in _USES_NETNS and (opts.scratch or (command != "DEL" and not exists))
    live = opts.live and not wanted and command in _USES_NETNS + ("GC",)
    note = (f"--live: ran as recorded (container {env.get('CNI_CONTAINERID', '')!r}, netns {old_ns or '(none)'}), "
            "on the node for real") if live else ""
    # Without --live (and --keep-netns, which keeps what the ADD made), the call runs in a scratch node: its
    # "host" side (bridges, sysctls, firewall rules, dataDir files) is never the node's (review 15).
    node = command in _USES_NETNS and not live and not opts.keep_netns
    if wanted and not node:
        name = scratch_netns.unique_name("skb-replay")
        try:
            scratch = scratch_netns.add(name, opts.netns_dir)
        except scratch_netns.NetnsAdminError as e:
            raise ReplayError(f"cannot make a scratch netns: {e}") from None
        env["CNI_NETNS"] = scratch
        stdin = swap_string(stdin, old_ns, scratch)
    if wanted:
        note = (f"recorded netns {old_ns or '(none)'} " + ("replaced on request" if opts.scratch else "is gone")
                + (f": ran in scratch netns {scratch}" if scratch else ": ran in a scratch netns of a scratch node"))
    elif command == "DEL" and not live:
        note = f"recorded netns {old_ns or '(none)'}" + (" is gone" if old_ns else "") + ": the DEL ran with it"
    if command in _USES_NETNS and not live:   # (see the module's docstring: never the recorded attachment's state)
        own = "skb-replay-" + os.urandom(8).hex()
        note += (f", as container {own} (not the recorded {env.get('CNI_CONTAINERID', '')!r}, whose state on "
                 "the node a replay must not reach; --live acts on it)")
        env["CNI_CONTAINERID"] = own
    tmpdir = tempfile.mkdtemp(prefix="skb-replay-")
    try:
        stdin, diverted = divert_records(stdin, env, tmpdir)
    except aside.TooDeep as e:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise ReplayError(f"{e}: give --live to run it anyway") from None
    log_note = (f"the call's own record ({', '.join(diverted)}) went to a temporary file, removed since: "
                "a replay appends to no log" if diverted else "")
    cleanup_note = ""
    try:
        if node:
            out, cleanup_note, scratch = _in_scratch_node(plugin, env, stdin, old_ns if wanted else None, opts)
            env["CNI_NETNS"] = scratch or env.get("CNI_NETNS", "")
            note += ("; the plugin's host side was a scratch node (a netns of its own; /var/lib/cni, /run/cni "
                     "and the dataDirs of its configuration covered), so nothing it did there reached the node")
        else:
            out = _run(plugin, env, stdin, opts.timeout)
            if scratch and command == "ADD":
                cleanup_note = _undo_add(plugin, env, stdin, opts)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if scratch and not node and not opts.keep_netns:
            try:
                scratch_netns.delete(os.path.basename(scratch), opts.netns_dir)
            except scratch_netns.NetnsAdminError:
                pass
    recorded = None
    if "exitCode" in rec:
        rstdout = rec.get("stdout") or ""
        if scratch:
            rstdout = swap_string(rstdout, old_ns, scratch)
        recorded = {"exitCode": rec.get("exitCode"), "stdout": rstdout, "stderr": rec.get("stderr") or ""}
    same, aside = None, False
    if recorded is not None:
        a, b = _jsonish(recorded["stdout"]), _jsonish(out["stdout"])
        same_out = (a == b) if (a is not None or b is not None) else \
            recorded["stdout"].strip() == out["stdout"].strip()
        if not same_out and scratch and command == "ADD" and a is not None:   # a container of its own
            free = not _requested(env.get("CNI_ARGS", ""), stdin)
            same_out = aside = _generated_aside(a, free) == _generated_aside(b, free)
        same = recorded["exitCode"] == out["exitCode"] and same_out
        aside = aside and same
    return {"command": command, "plugin": plugin, "env": {k: v for k, v in env.items() if k.startswith("CNI_")},
            "netnsNote": note, "pathNote": path_note, "logNote": log_note, "cleanupNote": cleanup_note,
            "keptNetns": scratch if scratch and opts.keep_netns else "",
            "recorded": recorded, "replayed": out, "same": same, "generatedAside": aside}


def _generated_aside(result, free):
    """An ADD's result without what a replay under a container ID of its own cannot repeat: MACs and the
    host interface's name (made from the container ID) and, when no address was requested (``free``),
    each address within its subnet (the next free one then), unless it is its gateway or the subnet's
    network or broadcast address. Anything else that differs is a real difference."""
    if not isinstance(result, dict):
        return result
    from skb.cni.addr import Net
    result = json.loads(json.dumps(result))
    interfaces = result.get("interfaces") if isinstance(result.get("interfaces"), list) else []
    for iface in interfaces:
        if isinstance(iface, dict):
            iface.pop("mac", None)
            if not iface.get("sandbox"):
                iface.pop("name", None)
    for ip in result.get("ips") if isinstance(result.get("ips"), list) and free else ():
        net = Net.parse(ip.get("address")) if isinstance(ip, dict) else None
        if net is not None and ip["address"].split("/")[0] != ip.get("gateway") and net.ip != net.network and \
                (net.family == 6 or net.ip != net.last):   # (the gateway, the network, the broadcast: never)
            ip["address"] = f"any of {net.network}/{net.prefixlen}"
    return result


def _requested(cni_args, stdin):
    """Whether the call asked for addresses (CNI_ARGS IP=, args.cni.ips, runtimeConfig.ips): then an
    address is the call's, not the allocator's, and a different one is a real difference."""
    if any(part.split("=", 1)[0].strip() == "IP" for part in cni_args.split(";")):
        return True
    conf = _jsonish(stdin)
    if not isinstance(conf, dict):
        return True     # (unknown: compare addresses as they are)
    args, rc = conf.get("args"), conf.get("runtimeConfig")
    cni = args.get("cni") if isinstance(args, dict) else None
    return bool(isinstance(cni, dict) and cni.get("ips")) or bool(isinstance(rc, dict) and rc.get("ips"))


def _run(plugin, env, stdin, timeout):
    """The call's exit code (None when killed), stdout and stderr."""
    try:
        code, stdout, stderr = rawexec.spawn(plugin, [plugin], env, stdin.encode("utf-8", "surrogatepass"), timeout)
        return {"exitCode": code, "stdout": stdout.decode(errors="replace"), "stderr": stderr.decode(errors="replace")}
    except rawexec.Timeout as e:
        return {"exitCode": None, "stdout": e.stdout.decode(errors="replace"),
                "stderr": e.stderr.decode(errors="replace") + f"\n(killed after {timeout:g} s)"}
    except OSError as e:
        raise ReplayError(f"cannot run {plugin}: {e.strerror}") from None


def _in_scratch_node(plugin, env, stdin, old_ns, opts):
    """The call (and an ADD's DEL) in a scratch node: (its outcome, the DEL's note, the scratch netns or
    None). ``old_ns``: the recorded netns a scratch one replaces, or None to keep it (a gone one). Every
    dataDir its configuration names and scratch_node.COVERED are overlays there; warm start stays off (no server
    in a node about to vanish). ReplayError when the node cannot be isolated so."""
    dirs = data_dirs(stdin)
    root = tempfile.mkdtemp(prefix="skb-replay-node-")

    def inside():
        scratch_node.enter(root, "skb-replay")
        for n, d in enumerate(dict.fromkeys(list(scratch_node.COVERED) + dirs)):
            scratch_node.isolate(d, root, n, "skb-replay", required=d in dirs)
        e, text, pod = dict(env, SKB_WARM="0"), stdin, None
        if old_ns is not None:
            pod = scratch_netns.add(scratch_netns.unique_name("skb-replay"), root)
            e["CNI_NETNS"], text = pod, swap_string(stdin, old_ns, pod)
        out = _run(plugin, e, text, opts.timeout)
        undone = _undo_add(plugin, e, text, opts, "in the scratch node, gone with it") \
            if e.get("CNI_COMMAND") == "ADD" else ""
        return {"out": out, "undone": undone, "pod": pod}
    try:
        reply = scratch_node.run(inside, 2 * opts.timeout + 30, "the replay")
    finally:
        try:
            os.rmdir(root)
        except OSError:
            pass
    if "skipped" in reply:
        raise ReplayError(f"cannot replay it without changing the node: {reply['skipped']} (--live runs it on the "
                          "node for real)")
    return reply["out"], reply["undone"], reply["pod"]


def data_dirs(stdin):
    """The absolute paths of every ``dataDir`` (any spelling, at any depth) of a configuration. ReplayError
    when it is nested too deep to tell (a plugin may still read it)."""
    found = []

    def hook(pairs):
        found.extend(os.path.abspath(v) for k, v in pairs if isinstance(k, str) and fold(k) == "datadir"
                     and isinstance(v, str) and v and "\0" not in v)
        return dict(pairs)
    try:
        json.loads(stdin, object_pairs_hook=hook)
    except RecursionError:
        raise ReplayError("its configuration is nested too deep to tell which directories it writes: give --live "
                          "to run it anyway") from None
    except (ValueError, TypeError):
        pass
    return found


def _undo_add(plugin, env, stdin, opts, where="on the node"):
    """After an ADD in a scratch netns: its DEL, so that no reservation, host route or masquerade rule
    of a pod that never was stays on the node. What happened, as a note."""
    ids = f"container {env.get('CNI_CONTAINERID', '')}, ifname {env.get('CNI_IFNAME', '')}"
    if opts.keep_netns:
        return (f"--keep-netns: the matching DEL was not run, so the ADD's node state stays (its address "
                f"reservation, host routes, masquerade rules; {ids}) until a DEL of that container")
    done = _run(plugin, dict(env, CNI_COMMAND="DEL"), stdin, opts.timeout)
    if done["exitCode"] == 0:
        return f"ran the matching DEL ({ids}) in the scratch netns: exit 0"
    why = " ".join((done["stdout"] or done["stderr"]).split())[:300]
    return (f"the matching DEL ({ids}) failed (exit {done['exitCode']}): {why}: the ADD's address reservation, "
            f"host routes or masquerade rules may remain {where}")


def show(number, rec, outcome, style, width, out):
    """The outcome for a terminal: what came from the record or the plugin escaped (``visible``)."""
    env = {k: visible(v, "") for k, v in outcome["env"].items()}
    width = min(width, MAX_WIDTH)
    print(style.bold(f"record #{number}: {visible(outcome['command'], '')} by {visible(rec.get('plugin') or '?', '')}"
                     f" at {visible(rec.get('time', '?'), '')}") + f", replayed with {visible(outcome['plugin'], '')}",
          file=out)
    print(f"  container={env.get('CNI_CONTAINERID', '')} ifname={env.get('CNI_IFNAME', '')} "
          f"netns={env.get('CNI_NETNS', '')} args={env.get('CNI_ARGS', '')}", file=out)
    for key in ("netnsNote", "pathNote", "logNote", "cleanupNote"):
        if outcome[key]:
            print(f"  {style.yellow(visible(outcome[key], ''))}", file=out)
    rec_out, new = outcome["recorded"], outcome["replayed"]
    left = [f"exit {rec_out['exitCode']}"] + _pretty(rec_out["stdout"]) if rec_out else \
        ["(no recorded output: a cniOutput record)"]
    right = [f"exit {new['exitCode']}"] + _pretty(new["stdout"])
    col = (width - 3) // 2
    if col >= 36:
        print(f"{style.bold('recorded'.ljust(col))} | {style.bold('replayed')}", file=out)
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            mark = "|" if a == b else "*"
            a_cell = (a if len(a) <= col else a[:col - 1] + "~").ljust(col)
            if mark == "*" and rec_out:
                a_cell, b = style.red(a_cell), style.green(b)
            print(f"{a_cell} {mark} {b}", file=out)
    else:
        print(style.bold("recorded:"), file=out)
        for line in left:
            print(f"  {line}", file=out)
        print(style.bold("replayed:"), file=out)
        for line in right:
            print(f"  {line}", file=out)
    if new["stderr"].strip():
        print(style.dim("replayed stderr:"), file=out)
        for line in new["stderr"].rstrip("\n").split("\n"):
            print(f"  {visible(line, chr(9))}", file=out)
    if outcome["keptNetns"]:
        print(f"  scratch netns kept: {outcome['keptNetns']} (skb netns del {os.path.basename(outcome['keptNetns'])})",
              file=out)
    verdict = {True: style.green("same outcome as recorded"), False: style.red("DIFFERENT from the recording"),
               None: "nothing recorded to compare with"}[outcome["same"]]
    if outcome["generatedAside"]:
        verdict += (" (but for what the replay's own container ID generates anew: MACs, the host veth's name, "
                    "the address within its subnet)")
    print(f"skb replay: {verdict}", file=out)


def command(opts):
    try:
        records = read_records(opts.file)
        number, rec = select(records, opts.number, opts.command)
        plugin = choose_plugin(rec, opts)
        # Show what will run before it runs (a record is untrusted input).
        print(f"skb replay: running {visible(plugin, '')} for record #{number} "
              f"({visible(rec.get('command') or '?', '')})", file=sys.stderr)
        outcome = replay(rec, plugin, opts)
    except ReplayError as e:
        print(f"skb replay: {visible(str(e), '')}", file=sys.stderr)
        return 2
    try:
        if opts.json:
            print(json.dumps(dict(outcome, record=number), indent=2))
        else:
            show(number, rec, outcome, Style.for_stream(sys.stdout, opts.color), shutil.get_terminal_size().columns,
                 sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:      # skb replay ... | head -1
        return log.stdout_closed()
    return 0 if outcome["same"] in (True, None) else 1


EPILOG = """\
Reads a plugin's debug log (skbDebugLog / SKB_DEBUG_LOG), the debug plugin's captureFile, or the
reference debug plugin's cniOutput text. Runs the call with its recorded stdin and the spec's CNI_*
variables (never CNI_NETNS_OVERRIDE). An ADD or CHECK whose netns is gone runs in a scratch netns (the path
is substituted in env, stdin and the recorded output); an ADD there is followed by its DEL, so the node
keeps no address, route or masquerade rule of it (not with --keep-netns). Without --live an ADD, CHECK or
DEL runs as a container of its own, never reaching the recorded attachment: its MACs, host veth name and
address (within the same subnet) may differ and still count as the same outcome. Refused unless --live:
an ADD, CHECK or DEL whose recorded netns still exists (--scratch replays it in a scratch netns), a GC (it
would release what was added since), a configuration with the debug plugin's hooks (root commands).
Exit status: 0 same outcome, 1 different, 2 could not replay.

examples:
  skb log /tmp/capture.jsonl                          # find the record number
  skb replay /tmp/capture.jsonl                       # the last call
  skb replay /tmp/capture.jsonl -n 3 --plugin /usr/lib/cni/ptp
  skb replay /var/log/skb-cni.jsonl --command ADD -n -1 --scratch --keep-netns
  skb replay /tmp/cni_output.txt --plugin ./my-plugin   # the reference debug plugin's text"""


def add_parser(sub, formatter, parents=()):
    r = sub.add_parser("replay", help="re-run a recorded plugin call and compare the outputs", parents=list(parents),
                       description="Re-run a call recorded by a debug log or capture, next to its recorded output.",
                       epilog=EPILOG, formatter_class=formatter)
    r.add_argument("file", help="debug log, captureFile, or cniOutput text")
    r.add_argument("-n", "--number", type=record_number, default=-1,
                   help="which record: 1-based, negative from the end (default: -1, the last)")
    r.add_argument("--command", choices=("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"),
                   help="count only records of this command")
    r.add_argument("--plugin", help="plugin to run: a path, or a name looked up in the CNI path")
    r.add_argument("--cni-path", help="plugin dirs, ':'-separated (also sent as CNI_PATH)")
    r.add_argument("--scratch", action="store_true", help="always run in a scratch netns")
    r.add_argument("--keep-netns", action="store_true",
                   help="keep the scratch netns for a look afterwards: the call then runs with the node as its "
                        "host side (not in a scratch node) and a replayed ADD is not undone")
    r.add_argument("--live", action="store_true",
                   help="replay the call as recorded (container ID, netns; a GC, hooks): acts on the node for real")
    r.add_argument("--netns-dir", default="/run/netns", help="where scratch namespaces go (default: /run/netns)")
    r.add_argument("--timeout", type=positive_seconds, default=60.0,
                   help="kill the plugin after this many seconds (above 0; default: 60)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=command)
    return r
