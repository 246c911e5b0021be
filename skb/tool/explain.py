"""``skb explain``: what a CNI error message from kubelet, a runtime, libcni, a plugin or a network add-on
means, what on this node causes it, what to check and how to fix it.

The messages are data: ``skb.tool.catalogue`` (each entry cites the message shape it matches, with a
cause, checks and a fix in this project's words, filled with the values the message carried). A message
that wraps another (containerd's "failed to setup network for sandbox", libcni's 'plugin type="X"
failed (add)', kubelet's NetworkPluginNotReady) is explained and then the message it wraps, layer by
layer; messages that follow one another on a line (a setup error, then the cleanup's) are explained in
turn. After the explanation the doctor checks that apply run and their findings are printed; text that
matches nothing is said to be unknown and the whole doctor runs.

``--journal`` reads the runtimes' recent log: ``journalctl`` (bounded in time, lines, bytes and seconds)
for the containerd, crio and kubelet units, else the usual log files; every recognised message is listed
once with how often it appeared. Where neither is available it says so and exits 0. ``--log-file FILE``
(repeatable, implies ``--journal``) reads those files instead: one that cannot be read is an error.
"""
import os
import sys
import json
import shutil
import subprocess

from skb.tool.style import Style, fail, shell_word, visible
from skb.tool.catalogue import ENTRIES, Values, fill
from skb.tool.doctor import command as doctor_command
from skb.tool.doctor.findings import SEVERITIES
from skb.tool.doctor.files import BadFile, open_regular, read_regular

INPUT_LIMIT = 1 << 20
JOURNAL_UNITS = ("containerd", "crio", "kubelet")
JOURNAL_SINCE = "-2h"
JOURNAL_LINES = 5000
JOURNAL_TIMEOUT = 10.0
LOG_FILES = ("/var/log/containerd.log", "/var/log/crio.log", "/var/log/kubelet.log", "/var/log/syslog",
             "/var/log/messages")
LOG_TAIL = 4 << 20        # bytes read from the end of a log file
GROUPS = ("version", "status", "node", "leaks")
MAX_DEPTH = 8             # layers of wrapping followed
MAX_CHAINS = 4            # messages explained one after the other in one text


class Layer:
    """One explained message: its entry, the shape that matched, the match, the values for its texts,
    and how it relates to the one before ("", "wrapped", "also")."""

    __slots__ = ("entry", "shape", "m", "values", "how")

    def __init__(self, entry, shape, m, values, how):
        self.entry, self.shape, self.m, self.values, self.how = entry, shape, m, values, how

    @property
    def key(self):
        return self.entry.key

    def title(self):
        return fill(self.entry.title, self.values)

    def cause(self):
        return fill(self.entry.cause, self.values)

    def checks(self):
        # Commands to copy into a shell: each value the message carried is quoted word by word (a list of
        # dirs stays several words), so that "$(...)" or ";" in a message is never run by the copy.
        quoted = Values({k: " ".join(shell_word(w) for w in str(v).split()) for k, v in self.values.items()})
        return [fill(c, quoted) for c in self.entry.checks]

    def fix(self):
        return fill(self.entry.fix, self.values)

    def matched(self):
        return {k: v for k, v in self.m.groupdict().items() if v}

    def to_dict(self):
        return {"pattern": self.key, "family": self.entry.family, "shape": self.shape, "layer": self.how or "outer",
                "title": self.title(), "meaning": self.cause(), "checks": self.checks(), "fix": self.fix(),
                "matched": self.matched()}


def _unescape(text):
    """Log lines quote messages: \\" (or \\\\\\") stands for "."""
    for _ in range(3):
        new = text.replace('\\\\\\"', '"').replace('\\"', '"')
        if new == text:
            break
        text = new
    return text


def _first(text, skip):
    """(entry, match, shape) of the message that starts first in ``text`` (ties: the earlier entry)."""
    best = None
    for e in ENTRIES:
        if e.key in skip:
            continue
        found = e.search(text)
        if found and (best is None or found[0].start() < best[1].start()):
            best = (e, found[0], found[1])
    return best


