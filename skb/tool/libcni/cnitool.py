"""cnitool's conventions: its strict CNI_ARGS parser and its container id."""
import hashlib
import os

from skb.cni.invoke import go_quote
from skb.tool.libcni.errors import LibcniError

def parse_cnitool_args(s):
    """cnitool's strict CNI_ARGS parser: every ``K=V`` pair needs a non-empty key and value."""
    out = []
    for pair in s.split(";"):
        kv = pair.split("=")
        if len(kv) != 2 or not kv[0] or not kv[1]:
            raise LibcniError(f"invalid CNI_ARGS pair {go_quote(pair)}")
        out.append((kv[0], kv[1]))
    return out


def go_abs(path):
    """filepath.Abs: absolute and cleaned (also collapses a leading ``//``)."""
    p = os.path.normpath(os.path.join(os.getcwd(), path))
    return "/" + p.lstrip("/") if p.startswith("//") else p


def cnitool_container_id(netns_path):
    """``cnitool-`` + the first 10 bytes of SHA-512 of the absolute netns path, in hex (so ADD and DEL
    with the same path name the same attachment)."""
    return "cnitool-" + hashlib.sha512(go_abs(netns_path).encode()).hexdigest()[:20]
