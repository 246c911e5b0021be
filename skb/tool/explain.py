"""``skb explain``: what a CNI error message from kubelet, a runtime, libcni or a plugin means, and what on
this node causes it.

The messages are recognised by the table ``PATTERNS`` (one place, each entry tested with a real message):
a regular expression, a title, one paragraph on the meaning and the usual causes, and the doctor finding
codes that bear on it. Wrapping messages (containerd's "failed to setup network for sandbox", libcni's
'plugin type="X" failed (add)', kubelet's NetworkPluginNotReady) are explained and then the message they
wrap is explained too. After the explanation the doctor checks that apply are run and their findings
printed; text that matches nothing is said to be unknown and the whole doctor runs.

``--journal`` reads the runtimes' recent log: ``journalctl`` (bounded in time, lines, bytes and seconds)
for the containerd, crio and kubelet units, else log files (``--log-file``); every recognised message is
listed once with how often it appeared. Where neither is available it says so and exits 0.
"""
import os
import re
import sys
import json
import shutil
import subprocess

from skb.tool.style import Style, fail
from skb.tool.doctor import command as doctor_command
from skb.tool.doctor.findings import SEVERITIES
from skb.tool.doctor.files import BadFile, read_regular

INPUT_LIMIT = 1 << 20
JOURNAL_UNITS = ("containerd", "crio", "kubelet")
JOURNAL_SINCE = "-2h"
JOURNAL_LINES = 5000
JOURNAL_TIMEOUT = 10.0
LOG_FILES = ("/var/log/containerd.log", "/var/log/crio.log", "/var/log/kubelet.log", "/var/log/syslog",
             "/var/log/messages")
LOG_TAIL = 4 << 20        # bytes read from the end of a log file
GROUPS = ("version", "status", "node", "leaks")

# finding codes by topic
CONF = ("no-config", "invalid-json", "load-error", "wrong-extension", "no-plugins", "skipped-entry",
        "unreadable-entry", "default-network", "several-networks", "shadowed", "runtime-dirs-disagree",
        "runtime-config-invalid", "runtime-config-ignored")
BINS = ("plugin-missing", "plugin-elsewhere", "plugin-not-executable", "runtime-dirs-disagree",
        "runtime-config-invalid", "runtime-config-ignored")
VERSIONS = ("version-unsupported", "version-failed", "no-cniversion")
RUN = ("probe-failed", "probe-no-ip", "probe", "probe-skipped", "forwarding-off")


class Pattern:
    __slots__ = ("key", "regex", "title", "meaning", "codes", "groups", "inner")

    def __init__(self, key, regex, title, meaning, codes=(), groups=(), inner=None):
        self.key = key
        self.regex = re.compile(regex, re.IGNORECASE | re.DOTALL)
        self.title = title
        self.meaning = meaning
        self.codes = tuple(codes)
        self.groups = tuple(groups)     # doctor check groups that must run (GROUPS)
        self.inner = inner              # name of the group holding a wrapped message to explain as well


