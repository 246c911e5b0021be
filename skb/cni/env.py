"""The CNI_* environment: which variables each command needs, their validation, and CNI_ARGS.

The order of checks and the codes follow the Go ``skel`` (docs/REFERENCE.md#the-order-of-checks), because runtimes
are tested against Go plugins: an invalid container id or interface name is reported before missing
variables, and "missing" means unset *or empty* (libcni always sets all six, empty when unused).
"""
from skb.cni.errors import CNIError, INVALID_ENV

ADD, DEL, CHECK, VERSION, STATUS, GC = "ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC"
COMMANDS = (ADD, DEL, CHECK, VERSION, STATUS, GC)

# Checked in this order (it decides which error a request with several problems gets).
_VARS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH",
         "CNI_NETNS_OVERRIDE")
# CNI_PATH: the spec makes it optional, Go's skel requires it; we follow Go, as every libcni runtime sends it.
_REQUIRED = {
    ADD: ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    CHECK: ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    DEL: ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"),  # DEL must work once the netns is gone
    STATUS: ("CNI_PATH",),
    GC: ("CNI_PATH",),
}


# Runtimes name containers with 64 hex digits (containerd, CRI-O, podman). ADD and CHECK refuse an id
# longer than this, before anything is applied: every record keyed by the id must hold it whole, or a DEL
# could not match what its ADD made (host-local reads its reservation files with a 4 KiB bound; ptp's
# masquerade comments hold the id). DEL accepts any length: it must never block cleanup.
MAX_CONTAINER_ID = 1024


class MissingCommand(Exception):
    """CNI_COMMAND is unset: a person ran the plugin by hand; the dispatcher prints what it is."""


class CmdArgs:
    """One call's parameters, parsed once from the environment (stdin is read separately)."""

    __slots__ = ("command", "container_id", "netns", "ifname", "args", "path", "netns_override")

    def __init__(self, command, container_id="", netns="", ifname="", args="", path=(), netns_override=False):
        self.command = command
        self.container_id = container_id
        self.netns = netns
        self.ifname = ifname
        self.args = args
        self.path = tuple(path)
        self.netns_override = netns_override

    def __repr__(self):
        return (f"CmdArgs({self.command!r}, container_id={self.container_id!r}, netns={self.netns!r}, "
                f"ifname={self.ifname!r}, args={self.args!r}, path={self.path!r})")


def from_environ(environ):
    """Validate and parse the CNI_* variables of ``environ`` (a mapping)."""
    command = environ.get("CNI_COMMAND", "")
    required = _REQUIRED.get(command, ())
    missing = []
    for var in _VARS:
        value = environ.get(var, "")
        if not value:
            if var in required or var == "CNI_COMMAND":
                missing.append(var)
        elif var in required:
            if var == "CNI_CONTAINERID":
                check_container_id(value)
            elif var == "CNI_IFNAME":
                check_ifname(value)
    if missing:
        if not command:
            raise MissingCommand()
        raise CNIError(INVALID_ENV, f"required env variables [{','.join(missing)}] missing",
                       f"CNI_COMMAND={command} needs {', '.join(required)} set and non-empty")
    cid = environ.get("CNI_CONTAINERID", "")
    if len(cid) > MAX_CONTAINER_ID and command in (ADD, CHECK):
        raise CNIError(INVALID_ENV, f"CNI_CONTAINERID is longer than {MAX_CONTAINER_ID} characters",
                       f"it has {len(cid)}; container ids are at most {MAX_CONTAINER_ID} characters (runtimes use "
                       "64 hex digits)")
    override = environ.get("CNI_NETNS_OVERRIDE", "").lower() in ("1", "true")
    path = [p for p in environ.get("CNI_PATH", "").split(":") if p]
    return CmdArgs(command, cid, environ.get("CNI_NETNS", ""),
                   environ.get("CNI_IFNAME", ""), environ.get("CNI_ARGS", ""), path, override)


def _is_name_char(c):
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c in "_.-"


def valid_name(s):
    """The rule for container ids and network names: ``^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$``."""
    return bool(s) and s[0] not in "_.-" and all(_is_name_char(c) for c in s)


def check_container_id(cid):
    if not valid_name(cid):
        raise CNIError(INVALID_ENV, "invalid characters in containerID",
                       f"CNI_CONTAINERID {cid!r}: use letters, digits, '_', '.' and '-', starting with a "
                       "letter or digit")


def check_ifname(name):
    """Linux's dev_valid_name, with Go's messages (runtimes and tests match on them)."""
    if not name:
        raise CNIError(INVALID_ENV, "interface name is empty", "set CNI_IFNAME, e.g. CNI_IFNAME=eth0")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # os.environ carries non-UTF-8 bytes as lone surrogates
        raise CNIError(INVALID_ENV, "interface name is not valid UTF-8",
                       f"CNI_IFNAME {name!r}: a name the result (JSON) could not carry; use ASCII, e.g. eth0") from None
    if len(name.encode()) > 15:
        raise CNIError(INVALID_ENV, "interface name is too long",
                       f"interface name should be less than 16 characters (CNI_IFNAME {name!r} has "
                       f"{len(name.encode())} bytes)")
    if name in (".", ".."):
        raise CNIError(INVALID_ENV, "interface name is . or ..", f"CNI_IFNAME {name!r}")
    if any(c in "/:" or c.isspace() for c in name):
        raise CNIError(INVALID_ENV, "interface name contains / or : or whitespace characters",
                       f"CNI_IFNAME {name!r}")


def _parse_bool_arg(value):
    v = value.lower()
    if v in ("1", "true"):
        return True
    if v in ("0", "false"):
        return False
    raise ValueError(f"{value!r} is not a boolean (use true, false, 1 or 0)")


def parse_cni_args(raw, known=None):
    """Parse ``CNI_ARGS`` (``K=V;K=V``) like Go's ``types.LoadArgs``.

    ``known`` maps the plugin's argument names (case-sensitive) to a parser (str -> value, raising
    ValueError). Unknown keys are an error unless ``IgnoreUnknown`` is true, wherever it appears.
    Errors are code 4 (invalid environment variable, named) rather than Go's generic 999.
    """
    known = dict(known or {})
    out = {}
    unknown = []
    ignore_unknown = False
    if not raw:
        return out
    for pair in raw.split(";"):
        kv = pair.split("=")
        if len(kv) != 2:
            raise CNIError(INVALID_ENV, f"CNI_ARGS: invalid pair {pair!r}",
                           f"CNI_ARGS={raw!r}: expected KEY=VALUE pairs separated by ';' with no trailing ';'")
        key, value = kv
        if key == "IgnoreUnknown":
            try:
                ignore_unknown = _parse_bool_arg(value)
            except ValueError as e:
                raise CNIError(INVALID_ENV, f"CNI_ARGS: error parsing value of pair {pair!r}", str(e)) from None
        elif key in known:
            try:
                out[key] = known[key](value)
            except ValueError as e:
                raise CNIError(INVALID_ENV, f"CNI_ARGS: error parsing value of pair {pair!r}", str(e)) from None
        else:
            unknown.append(pair)
    if unknown and not ignore_unknown:
        raise CNIError(INVALID_ENV, f"CNI_ARGS: unknown args {unknown!r}",
                       f"this plugin understands {sorted(known) or 'no keys'}; add IgnoreUnknown=1 to "
                       "CNI_ARGS to pass others through")
    return out
