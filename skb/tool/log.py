"""``skb log``: list the calls in a debug log or capture, one line per call; ``--follow`` tails it live.

Reads the JSON lines a plugin writes with ``skbDebugLog`` / ``SKB_DEBUG_LOG`` and the debug plugin's
``captureFile`` (the same record), or the reference debug plugin's ``cniOutput`` text. Records are
numbered as ``skb replay -n`` counts them. A record is untrusted input: any field may have any type.

The file is opened without blocking and must be a regular file (a FIFO or a device is refused with one
line, never waited on or read without end); lines longer than LINE_LIMIT are skipped with a note.
``--follow`` polls: it notices truncation (starts again from the top) and rotation (the path names a new
file: the old one is read to its end first, then the new one from its start).
"""
import os
import sys
import json
import time
import stat

from skb.tool import argtypes
from skb.tool.style import Style, fail, visible
from skb.linux.files import kind_name
from skb.tool.doctor.files import BadFile, open_regular

LINE_LIMIT = 16 << 20          # one record (a config with a large prevResult is far smaller)
TEXT_LIMIT = 64 << 20          # the reference text format is parsed whole
CHUNK = 1 << 20
POLL = 0.2                     # seconds between looks at a followed file
_TEXT_COMMANDS = {"CmdAdd": "ADD", "CmdDel": "DEL", "CmdCheck": "CHECK", "CmdStatus": "STATUS", "CmdGC": "GC"}
_TEXT_FIELDS = {"ContainerID": "CNI_CONTAINERID", "Netns": "CNI_NETNS", "IfName": "CNI_IFNAME",
                "Args": "CNI_ARGS", "Path": "CNI_PATH"}
_SEPARATOR = "----------------------"


def parse_text_records(text):
    """The reference debug plugin's cniOutput: blocks of ``CmdAdd``, ``Key: value`` lines, the stdin
    (to the separator line), ``----------------------``."""
    records = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        head = lines[i].strip()
        if head not in _TEXT_COMMANDS:
            i += 1
            continue
        command = _TEXT_COMMANDS[head]
        env = {"CNI_COMMAND": command}
        i += 1
        stdin = None
        while i < len(lines):
            line = lines[i]
            key, sep, value = line.partition(": ")
            if not sep and line.endswith(":"):
                key, value, sep = line[:-1], "", ":"
            if key == "StdinData":
                body = [value]
                i += 1
                while i < len(lines) and lines[i] != _SEPARATOR:
                    body.append(lines[i])
                    i += 1
                stdin = "\n".join(body)
                break
            if key in _TEXT_FIELDS:
                env[_TEXT_FIELDS[key]] = value
            i += 1
        i += 1
        records.append({"command": command, "env": env, "stdin": stdin.rstrip("\n") if stdin else "",
                        "plugin": "", "format": "cniOutput"})
    return records




def stdout_closed():
    """After BrokenPipeError (``skb log | head -1``): stdout points at /dev/null, so that nothing more is
    written to the closed pipe (not even at exit). Returns the exit status for it, a shell's for SIGPIPE."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass
    return 141



EPILOG = """\
Reads the JSON lines written by a plugin's skbDebugLog / SKB_DEBUG_LOG and by the debug plugin's
captureFile (the same record), or the reference debug plugin's cniOutput text. Records are numbered for
skb replay -n. A call made with W3C trace context (TRACEPARENT, TRACESTATE in the plugin's environment, as
newer libcni passes them) shows trace=<traceparent>, to match it with the runtime's trace.

--follow prints the last --lines records (default 10), then each new call as it is written, until
interrupted; it keeps going when the file is truncated or rotated. --json prints each record as one JSON
line, {"number": N, "record": {...}}, with --follow too.

examples:
  skb log /var/log/skb-cni.jsonl
  skb log -v /tmp/capture.jsonl
  skb log --follow /var/log/skb-cni.jsonl
  skb log --json /var/log/skb-cni.jsonl | jq -c 'select(.record.exitCode != 0)'"""


def _s(v):
    """A field for display: strings as they are, anything else as compact JSON."""
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    try:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(v)


def _one_line(v):
    """A field on one line, every control character shown as an escape: never a terminal's command."""
    return visible(" ".join(_s(v).split()))


def _block(v):
    """A multi-line field: escaped as ``_one_line``'s but tabs and newlines, its later lines indented
    (never at the start of a line, where a record's number is)."""
    return visible(_s(v).strip(), "\n\t").replace("\n", "\n      ")


def trace_of(rec):
    """(traceparent, tracestate) recorded with a call, '' when absent."""
    trace = rec.get("trace") if isinstance(rec.get("trace"), dict) else {}
    return _s(trace.get("traceparent")), _s(trace.get("tracestate"))


