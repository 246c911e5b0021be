"""The ``skb`` command: run, diagnose and replay CNI the way an operator debugs it.

Not on a plugin's call path, so it may import what it likes (argparse, json, subprocess). The frozen
build strips docstrings (optimize=2): every help text lives in string constants, never in __doc__.
Subcommands:

- ``add|check|del|status|gc NETWORK NETNS``: cnitool's interface over ``skb.tool.libcni``;
- ``netns add|del|list``: scratch namespaces (``skb.linux.scratch_netns``);
- ``doctor``: ``skb.tool.doctor``; ``explain``: ``skb.tool.explain``; ``replay``: ``skb.tool.replay``;
  ``log``: ``skb.tool.log``;
- ``install|uninstall``: ``skb.tool.install`` over ``skb.install``.
"""
import os
import signal
import sys
import argparse
import json
from skb import __version__
from skb.cni.errors import CNIError
from skb.cni.netconf import SUPPORTED_VERSIONS
from skb.tool import install
from skb.tool.argtypes import positive_seconds
from skb.tool.style import Style, fail, visible
from skb.linux import netns, scratch_netns
from skb.tool import doctor
from skb.tool import libcni
from skb.tool.libcni import aside, rawexec
from skb.tool import replay
from skb.tool import log
from skb.tool import explain
from skb.tool import warm

DEFAULT_CNI_PATH = "/opt/cni/bin"

MAIN_HELP = "Run, diagnose and replay CNI on a node (from the skb-cni plugin suite)."
MAIN_EPILOG = """\
examples:
  skb netns add blue && skb add mynet blue && skb del mynet blue
  skb doctor
  skb doctor --probe --json
  skb log /tmp/calls.jsonl
  skb explain 'failed to find plugin "ptp" in path [/opt/cni/bin]'
  skb replay /tmp/calls.jsonl -n -1
  skb install --pod-cidr 10.244.1.0/24

Run 'skb COMMAND --help' for each command's options and examples. --json gives machine-readable output
(doctor, replay, log, warm status, version)."""

RUN_EPILOG = """\
The network is looked up in the conf dir exactly as libcni does: .conflist files first, then .conf/.json,
by file name, first match of "name" wins. ADD prints the final result and caches it in
<cache-dir>/results/<network>-<containerid>-<ifname>; CHECK and DEL use that cached result as prevResult.
The container id is cnitool's: cnitool- + 20 hex digits of SHA-512 of the absolute netns path.

environment (as cnitool):
  NETCONFPATH   conf dir (default /etc/cni/net.d)      CNI_PATH   plugin dirs, ':'-separated
  CNI_IFNAME    interface name (default eth0)          CNI_ARGS   K=V;K=V (strict: no empty key or value)
  CAP_ARGS      capability arguments as a JSON object, e.g. '{"portMappings":[...]}'
Flags override the environment. NETNS is a path (a relative one is taken from the current directory, as
cnitool does), or a bare name: the namespace /run/netns/NAME, as ip netns names it.

examples:
  skb netns add blue
  CNI_PATH=/opt/cni/bin skb add mynet /run/netns/blue
  skb check mynet blue
  skb del mynet blue -i eth1
  CAP_ARGS='{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}' skb add mynet blue
  skb add mynet blue --conf-dir /tmp/net.d --cni-path /usr/lib/cni:/opt/cni/bin -v"""

GC_EPILOG = """\
Without --valid or --keep-live this is cnitool's gc: every cached attachment of the network is DELeted
and the plugins get no list of valid attachments (what a plugin then frees is its own choice: skb's
host-local frees nothing, as it cannot tell what is in use). With --valid and/or
--keep-live only the other cached attachments are DELeted, and the plugins get the valid list as
cni.dev/valid-attachments (and cni.dev/attachments, the spec-1.1.0 tag's name). Plugins are sent GC only
when the network's cniVersion is 1.1.0 or later (a note on stderr says so otherwise); disableGC turns all
of it off.

examples:
  skb gc mynet --keep-live
  skb gc mynet --valid ctr1:eth0 --valid ctr2:eth0
  skb gc mynet                      # cnitool semantics: nothing is valid"""