PATTERNS = (
    Pattern("not-ready-status",
            r"NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: (?P<msg>.+)",
            "kubelet: the runtime reports its network as not ready (the node is NotReady)",
            "kubelet asks the runtime for its status every few seconds; the runtime answers NetworkReady=false "
            "with the text after 'Network plugin returns error:'. With containerd 2 and a network of cniVersion "
            "1.1.0 that text can come from a plugin failing CNI STATUS (its daemon or datastore is down); "
            "otherwise it is the runtime's own reason, usually that it loaded no network configuration. New "
            "pods are not scheduled on the node until it clears.",
            CONF + BINS + ("status-failed",), ("status",), "msg"),
    Pattern("cni-config-uninitialized", r"cni config uninitiali[sz]ed",
            "the runtime has no usable CNI network configuration",
            "containerd (and dockershim before it) found no network configuration it could load in its CNI "
            "conf dir. Usual causes: the network add-on has not written its config yet (it is normal for a "
            "few seconds after a node joins), the file is in another directory than the runtime's conf_dir, "
            "it has an extension libcni ignores, or a file in the directory does not parse, which aborts the "
            "whole load.", CONF),
    Pattern("cni-plugin-not-initialized", r"cni plugin not initiali[sz]ed",
            "containerd's CRI has not loaded a CNI network",
            "containerd's CRI answers this until a load of its conf dir succeeds: the directory is empty or "
            "missing, every candidate file fails to load (one invalid file makes the whole load fail), or the "
            "config names a plugin containerd cannot find. containerd reloads when the directory changes; the "
            "doctor below shows which file is at fault.", CONF + BINS + VERSIONS),
    Pattern("no-networks-found", r"No networks found in (?P<dir>\S+)|No CNI configuration file in (?P<dir2>\S+)",
            "no network configuration file in the conf dir",
            "The runtime (CRI-O's ocicni, or a meta-plugin such as multus) looked in the directory named and "
            "found no .conf, .conflist or .json file it could load. Usual causes: the network add-on has not "
            "started, it writes to another directory than the runtime reads (CRI-O: network_dir), or the "
            "file's extension or content is wrong.", CONF),
    Pattern("missing-default-network", r"Missing CNI default network",
            "CRI-O: no default network",
            "CRI-O (ocicni) found no network to use for pods: none loaded from its network_dir, or "
            "cni_default_network names a network no file defines. A network_dir pointing elsewhere than where "
            "the add-on writes its config gives the same message.", CONF),
    Pattern("cni-config-load-failed", r"cni config load failed|failed to load cni config",
            "containerd could not load its CNI configuration",
            "A file in the conf dir failed to load; libcni stops at the first failure, so one bad file (invalid "
            "JSON, a conflist without plugins, a FIFO or a directory named like a config) hides every network.",
            CONF),
    Pattern("no-plugins-key", r"no 'plugins' key|no plugin configs found",
            "a .conflist without a plugins list",
            "libcni read a .conflist that has no 'plugins' array (before libcni 1.3: \"no 'plugins' key\"; since: "
            "\"no plugin configs found\"). Usually a single-plugin config saved under the .conflist extension: "
            "rename it to .conf, or wrap the object in {\"plugins\": [...]}.", CONF),
    Pattern("plugin-not-found", r'failed to find plugin "(?P<plugin>[^"]*)" in path \[(?P<path>[^\]]*)\]',
            "a plugin executable is not in the runtime's plugin dirs",
            "libcni looked for the plugin named by a config's \"type\" (or ipam.type) in each directory listed "
            "and found no file of that name. Usual causes: the plugin is not installed, it is installed in "
            "another directory than the runtime's bin_dir / bin_dirs / plugin_dirs (Debian's packages use "
            "/usr/lib/cni, most add-ons /opt/cni/bin), or the type is misspelt.", BINS),
    Pattern("network-info", r"failed to find network info for sandbox",
            "containerd: the pod network's result has no IP for the pod's interface",
            "After ADD, containerd's CRI looks up the addresses of the interface it asked for (eth0) in the "
            "result; this message means the result had none there: the chain's last plugin dropped the "
            "prevResult, the IPAM returned no address, or the ips point (by interface index) at another "
            "interface (the host side). skb doctor --probe runs the ADD in scratch namespaces and shows the "
            "result.", CONF + BINS + RUN),
    Pattern("statfs-proc", r'failed to Statfs "(?P<path>/proc/(?P<pid>\d+)(?:/task/\d+)?/ns/net)"',
            "the container's network namespace was gone when the plugin ran",
            "The runtime passed CNI_NETNS as /proc/<pid>/ns/net and that process had already exited: the "
            "sandbox died (or was killed) before its network was set up, or this is a DEL for a container that "
            "is long gone. A PID can be reused: a later DEL through such a path may reach another process's "
            "namespace (the reference loopback's DEL set the node's lo down this way). Usually transient; if "
            "it repeats, look at why sandboxes die (OOM, runtime restarts).", ("host-lo-down", "leaked-reservation"),
            ("node", "leaks")),
    Pattern("statfs", r'failed to Statfs "(?P<path>[^"]+)"',
            "the network namespace path does not exist",
            "A plugin could not open CNI_NETNS: the named namespace was deleted (or never created) before the "
            "call. For ADD the runtime is racing its own cleanup; for DEL most plugins treat it as done.",
            ("leaked-reservation",), ("leaks",)),
    Pattern("plugin-failed", r'plugin type="(?P<plugin>[^"]*)"(?: name="[^"]*")? failed \((?P<verb>[a-z]+)\): '
                             r'(?P<rest>.+)',
            "a plugin of the chain failed",
            "libcni ran the network's plugins in order and the plugin named failed for the command named (add, "
            "delete, check); what follows the colon is the plugin's own error (its msg and details). The "
            "plugin's message is explained below when it is a known one.", BINS + VERSIONS + ("status-failed",),
            ("version",), "rest"),
    Pattern("incompatible-versions", r"incompatible CNI versions|does not support (?:the )?config version",
            "the config's cniVersion is one the plugin does not speak",
            "The plugin was given a cniVersion it does not list in its supportedVersions (error code 1). Usual "
            "causes: a config written for a newer spec (1.1.0) with older plugins (the Go plugins before v1.6.0 "
            "stop at 1.0.0), or a missing cniVersion (read as 0.1.0) with a plugin that dropped it. podman "
            "silently drops such networks.", VERSIONS + BINS, ("version",)),
    Pattern("duplicate-allocation", r"(?P<address>\S+) has been allocated to (?P<container>\S+), duplicate allocation is not "
                                    r"allowed|duplicate allocation is not allowed",
            "host-local: this container already holds an address",
            "host-local found a reservation file for the same container ID and interface: an earlier ADD "
            "succeeded (or half succeeded) and no DEL released it, and the runtime is now retrying ADD. Usual "
            "causes: a runtime restart between ADD and DEL, a DEL that failed, or a state dir restored from a "
            "backup. skb gc releases what no live attachment holds.", ("leaked-reservation",), ("leaks",)),
    Pattern("range-full", r"no IP addresses available in range set(?:: (?P<range>\S+))?",
            "host-local: the address range is exhausted",
            "Every address of the range set is reserved. On a node that runs far fewer pods than the range "
            "holds, the reservations are leaked: containers whose DEL never ran (runtime crashes, a cleared "
            "result cache). The doctor lists the leaked reservations; skb gc frees them.",
            ("leaked-reservation",), ("leaks",)),
    Pattern("allocate-range", r"failed to allocate for range (?P<range_set>\d+): (?P<rest>.+)",
            "host-local could not allocate from a range set",
            "host-local tried the range set numbered (counting the ranges in the config from 0) and failed for "
            "the reason after the colon, explained below when it is a known one.", ("leaked-reservation",),
            ("leaks",), "rest"),
    Pattern("sandbox-setup", r'failed to (?:setup|set up) (?:sandbox container "(?P<container>[0-9a-f]+)" )?network '
                             r'(?:for (?:sandbox|pod) "(?P<sandbox>[^"]+)")?[^:]*: (?P<rest>.+)',
            "the runtime's ADD for a pod sandbox failed",
            "The runtime (containerd's CRI, CRI-O, or dockershim) ran ADD of the pod network for a new sandbox "
            "and it failed; the pod stays in ContainerCreating and kubelet retries with a new sandbox. The "
            "cause is the message after the colon, explained below when it is a known one.", CONF + BINS,
            ("version",), "rest"),
    Pattern("sandbox-destroy", r'failed to destroy network for sandbox "(?P<sandbox>[^"]+)": (?P<rest>.+)',
            "the runtime's DEL for a pod sandbox failed",
            "StopPodSandbox ran DEL of the pod network and it failed; kubelet retries, and the pod's address "
            "stays reserved until a DEL succeeds. A cached result that no longer parses (\"failed to get "
            "network cached result\") or a config changed since the ADD are the usual causes.",
            VERSIONS + ("leaked-reservation",), ("version", "leaks"), "rest"),
    Pattern("netplugin-no-message", r"netplugin failed(?: with no error message| but error parsing its diagnostic "
                                    r"message)?",
            "a plugin failed without a CNI error on stdout",
            "The plugin exited non-zero and did not print a CNI error object: it crashed, was killed (a "
            "timeout), is not a CNI plugin (a wrapper script, the wrong architecture), or printed text instead "
            "of JSON.", BINS + ("version-failed",), ("version",)),
    Pattern("exec-failed", r"fork/exec (?P<path>\S+): (?:permission denied|exec format error|no such file)",
            "the plugin file could not be executed",
            "libcni found the file but the kernel refused to run it: not executable (chmod 755), built for "
            "another architecture, or a script whose interpreter is missing.", BINS, ("version",)),
)


