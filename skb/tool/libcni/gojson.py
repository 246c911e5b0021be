"""Go's JSON encoding and decoder messages, so the bytes handed to plugins and written to the cache match
libcni's, and type errors read as Go's decoder words them."""
import json
import re

from skb.cni import jsonio
from skb.cni.invoke import go_quote, json_kind as _json_kind
from skb.cni.netconf import fold
from skb.tool.libcni.errors import LibcniError

__all__ = ["MAX_DEPTH", "too_deep", "go_marshal", "go_type", "go_quote", "_json_kind", "_decode", "_field",
           "_map_field", "_spellings", "_struct_field"]
_SURROGATE = re.compile("[\ud800-\udfff]")


def _go_numbers(obj):
    # Go decodes every JSON number into float64 and writes integral values without a fraction.
    if isinstance(obj, float) and obj.is_integer() and abs(obj) < 1e21:
        return int(obj)
    if isinstance(obj, dict):
        return {k: _go_numbers(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_go_numbers(v) for v in obj]
    return obj


def go_marshal(obj, sort_keys=True):
    """JSON bytes as Go's ``json.Marshal`` of decoded JSON writes them: compact, map keys sorted,
    ``<``, ``>``, ``&``, U+2028 and U+2029 escaped, other text as UTF-8."""
    text = json.dumps(_go_numbers(obj), sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                   ("\u2029", "\\u2029")):
        text = text.replace(c, esc)
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (a "\ud800" escape, or a non-UTF-8 byte of a file name): Go writes U+FFFD.
        return _SURROGATE.sub("\ufffd", text).encode()


def go_type(v):
    """Go's %T of a value decoded into interface{}: libcni's messages carry it word for word ("invalid type
    float64 for disableCheck"), where skb's own messages describe a value (``skb.cni.errors.describe``)."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "[]interface {}"
    return "map[string]interface {}"




# Arrays and objects nested deeper than this are refused where the skb command decodes JSON (conflists,
# CAP_ARGS): no configuration comes near it, and everything that walks the value afterwards (Go's number
# rules, the encoder) stays far inside the interpreter's recursion limit, whatever its stack holds already.
MAX_DEPTH = 200


def too_deep(obj, limit=MAX_DEPTH):
    """True when arrays and objects nest more than ``limit`` levels in ``obj`` (walked without recursion)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def _decode(data, where):
    try:
        obj = jsonio.loads(data)
    except jsonio.JSONSyntaxError as e:
        raise LibcniError(f"{where}: {e}") from None
    if too_deep(obj):
        raise LibcniError(f"{where}: nesting too deep (more than {MAX_DEPTH} levels of arrays and objects)")
    return obj


def _spellings(obj, key):
    """The values of the keys of ``obj`` that Go's decoder reads into the struct field ``key`` (equal to it
    under Unicode simple case folding, ``skb.cni.netconf.fold``), in document order; none when ``obj`` is
    not an object."""
    if not isinstance(obj, dict):
        return []
    want = fold(key)
    return [v for k, v in obj.items() if fold(k) == want]


def _field(obj, key):
    """A string, number or boolean struct field as Go's decoder fills it: every spelling of ``key`` is
    decoded into it in document order, so the last one wins, and null changes nothing
    (docs/REFERENCE.md#decoding-a-configuration)."""
    found = None
    for v in _spellings(obj, key):
        if v is not None:
            found = v
    return found


def _struct_field(obj, key, sub):
    """The field ``sub`` of the struct field ``key``: every spelling of ``key`` is decoded into the same
    struct, so the last spelling of ``sub`` in any of them wins (``"ipam": {"type": "a"}, "IPAM": {}``
    keeps "a")."""
    found = None
    for inner in _spellings(obj, key):
        v = _field(inner, sub)
        if v is not None:
            found = v
    return found


def _map_field(obj, key):
    """A map struct field (``map[string]bool``): null resets it, and each spelling that is an object adds
    its entries to the map, a later entry replacing an earlier one of the same key (Go keeps a map's
    entries when it decodes another object into it)."""
    found = None
    for v in _spellings(obj, key):
        if v is None:
            found = None
        elif isinstance(v, dict):
            found = {**(found or {}), **v}
    return found