def _chain(text, start, end, context, layers, how, depth):
    """Explain the first known message in text[start:end] and what it wraps; the offset where the last
    message explained ends (None when nothing is known there)."""
    found = _first(text[start:end], {layer.key for layer in layers})
    if found is None:
        return None
    entry, m, shape = found
    values = Values(context)
    values.update(entry.defaults)
    groups = {k: v for k, v in m.groupdict().items() if v}
    values.update({k: v for k, v in groups.items() if k != "rest"})
    if entry.derive:         # it may read the wrapped message too (libcni's reason, without the runtime's words)
        values.update(entry.derive(Values(values, **groups)))
    layers.append(Layer(entry, shape, m, values, how))
    if m.groupdict().get("rest") and depth < MAX_DEPTH:
        inner = _chain(text, start + m.start("rest"), start + m.end("rest"), values, layers, "wrapped", depth + 1)
        return inner if inner is not None else start + m.end()
    return start + m.end()


def match(text):
    """[Layer]: the outermost known message, the ones it wraps in order, then the next messages of the
    text after the last one explained (each entry once)."""
    text = _unescape(text)
    layers, at = [], 0
    for n in range(MAX_CHAINS):
        after = _chain(text, at, len(text), {}, layers, "also" if n else "", 0)
        if after is None or after <= at:
            break
        at = after
    return layers


def _paragraph(layer, indent="  "):
    """The layer for a terminal: what the message carried is escaped (``visible``), as the doctor, skb log and
    skb replay print it; the checks are already printable (``shell_word``)."""
    lines = [f"{visible(layer.title())}.", f"{indent}{visible(layer.cause())}"]
    lines += [f"{indent}check: {visible(c)}" for c in layer.checks()]
    if layer.fix():
        lines.append(f"{indent}fix: {visible(layer.fix())}")
    return "\n".join(lines)


def explain_text(text, opts, out):
    """Print the explanation and the doctor's findings that apply; the exit status."""
    style = Style.for_stream(out, opts.color)
    layers = match(text)
    if not layers:
        if not opts.json:
            print(f"{style.bold('skb explain')}: this message is not one skb knows: "
                  f"{' '.join(text.split())[:300]!r}", file=out)
            print("Running the whole doctor:", file=out)
        return _doctor(opts, None, (), style, out)
    if not opts.json:
        for layer in layers:
            lead = style.bold("skb explain") if not layer.how else style.dim(f"  {layer.how}")
            print(f"{lead}: {_paragraph(layer, '    ' if layer.how else '  ')}", file=out)
    codes = {c for layer in layers for c in layer.entry.codes}
    groups = {g for layer in layers for g in layer.entry.groups}
    return _doctor(opts, codes, groups, style, out, [layer.to_dict() for layer in layers])


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
        shown = ", ".join(sorted(codes)) or "none"
        print(f"The doctor's checks that apply ({shown}) found nothing on this node.", file=out)
    else:
        if codes is not None:
            print("What the doctor finds on this node:", file=out)
        doctor_command.report(sorted(findings, key=lambda f: SEVERITIES.index(f.severity)), views, style, out)
    return 1 if problems else 0


# ---------------------------------------------------------------------------------------------------
# --journal

def journal_lines(opts):
    """(source, lines) of the runtimes' recent log, or (None, reason) when none is available. Files
    given with --log-file are read, each of them: one that cannot be read is a BadFile (a typo must not
    look like a clean log)."""
    if opts.log_file:
        lines = []
        for path in opts.log_file:
            lines += _tail(path).decode("utf-8", "replace").splitlines()
        return ", ".join(opts.log_file), lines
    journalctl = shutil.which("journalctl")
    if journalctl:
        # short-iso, not cat: the unit's name on each line (crio[700]:) is what tells CRI-O's ocicni from
        # podman where both print the same words
        argv = [journalctl, "--no-pager", "-o", "short-iso", "--since", JOURNAL_SINCE, "-n", str(JOURNAL_LINES)]
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
        reason = "no journalctl on PATH"
    tried = []
    for path in LOG_FILES:
        try:
            fd_data = _tail(path)
        except BadFile as e:
            tried.append(str(e))
            continue
        return path, fd_data.decode("utf-8", "replace").splitlines()
    return None, "; ".join(x for x in [reason] + tried if x)