def _unescape(text):
    """Log lines quote messages: \\" (or \\\\\\") stands for "."""
    for _ in range(3):
        new = text.replace('\\\\\\"', '"').replace('\\"', '"')
        if new == text:
            break
        text = new
    return text


def match(text, depth=0):
    """[(pattern, match)]: the outermost recognised message (the one that starts first; ties go to the
    earlier entry of PATTERNS), then, through its wrapped part, the messages it wraps."""
    text = _unescape(text)
    best = None
    for p in PATTERNS:
        m = p.regex.search(text)
        if m and (best is None or m.start() < best[1].start()):
            best = (p, m)
    if best is None:
        return []
    p, m = best
    out = [best]
    if p.inner and depth < 4 and m.group(p.inner):
        out += [x for x in match(m.group(p.inner), depth + 1) if x[0].key != p.key]
    return out


def _paragraph(p, m):
    details = {k: v for k, v in m.groupdict().items() if v and k not in ("rest", "msg")}
    extra = ("; " + ", ".join(f"{k.replace('_', ' ').rstrip('2')}: {v}" for k, v in details.items())) if details else ""
    return f"{p.title}{extra}.\n  {p.meaning}"


def explain_text(text, opts, out):
    """Print the explanation and the doctor's findings that apply; the exit status."""
    style = Style.for_stream(out, opts.color)
    matched = match(text)
    if not matched:
        if not opts.json:
            print(f"{style.bold('skb explain')}: this message is not one skb knows: "
                  f"{' '.join(text.split())[:300]!r}", file=out)
            print("Running the whole doctor:", file=out)
        return _doctor(opts, None, (), style, out)
    explained = [{"pattern": p.key, "title": p.title, "meaning": p.meaning,
                  "matched": {k: v for k, v in m.groupdict().items() if v}} for p, m in matched]
    if not opts.json:
        for i, (p, m) in enumerate(matched):
            lead = style.bold("skb explain") if i == 0 else style.dim("  wrapped")
            print(f"{lead}: {_paragraph(p, m)}", file=out)
    codes = {c for p, _m in matched for c in p.codes}
    groups = {g for p, _m in matched for g in p.groups}
    return _doctor(opts, codes, groups, style, out, explained)


