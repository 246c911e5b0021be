"""Terminal styling and error lines of the ``skb`` command, in one place."""
import os
import shlex
import sys



class Style:
    """ANSI colour when enabled (a terminal, NO_COLOR unset or empty as no-color.org says, TERM not dumb, or
    --color always)."""

    def __init__(self, enabled):
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream, when="auto"):
        if when == "always":
            return cls(True)
        if when == "never":
            return cls(False)
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        return cls(tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb")

    def _wrap(self, code, text):
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def red(self, text):
        return self._wrap("31", text)

    def yellow(self, text):
        return self._wrap("33", text)

    def green(self, text):
        return self._wrap("32", text)

    def bold(self, text):
        return self._wrap("1", text)

    def dim(self, text):
        return self._wrap("2", text)


def visible(text, keep=""):
    """``text`` with every character a terminal would act on (escape sequences, carriage returns, C1 and
    bidirectional controls), but those in ``keep``, written as an escape (``\x1b``, ``\n``...): what a
    plugin, a record or a file put in a message can neither move the cursor nor set the clipboard (OSC 52),
    nor, in one-line output, start a line of its own. Not text: its str() (None: nothing)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def fail(prog, msg, opts=None):
    style = Style.for_stream(sys.stderr, getattr(opts, "color", "auto"))
    print(f"{prog}: {style.red('error')}: {visible(str(msg), keep=chr(10) + chr(9))}", file=sys.stderr)
    return 1


def shell_word(word):
    """``word`` for a shell: shlex's quoting, or $'...' (bash, zsh, ksh) when it holds a character a terminal
    would act on: printed, it stays visible; pasted, it is the exact value (a byte that was not UTF-8, which
    Python holds as a lone surrogate, as that byte)."""
    if word.isprintable():
        return shlex.quote(word)
    out = []
    for c in word:
        n = ord(c)
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        elif 0xDC80 <= n <= 0xDCFF:
            out.append(f"\\x{n - 0xDC00:02x}")
        else:
            out.append(f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")
    return "$'" + "".join(out) + "'"