def _tail(path):
    """The last LOG_TAIL bytes of a regular file."""
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
    seen = {}                   # first entry's key -> [layers of the last such line, count, line]
    for line in lines:
        layers = match(line)
        if layers:
            entry = seen.setdefault(layers[0].key, [layers, 0, line])
            entry[1] += 1
            entry[0], entry[2] = layers, line
    if not seen:
        print(f"skb explain: no known CNI error in {source} ({len(lines)} lines read).", file=out)
        return 0
    print(f"skb explain: {len(seen)} kind{'s' if len(seen) != 1 else ''} of CNI error in {source}:", file=out)
    codes, groups = set(), set()
    for layers, count, line in seen.values():
        print(f"- {style.bold(visible(layers[0].title()))} ({count} time{'s' if count != 1 else ''}); last: "
              f"{visible(' '.join(_unescape(line).split())[:400])}", file=out)
        for layer in layers:
            print(f"  {_paragraph(layer, '    ')}", file=out)
            codes.update(layer.entry.codes)
            groups.update(layer.entry.groups)
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
        if opts.log_file and (opts.text or opts.file):
            return _usage_error(opts, "--log-file reads the runtimes' log (it implies --journal): give it or a "
                                      "message to explain, not both")
        if opts.journal or opts.log_file:
            return explain_journal(opts, sys.stdout)
        if opts.file:
            if opts.text:
                return fail("skb explain", "give the message either as TEXT or with --from-file, not both", opts)
            text = read_regular(opts.file, INPUT_LIMIT).decode("utf-8", "replace")
        elif opts.text in ([], ["-"]):
            if opts.text == [] and (sys.stdin is None or sys.stdin.isatty()):
                return _usage_error(opts, "give the message as an argument, '-' to read it from stdin, or --journal")
            text = _read_stdin()
        else:
            text = " ".join(opts.text)
    except BadFile as e:
        return fail("skb explain", f"cannot read {e}", opts)
    if not text.strip():
        return _usage_error(opts, "the message is empty (or only blanks): give the error message to explain")
    return explain_text(text, opts, sys.stdout)


def _usage_error(opts, msg):
    """A usage error as argparse reports one: the subcommand's usage, the reason, exit status 2."""
    sys.stderr.write(getattr(opts, "explain_usage", ""))
    fail("skb explain", msg, opts)
    return 2


EPILOG = """\
Recognises the CNI errors printed by kubelet, containerd, CRI-O, podman, libcni, the reference plugins
and the network add-ons behind them (flannel, Calico, AWS VPC CNI, Multus): e.g. "cni plugin not
initialized", 'failed to find plugin "ptp" in path [...]', "incompatible CNI versions", "no IP addresses
available in range set", NetworkPluginNotReady, "loadFlannelSubnetEnv failed". For each it says what
the message means with the values it carries (plugin, versions, paths), what to check and the fix, then
runs the doctor's checks that apply (the options below are the doctor's) and prints their findings. A
message wrapping another (containerd's "failed to setup network for sandbox", libcni's 'plugin
type="X" failed (add)') is explained layer by layer. Unknown text: the whole doctor runs. Exit status 1
when a check finds a problem, 2 when no message is given (an empty one included).

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
                   help="read this log file instead of the journal (repeatable; implies --journal; a file "
                        "that cannot be read is an error)")
    e.add_argument("--json", action="store_true", help="the findings as JSON (after the explanation)")
    doctor_command.add_options(e)
    e.set_defaults(func=command, json=False, explain_usage=e.format_usage())
    return e
