"""CNI errors: an exception that carries a spec error code, the codes themselves, and the words every
message is made of (an errno, a decoded JSON value, a string quoted as Go's %q quotes it).

Every failure a plugin reports goes through ``CNIError``: the dispatcher prints it as one JSON object on
stdout (``cniVersion``, ``code``, ``msg``, ``details``) and exits 1. Raise it where the cause is known,
with a message that names the field, the file or the object, and the fix.
"""
import errno
import os

# Codes 0-99 belong to the spec; 8 and 999 are the Go library's, kept because runtimes have seen them.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE = 6
INVALID_CONFIG = 7
INVALID_NETNS = 8          # Go only: CNI_NETNS is the plugin's own netns
TRY_AGAIN = 11
NOT_AVAILABLE = 50         # STATUS: cannot service ADD
LIMITED_CONNECTIVITY = 51  # STATUS: cannot service ADD, existing containers may be degraded
INTERNAL = 999             # anything unexpected; the message says what failed


class CNIError(Exception):
    """An error with a CNI code. ``msg`` is short; ``details`` carries the evidence and the fix."""

    __slots__ = ("code", "msg", "details")

    def __init__(self, code, msg, details=""):
        Exception.__init__(self, msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_dict(self, cni_version=None):
        out = {}
        if cni_version:
            out["cniVersion"] = cni_version
        out["code"] = self.code
        out["msg"] = self.msg
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self):
        return f"{self.msg}: {self.details}" if self.details else self.msg

    def __repr__(self):
        return f"CNIError({self.code!r}, {self.msg!r}, {self.details!r})"


def errno_reason(err):
    """An errno as the messages word it, the same everywhere (netlink, netns, sysctl):
    ``permission denied (EACCES)``."""
    text = os.strerror(err)
    return f"{text[:1].lower()}{text[1:]} ({errno.errorcode.get(err, err)})"


def describe(value):
    """A decoded JSON value as a message names it: ``null``, ``true``, ``the number 5``, ``the string "x"``
    (cut at 80 characters), ``an object``, ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 64:
        return "a number too large for 64 bits"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {quote(value)}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def quote(s, limit=80):
    """``s`` in double quotes for a message, cut at ``limit`` characters, quotes, backslashes and anything
    unprintable escaped (a message is one line, whatever a field holds)."""
    if len(s) > limit:
        s = s[:limit - 3] + "..."
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else
                         ("\\" + c if c in '"\\' else f"\\u{ord(c):04x}") for c in s) + '"'


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\v": "\\v", '"': '\\"', "\\": "\\\\"}


def go_quote(s):
    """Go's %q of a string (strconv.Quote), as Go's plugins and libcni quote names in messages and in
    masquerade comments: printable characters as they are, the usual backslash escapes, ``\\xHH`` below
    space and for DEL, ``\\uHHHH`` or ``\\UHHHHHHHH`` for other unprintable characters. A byte that was not
    UTF-8 (carried as a lone surrogate by Python's surrogateescape) is ``\\xHH``, as Go writes it."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    out = []
    for c in s:
        esc = _GO_ESCAPES.get(c)
        if esc is not None:
            out.append(esc)
        elif c.isprintable():
            out.append(c)
        else:
            n = ord(c)
            if n < 0x20 or n == 0x7F:
                out.append(f"\\x{n:02x}")
            elif 0xDC80 <= n <= 0xDCFF:          # surrogateescape: the byte n - 0xDC00
                out.append(f"\\x{n - 0xDC00:02x}")
            elif 0xD800 <= n <= 0xDFFF:
                out.append("\\ufffd")
            elif n < 0x10000:
                out.append(f"\\u{n:04x}")
            else:
                out.append(f"\\U{n:08x}")
    return '"' + "".join(out) + '"'
