"""One undo stack per ADD: every side effect registers its undo right after it succeeds; a failure
unwinds them all, newest first, so a failed ADD leaves nothing behind.

    undo = UndoStack()
    try:
        make_veth(); undo.push("delete veth x", nl.link_del, "x")
        ...
    except BaseException as e:
        undo.unwind(e)
        raise

An undo that fails does not stop the others. What could not be undone is written to stderr and added to
the error's ``details`` (when it is a CNIError), so the runtime's log says what was left behind.
"""
import sys

__all__ = ["UndoStack"]


class UndoStack:
    __slots__ = ("_steps",)

    def __init__(self):
        self._steps = []

    def push(self, what, fn, *args):
        """Register ``fn(*args)`` as the undo of the step just done; ``what`` names it for messages."""
        self._steps.append((what, fn, args))

    def __len__(self):
        return len(self._steps)

    def descriptions(self):
        return [what for what, _fn, _args in self._steps]

    def unwind(self, error=None):
        """Run every undo, newest first; return the list of (what, exception) that failed."""
        failed = []
        while self._steps:
            what, fn, args = self._steps.pop()
            try:
                fn(*args)
            except Exception as e:  # keep undoing the rest
                failed.append((what, e))
        if failed:
            text = "; ".join(f"{what}: {e}" for what, e in failed)
            sys.stderr.write(f"skb-cni: the failed ADD could not undo everything: {text}\n")
            details = getattr(error, "details", None)
            if isinstance(details, str):
                note = f"cleanup after the failure also failed ({text}); a DEL will retry it"
                error.details = f"{details}; {note}" if details else note
        return failed
