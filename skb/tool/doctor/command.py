"""``skb doctor``: run the checks in order, report, exit status."""
import os
import sys
import json

from skb.tool.style import Style, fail, visible
from skb.tool.doctor.findings import Finding, SEVERITIES
from skb.tool.doctor.runtimes import CONTAINERD_CONFIG, CRIO_CONFIG, CRIO_CONFIG_DIR, views_from
from skb.tool.doctor.confdir import check_conf_dir, check_shadowing
from skb.tool.doctor.plugins import (prefetch, check_plugins, check_declared_versions, check_status,
                                     check_runtime_bins)
from skb.tool.doctor.node import check_host_lo, check_routing
from skb.tool.doctor.warmcallers import check_warm_callers, check_warm_off_files
from skb.tool.doctor.reservations import check_leaks
from skb.tool.doctor.ipamconf import check_ipam
from skb.tool.doctor.overlap import check_overlap
from skb.tool.doctor.probe import probe

# A failing probe ADD is the same cause as one of these errors about its network: a note then, not a second error
PREDICTED = ("config-invalid", "range-exhausted", "pod-range-overlap", "plugin-missing", "plugin-elsewhere",
             "plugin-dangling", "plugin-not-executable", "version-unsupported", "version-failed")


def run(opts, skip=()):
    """All findings, in report order, and the views checked. ``skip`` names check groups left out:
    ``version`` (VERSION of every plugin), ``status``, ``node`` (lo, forwarding, rp_filter, the pod ranges
    against the node's network), ``leaks`` (and exhausted ranges)."""
    # The plugins it runs (VERSION, STATUS, the probe) go by exec: a warm server started here would stay
    # in the operator's session for its idle time, for calls no runtime makes (docs/DIAGNOSTICS.md).
    os.environ["SKB_WARM"] = "0"
    findings = []
    exhausted = set()
    views, runtimes = views_from(opts, findings)
    search = [d for d in os.environ.get("CNI_PATH", "").split(":") if d]
    search += [d for v in views + runtimes for d in v.bin_dirs]
    networks_seen, bins = [], {}
    first_default = None
    for view in views:
        before = len(findings)
        loaded = check_conf_dir(view, findings)
        default = check_shadowing(view, loaded, findings)
        first_default = first_default or default
        networks = [e.netconf for e in loaded if e.netconf]
        run_version = "version" not in skip and not opts.no_version
        run_status = "status" not in skip and not opts.no_status
        versions, statuses = prefetch(view, networks, run_version, run_status)
        versions, found_all = check_plugins(view, networks, findings, run_version, search, versions)
        check_declared_versions(networks, versions, found_all, findings)
        if run_status:
            check_status(view, networks, default, found_all, findings, statuses)
        fresh = [n for n in networks if all(n.source != m.source for m in networks_seen)]
        networks_seen += fresh
        bins.update((n.source, view.bin_dirs) for n in fresh)
        exhausted |= check_ipam(fresh, opts.cache_dir, findings, "leaks" not in skip, view.bin_dirs)
        if len(views) > 1:
            for f in findings[before:]:
                f.what = f"[{view.source}] {f.what}"
        if opts.probe:
            if default is None:         # the findings above say why: one cause, one finding
                findings.append(Finding("note", "probe-skipped", "the probe did not run: no pod network to probe",
                                        f"nothing loads in {view.conf_dir}", "fix the findings above"))
            else:
                probe(view, default, opts, findings)
    check_runtime_bins(views, runtimes, first_default, findings, search)
    if "node" not in skip:
        check_host_lo(findings)
        check_routing(networks_seen, opts.cache_dir, findings)
        check_overlap(networks_seen, findings)
        check_warm_callers(findings)
        check_warm_off_files(search, findings)
    if "leaks" not in skip:
        check_leaks(networks_seen, opts.cache_dir, findings, exhausted, bins)
    _fold_probe(findings)
    _fold_status(findings)
    unique, keys = [], set()
    for f in findings:
        if f.key() not in keys:
            keys.add(f.key())
            unique.append(f)
    return unique, views