STATUS_EPILOG = """\
Sends STATUS to each plugin in order and stops at the first error (nothing for cniVersion < 1.1.0).

example:
  skb status mynet"""

NETNS_EPILOG = """\
A named netns is /run/netns/NAME with the namespace bind-mounted on it, exactly as ip netns add makes it
(lo starts DOWN). Use it as the NETNS of skb add/del, or with ip netns exec NAME.

examples:
  skb netns add blue
  skb netns list
  skb netns del blue"""

# ---------------------------------------------------------------------------------------------------
# version

def version_text():
    return f"skb-cni {__version__}; CNI spec versions {', '.join(SUPPORTED_VERSIONS)}"


def _cmd_version(opts):
    if opts.json:
        print(json.dumps({"version": __version__, "cniVersions": list(SUPPORTED_VERSIONS)}))
    else:
        print(version_text())
    return 0


# ---------------------------------------------------------------------------------------------------
# the cnitool-compatible runner

def netns_path(arg):
    """A NETNS argument: a path as given (made absolute from the current directory, as cnitool does), or a
    bare name (no '/'), which names the namespace /run/netns/NAME as ip netns does."""
    if "/" not in arg and scratch_netns.valid_name(arg):
        return scratch_netns.path_of(arg)
    return arg


def missing_netns(arg):
    """Why the NETNS argument of an ADD or CHECK names nothing (None when it exists). Said here rather
    than by the plugin, which could only report an unknown container."""
    path = netns_path(arg)
    if os.path.lexists(path):
        return None
    if path != arg:
        here = f"; ./{arg} exists here: give ./{arg} to use that file" if os.path.lexists(arg) else ""
        return (f"no network namespace named {arg!r}: {path} does not exist (create it with skb netns add {arg} "
                f"or ip netns add {arg}, or give a path){here}")
    return None     # a path: passed on as cnitool passes it (the plugin says what it finds there)


def split_path(s):
    return [p for p in s.split(":")] if s else []


def runner_from(opts):
    """(CNIConfig, conf dir) from flags, then the cnitool environment."""
    cni_path = opts.cni_path if opts.cni_path is not None else os.environ.get("CNI_PATH", "") or DEFAULT_CNI_PATH
    exec_ = libcni.RawExec(timeout=opts.timeout)
    return libcni.CNIConfig(split_path(cni_path), opts.cache_dir, exec_), conf_dir_from(opts)


def conf_dir_from(opts):
    return opts.conf_dir or os.environ.get("NETCONFPATH", "") or libcni.DEFAULT_CONF_DIR


def runtime_conf_from(opts):
    """libcni's RuntimeConf as cnitool builds it."""
    cap_raw = opts.cap_args if opts.cap_args is not None else os.environ.get("CAP_ARGS", "")
    caps = {}
    if cap_raw:
        try:
            caps = libcni.jsonio.loads(cap_raw)
        except ValueError as e:
            raise libcni.LibcniError(f"CAP_ARGS is not JSON: {e}") from None
        if libcni.too_deep(caps):
            raise libcni.LibcniError(f"CAP_ARGS nests arrays and objects more than {libcni.MAX_DEPTH} levels deep")
        if not isinstance(caps, dict):
            raise libcni.LibcniError("CAP_ARGS must be a JSON object, e.g. '{\"mac\": \"c2:11:22:33:44:55\"}'")
    args_raw = opts.args if opts.args is not None else os.environ.get("CNI_ARGS", "")
    args = libcni.parse_cnitool_args(args_raw) if args_raw else []
    ifname = opts.ifname or os.environ.get("CNI_IFNAME", "") or "eth0"
    ns = netns_path(opts.netns) if opts.netns else ""
    ns_abs = libcni.go_abs(ns) if ns else ""
    cid = opts.container_id or (libcni.cnitool_container_id(ns_abs) if ns_abs else "")
    return libcni.RuntimeConf(cid, ns_abs, ifname, args, caps)


def _show_calls(cni, style):
    for call in cni.exec.calls:
        rc = call["exitCode"]
        mark = style.green("exit 0") if rc == 0 else style.red(f"exit {rc}")
        print(f"skb: {call['env'].get('CNI_COMMAND')} {call['path']} -> {mark}", file=sys.stderr)
        if rc != 0 and call["stdout"]:
            print(f"     stdout: {call['stdout'].decode(errors='replace').strip()}", file=sys.stderr)


