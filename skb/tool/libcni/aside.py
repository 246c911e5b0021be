"""Calls skb makes on its own account (a replay, the doctor's VERSION, STATUS and --probe) record themselves
nowhere the runtime's calls are recorded: the files a plugin appends its record to (the debug log, a
debug plugin's captureFile and cniOutput), named in the call's stdin in any spelling the plugins read, or by
SKB_DEBUG_LOG, are pointed into a temporary directory."""
import json
import os
import shutil
import tempfile

from skb.cni.netconf import fold
from skb.tool.libcni import rawexec
from skb.tool.libcni.errors import LibcniError

class TooDeep(ValueError):
    """A configuration nested too deep to read here, which a plugin may still read: the call is not made."""


# Keys of a plugin's stdin that name a file the call appends its own record to (any spelling Go's
# decoder folds to them: the plugins read keys so).
_RECORD_KEYS = ("skbDebugLog", "captureFile", "cniOutput")


def swap_string(text, old, new):
    """Replace the JSON string ``old`` (a whole string value, quotes included) by ``new``."""
    if not old:
        return text
    return text.replace(json.dumps(old), json.dumps(new)).replace(json.dumps(old, ensure_ascii=False),
                                                                  json.dumps(new, ensure_ascii=False))


def _top_pairs(text):
    """The (key, value) pairs of the JSON object ``text``, every spelling and duplicate as written (nested
    objects as dicts); None when it is not one."""
    seen = []

    def hook(pairs):
        seen.append(pairs)
        return dict(pairs)
    try:
        obj = json.loads(text, object_pairs_hook=hook)
    except RecursionError:      # (a plugin may still read it, and its record files: fail closed)
        raise TooDeep("its configuration is nested too deep to find the files it appends its record to") from None
    except (ValueError, TypeError):
        return None
    return seen[-1] if isinstance(obj, dict) else None


def _record_files(pairs, wanted):
    return [(k, v) for k, v in pairs if isinstance(k, str) and fold(k) in wanted and isinstance(v, str) and v]


def divert_records(stdin, env, tmpdir):
    """(stdin, keys): every file the call would append its record to (a key the plugins read as
    ``skbDebugLog``, ``captureFile`` or ``cniOutput``, in any spelling; ``SKB_DEBUG_LOG`` in ``env``, which is
    changed in place) points into ``tmpdir`` instead. The rest of stdin keeps its bytes."""
    keys = []
    if env.get("SKB_DEBUG_LOG"):
        env["SKB_DEBUG_LOG"] = os.path.join(tmpdir, "SKB_DEBUG_LOG")
        keys.append("SKB_DEBUG_LOG")
    wanted = {fold(k): k for k in _RECORD_KEYS}
    pairs = _top_pairs(stdin)
    found = _record_files(pairs or [], wanted)
    if not found:
        return stdin, keys
    for key, value in found:
        stdin = swap_string(stdin, value, os.path.join(tmpdir, wanted[fold(key)]))
    again = _top_pairs(stdin)
    if again is None or any(not v.startswith(tmpdir + os.sep) for _k, v in _record_files(again, wanted)):
        # written with other escapes: re-encoded, every pair kept in its order
        stdin = "{" + ",".join(json.dumps(k) + ":" + json.dumps(os.path.join(tmpdir, wanted[fold(k)])
                                                              if (k, v) in found else v) for k, v in pairs) + "}"
    keys += list(dict.fromkeys(k for k, _v in found))
    return stdin, keys


class AsideExec(rawexec.RawExec):
    """libcni's RawExec whose calls record themselves nowhere the runtime's calls are recorded: each call's
    record files (``divert_records``) are in a temporary directory, removed after it. For every call skb
    makes on its own account (the doctor's VERSION, STATUS and --probe, a replay)."""

    def exec_plugin(self, path, stdin, environ):
        tmpdir = tempfile.mkdtemp(prefix="skb-aside-")
        _DIRS.add(tmpdir)
        try:
            env = dict(environ)
            try:
                text, _keys = divert_records(stdin.decode("utf-8", "surrogateescape"), env, tmpdir)
            except TooDeep as e:
                raise LibcniError(f"not run: {e}") from None
            return super().exec_plugin(path, text.encode("utf-8", "surrogateescape"), env)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
            _DIRS.discard(tmpdir)


# The temporary dirs of calls in flight: a call in a thread of the doctor's is not unwound when skb ends on
# a signal (sys.exit in the main thread), so main's end removes what is left (remove_all).
_DIRS = set()


def remove_all():
    for tmpdir in list(_DIRS):
        shutil.rmtree(tmpdir, ignore_errors=True)
        _DIRS.discard(tmpdir)