def _fold_probe(findings):
    """One cause, one finding: the probe of a network with an error that predicts its outcome adds a note.
    A failing ADD or DEL is that error again; an ADD that passed in the scratch node passed only because
    the scratch node lacks what the error is about (the node's addresses and routes)."""
    known = {f.where for f in findings if f.severity == "error" and f.code in PREDICTED}
    for f in findings:
        if f.where not in known:
            continue
        if f.code == "probe-failed" and f.severity == "error" and f.what.startswith(("ADD", "DEL")):
            f.severity = "note"
            f.what += ", as the error above predicts"
        elif f.code == "probe" and f.what.startswith("probe ADD ok"):
            f.what = f.what.replace("probe ADD ok", "probe ADD ok in its scratch node only (the error above is "
                                    "about this node)", 1)


def _fold_status(findings):
    """One cause, one finding: STATUS of a network whose configuration config-invalid already refuses
    fails with a configuration error (code 6 or 7) for that same reason, or for a dataDir config-invalid
    found on a read-only mount with that mount's error (EROFS); STATUS of a plugin whose VERSION fails
    (it cannot be run), of a network whose version a plugin does not speak, of an exhausted
    range (code 50) fails for the reason that error gives: each is only a note (review 16)."""
    invalid = {f.where for f in findings if f.code == "config-invalid" and f.severity == "error"}
    read_only = {f.where for f in findings if f.code == "config-invalid" and f.severity == "error"
                 and "is on a read-only mount" in f.what}
    errors = {(f.code, f.where) for f in findings if f.severity == "error"}
    for f in findings:
        if f.code != "status-failed":
            continue
        if f.network in invalid and f.cni_code in (6, 7) or f.network in read_only and "EROFS" in f.evidence:
            cause = "config-invalid"
        elif ("version-failed", f.where) in errors:           # the same plugin cannot even be run
            cause = "version-failed"
        elif any(g.code == "version-unsupported" and g.severity == "error" and g.where == f.network
                 and g.evidence.startswith(f"{f.where} answers VERSION") for g in findings):
            # (that very plugin lacks the version: another plugin's STATUS failure is its own, review 16)
            cause = "version-unsupported"
        elif ("range-exhausted", f.network) in errors and f.cni_code == 50:
            cause = "range-exhausted"
        else:
            continue
        f.severity = "note"
        f.what += f", for the reason the {cause} error gives"


def report(findings, views, style, out):
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}
    label = {"error": style.red("error  "), "warning": style.yellow("warning"), "note": style.dim("note   ")}
    for f in sorted(findings, key=lambda f: SEVERITIES.index(f.severity)):
        line = f"{label[f.severity]} {style.bold(f.code)}: {visible(f.what)}"
        if f.evidence:
            line += f" {style.dim('| evidence:')} {visible(f.evidence)}"
        if f.fix:
            line += f" {style.dim('| fix:')} {visible(f.fix)}"
        print(line, file=out)
    where = "; ".join(f"{v.source}: conf dir {v.conf_dir}, bin dirs {':'.join(v.bin_dirs)}" for v in views) or \
        "no conf dir (the runtime's configuration does not parse)"
    problems = counts["error"] + counts["warning"]
    verdict = style.green("no problems found") if not problems else \
        style.red(f"{counts['error']} error{'s' if counts['error'] != 1 else ''}") + \
        f", {counts['warning']} warning{'s' if counts['warning'] != 1 else ''}"
    print(f"skb doctor: {verdict} ({counts['note']} note{'s' if counts['note'] != 1 else ''}); checked {where}",
          file=out)