def _doctor(opts, codes, groups, style, out, explained=None):
    skip = () if codes is None else tuple(g for g in GROUPS if g not in groups)
    findings, views = doctor_command.run(opts, skip=skip)
    if codes is not None:
        findings = [f for f in findings if f.code in codes]
    problems = [f for f in findings if f.severity != "note"]
    if opts.json:
        print(json.dumps({"explained": explained or [],
                          "problems": [f.to_dict() for f in problems],
                          "notes": [f.to_dict() for f in findings if f.severity == "note"],
                          "checked": [v.to_dict() for v in views]}, indent=2), file=out)
    elif codes is not None and not findings:
        print(f"The doctor's checks that apply ({', '.join(sorted(codes))}) found nothing on this node.", file=out)
    else:
        if codes is not None:
            print("What the doctor finds on this node:", file=out)
        doctor_command.report(sorted(findings, key=lambda f: SEVERITIES.index(f.severity)), views, style, out)
    return 1 if problems else 0


# ---------------------------------------------------------------------------------------------------
# --journal

def journal_lines(opts):
    """(source, lines) of the runtimes' recent log, or (None, reason) when none is available."""
    journalctl = shutil.which("journalctl")
    if journalctl and not opts.log_file:
        argv = [journalctl, "--no-pager", "-o", "cat", "--since", JOURNAL_SINCE, "-n", str(JOURNAL_LINES)]
        for unit in JOURNAL_UNITS:
            argv += ["-u", unit]
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=JOURNAL_TIMEOUT)
        except (OSError, subprocess.SubprocessError) as e:
            reason = f"journalctl failed: {e}"
        else:
            data = p.stdout[-LOG_TAIL:]
            if p.returncode == 0 and data.strip():
                return f"journalctl -u {' -u '.join(JOURNAL_UNITS)} --since {JOURNAL_SINCE}", \
                    data.decode("utf-8", "replace").splitlines()
            reason = (f"journalctl exited {p.returncode}: {p.stderr.decode('utf-8', 'replace').strip()[:200]}"
                      if p.returncode else "journalctl has no recent entries for " + ", ".join(JOURNAL_UNITS))
    else:
        reason = "no journalctl on PATH" if not opts.log_file else ""
    tried = []
    for path in opts.log_file or LOG_FILES:
        try:
            fd_data = _tail(path)
        except BadFile as e:
            tried.append(str(e))
            continue
        return path, fd_data.decode("utf-8", "replace").splitlines()
    return None, "; ".join(x for x in [reason] + tried if x)


def _tail(path):
    """The last LOG_TAIL bytes of a regular file."""
    from skb.tool.doctor.files import open_regular
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, LOG_TAIL, max(0, size - LOG_TAIL))
    except OSError as e:
        raise BadFile(path, (e.strerror or str(e)).lower()) from None
    finally:
        os.close(fd)


