"""The CNI spec versions this suite speaks: the list, their result families, parsing a version string,
and the VERSION reply (the same for every plugin).

Kept apart from everything else so that VERSION, which podman sends to every plugin before each command,
is answered without loading any plugin code (see skb.applets): this module imports nothing, and loads
skb.cni.errors only on its error paths.
"""
SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = SUPPORTED_VERSIONS[-1]
# Like Go's skel: the newest version we speak, whatever the request says (runtimes only read the list).
VERSION_REPLY = ('{"cniVersion":"%s","supportedVersions":[%s]}\n'
                 % (LATEST, ",".join(f'"{v}"' for v in SUPPORTED_VERSIONS)))

# Go's result packages: a result can be read only by its family's parser (docs/REFERENCE.md#version-families).
FAMILY = {"0.1.0": "020", "0.2.0": "020", "0.3.0": "040", "0.3.1": "040", "0.4.0": "040",
          "1.0.0": "100", "1.1.0": "100"}
FAMILY_MEMBERS = {"020": "0.1.0, 0.2.0", "040": "0.3.0, 0.3.1, 0.4.0", "100": "1.0.0, 1.1.0"}
SUPPORTED_TEXT = ", ".join(SUPPORTED_VERSIONS)


def parse_version(s):
    """``"1.1"`` -> ``(1, 1, 0)``, as Go's ``version.ParseVersion``: up to three integer parts (optional
    sign, ASCII digits), missing parts are 0, ``""`` is 0.1.0. Anything else is a code-6 CNIError."""
    if not isinstance(s, str):
        from skb.cni.errors import CNIError, DECODE, describe  # (error path)
        raise CNIError(DECODE, f"invalid version: expected a string, found {describe(s)}",
                       'a CNI version looks like "1.1.0"')
    if s == "":
        return (0, 1, 0)
    parts = s.split(".")
    if len(parts) > 3:
        from skb.cni.errors import CNIError, DECODE, quote  # (error path)
        raise CNIError(DECODE, f"invalid version {quote(s)}: too many parts",
                       'a CNI version has at most three dot-separated numbers, e.g. "1.1.0"')
    out = [0, 0, 0]
    for i, part in enumerate(parts):
        digits = part[1:] if part[:1] in ("+", "-") else part
        if not (digits.isascii() and digits.isdigit()):
            from skb.cni.errors import CNIError, DECODE, quote  # (error path)
            raise CNIError(DECODE, f"invalid version {quote(s)}: {quote(part)} is not an integer",
                           'a CNI version has at most three dot-separated numbers, e.g. "1.1.0"')
        out[i] = -int(digits) if part[0] == "-" else int(digits)
    return tuple(out)


version_tuple = parse_version


def check_version_string(v, where="cniVersion"):
    """A configuration's version string is one to three dot-separated decimal numbers ("1.1.0"; Go also
    reads "1.1"). Anything else is not a version at all: code 6, as the spec's error table says."""
    parts = v.split(".")
    if len(parts) > 3 or not all(p and p.isascii() and p.isdigit() for p in parts):
        from skb.cni.errors import CNIError, DECODE, quote  # (error path)
        raise CNIError(DECODE, f"invalid {where}: {quote(v)} is not a version string",
                       'a CNI version is written like "1.1.0"')


def version_family(v):
    """The result family of a supported version: ``"020"``, ``"040"`` or ``"100"`` (``""`` is 0.1.0)."""
    family = FAMILY.get(v or "0.1.0") if v is None or isinstance(v, str) else None
    if family is None:
        from skb.cni.errors import CNIError, INCOMPATIBLE_VERSION, describe  # (error path)
        raise CNIError(INCOMPATIBLE_VERSION, f"unsupported CNI version {describe(v)}",
                       f"supported versions: {SUPPORTED_TEXT}")
    return family