def format_record(n, rec, style, verbose=False):
    """The lines shown for record ``n``."""
    env = rec.get("env") if isinstance(rec.get("env"), dict) else {}
    code = rec.get("exitCode")
    recorded = "exitCode" in rec
    ok = code == 0 or not recorded        # cniOutput text records no outcome
    status = style.red(f"FAILED (exit {_one_line(code)})") if not ok else \
        style.green("ok") if recorded else "(outcome not recorded)"
    command = _s(rec.get("command")) or _s(env.get("CNI_COMMAND")) or "?"
    parent, state = trace_of(rec)
    line = (f"#{n} {_one_line(rec.get('time')) or '?'} {_one_line(rec.get('plugin')) or '?'} {style.bold(_one_line(command))} "
            f"container={_one_line(env.get('CNI_CONTAINERID'))} ifname={_one_line(env.get('CNI_IFNAME'))} "
            f"netns={_one_line(env.get('CNI_NETNS'))} {status}")
    duration = rec.get("durationMs")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool):
        line += f" {duration} ms"
    if parent:
        line += f" trace={_one_line(parent)}"
    out = [line]
    if not ok or verbose:
        for key in ("stdin", "stdout", "stderr"):
            if rec.get(key):
                out.append(f"    {key}: {_block(rec[key])}")
        if verbose and state:
            out.append(f"    tracestate: {_one_line(state)}")
    return out


def record_lines(n, rec, style, opts):
    """The lines printed for record ``n``: one JSON line with --json, else format_record's."""
    if getattr(opts, "json", False):
        # (ASCII: a C1 or bidirectional control in a record reaches the terminal escaped, as \u009b)
        return [json.dumps({"number": n, "record": rec}, separators=(",", ":"))]
    return format_record(n, rec, style, opts.verbose)


def _record(line):
    """A JSON-lines record, or None (with the reason) for a line that is not one."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return None, "not a JSON line"
    if not isinstance(rec, dict):
        return None, "not a JSON object"
    return rec, ""


class Reader:
    """Lines of a regular file read in bounded chunks from an open descriptor; keeps a partial last
    line until its newline arrives."""

    def __init__(self, path, fd):
        self.path = path
        self.fd = fd
        self.pos = 0
        self.buf = b""
        self.skipping = False       # inside a line longer than LINE_LIMIT
        self.ino = os.fstat(fd).st_ino

    def lines(self):
        """Complete lines available now (bytes, without newline); notes for skipped ones as str."""
        out = []
        while True:
            try:
                chunk = os.pread(self.fd, CHUNK, self.pos)
            except OSError as e:
                raise BadFile(self.path, (e.strerror or str(e)).lower()) from None
            if not chunk:
                return out
            self.pos += len(chunk)
            data = self.buf + chunk
            parts = data.split(b"\n")
            self.buf = parts.pop()
            for part in parts:
                if self.skipping:
                    self.skipping = False
                elif len(part) > LINE_LIMIT:     # (whole in one chunk: skipped all the same)
                    out.append(f"a line longer than {LINE_LIMIT} bytes, skipped")
                else:
                    out.append(part)
            if len(self.buf) > LINE_LIMIT:
                out.append(f"a line longer than {LINE_LIMIT} bytes, skipped")
                self.buf = b""
                self.skipping = True

    def close(self):
        os.close(self.fd)


def _open(path):
    fd = open_regular(path)
    return Reader(path, fd)


def _is_text_format(reader):
    """The reference debug plugin's text records start with a CmdAdd-like line."""
    try:
        head = os.pread(reader.fd, 4096, 0)
    except OSError:
        return False
    first = next((line.strip() for line in head.decode("utf-8", "replace").split("\n") if line.strip()), "")
    return first in ("CmdAdd", "CmdDel", "CmdCheck", "CmdStatus", "CmdGC")


def records(path, reader, warn, final=True):
    """(number, record) of every record now in the file; ``final``: a last line without its newline
    counts too (a followed file may still be writing it)."""
    if _is_text_format(reader):
        size = os.fstat(reader.fd).st_size
        if size > TEXT_LIMIT:
            raise BadFile(path, f"is larger than {TEXT_LIMIT} bytes of text records")
        text = os.pread(reader.fd, TEXT_LIMIT + 1, 0).decode("utf-8", "replace")
        reader.pos = len(text.encode("utf-8", "replace"))
        return list(enumerate(parse_text_records(text), 1))
    out = []
    n = 0
    lines = reader.lines()
    if final and reader.buf.strip() and not reader.skipping:
        lines.append(reader.buf)
        reader.buf = b""
    for lineno, line in enumerate(lines, 1):
        if isinstance(line, str):
            warn(f"{path}: {line}")
            continue
        if not line.strip():
            continue
        rec, why = _record(line.decode("utf-8", "replace"))
        if rec is None:
            warn(f"{path}:{lineno}: {why}, skipped")
            continue
        n += 1
        out.append((n, rec))
    return out


def _warn(msg):
    print(f"skb log: {msg}", file=sys.stderr)


