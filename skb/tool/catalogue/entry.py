"""A catalogue entry, the shapes it cites compiled into its matcher, and the values its texts are filled
with (see skb.tool.catalogue)."""
import re

PLACEHOLDERS = {
    "rest": r".+",                                   # a wrapped message: explained in turn
    "plugin": r"[^\"\s\\]+",
    "name": r"[^\"\s]+",
    "network": r"[^\"]+",
    "pod": r"[^\"\s]+",
    "id": r"[^\"\s:()]+",
    "sandbox": r"[^\"\s]*",
    "path": r"/[^\s\"']*[^\s\"':.,\]]",
    "dir": r"/[^\s\"':]*[^\s\"':.,]",
    "dirs": r"[^\]]*",
    "version": r"[^\"\s\\]*",
    "versions": r"[^\]]*",
    "ip": r"[0-9A-Fa-f.:]*[0-9A-Fa-f]",
    "cidr": r"[0-9A-Fa-f.:]+/\d+",
    "range": r"[0-9A-Fa-f.:]+-[0-9A-Fa-f.:]*[0-9A-Fa-f](?:,[0-9A-Fa-f.:]+-[0-9A-Fa-f.:]*[0-9A-Fa-f])*",
    "ifname": r"[^\s()\"]+",
    "n": r"\d+",
    "verb": r"[a-z]+",
    "word": r"\S+",
    "reason": r"[^,\"\n]+",
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
            out.append(r".*?")
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