def _cmd_run(opts):
    verb = opts.cmd
    prog = f"skb {verb}"
    style = Style.for_stream(sys.stderr, opts.color)
    cni = None
    try:
        cni, conf_dir = runner_from(opts)
        if verb in ("add", "check", "del") and not opts.netns:
            return fail(prog, "NETNS is required: a netns path such as /run/netns/blue (skb netns add blue)", opts)
        missing = missing_netns(opts.netns) if verb in ("add", "check") else None
        if missing:
            return fail(prog, missing, opts)
        netconf = libcni.load_network(conf_dir, opts.network)
        rt = runtime_conf_from(opts)
        if verb == "add":
            res = cni.add_list(netconf, rt)
            print(json.dumps(libcni.result_dict(res), indent=4))
        elif verb == "check":
            cni.check_list(netconf, rt)
        elif verb == "del":
            cni.del_list(netconf, rt)
        elif verb == "status":
            cni.status_list(netconf)
        elif verb == "gc":
            valid = None
            if opts.valid or opts.keep_live:
                valid = []
                for v in opts.valid or ():
                    cid, sep, ifname = v.partition(":")
                    if not sep or not cid or not ifname:
                        return fail(prog, f"--valid {v!r}: expected CONTAINERID:IFNAME, e.g. ctr1:eth0", opts)
                    valid.append((cid, ifname))
                if opts.keep_live:
                    cached = cni.cached_attachments()
                    if not cached:
                        return fail(prog, f"--keep-live: {os.path.join(cni.cache_dir, 'results')} holds no cached "
                                          "attachment at all, so no runtime's libcni cache is there: the plugins "
                                          "would be told that nothing is in use, and free every reservation. Give "
                                          "the runtime's --cache-dir (to free them all, name one attachment that "
                                          "does not exist: --valid none:none)", opts)
                    valid += [(a.container_id, a.ifname) for a in cached
                              if a.network == netconf.name and a.netns and not netns.gone(a.netns)]
            errors = cni.gc_list(netconf, valid)
            if errors:
                raise libcni.LibcniError("\n".join(str(e) for e in errors))
            _gc_notes(prog, netconf, valid)
    except (libcni.LibcniError, CNIError) as e:
        if opts.verbose and cni is not None:
            _show_calls(cni, style)
        text = libcni.describe(e)
        inner = e.cni_error() if isinstance(e, libcni.LibcniError) else e
        if inner is not None and inner.code:
            text += f" (CNI error code {inner.code})"
        return fail(prog, text, opts)
    if opts.verbose:
        _show_calls(cni, style)
    return 0


def _gc_notes(prog, netconf, valid):
    """What a gc that exits 0 did not do, on stderr: plugins get GC only at cniVersion 1.1.0 and later, and
    a GC without a list of valid attachments frees nothing in skb's host-local."""
    if netconf.disable_gc:
        return
    if not libcni.speaks_1_1(netconf.cni_version):
        sys.stderr.write(f"{prog}: note: network {netconf.name!r} has cniVersion {netconf.cni_version}: its plugins "
                         "are sent GC only from 1.1.0 on, so only cached attachments were DELeted; an IPAM's "
                         "leaked reservations stay (skb doctor names them and how to remove them)\n")
    elif valid is None:
        sys.stderr.write(f"{prog}: note: the plugins got no list of valid attachments, and skb's host-local "
                         "releases nothing without one (it cannot tell which reservations are in use); "
                         "--keep-live sends the live ones\n")


# ---------------------------------------------------------------------------------------------------
# netns