def safe_stdout():
    """Names from the file system or a record may hold bytes that are not UTF-8 (or lone surrogates):
    print them escaped rather than fail."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def command(opts):
    safe_stdout()
    if opts.probe and not 0 < opts.probe_timeout <= 3600:
        return fail("skb doctor", f"--probe-timeout {opts.probe_timeout:g}: give a number of seconds from 0 to 3600",
                    opts)
    findings, views = run(opts)
    problems = [f for f in findings if f.severity != "note"]
    if opts.json:
        print(json.dumps({"problems": [f.to_dict() for f in problems],
                          "notes": [f.to_dict() for f in findings if f.severity == "note"],
                          "summary": {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES},
                          "checked": [v.to_dict() for v in views]}, indent=2))
    else:
        report(findings, views, Style.for_stream(sys.stdout, opts.color), sys.stdout)
    return 1 if problems else 0


EPILOG = """\
Prints one line per problem: severity, code, what is wrong | evidence | fix; then a summary. Exit status 1
when there are errors or warnings. Codes: no-config, wrong-extension, skipped-entry, unreadable-entry,
no-plugins, invalid-json, load-error, no-cniversion, shadowed, several-networks, plugin-missing,
plugin-elsewhere, plugin-dangling, plugin-not-executable, version-failed, version-unsupported, status-failed,
config-invalid, range-exhausted, pod-range-overlap, host-lo-down, forwarding-off, rp-filter-strict,
leaked-reservation, runtime-dirs-disagree, runtime-config-invalid, runtime-config-ignored, probe-failed,
probe-no-ip, probe-leftover, probe-skipped, probe-needs, warm-start-off; and the notes default-network and
probe. A leaked host-local reservation is one whose attachment has no cached result in <cache-dir>/results,
or whose cached netns is gone. One cause gives one finding: a probe
outcome an error already predicts is a note. docs/DIAGNOSTICS.md has the whole list.

Without --conf-dir/--bin-dir the directories come from containerd's config.toml (version 1, 2 and 3
layouts, with its imports) and CRI-O's crio.conf and crio.conf.d (their disagreements are reported),
else /etc/cni/net.d and /opt/cni/bin; with them, each runtime is still asked whether it would find the
pod network's plugins. Networks with cniVersion 1.1.0 or later get STATUS, as containerd 2 sends it.
--probe runs ADD and DEL of the pod network in a scratch node namespace of its own (network and mount):
the node is never changed; what the ADD needed from the node (forwarding) is reported.

examples:
  skb doctor
  skb doctor --json | jq '.problems[].code'
  skb doctor --conf-dir /etc/cni/net.d --bin-dir /opt/cni/bin:/usr/lib/cni
  skb doctor --probe                      # ADD + DEL of the pod network in scratch namespaces (root)
  skb doctor --containerd-config /etc/containerd/config.toml --crio-config ''"""


def add_parser(sub, formatter, parents=()):
    d = sub.add_parser("doctor", help="find what is wrong with this node's CNI set-up", parents=list(parents),
                       description="Inspect the node's CNI configuration, plugins and state; print each "
                                   "problem with its evidence and fix.", epilog=EPILOG, formatter_class=formatter)
    add_options(d)
    d.add_argument("--probe", action="store_true", help="ADD and DEL the pod network in scratch namespaces (the "
                   "node is never changed; root)")
    d.add_argument("--probe-ifname", default="eth0", help="the interface a runtime looks up (default: eth0)")
    d.add_argument("--probe-timeout", type=float, default=60.0, help="seconds a plugin may take in the probe")
    d.add_argument("--netns-dir", default="/run/netns", help="where the probe's scratch netns goes (in the "
                   "probe's own mount namespace)")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=command)
    return d


def add_options(d):
    """Where to look and which checks to run: shared with skb explain."""
    d.add_argument("--conf-dir", help="the CNI conf dir to check (default: the runtimes', else /etc/cni/net.d)")
    d.add_argument("--bin-dir", action="append", metavar="DIR[:DIR]",
                   help="plugin dir (repeatable or ':'-separated; default: the runtimes', else /opt/cni/bin)")
    d.add_argument("--containerd-config", default=CONTAINERD_CONFIG,
                   help=f"containerd's config.toml (default: {CONTAINERD_CONFIG}; '' to ignore)")
    d.add_argument("--crio-config", default=CRIO_CONFIG, help=f"CRI-O's crio.conf (default: {CRIO_CONFIG}; '' to ignore)")
    d.add_argument("--crio-config-dir", default=CRIO_CONFIG_DIR,
                   help=f"CRI-O's drop-in dir (default: {CRIO_CONFIG_DIR}; '' to ignore)")
    d.add_argument("--cache-dir", default="/var/lib/cni", help="libcni's cache dir (default: /var/lib/cni)")
    d.add_argument("--no-version", action="store_true", help="do not run the plugins with VERSION")
    d.add_argument("--no-status", action="store_true",
                   help="do not send STATUS to the networks' plugins (cniVersion 1.1.0 and later)")
    d.set_defaults(probe=False, probe_ifname="eth0", probe_timeout=60.0, netns_dir="/run/netns", json=False)
