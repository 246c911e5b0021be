"""``skb install`` and ``skb uninstall``: the command-line face of ``skb.install`` (which holds the logic and
imports nothing of the rest of skb, so build/bundle.py can run it on the build host)."""
import os
import signal
import sys
import time

from skb.applets import APPLETS
from skb.install.conflist import (DEFAULT_CONF_DIR, DEFAULT_CONF_NAME, DEFAULT_NETWORK, DEFAULT_TEMPLATE,
                                  VAR_RE, conf_bytes, config_conflicts, install_config, parse_pod_cidrs,
                                  render, template_values, uninstall_config, check_conf_name, check_mtu)
from skb.install.files import DEFAULT_BIN_DIR, LINK, InstallError, os_error_text, read_regular, say
from skb.install import node
from skb.install.suite import install_suite, suite_installed, uninstall_suite
from skb.tool.argtypes import positive_seconds, seconds
from skb.tool.style import fail

INSTALL_HELP = "install the suite into a CNI bin dir and write this node's network configuration"
INSTALL_EPILOG = """\
What it does, each step atomic (temporary file, then rename) and skipped when already done:
  1. copies the suite (launchers + .skb bundle) from --from into --bin-dir, then removes the bundle dirs
     no launcher names (an older release extracted there by tar leaves its own);
  2. fills the template with this node's pod CIDR and MTU and writes --conf-dir/--conf-name.
A rerun is a no-op; a run killed half-way leaves the old files in place and the next run completes.
It refuses to overwrite another network's configuration, or to write ours where another file sorts first
(the runtime would keep using that one), unless --force: another network's, or one of our network's name
with other contents (an exact copy of ours is harmless). --wait warns when such a file appears later.

template variables (${NAME}):
  POD_CIDR     the first pod CIDR, e.g. 10.244.1.0/24
  POD_RANGES   host-local "ranges": [[{"subnet": "<cidr>"}], ...], one range set per CIDR (dual stack)
  POD_ROUTES   host-local "routes": a default route per family
  MTU          --mtu, else the MTU of the interface of this node's default route (1500 without one)
  any NAME given with --set NAME=VALUE

A pod CIDR must leave host-local a gateway and one pod (at most a /30, a /126) and avoid the blocks no
pod address can be in (0.0.0.0/8 and ::, loopback, multicast, 240.0.0.0/4); an MTU (--mtu, SKB_MTU,
--set MTU=) is 68 to 65535; --conf-name is a plain file name ending in .conflist.

pod CIDR sources, the first given wins: --pod-cidr, --pod-cidr-file, SKB_POD_CIDR, --pod-cidr-from-api
(this node's spec.podCIDRs, read from the Kubernetes API with the pod's ServiceAccount: a pod's
KUBERNETES_SERVICE_HOST/PORT, its token and ca.crt; the node is --node-name, default $NODE_NAME).

environment: SKB_POD_CIDR (as --pod-cidr), SKB_MTU (as --mtu), NODE_NAME (as --node-name),
SKB_UNINSTALL_ON_STOP=true (as --uninstall-on-stop)

examples:
  skb install --pod-cidr 10.244.1.0/24
  skb install --from /opt/skb-cni/bin --bin-dir /host/opt/cni/bin --conf-dir /host/etc/cni/net.d \\
      --pod-cidr-from-api --wait
  skb install --bin-dir /tmp/bin --no-config"""

UNINSTALL_HELP = "remove this node's skb network configuration (and with --purge the suite)"
UNINSTALL_EPILOG = """\
Without its configuration the runtime reports the node's network as not ready: kubelet marks the node
NotReady instead of starting pods without networking. The plugins stay, so pods still running can be
torn down; --purge removes the launchers (only files that are skb-cni's) and the bundle too, for a
drained node. Another network's file at the same path is kept unless --force.

examples:
  skb uninstall
  skb uninstall --conf-dir /host/etc/cni/net.d --purge --bin-dir /host/opt/cni/bin
  skb uninstall --purge --keep-config      # before installing the Go plugins, which read the same config"""