def _netns_problem(opts):
    """Why ``skb netns`` cannot work with these arguments (None when it can): names must be plain file
    names that are valid UTF-8, and the run dir a directory (when it exists)."""
    for name in opts.names:
        if not _utf8(name):
            return f"netns name {name.encode(errors='surrogateescape')!r} is not valid UTF-8: use a plain name"
        if not scratch_netns.valid_name(name):
            return f"invalid netns name {name!r}: use a plain file name (no '/', not '.' or '..', at most 255 bytes)"
        if opts.action == "add" and any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in name):
            return f"invalid netns name {name!r}: it holds control characters; use a plain name"
    try:
        st = os.stat(opts.run_dir)
    except FileNotFoundError:
        st = None           # (add makes it; a del finds none of its names below)
    except (OSError, ValueError) as e:
        return f"cannot use --run-dir {opts.run_dir!r}: {getattr(e, 'strerror', None) or e}"
    if st is not None and st.st_mode & 0o170000 != 0o040000:
        return f"--run-dir {opts.run_dir!r} is not a directory: give the directory named namespaces live in"
    if opts.action == "del":   # every name judged before any is removed: a refusal changes nothing
        if len(set(opts.names)) != len(opts.names):
            return "a name is given twice: nothing was removed"
        for name in opts.names:
            path = scratch_netns.path_of(name, opts.run_dir)
            if not os.path.lexists(path):
                return f'cannot remove namespace file "{visible(path)}": no such file; nothing was removed'
            if os.path.isdir(path) and not os.path.islink(path):
                return (f'cannot remove "{visible(path)}": it is a directory, not a namespace file; nothing was '
                        "removed")
    return None


def _utf8(text):
    try:
        text.encode()
        return True
    except UnicodeEncodeError:
        return False


def _cmd_netns(opts):
    problem = _netns_problem(opts)
    if problem:
        return fail(f"skb netns {opts.action}", problem, opts)
    try:
        if opts.action == "add":
            for name in opts.names:
                print(scratch_netns.add(name, opts.run_dir))
        elif opts.action == "del":
            for name in opts.names:
                scratch_netns.delete(name, opts.run_dir)
        else:
            for name in scratch_netns.names(opts.run_dir):
                path = scratch_netns.path_of(name, opts.run_dir)
                print(visible(name) + ("" if not netns.gone(path) else
                                       " (not a namespace: nothing is mounted on it; skb netns del removes it)"
                                       if os.path.isfile(path) else " (not a namespace)"))
    except scratch_netns.NetnsAdminError as e:
        return fail(f"skb netns {opts.action}", str(e), opts)
    except OSError as e:
        return fail(f"skb netns {opts.action}", f"{opts.run_dir}: {e.strerror or e}", opts)
    return 0


# ---------------------------------------------------------------------------------------------------
# argument parsing

def _common_run_args(p, netns_required=True):
    p.add_argument("network", metavar="NETWORK", help='the "name" of a network in the conf dir')
    if netns_required:
        p.add_argument("netns", metavar="NETNS", help="the netns: a path, or a name in /run/netns")
    else:
        p.add_argument("netns", metavar="NETNS", nargs="?", default="",
                       help="accepted for cnitool compatibility; not used")
    p.add_argument("-i", "--ifname", help="interface name (default: $CNI_IFNAME, else eth0)")
    p.add_argument("--conf-dir", help="network configuration dir (default: $NETCONFPATH, else /etc/cni/net.d)")
    p.add_argument("--cni-path", help=f"plugin dirs, ':'-separated (default: $CNI_PATH, else {DEFAULT_CNI_PATH})")
    p.add_argument("--cache-dir", default="/var/lib/cni", help="libcni cache dir (default: /var/lib/cni)")
    p.add_argument("--args", help="CNI_ARGS to send, K=V;K=V (default: $CNI_ARGS)")
    p.add_argument("--cap-args", help="capability arguments, a JSON object (default: $CAP_ARGS)")
    p.add_argument("--container-id", help="container id (default: cnitool's, derived from the netns path)")
    p.add_argument("--timeout", type=positive_seconds,
                   help="kill a plugin that takes longer (seconds, above 0; default: wait)")
    p.add_argument("-v", "--verbose", action="store_true", help="list each plugin run on stderr")
    p.set_defaults(func=_cmd_run)


