"""Go's JSON encoding and decoder messages, so the bytes handed to plugins and written to the cache match
libcni's, and type errors read as Go's decoder words them."""
import json

from skb.cni import jsonio
from skb.cni.invoke import go_quote, json_kind as _json_kind
from skb.tool.libcni.errors import LibcniError

__all__ = ["go_marshal", "go_type", "go_quote", "_json_kind", "_decode", "_field"]

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
    return text.encode()


def go_type(v):
    """Go's %T of a value decoded into interface{}."""
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




def _decode(data, where):
    try:
        return jsonio.loads(data)
    except jsonio.JSONSyntaxError as e:
        raise LibcniError(f"{where}: {e}") from None


def _field(obj, key):
    """A struct field as Go's decoder finds it: exact key first, else a case-insensitive match."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    low = key.lower()
    for k, v in obj.items():
        if k.lower() == low:
            return v
    return None
