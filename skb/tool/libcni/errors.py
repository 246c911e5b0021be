"""libcni's errors: ``LibcniError`` wraps a cause as Go's ``%w`` does, and ``describe`` prints an error
as Go prints it."""
from skb.cni.errors import CNIError

class LibcniError(Exception):
    """A runtime-side failure, worded as libcni words it. ``cause`` is the wrapped error (a plugin's
    CNIError or another LibcniError), as Go's ``%w``."""

    def __init__(self, msg, cause=None):
        Exception.__init__(self, msg)
        self.msg = msg
        self.cause = cause

    def __str__(self):
        return f"{self.msg}: {describe(self.cause)}" if self.cause is not None else self.msg

    def cni_error(self):
        """The plugin error at the bottom of the chain, if any (to report its code)."""
        cause = self.cause
        while isinstance(cause, LibcniError):
            cause = cause.cause
        return cause if isinstance(cause, CNIError) else None


class NoConfigsFound(LibcniError):
    def __init__(self, conf_dir):
        LibcniError.__init__(self, f"no net configurations found in {conf_dir}")


class NotFound(LibcniError):
    def __init__(self, conf_dir, name):
        LibcniError.__init__(self, f'no net configuration with name "{name}" in {conf_dir}')


def describe(err):
    """An error as Go prints it: a plugin's CNI error is ``msg; details``."""
    if isinstance(err, CNIError):
        return f"{err.msg}; {err.details}" if err.details else err.msg
    return str(err)