def build_parser():
    """The parser; its ``commands`` attribute maps each command to its subparser (for a usage message of
    the command's own)."""
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="skb", description=MAIN_HELP, epilog=MAIN_EPILOG, formatter_class=raw)
    color_help = "colour the output (default: auto = only on a terminal, never with NO_COLOR set)"
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto", help=color_help)
    p.add_argument("--version", action="version", version=version_text(), help="print the version and exit")
    common = argparse.ArgumentParser(add_help=False)   # --color after the subcommand works too
    common.add_argument("--color", choices=("auto", "always", "never"), default=argparse.SUPPRESS, help=color_help)
    parents = [common]
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", title="commands")

    for verb, text in (("add", "ADD the network's plugins to the netns and print the result"),
                       ("check", "CHECK the attachment against its cached result"),
                       ("del", "DEL the attachment (plugins in reverse order)")):
        sp = sub.add_parser(verb, parents=parents, help=text, description=text + ", as cnitool does.", epilog=RUN_EPILOG,
                            formatter_class=raw)
        _common_run_args(sp)
    st = sub.add_parser("status", parents=parents, help="ask each plugin whether it can ADD (STATUS)",
                        description="STATUS the network's plugins, as cnitool does.", epilog=STATUS_EPILOG,
                        formatter_class=raw)
    _common_run_args(st, netns_required=False)
    gc = sub.add_parser("gc", parents=parents, help="DEL stale cached attachments and send GC to the plugins",
                        description="Garbage-collect a network, as libcni's GCNetworkList does.",
                        epilog=GC_EPILOG, formatter_class=raw)
    _common_run_args(gc, netns_required=False)
    gc.add_argument("--valid", action="append", metavar="CONTAINERID:IFNAME",
                    help="an attachment still in use (repeatable)")
    gc.add_argument("--keep-live", action="store_true",
                    help="treat every cached attachment whose netns is still a namespace as in use")

    ns = sub.add_parser("netns", parents=parents, help="scratch network namespaces (add, del, list)",
                        description="Create and delete named network namespaces, like ip netns.",
                        epilog=NETNS_EPILOG, formatter_class=raw)
    ns.add_argument("action", choices=("add", "del", "list"))
    ns.add_argument("names", metavar="NAME", nargs="*", help="namespace names (for add and del)")
    ns.add_argument("--run-dir", default="/run/netns", help="where named namespaces live (default: /run/netns)")
    ns.set_defaults(func=_cmd_netns)

    doctor.add_parser(sub, raw, parents)
    explain.add_parser(sub, raw, parents)
    log.add_parser(sub, raw, parents)
    replay.add_parser(sub, raw, parents)
    warm.add_parser(sub, raw, parents)
    install.add_parsers(sub, raw, parents)
    v = sub.add_parser("version", parents=parents, help="print the suite's version and the CNI versions it speaks",
                       epilog="examples:\n  skb version\n  skb version --json\n  skb --version", formatter_class=raw)
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.set_defaults(func=_cmd_version)
    p.commands = sub.choices
    return p


def main(argv):
    # Names and records may hold bytes that are not UTF-8 (a netns name, a file name in a record):
    # print them escaped rather than fail on them.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    parser = build_parser()
    opts, extra = parser.parse_known_args(argv)
    if extra:
        # argparse reports a subcommand's unknown flag with the top-level usage; show the command's own.
        (parser.commands.get(opts.cmd) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(opts, "func", None):
        parser.print_help()
        return 2
    if opts.cmd == "netns" and opts.action in ("add", "del") and not opts.names:
        parser.commands["netns"].error(f"netns {opts.action} needs at least one NAME, "
                                       f"e.g. skb netns {opts.action} blue")
    # A plugin run with a timeout (the runner's --timeout, the doctor's own calls) leads a process group of its
    # own, which a signal to ours no longer reaches: however we end, those groups end with us. (SIGKILL
    # aside, as for a runtime's exec'd plugin.) A command may set its own handlers (install --wait).
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    try:
        return opts.func(opts)
    except KeyboardInterrupt:
        return 130
    except Exception as e:   # the last resort: one line, never a traceback (SKB_TRACEBACK=1 shows it)
        if os.environ.get("SKB_TRACEBACK") == "1":
            raise
        return fail(f"skb {opts.cmd}", f"internal error: {type(e).__name__}: {e} (this is a bug in skb-cni; "
                                       "SKB_TRACEBACK=1 shows where)", opts)
    finally:
        rawexec.kill_all()
        aside.remove_all()
