"""CNI errors: an exception that carries a spec error code, and the codes themselves.

Every failure a plugin reports goes through ``CNIError``: the dispatcher prints it as one JSON object on
stdout (``cniVersion``, ``code``, ``msg``, ``details``) and exits 1. Raise it where the cause is known,
with a message that names the field, the file or the object, and the fix.
"""

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