def read_all(path, warn, limit=None):
    """(number, record) of every record in the file at ``path``, numbered as listed (``skb replay`` reads
    them so too). Raises BadFile, also for a file larger than ``limit`` bytes."""
    reader = _open(path)
    try:
        if limit is not None and os.fstat(reader.fd).st_size > limit:
            raise BadFile(path, f"is larger than {limit} bytes: not a file this reads")
        return records(path, reader, warn)
    finally:
        reader.close()


def command(opts):
    style = Style.for_stream(sys.stdout, opts.color)
    path = opts.file
    if opts.lines == 0 and not opts.follow:
        print("skb log: error: -n 0 shows no record (give N of 1 or more, or --follow -n 0 for only new calls)",
              file=sys.stderr)
        return 2
    if opts.follow:
        return follow(path, opts, style)
    try:
        recs = read_all(path, _warn)
    except BadFile as e:
        return fail("skb log", f"cannot read {e}", opts)
    if opts.lines is not None:
        recs = recs[-opts.lines:] if opts.lines > 0 else []
    try:
        for n, rec in recs:
            for line in record_lines(n, rec, style, opts):
                print(line)
        sys.stdout.flush()
    except BrokenPipeError:      # skb log FILE | head -1
        return stdout_closed()
    return 0


def _emit(lines):
    for line in lines:
        print(line)
    sys.stdout.flush()


def follow(path, opts, style, poll=POLL):
    """Print the last records, then every new one; never returns unless interrupted or the path turns
    into something that is not a regular file."""
    reader = None
    shown = opts.lines if opts.lines is not None else 10
    count = [0]

    def show(lines):
        for line in lines:
            if isinstance(line, str):
                _warn(f"{path}: {line}")
                continue
            if not line.strip():
                continue
            rec, why = _record(line.decode("utf-8", "replace"))
            if rec is None:
                _warn(f"{path}: {why}, skipped")
                continue
            count[0] += 1
            _emit(record_lines(count[0], rec, style, opts))

    try:
        while reader is None:
            try:
                reader = _open(path)
            except BadFile as e:
                if e.errno != 2:      # ENOENT: wait for it to appear
                    return fail("skb log", f"cannot read {e}", opts)
                time.sleep(poll)
        if _is_text_format(reader):
            return fail("skb log", f"--follow reads JSON-lines logs; {path} holds the reference debug plugin's "
                                   "text records (list them without --follow)", opts)
        first = records(path, reader, _warn, final=False)
        count[0] = len(first)
        for num, rec in first[-shown:] if shown > 0 else []:
            _emit(record_lines(num, rec, style, opts))
        sys.stdout.flush()
        while True:
            show(reader.lines())
            reader, rest = _check_rotation(path, reader, opts)
            show(rest)
            if reader is None:
                return 1
            time.sleep(poll)
    except KeyboardInterrupt:
        return 0
    except BadFile as e:
        return fail("skb log", f"cannot read {e}", opts)
    except BrokenPipeError:
        return stdout_closed()
    finally:
        if reader is not None:
            reader.close()


def _check_rotation(path, reader, opts):
    """(the reader to go on with, lines still to show): the same one, a rewound one (truncated), or one
    on the new file after the rest of the old one."""
    try:
        size = os.fstat(reader.fd).st_size
    except OSError:
        size = reader.pos
    if size < reader.pos:
        _warn(f"{path} was truncated; reading it from the start")
        reader.pos, reader.buf, reader.skipping = 0, b"", False
        return reader, []
    try:
        st = os.stat(path)
    except OSError:
        return reader, []                  # moved away, not replaced yet: keep reading the old file
    if st.st_ino == reader.ino and st.st_dev == os.fstat(reader.fd).st_dev:
        return reader, []
    rest = reader.lines()                  # the rest of the old file first
    if reader.buf.strip() and not reader.skipping:
        rest.append(reader.buf)
    reader.close()
    if not stat.S_ISREG(st.st_mode):
        fail("skb log", f"{path} is now {kind_name(st.st_mode)}, not a regular file", opts)
        return None, rest
    try:
        new = _open(path)
    except BadFile as e:
        fail("skb log", f"cannot read {e}", opts)
        return None, rest
    _warn(f"{path} was replaced (rotated); following the new file")
    return new, rest


def add_parser(sub, formatter, parents=()):
    lg = sub.add_parser("log", parents=list(parents), help="list the calls in a debug log or debug-plugin capture",
                        description="List recorded plugin calls, numbered.", epilog=EPILOG, formatter_class=formatter)
    lg.add_argument("file", help="the JSON-lines debug log or capture")
    lg.add_argument("-v", "--verbose", action="store_true", help="show stdin/stdout of successful calls too")
    lg.add_argument("-f", "--follow", action="store_true", help="print new calls as they are written")
    lg.add_argument("-n", "--lines", type=argtypes.count, metavar="N",
                    help="only the last N records (default: all; with --follow: 10, and 0 shows only new ones)")
    lg.add_argument("--json", action="store_true", help='one JSON line per record: {"number": N, "record": {...}}')
    lg.set_defaults(func=command)
    return lg
