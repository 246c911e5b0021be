"""IP addresses and networks as small immutable values, on ``_socket`` alone.

The standard library's ``ipaddress`` is what these mirror (and what the tests check them against), but
importing it costs ~5 ms (functools, re ...) on every plugin call, where Go's whole host-local ADD takes
~4 ms. So the hot path uses these: an address is (family, integer), a network adds a prefix length.
Text is always written the way Go's ``net.IP.String`` writes it, because that text names host-local's
reservation files and appears in results: IPv4-mapped IPv6 becomes IPv4, IPv6 is compressed lower case.
"""
from _socket import AF_INET, AF_INET6, inet_ntop, inet_pton

_V4MAPPED = b"\0" * 10 + b"\xff\xff"


def _fmt6(b):
    """16 bytes as Go writes IPv6: the longest run (first on ties) of two or more zero groups becomes
    ``::``; lower-case hex without leading zeros (glibc's inet_ntop writes ``::1.2.3.4`` instead)."""
    words = [b[i] << 8 | b[i + 1] for i in range(0, 16, 2)]
    start, length, i = -1, 1, 0
    while i < 8:
        if words[i]:
            i += 1
            continue
        j = i
        while j < 8 and not words[j]:
            j += 1
        if j - i > length:
            start, length = i, j - i
        i = j
    if start < 0:
        return ":".join(format(w, "x") for w in words)
    return (":".join(format(w, "x") for w in words[:start]) + "::" +
            ":".join(format(w, "x") for w in words[start + length:]))


def parse_text(s):
    """``(canonical text, family 4|6, was_ipv4_mapped)`` for an address string, or None if it is not one."""
    try:
        if ":" in s:
            b = inet_pton(AF_INET6, s)
            if b[:12] == _V4MAPPED:
                return inet_ntop(AF_INET, b[12:]), 4, True
            return _fmt6(b), 6, False
        return inet_ntop(AF_INET, inet_pton(AF_INET, s)), 4, False
    except (OSError, ValueError, TypeError):  # ValueError: embedded NUL or non-ASCII text
        return None


class IP:
    """An IPv4 or IPv6 address: ``family`` (4 or 6) and ``value`` (an int). Ordered within a family."""

    __slots__ = ("family", "value")

    def __init__(self, family, value):
        object.__setattr__(self, "family", family)
        object.__setattr__(self, "value", value)

    @classmethod
    def parse(cls, s):
        """Parse text; None if ``s`` is not an address. IPv4-mapped IPv6 is read as IPv4 (as Go does)."""
        try:
            if ":" in s:
                b = inet_pton(AF_INET6, s)
                if b[:12] == _V4MAPPED:
                    return cls(4, int.from_bytes(b[12:], "big"))
                return cls(6, int.from_bytes(b, "big"))
            return cls(4, int.from_bytes(inet_pton(AF_INET, s), "big"))
        except (OSError, ValueError, TypeError):
            return None

    @property
    def bits(self):
        return 32 if self.family == 4 else 128

    @property
    def packed(self):
        return self.value.to_bytes(4 if self.family == 4 else 16, "big")

    def __add__(self, n):
        return IP(self.family, self.value + n)

    def __sub__(self, n):
        return IP(self.family, self.value - n)

    def __str__(self):
        if self.family == 4:
            return inet_ntop(AF_INET, self.packed)
        return _fmt6(self.packed)

    def __repr__(self):
        return f"IP({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, IP) and self.family == other.family and self.value == other.value

    def __lt__(self, other):
        return (self.family, self.value) < (other.family, other.value)

    def __le__(self, other):
        return (self.family, self.value) <= (other.family, other.value)

    def __hash__(self):
        return hash((self.family, self.value))

    def __setattr__(self, name, value):
        raise AttributeError("IP is immutable")


class Net:
    """A network: ``family``, ``prefixlen`` and the address it was written with (``ip``, host bits kept,
    as CNI results keep them). ``network``/``last`` are its first and last addresses."""

    __slots__ = ("ip", "prefixlen")

    def __init__(self, ip, prefixlen):
        object.__setattr__(self, "ip", ip)
        object.__setattr__(self, "prefixlen", prefixlen)

    @classmethod
    def parse(cls, s):
        """``"10.1.0.5/24"`` -> Net; None if malformed (no prefix, prefix out of range, not an address)."""
        if not isinstance(s, str):
            return None
        addr, slash, plen = s.partition("/")
        if not slash or not (plen.isascii() and plen.isdigit()):
            return None
        digits = plen.lstrip("0")   # Go reads the prefix length with any number of leading zeros
        if len(digits) > 3:
            return None
        ip = IP.parse(addr)
        if ip is None:
            return None
        n = int(digits or "0")
        if ":" in addr and ip.family == 4:  # IPv4-mapped: the prefix counted 128 bits
            n -= 96
            if n < 0:
                return None
        if n > ip.bits:
            return None
        return cls(ip, n)

    @property
    def family(self):
        return self.ip.family

    @property
    def hostmask(self):
        return (1 << (self.ip.bits - self.prefixlen)) - 1

    @property
    def network(self):
        return IP(self.ip.family, self.ip.value & ~self.hostmask)

    @property
    def last(self):
        return IP(self.ip.family, self.ip.value | self.hostmask)

    @property
    def size(self):
        return self.hostmask + 1

    def has_host_bits(self):
        return bool(self.ip.value & self.hostmask)

    def __contains__(self, ip):
        return ip.family == self.ip.family and (ip.value | self.hostmask) == (self.ip.value | self.hostmask)

    def overlaps(self, other):
        return self.family == other.family and (self.network in other or other.network in self)

    def __str__(self):
        return f"{self.ip}/{self.prefixlen}"

    def __repr__(self):
        return f"Net({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, Net) and self.ip == other.ip and self.prefixlen == other.prefixlen

    def __hash__(self):
        return hash((self.ip, self.prefixlen))

    def __setattr__(self, name, value):
        raise AttributeError("Net is immutable")
