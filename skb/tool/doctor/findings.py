"""What a doctor check reports (``Finding``) and where a runtime looks (``View``)."""
import os

SEVERITIES = ("error", "warning", "note")
DEFAULT_BIN_DIR = "/opt/cni/bin"


class Finding:
    __slots__ = ("severity", "code", "what", "evidence", "fix", "where", "network", "cni_code")

    def __init__(self, severity, code, what, evidence="", fix="", where="", network="", cni_code=None):
        self.severity = severity
        self.code = code
        self.what = what
        self.evidence = _one_line(evidence)
        self.fix = " ".join(line.strip() for line in str(fix).splitlines() if line.strip()) if fix else ""
        # (a fix's spaces are kept: a command's quoted path may hold two in a row)
        self.where = where
        self.network = network      # the configuration file of the network it is about, when one
        self.cni_code = cni_code    # the CNI error code a call failed with, when one

    def to_dict(self):
        return {"severity": self.severity, "code": self.code, "what": self.what, "evidence": self.evidence,
                "fix": self.fix, "where": self.where}

    def key(self):
        return (self.code, self.what)


def _one_line(s):
    return " ".join(str(s).split()) if s else ""


class View:
    """One runtime's idea of where CNI lives (or the flags', or the defaults)."""

    __slots__ = ("source", "conf_dir", "bin_dirs", "default_network", "origin", "bin_key", "max_conf_num", "conf_key")

    def __init__(self, source, conf_dir, bin_dirs, default_network="", origin="", bin_key="", max_conf_num=1,
                 conf_key=""):
        self.source = source
        self.conf_dir = conf_dir
        self.bin_dirs = list(bin_dirs)
        self.default_network = default_network
        self.origin = origin
        self.bin_key = bin_key            # the setting that names the bin dirs, for a fix to point at
        self.max_conf_num = max_conf_num  # containerd: how many conf files its CRI loads (0: all)
        self.conf_key = conf_key          # the setting that names the conf dir

    def is_runtime(self):
        return self.source in ("containerd", "CRI-O")

    def key(self):
        return (_norm(self.conf_dir), tuple(_norm(d) for d in self.bin_dirs), self.default_network)

    def to_dict(self):
        return {"source": self.source, "confDir": self.conf_dir, "binDirs": self.bin_dirs,
                "defaultNetwork": self.default_network, "origin": self.origin}


def _norm(path):
    return os.path.normpath(path) if path else path


def plural(n, word, words=None):
    return f"{n} {word if n == 1 else (words or word + 's')}"
