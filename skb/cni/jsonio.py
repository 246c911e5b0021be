"""JSON in and out on the C accelerator alone, and a document's bytes in and out of a descriptor.

``import json`` costs ~7-10 ms (it pulls in re, enum, functools ...), more than Go's whole loopback call,
so the hot path drives ``_json``'s scanner and encoder directly. The pure-Python ``json`` module is loaded
only to describe a syntax error, where a few milliseconds do not matter.

``read_bounded`` and ``write_all`` are the suite's one bounded reader and one write-everything loop: here,
because every plugin loads this module, so that no caller (host-local's store, skel, the doctor through
skb.linux.files) loads a module more for them.
"""
import _json
import os


class _ScanContext:
    # The attributes _json.make_scanner reads from its context (normally a json.JSONDecoder).
    __slots__ = ("strict", "object_hook", "object_pairs_hook", "parse_float", "parse_int",
                 "parse_constant", "memo")

    def __init__(self):
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = _object
        self.parse_float = _finite_float
        self.parse_int = int
        self.parse_constant = _reject_constant
        self.memo = {}


class _BadToken(ValueError):
    """A token the C scanner accepted but JSON (and Go's decoder) does not; ``token`` locates it."""

    def __init__(self, problem, token):
        ValueError.__init__(self, problem)
        self.token = token


def _object(pairs):
    """An object's pairs as a dict whose order is the document's, a repeated key standing at its last
    place (a plain dict would keep it at its first): a decoder matching keys as Go does, where the last of
    several spellings wins, then sees them in Go's order (``{"a": 1, "A": 2, "a": 3}`` reads 3). ~2 us
    per configuration."""
    d = dict(pairs)
    if len(d) != len(pairs):
        d = {}
        for k, v in pairs:
            d.pop(k, None)
            d[k] = v
    return d


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


# Python refuses to turn longer digit strings into ints (sys.int_max_str_digits, 4300 by default); the
# limit is ours so that the answer does not depend on the interpreter's setting.
MAX_INT_DIGITS = 4300


def _checked_int(s):
    digits = len(s) - (s[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise _BadToken(f"number too long ({digits} digits; at most {MAX_INT_DIGITS})", s)
    try:
        return int(s)
    except ValueError:  # a lower interpreter limit
        raise _BadToken(f"number too long ({digits} digits)", s) from None


def _replace_surrogates(s):
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)


def _has_surrogate(s):
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _clean(obj):
    """``obj`` with every lone UTF-16 surrogate in its strings (keys too) replaced by U+FFFD, as Go's
    decoder does: such a string cannot be printed, written to a file or used as a path."""
    if isinstance(obj, str):
        return _replace_surrogates(obj) if _has_surrogate(obj) else obj
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, dict):
        return {_clean(k): _clean(v) for k, v in obj.items()}
    return obj


def loads(data):
    """Decode ``data`` (str or UTF-8 bytes). Raises JSONSyntaxError (a ValueError) with a location."""
    if isinstance(data, (bytes, bytearray)):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JSONSyntaxError("invalid UTF-8 byte", data.decode("utf-8", "replace"), e.start) from None
        # Decoded UTF-8 holds no surrogates: only a \\uD8xx-\\uDFxx escape can make a lone one.
        suspect = "\\ud" in text or "\\uD" in text
    else:
        text = data
        suspect = "\\ud" in text or "\\uD" in text or _has_surrogate(text)
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
        if getattr(e, "pos", None) is None:  # int() refused a digit string: find and name the number
            raise _locate_bad_number(text, i) from None
        raise _explain(text, e.pos) from None
    except SystemError:
        # The C scanner builds its error from json.decoder, but only when that module is already
        # loaded; otherwise it fails without an exception. Let the pure decoder find the spot.
        raise _explain(text, i) from None
    except RecursionError:
        raise JSONSyntaxError(TOO_DEEP, text, i) from None
    finally:
        _ctx.memo.clear()  # the scanner memoises keys in its context: don't grow a long-lived process
    while end < n and text[end] in _WS:
        end += 1
    if end != n:
        raise JSONSyntaxError("extra data after the JSON value", text, end)
    if suspect:
        try:
            obj = _clean(obj)
        except RecursionError:
            raise JSONSyntaxError(TOO_DEEP, text, i) from None
    return obj


def _locate_bad_number(text, i):
    ctx = _ScanContext()
    ctx.parse_int = _checked_int
    try:
        _json.make_scanner(ctx)(text, i)
    except _BadToken as e:
        return JSONSyntaxError(str(e), text, max(text.find(e.token, i), i))
    except (ValueError, StopIteration, RecursionError, SystemError):
        pass
    return JSONSyntaxError("invalid number", text, i)