def explain_journal(opts, out):
    style = Style.for_stream(out, opts.color)
    source, lines = journal_lines(opts)
    if source is None:
        print(f"skb explain --journal: no runtime log to read ({lines}); skipped. Pass the message itself: "
              "skb explain 'TEXT', or a log file with --log-file FILE.", file=out)
        return 0
    seen = {}
    for line in lines:
        for p, m in match(line)[:1]:
            entry = seen.setdefault(p.key, [p, m, 0, line])
            entry[2] += 1
            entry[1], entry[3] = m, line
    if not seen:
        print(f"skb explain: no known CNI error in {source} ({len(lines)} lines read).", file=out)
        return 0
    print(f"skb explain: {len(seen)} kind{'s' if len(seen) != 1 else ''} of CNI error in {source}:", file=out)
    codes, groups = set(), set()
    for p, m, count, line in seen.values():
        print(f"- {style.bold(p.title)} ({count} time{'s' if count != 1 else ''}); last: "
              f"{' '.join(_unescape(line).split())[:400]}", file=out)
        for q, qm in match(line):
            print(f"  {_paragraph(q, qm)}", file=out)
            codes.update(q.codes)
            groups.update(q.groups)
    return _doctor(opts, codes, groups, style, out)


# ---------------------------------------------------------------------------------------------------
# the command

def _read_stdin():
    try:
        data = sys.stdin.buffer.read(INPUT_LIMIT + 1)
    except (OSError, ValueError, AttributeError) as e:
        raise BadFile("stdin", str(e)) from None
    if len(data) > INPUT_LIMIT:
        raise BadFile("stdin", f"more than {INPUT_LIMIT} bytes: pass the message, not a whole log (or use --journal)")
    return data.decode("utf-8", "replace")


def command(opts):
    doctor_command.safe_stdout()
    try:
        if opts.journal:
            return explain_journal(opts, sys.stdout)
        if opts.file:
            if opts.text:
                return fail("skb explain", "give the message either as TEXT or with --from-file, not both", opts)
            text = read_regular(opts.file, INPUT_LIMIT).decode("utf-8", "replace")
        elif opts.text in ([], ["-"]):
            if opts.text == [] and (sys.stdin is None or sys.stdin.isatty()):
                return fail("skb explain", "give the message as an argument, '-' to read it from stdin, or --journal",
                            opts)
            text = _read_stdin()
        else:
            text = " ".join(opts.text)
    except BadFile as e:
        return fail("skb explain", f"cannot read {e}", opts)
    if not text.strip():
        return fail("skb explain", "the message is empty", opts)
    return explain_text(text, opts, sys.stdout)


EPILOG = """\
Recognises the CNI errors printed by kubelet, containerd, CRI-O, podman, libcni and the reference
plugins (e.g. "cni plugin not initialized", 'failed to find plugin "ptp" in path [...]', "no IP
addresses available in range set", NetworkPluginNotReady), says in one paragraph what the message means
and its usual causes, then runs the doctor's checks that apply (the options below are the doctor's) and
prints their findings. A message wrapping another (containerd's "failed to setup network for sandbox",
libcni's 'plugin type="X" failed (add)') is explained layer by layer. Unknown text: the whole doctor
runs. Exit status 1 when a check finds a problem.

examples:
  skb explain 'failed to find plugin "ptp" in path [/opt/cni/bin]'
  kubectl describe pod web-0 | grep FailedCreatePodSandBox | skb explain -
  skb explain --journal
  skb explain --journal --log-file /var/log/containerd.log"""


def add_parser(sub, formatter, parents=()):
    e = sub.add_parser("explain", parents=list(parents), help="explain a CNI error message and check its causes",
                       description="Explain a CNI error message from kubelet, a runtime, libcni or a plugin, and "
                                   "run the doctor checks that apply.", epilog=EPILOG, formatter_class=formatter)
    e.add_argument("text", nargs="*", metavar="TEXT", help="the message ('-' or nothing: read it from stdin)")
    e.add_argument("--from-file", dest="file", metavar="FILE", help="read the message from a file")
    e.add_argument("--journal", action="store_true",
                   help="read the runtimes' recent log (journalctl -u containerd -u crio -u kubelet, else log files)")
    e.add_argument("--log-file", action="append", metavar="FILE",
                   help="with --journal: read this log file instead of the journal (repeatable)")
    e.add_argument("--json", action="store_true", help="the findings as JSON (after the explanation)")
    doctor_command.add_options(e)
    e.set_defaults(func=command, json=False)
    return e