def default_source():
    """The bin dir this frozen program runs from (``<bin dir>/.skb-<v>-<h>/_internal``), or None."""
    meipass = getattr(sys, "_MEIPASS", None)
    if not meipass:
        return None
    bindir = os.path.dirname(os.path.dirname(os.path.abspath(meipass)))
    return bindir if os.path.islink(os.path.join(bindir, LINK)) else None


def _true(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def add_parsers(sub, raw, parents):
    p = sub.add_parser("install", parents=parents, help=INSTALL_HELP, description=INSTALL_HELP + ".",
                       epilog=INSTALL_EPILOG, formatter_class=raw)
    p.add_argument("--from", dest="source", metavar="DIR",
                   help="the suite to install (default: the bin dir this skb runs from)")
    p.add_argument("--bin-dir", default=DEFAULT_BIN_DIR, help=f"where to install (default: {DEFAULT_BIN_DIR})")
    p.add_argument("--conf-dir", default=DEFAULT_CONF_DIR, help=f"CNI conf dir (default: {DEFAULT_CONF_DIR})")
    p.add_argument("--conf-name", default=DEFAULT_CONF_NAME, help=f"file name (default: {DEFAULT_CONF_NAME})")
    p.add_argument("--template", metavar="FILE", help="conflist template (default: ptp + host-local over the "
                                                        "pod CIDR, network \"skb\")")
    p.add_argument("--pod-cidr", action="append", metavar="CIDR",
                   help="this node's pod CIDR (repeat, or comma-separate, for dual stack; default: $SKB_POD_CIDR)")
    p.add_argument("--pod-cidr-file", metavar="FILE",
                   help="read the pod CIDRs from FILE, e.g. written by kubectl get node -o jsonpath={.spec.podCIDRs[*]}")
    p.add_argument("--pod-cidr-from-api", action="store_true",
                   help="read this node's pod CIDRs from the Kubernetes API (in a pod: its ServiceAccount)")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""),
                   help="the node whose pod CIDRs to read (default: $NODE_NAME)")
    p.add_argument("--service-account-dir", default=node.SA_DIR, metavar="DIR",
                   help=f"the pod's ServiceAccount token and ca.crt (default: {node.SA_DIR})")
    p.add_argument("--api-wait", type=seconds, default=300.0, metavar="SECONDS",
                   help="how long to wait for the API, or for the node to get its pod CIDR (default: 300)")
    p.add_argument("--mtu",
                   help="the pods' MTU (default: $SKB_MTU, else the MTU of the default route's interface)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="another template variable")
    p.add_argument("--no-config", action="store_true", help="install the suite only")
    p.add_argument("--force", action="store_true", help="write our config even over or behind another network's")
    p.add_argument("--wait", action="store_true",
                   help="then keep running (a DaemonSet's container): re-install whatever goes missing")
    p.add_argument("--interval", type=positive_seconds, default=60.0,
                   help="seconds between checks with --wait (above 0; default: 60)")
    p.add_argument("--uninstall-on-stop", action="store_true",
                   help="with --wait: remove our config on SIGTERM (when removing skb-cni from a cluster)")
    p.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    p.set_defaults(func=cmd_install)

    u = sub.add_parser("uninstall", parents=parents, help=UNINSTALL_HELP, description=UNINSTALL_HELP + ".",
                       epilog=UNINSTALL_EPILOG, formatter_class=raw)
    u.add_argument("--bin-dir", default=DEFAULT_BIN_DIR, help=f"with --purge (default: {DEFAULT_BIN_DIR})")
    u.add_argument("--conf-dir", default=DEFAULT_CONF_DIR, help=f"CNI conf dir (default: {DEFAULT_CONF_DIR})")
    u.add_argument("--conf-name", default=DEFAULT_CONF_NAME, help=f"file name (default: {DEFAULT_CONF_NAME})")
    u.add_argument("--network", default=DEFAULT_NETWORK,
                   help=f"the name of our network in that file (default: {DEFAULT_NETWORK})")
    u.add_argument("--force", action="store_true", help="remove the file even if it holds another network")
    u.add_argument("--purge", action="store_true", help="remove the launchers and the bundle too")
    u.add_argument("--keep-config", action="store_true",
                   help="leave the config in place (with --purge: remove the suite only, e.g. going back to "
                        "the Go plugins, which read the same config)")
    u.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    u.set_defaults(func=cmd_uninstall)


def _log(opts):
    return None if opts.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))


