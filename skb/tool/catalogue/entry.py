"""A catalogue entry, the shapes it cites compiled into its matcher, and the values its texts are filled
with (see skb.tool.catalogue)."""
import re

# Each placeholder's longest match is bounded (PATH_MAX for paths, 253 for Kubernetes names, 45 for an
# address): an unanchored search tries every start of a line, and an unbounded run there made a long line
# quadratic (16,000 characters took seconds). Bounded, a search costs at most the line's length times the
# bound. A value longer than its bound (a 300-character plugin name) no longer matches: none is real.
PLACEHOLDERS = {
    "rest": r".+",                                   # a wrapped message: explained in turn
    "plugin": r"[^\"\s\\]{1,255}",
    "name": r"[^\"\s]{1,255}",
    "network": r"[^\"]{1,255}",
    "pod": r"[^\"\s\[\]]{1,320}",                # namespace/name, which holds no brackets
    "id": r"[^\"\s:()]{1,255}",
    "sandbox": r"[^\"\s]{0,255}",
    "path": r"/[^\s\"']{0,4095}[^\s\"':.,\]]",
    "dir": r"/[^\s\"':]{0,4095}[^\s\"':.,]",
    "dirs": r"[^\]]{0,4096}",
    "version": r"[^\"\s\\]{0,64}",
    "versions": r"[^\]]{0,1024}",
    "ip": r"[0-9A-Fa-f.:]{0,44}[0-9A-Fa-f]",
    "cidr": r"[0-9A-Fa-f.:]{1,45}/\d{1,3}",
    "range": r"[0-9A-Fa-f.:]{1,45}-[0-9A-Fa-f.:]{0,44}[0-9A-Fa-f](?:,[0-9A-Fa-f.:]{1,45}-[0-9A-Fa-f.:]{0,44}[0-9A-Fa-f]){0,64}",
    "ifname": r"[^\s()\"]{1,64}",
    "n": r"\d{1,20}",
    "verb": r"[a-z]{1,16}",
    "word": r"\S{1,255}",
    "reason": r"[^,\"\n]{1,1024}",
    "detail": r"[^\n]{1,4096}",                     # the rest of the line, explained by the entry itself
    "url": r"[A-Za-z][A-Za-z0-9.\+-]{0,15}://[^\s\"]{1,4096}",
    "probe": r"Readiness|Liveness|Startup",
}
_PLACEHOLDER = re.compile(r"<([a-z_]+\d*|\.\.\.)>")


def compile_shape(shape):
    """A regular expression matching ``shape``: its words literally (any run of blanks for a space, case
    ignored), each placeholder a named group of its kind."""
    out, at, seen = [], 0, set()
    for m in _PLACEHOLDER.finditer(shape):
        out.append(r"\s+".join(re.escape(w) for w in shape[at:m.start()].split(" ")))
        name = m.group(1)
        if name == "...":
            out.append(r".{0,1024}?")     # bounded, as every placeholder is: a search stays linear
        else:
            kind = name.rstrip("0123456789")
            kind = kind if kind in PLACEHOLDERS else kind.rsplit("_", 1)[-1]      # config_version: a version
            if kind not in PLACEHOLDERS or name in seen:
                raise ValueError(f"shape {shape!r}: placeholder <{name}> is unknown or repeated")
            seen.add(name)
            out.append(f"(?P<{name}>{PLACEHOLDERS[kind]})")
        at = m.end()
    out.append(r"\s+".join(re.escape(w) for w in shape[at:].split(" ")))
    return re.compile("".join(out), re.IGNORECASE | re.DOTALL)


class Entry:
    """One message: see the module docstring. ``codes``/``groups``: the doctor's finding codes that bear
    on it and the check groups that must run for them (skb.tool.doctor.command.run's ``skip``)."""

    __slots__ = ("key", "family", "shapes", "title", "cause", "checks", "fix", "codes", "groups", "derive",
                 "patterns", "defaults")

    def __init__(self, key, family, shapes, title, cause, checks=(), fix="", codes=(), groups=(), derive=None,
                 defaults=None):
        self.key = key
        self.family = family
        self.shapes = (shapes,) if isinstance(shapes, str) else tuple(shapes)
        self.title = title
        self.cause = cause
        self.checks = tuple(checks)
        self.fix = fix
        self.codes = tuple(codes)
        self.groups = tuple(groups)
        self.derive = derive
        self.defaults = defaults or {}
        self.patterns = [compile_shape(s) for s in self.shapes]

    @property
    def wraps(self):
        return any("<rest>" in s for s in self.shapes)

    def search(self, text):
        """(the earliest match of any shape, that shape) or None."""
        best = None
        for shape, pattern in zip(self.shapes, self.patterns):
            m = pattern.search(text)
            if m and (best is None or m.start() < best[0].start()):
                best = (m, shape)
        return best


DEFAULTS = {"plugin": "the plugin", "network": "the network", "version": "", "dir": "the conf dir",
            "path": "the file", "pod": "the pod", "ip": "the address", "range": "the range", "verb": "add"}


class Values(dict):
    """The values a text is filled with; a missing one reads as a neutral phrase, never as {name}."""

    def __missing__(self, key):
        return DEFAULTS.get(key.rstrip("0123456789"), "")


def fill(text, values):
    return text.format_map(values) if text else ""


def versions_list(text):
    """The versions of a Go-printed list: '"0.1.0" "0.2.0"' (quotes escaped or not) -> ['0.1.0', '0.2.0']."""
    return [v for v in re.findall(r"[0-9]+\.[0-9]+\.[0-9]+", text or "")]


def newest(versions):
    return max(versions, key=lambda v: tuple(int(x) for x in v.split("."))) if versions else ""


# The doctor's finding codes by topic: what an entry's ``codes`` draw on
CONF = ("no-config", "invalid-json", "load-error", "wrong-extension", "no-plugins", "skipped-entry",
        "unreadable-entry", "default-network", "several-networks", "shadowed", "runtime-dirs-disagree",
        "runtime-config-invalid", "runtime-config-ignored")
BINS = ("plugin-missing", "plugin-elsewhere", "plugin-not-executable", "plugin-dangling", "runtime-dirs-disagree",
        "runtime-config-invalid", "runtime-config-ignored")
VERSIONS = ("version-unsupported", "version-failed", "no-cniversion")
IPAM = ("config-invalid", "range-exhausted", "leaked-reservation")
NODE = ("pod-range-overlap", "forwarding-off", "rp-filter-strict", "host-lo-down")
RUN = ("probe-failed", "probe-no-ip", "probe", "probe-skipped", "forwarding-off")
