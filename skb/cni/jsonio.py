"""JSON in and out on the C accelerator alone.

``import json`` costs ~7-10 ms (it pulls in re, enum, functools ...), more than Go's whole loopback call,
so the hot path drives ``_json``'s scanner and encoder directly. The pure-Python ``json`` module is loaded
only to describe a syntax error, where a few milliseconds do not matter.
"""
import _json


class _ScanContext:
    # The attributes _json.make_scanner reads from its context (normally a json.JSONDecoder).
    __slots__ = ("strict", "object_hook", "object_pairs_hook", "parse_float", "parse_int",
                 "parse_constant", "memo")

    def __init__(self):
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = _finite_float
        self.parse_int = int
        self.parse_constant = _reject_constant
        self.memo = {}


class _BadToken(ValueError):
    """A token the C scanner accepted but JSON (and Go's decoder) does not; ``token`` locates it."""

    def __init__(self, problem, token):
        ValueError.__init__(self, problem)
        self.token = token


def _reject_constant(name):
    raise _BadToken(f"{name} is not valid JSON", name)


def _finite_float(s):
    v = float(s)
    if v - v != 0:  # inf: Go's decoder rejects numbers out of float64 range
        raise _BadToken(f"number {s} is out of range", s)
    return v


_ctx = _ScanContext()
_scan = _json.make_scanner(_ctx)
_WS = " \t\n\r"


class JSONSyntaxError(ValueError):
    """Invalid JSON, located: 1-based ``line`` and ``col``, ``snippet`` is the offending line."""

    def __init__(self, problem, text, pos):
        self.problem = problem
        self.pos = pos
        self.line = text.count("\n", 0, pos) + 1
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        self.col = pos - start + 1
        self.snippet = text[start:end if end >= 0 else len(text)].rstrip("\r")
        ValueError.__init__(self, f"{problem} at line {self.line}, column {self.col}")

    def describe(self):
        """Two lines for humans: the offending text and a caret under the column."""
        line = self.snippet
        col = self.col - 1
        if len(line) > 100:  # keep a window around the error on long (single-line) inputs
            lo = max(0, col - 50)
            line, col = ("..." if lo else "") + line[lo:lo + 100], col - lo + (3 if lo else 0)
        return f"{line}\n{' ' * col}^"


def loads(data):
    """Decode ``data`` (str or UTF-8 bytes). Raises JSONSyntaxError (a ValueError) with a location."""
    if isinstance(data, (bytes, bytearray)):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JSONSyntaxError("invalid UTF-8 byte", data.decode("utf-8", "replace"), e.start) from None
    else:
        text = data
    n = len(text)
    i = 0
    while i < n and text[i] in _WS:
        i += 1
    if text.startswith("\ufeff"):
        raise JSONSyntaxError("unexpected byte order mark", text, 0)
    try:
        obj, end = _scan(text, i)
    except StopIteration as e:
        raise _explain(text, e.value if e.value is not None else i) from None
    except _BadToken as e:
        raise JSONSyntaxError(str(e), text, max(text.find(e.token, i), i)) from None
    except ValueError as e:  # json.JSONDecodeError, when json.decoder happens to be loaded
        raise _explain(text, getattr(e, "pos", i)) from None
    except SystemError:
        # The C scanner builds its error from json.decoder, but only when that module is already
        # loaded; otherwise it fails without an exception. Let the pure decoder find the spot.
        raise _explain(text, i) from None
    except RecursionError:
        raise JSONSyntaxError("nesting too deep", text, i) from None
    finally:
        _ctx.memo.clear()  # the scanner memoises keys in its context: don't grow a long-lived process
    while end < n and text[end] in _WS:
        end += 1
    if end != n:
        raise JSONSyntaxError("extra data after the JSON value", text, end)
    return obj


def _explain(text, pos):
    """Say what is wrong near ``pos`` in terms a person editing a conflist understands."""
    problem = "invalid JSON"
    try:
        import json  # error path only
        json.loads(text)
    except json.JSONDecodeError as e:
        problem, pos = e.msg, e.pos
    except (ValueError, RecursionError):
        pass
    if problem.startswith("Expecting property name"):
        # "{...,}" is the classic hand-edit mistake: say so rather than what the parser expected.
        j = pos - 1
        while j >= 0 and text[j] in _WS:
            j -= 1
        if j >= 0 and text[j] == ",":
            return JSONSyntaxError("trailing comma after the last key (JSON allows none)", text, j)
    if problem.startswith("Expecting value"):
        j = pos - 1
        while j >= 0 and text[j] in _WS:
            j -= 1
        if j >= 0 and text[j] == "," and pos < len(text) and text[pos] == "]":
            return JSONSyntaxError("trailing comma after the last list item (JSON allows none)", text, j)
        if pos >= len(text.rstrip()):
            return JSONSyntaxError("unexpected end of input: the JSON is empty or cut short", text, pos)
    if problem.startswith("Unterminated string"):
        problem = "unterminated string (a missing closing quote?)"
    return JSONSyntaxError(problem[:1].lower() + problem[1:], text, pos)


_encode = _json.make_encoder(None, None, _json.encode_basestring, None, ":", ",", False, False, False)


def dumps(obj):
    """Compact JSON, UTF-8 text kept as is (Go's encoder does the same)."""
    return "".join(_encode(obj, 0))