def _explain(text, pos):
    """Say what is wrong near ``pos`` in terms a person editing a conflist understands. The decoder gives
    the position; the cases explained here are recognised from the text there, never from the decoder's
    wording, which changes between Python versions (3.13 reports trailing commas itself, at the comma)."""
    problem = "invalid JSON"
    try:
        import json  # error path only
        json.loads(text)
    except json.JSONDecodeError as e:
        problem, pos = e.msg, e.pos
    except (ValueError, RecursionError):
        pass
    if text.startswith(("//", "/*", "#"), pos):
        return JSONSyntaxError("a comment (JSON allows none: remove it)", text, pos)
    comma = _trailing_comma(text, pos)
    if comma is not None:
        # "{...,}" is the classic hand-edit mistake: say so rather than what the parser expected.
        what, at = comma
        return JSONSyntaxError(f"trailing comma after the last {what} (JSON allows none)", text, at)
    if pos >= len(text.rstrip(_WS)):
        return JSONSyntaxError("unexpected end of input: the JSON is empty or cut short", text, pos)
    if text[pos] == '"' and _unterminated(text, pos):
        return JSONSyntaxError("unterminated string (a missing closing quote?)", text, pos)
    if problem.endswith(" at"):     # ("Invalid control character at": the position is ours to add)
        problem = problem[:-3]
    if problem.startswith("Invalid control character"):
        problem += " in a string (write it escaped, e.g. \\n, \\t or \\u001b)"
    return JSONSyntaxError(problem[:1].lower() + problem[1:], text, pos)


TOO_DEEP = ("nesting too deep (this parser takes about 980 levels of objects and arrays; the reference plugins' "
            "takes 10,000)")


def _trailing_comma(text, pos):
    """("key" or "list item", position of the comma) when the error at ``pos`` is a comma followed by the
    end of its object or array (``pos`` at the comma, or just after it and its whitespace), else None."""
    n = len(text)
    j = pos
    if j >= n or text[j] != ",":
        j = pos - 1
        while j >= 0 and text[j] in _WS:
            j -= 1
        if j < 0 or text[j] != ",":
            return None
    k = j + 1
    while k < n and text[k] in _WS:
        k += 1
    i = j - 1
    while i >= 0 and text[i] in _WS:
        i -= 1
    if k >= n or i < 0 or text[i] in "{[,":  # "{,}", "[,,": no item before the comma
        return None
    opener = _innermost_open(text, j)
    if (opener, text[k]) == ("{", "}"):
        return "key", j
    if (opener, text[k]) == ("[", "]"):
        return "list item", j
    return None


def _innermost_open(text, end):
    """The bracket ("{" or "[") still open at ``end``, strings skipped; None at the top level."""
    stack = []
    i = 0
    while i < end:
        c = text[i]
        if c == '"':
            i += 1
            while i < end and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "{[":
            stack.append(c)
        elif c in "}]" and stack:
            stack.pop()
        i += 1
    return stack[-1] if stack else None


def _unterminated(text, start):
    """True when the string opened at ``start`` has no closing quote."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return False
        else:
            i += 1
    return True


_encode = _json.make_encoder(None, None, _json.encode_basestring, None, ":", ",", False, False, False)


def dumps(obj):
    """Compact JSON, UTF-8 text kept as is (Go's encoder does the same). Never yields text that cannot
    be encoded as UTF-8: a lone surrogate (from a str made in Python, or a non-UTF-8 byte carried by
    os.environ's surrogateescape) is written as U+FFFD, as Go writes invalid UTF-8."""
    s = "".join(_encode(obj, 0))
    if not s.isascii() and _has_surrogate(s):
        s = _replace_surrogates(s)
    return s


def read_bounded(fd, limit=None, size_hint=0):
    """Up to ``limit`` bytes (None: all) from ``fd`` until its end; ``size_hint`` (the file's size, when
    known) makes it one read as a rule. Raises OSError."""
    step = max(size_hint + 1, 1 << 16)
    chunks = []
    while limit is None or limit > 0:
        chunk = os.read(fd, step if limit is None else min(limit, step))
        if not chunk:
            break
        chunks.append(chunk)
        if limit is not None:
            limit -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def write_all(fd, data, offset=None):
    """Write every byte of ``data`` to ``fd`` (a pipe or a socket may take part of it per write): at the
    file position, or at ``offset`` with pwrite. Raises OSError."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[n:]
        if offset is not None:
            offset += n