def _mtu(opts, log):
    """The MTU value of the template: --mtu, else $SKB_MTU, else the default route's interface's, else 1500."""
    if opts.mtu is not None:
        return check_mtu(opts.mtu, "--mtu")
    if os.environ.get("SKB_MTU", "").strip():
        return check_mtu(os.environ["SKB_MTU"], "SKB_MTU")
    iface, mtu = node.default_route_mtu()
    if mtu:
        say(log, f"install: MTU {mtu}, from {iface} (the interface of this node's default route)")
        return str(mtu)
    say(log, f"install: MTU {node.DEFAULT_MTU}: " + (f"cannot read the MTU of {iface}" if iface else
                                                      "this node has no default route") + " (--mtu to set it)")
    return str(node.DEFAULT_MTU)


def _read_text(path, what, kind):
    """A file given on the command line, as text: a regular file of at most 4 MiB, read without waiting (a
    FIFO or /dev/zero there held the installer, or took it past its memory limit)."""
    try:
        data = read_regular(path, what=kind)
        if data is None:
            raise InstallError(f"cannot read {what} {path}: not a regular file")
        return data.decode("utf-8")
    except OSError as e:
        raise InstallError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise InstallError(f"cannot read {what} {path}: not UTF-8 text (byte {e.start})") from None


def _rendered_config(opts, log=None, stop=()):
    """The conflist dict this node gets, from the template and the pod CIDR sources. ``stop``: the signals
    --wait has caught; one caught while the API is asked again ends the wait (a pod's grace period is
    shorter than --api-wait)."""
    if opts.template:
        template, source = _read_text(opts.template, "the template", "template"), opts.template
    else:
        template, source = DEFAULT_TEMPLATE, "the built-in template"
    cidrs = []
    if opts.pod_cidr:
        cidrs = parse_pod_cidrs(",".join(opts.pod_cidr), "--pod-cidr")
    elif opts.pod_cidr_file:
        cidrs = parse_pod_cidrs(_read_text(opts.pod_cidr_file, "the pod CIDR file", "pod CIDR file"),
                                opts.pod_cidr_file)
    elif os.environ.get("SKB_POD_CIDR", "").strip():
        cidrs = parse_pod_cidrs(os.environ["SKB_POD_CIDR"], "SKB_POD_CIDR")
    elif opts.pod_cidr_from_api:
        text = node.node_pod_cidrs(opts.node_name, opts.service_account_dir, wait=opts.api_wait, log=log,
                                   sleep=lambda seconds: _nap(seconds, stop))
        cidrs = parse_pod_cidrs(text, f"node {opts.node_name!r}'s spec.podCIDRs")
        say(log, f"install: pod CIDRs of node {opts.node_name}: {' '.join(str(c) for c in cidrs)}")
    extra = {"MTU": _mtu(opts, log)} if "${MTU}" in template else {}
    for item in opts.set:
        name, sep, value = item.partition("=")
        if not sep or not VAR_RE.fullmatch("${" + name + "}"):
            raise InstallError(f"--set {item!r}: expected NAME=VALUE, e.g. --set MTU=1450")
        extra[name] = check_mtu(value, "--set MTU") if name == "MTU" else value
    return render(template, template_values(cidrs, extra), source)


