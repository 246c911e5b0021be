"""SHA-512 in hex, for names derived from an attachment: ptp's host veth name, the masquerade chain and
nftables names, cnitool's container id. One helper, without ``hashlib``: it costs ~1 ms more per call
than the C module it wraps, and its OpenSSL backend is not in the frozen bundle. The C module is
``_sha512`` on Python 3.11 and ``_sha2`` from 3.12; it is loaded on first use only (a plugin call that
derives no name never pays for it).
"""

__all__ = ["sha512_hex"]

_sha512 = None


def sha512_hex(data):
    """The SHA-512 digest of ``data`` (str, encoded as UTF-8, or bytes) in lower-case hex."""
    global _sha512
    if _sha512 is None:
        try:
            from _sha512 import sha512      # Python 3.11
        except ImportError:
            try:
                from _sha2 import sha512    # Python >= 3.12
            except ImportError:             # a build without the C modules
                from hashlib import sha512
        _sha512 = sha512
    return _sha512(data.encode() if isinstance(data, str) else data).hexdigest()