def _install_once(opts, source, conf, log):
    changed = install_suite(source, opts.bin_dir, log=log)
    if conf is not None:
        changed |= install_config(opts.conf_dir, opts.conf_name, conf, force=opts.force, log=log)
    return changed


def cmd_install(opts):
    log = _log(opts)
    source = opts.source or default_source()
    if not source:
        return fail("skb install", "--from DIR is required when skb does not run from an installed suite", opts)
    if opts.uninstall_on_stop and not opts.wait:
        print("skb install: error: --uninstall-on-stop acts when a --wait install is stopped: give --wait too, "
              "or run skb uninstall to remove the config now", file=sys.stderr)
        return 2
    uninstall_on_stop = opts.uninstall_on_stop or _true(os.environ.get("SKB_UNINSTALL_ON_STOP", ""))
    stop = []
    if opts.wait:
        # Before anything else: as a container's PID 1, a signal without a handler is ignored. A stop
        # during the first install lets it finish, then exits.
        signal.signal(signal.SIGTERM, lambda *_: stop.append(signal.SIGTERM))
        signal.signal(signal.SIGINT, lambda *_: stop.append(signal.SIGINT))
    try:
        if not opts.no_config:
            check_conf_name(opts.conf_name)
        conf = None if opts.no_config else _rendered_config(opts, log, stop)
        _install_once(opts, source, conf, log)
        if not opts.wait:
            return 0
        _watch(opts, source, conf, log, stop)
        if uninstall_on_stop and conf is not None:
            uninstall_config(opts.conf_dir, opts.conf_name, conf["name"], log=log)
        return 0
    except InstallError as e:
        return fail("skb install", str(e), opts)
    except OSError as e:
        return fail("skb install", os_error_text(e), opts)


def _nap(seconds, stop):
    """Sleep, waking when a signal was caught (``stop``): InstallError then, nothing installed yet."""
    deadline = time.monotonic() + seconds
    while not stop and time.monotonic() < deadline:
        time.sleep(min(0.2, seconds))
    if stop:
        raise InstallError(f"stopped by {signal.Signals(stop[0]).name} while waiting for the Kubernetes API: "
                           "nothing was installed")


def _watch(opts, source, conf, log, stop):
    """--wait: every --interval, install again whatever went missing (refusing what the first install
    refuses), and warn once about each file that comes to sort before ours and take the node's network."""
    say(log, f"install: watching {opts.bin_dir} and {opts.conf_dir} every {opts.interval:g}s")
    warned = set()
    while not stop:
        deadline = time.monotonic() + opts.interval
        while not stop and time.monotonic() < deadline:
            time.sleep(min(0.2, opts.interval))
        if stop:
            return
        if not suite_installed(source, opts.bin_dir) or (conf is not None and not _conf_current(opts, conf)):
            say(log, "install: something went missing: installing again")
            _install_once(opts, source, conf, log)
        if conf is not None and not opts.force:
            problems = set(config_conflicts(opts.conf_dir, opts.conf_name, conf["name"], conf_bytes(conf)))
            for p in sorted(problems - warned):
                say(log, f"install: warning: {p}")
            warned = problems


def _conf_current(opts, conf):
    try:
        return read_regular(os.path.join(opts.conf_dir, opts.conf_name)) == conf_bytes(conf)
    except OSError:
        return False


def cmd_uninstall(opts):
    log = _log(opts)
    try:
        check_conf_name(opts.conf_name, writing=False)
        if not opts.keep_config:
            uninstall_config(opts.conf_dir, opts.conf_name, opts.network, force=opts.force, log=log)
        if opts.purge:
            uninstall_suite(opts.bin_dir, APPLETS, log=log)
        return 0
    except InstallError as e:
        return fail("skb uninstall", str(e), opts)
    except OSError as e:
        return fail("skb uninstall", os_error_text(e), opts)
