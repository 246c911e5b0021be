"""skb explain, review 16: a message two runtimes print (ocicni's and podman's "Error validating CNI config
file") names the one the line names, or both; containerd's load error of a file that does not parse is
explained down to the file and libcni's JSON error; a kubelet probe failure is the node's traffic to a pod,
not a CNI deadline; and what a message carried reaches the terminal escaped, while a check command still
pastes as the exact value."""
import io
import subprocess
import types

import pytest

from skb.tool import explain

CRIO_LINE = ('crio[700]: time="2026-11-27T10:00:00Z" level=error msg="Error validating CNI config file '
             '/etc/cni/net.d/10-pods.conflist: [failed to find plugin \\"ptp\\" in path [/opt/cni/bin/ '
             '/usr/libexec/cni/]]"')
VALIDATE = ('Error validating CNI config file /etc/cni/net.d/10-pods.conflist: [failed to find plugin "ptp" in path '
            '[/opt/cni/bin/ /usr/libexec/cni/]]')
CONTAINERD_LOAD = ('error="cni config load failed: failed to load CNI config list file /etc/cni/net.d/10-pods.'
                   "conflist: error parsing configuration list: invalid character '}' looking for beginning of object "
                   'key string: invalid cni config: failed to load cni config"')
PROBE = ('Readiness probe failed: Get "http://10.244.1.5:8080/healthz": context deadline exceeded '
         '(Client.Timeout exceeded while awaiting headers)')


def _text(layers):
    return "\n".join(explain._paragraph(layer) for layer in layers)


# ---------------------------------------------------------------------------------------------------
# 1. "Error validating CNI config file": CRI-O's ocicni and podman print the same words

def test_a_crio_line_is_explained_as_crio():
    layers = explain.match(CRIO_LINE)
    assert [layer.key for layer in layers] == ["crio-validate", "plugin-not-found"]
    assert layers[0].entry.family == "CRI-O"
    text = explain._paragraph(layers[0])
    assert "plugin_dirs" in text and "[crio.network]" in text and "/etc/crio/crio.conf.d/" in text, text
    assert "podman" not in text and "containers.conf" not in text, text
    assert "/etc/cni/net.d/10-pods.conflist" in text


@pytest.mark.parametrize("prefix", ["crio: ", "Nov 27 10:00:00 node1 crio[700]: "])
def test_other_crio_prefixes(prefix):
    assert explain.match(prefix + VALIDATE)[0].key == "crio-validate"


@pytest.mark.parametrize("prefix", ["podman[4242]: ", 'podman: time="2026-11-27T10:00:00Z" level=warning msg="',
                                    "WARN[0000] "])
def test_a_podman_line_is_explained_as_podman(prefix):
    layers = explain.match(prefix + VALIDATE)
    assert [layer.key for layer in layers] == ["podman-validate", "plugin-not-found"]
    text = explain._paragraph(layers[0])
    assert "cni_plugin_dirs in containers.conf" in text and "crio.conf" not in text, text


def test_a_line_that_names_neither_names_both():
    """ocicni's loadNetworks and podman's libnetwork both print "Error validating CNI config file %s: %v"
    and skip the file: without the program's name the answer gives both settings."""
    layers = explain.match('time="2026-11-27T10:00:00Z" level=warning msg="' + VALIDATE + '"')
    assert [layer.key for layer in layers] == ["cni-validate", "plugin-not-found"]
    text = explain._paragraph(layers[0])
    for words in ("CRI-O", "podman", "plugin_dirs in crio.conf's [crio.network]", "/etc/crio/crio.conf.d/",
                  "cni_plugin_dirs in containers.conf", "/etc/cni/net.d/10-pods.conflist"):
        assert words in text, (words, text)


class _Journal:
    """journalctl as it prints a CRI-O line: with the unit's name, unless -o cat drops it."""

    def __init__(self):
        self.argv = None

    def __call__(self, argv, **kwargs):
        self.argv = argv
        fmt = argv[argv.index("-o") + 1] if "-o" in argv else "short"
        line = CRIO_LINE if fmt != "cat" else CRIO_LINE.split(": ", 1)[1]
        return subprocess.CompletedProcess(argv, 0, ("Nov 27 10:00:00 node1 " if fmt != "cat" else "")
                                           .encode() + line.encode() + b"\n", b"")


def test_the_journal_keeps_the_units_name(monkeypatch):
    """--journal read with -o cat lost "crio[700]:", the one word that tells CRI-O's line from podman's."""
    fake = _Journal()
    monkeypatch.setattr(explain.shutil, "which", lambda name: "/usr/bin/journalctl")
    monkeypatch.setattr(explain.subprocess, "run", fake)
    monkeypatch.setattr(explain, "_doctor", lambda *a, **k: 0)
    out = io.StringIO()
    opts = types.SimpleNamespace(log_file=None, color="never", json=False)
    assert explain.explain_journal(opts, out) == 0
    assert "cat" not in fake.argv, fake.argv
    assert "CRI-O (ocicni) drops the network of /etc/cni/net.d/10-pods.conflist" in out.getvalue(), out.getvalue()


# ---------------------------------------------------------------------------------------------------
# 2. containerd's load error of a file that does not parse

def test_a_conflist_that_does_not_parse_is_explained_to_the_json_error():
    layers = explain.match(CONTAINERD_LOAD)
    assert [layer.key for layer in layers] == ["cni-config-load-failed", "load-config-file", "config-parse"]
    text = _text(layers[1:])
    assert "/etc/cni/net.d/10-pods.conflist" in text
    assert "invalid character '}' looking for beginning of object key string" in text, text
    assert "invalid cni config" not in text.split("\n")[-1] and "failed to load cni config\"" not in text
    checks = [c for layer in layers[1:] for c in layer.checks()]
    assert any(c.startswith("skb doctor") for c in checks), checks
    assert any("json" in c and "/etc/cni/net.d/10-pods.conflist" in c for c in checks), checks
    assert all(layer.fix() for layer in layers[1:])


def test_a_conf_file_that_libcni_refuses():
    layers = explain.match("cni config load failed: failed to load CNI config file /etc/cni/net.d/10-pods.conf: "
                           "error parsing configuration: missing 'type': invalid cni config: failed to load cni config")
    assert [layer.key for layer in layers] == ["cni-config-load-failed", "load-config-file", "config-parse"]
    assert "missing 'type'" in layers[2].title() and "/etc/cni/net.d/10-pods.conf" in layers[2].title()


def test_libcnis_own_words_wrap_what_skb_knows():
    layers = explain.match("error parsing configuration list: no 'plugins' key")
    assert [layer.key for layer in layers] == ["config-parse", "no-plugins-key"]


# ---------------------------------------------------------------------------------------------------
# 3. a kubelet probe is the pod's traffic from the node

def test_a_probe_timeout_is_not_a_cni_deadline():
    layers = explain.match(PROBE)
    assert [layer.key for layer in layers] == ["kubelet-probe"]
    layer = layers[0]
    assert {"rp-filter-strict", "forwarding-off", "pod-range-overlap"} <= set(layer.entry.codes)
    assert "node" in layer.entry.groups
    assert "ip route get 10.244.1.5" in " ".join(layer.checks())
    text = explain._paragraph(layer)
    assert "readiness" in text.lower() and "10.244.1.5" in text and "timeoutSeconds" in text, text


@pytest.mark.parametrize("text, words", [
    ('Liveness probe failed: Get "http://10.244.0.5:8080/healthz": dial tcp 10.244.0.5:8080: connect: connection '
     "refused", "nothing listens"),
    ("Startup probe failed: dial tcp 10.244.0.5:5432: connect: no route to host", "no way to"),
    ('I1127 10:00:00.000000    1234 prober.go:107] "Probe failed" probeType="Readiness" pod="default/web-0" '
     'podUID="5e2c" containerName="web" probeResult="failure" output="Get \\"http://10.244.1.5:8080/healthz\\": '
     'context deadline exceeded (Client.Timeout exceeded while awaiting headers)"', "timeoutSeconds"),
])
def test_probe_failures_say_what_the_error_means(text, words):
    layers = explain.match(text)
    assert [layer.key for layer in layers] == ["kubelet-probe"], [layer.key for layer in layers]
    assert words in explain._paragraph(layers[0]), explain._paragraph(layers[0])


def test_a_runtimes_deadline_is_still_a_deadline():
    assert [layer.key for layer in explain.match("Error adding network: context deadline exceeded")] == \
        ["cni-add-network", "deadline"]


# ---------------------------------------------------------------------------------------------------
# 4. control characters from the message

ESC = 'failed to find plugin "ptp\x1b[31m" in path [/opt/cni/bin]'


def test_the_paragraph_escapes_what_the_message_carried():
    layer, = explain.match(ESC)
    text = explain._paragraph(layer)
    assert "\x1b" not in text, text
    assert 'the plugin "ptp\\x1b[31m"' in text and "fix: install ptp\\x1b[31m into" in text, text


def _pasted(word):
    """What bash makes of a word pasted as printed."""
    return subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, timeout=10).stdout


@pytest.mark.parametrize("name", ["/opt/ptp\x1b[31m", "/opt/a'b\x07\\c", "/opt/x\u202ey", "/opt/p\udcff"])
def test_a_check_command_pastes_as_the_exact_value(name):
    """A value with a control character is written $'...': visible, and once pasted the exact value (a byte
    that was not UTF-8 as that byte); plain values keep shlex's quoting."""
    layer, = explain.match(f'failed to find plugin "ptp" in path [{name} /usr/lib/cni]')
    check = layer.checks()[0]
    assert check.isprintable(), check
    assert check.endswith(" /usr/lib/cni"), check
    word = check[len("ls -l "):-len(" /usr/lib/cni")]
    assert _pasted(word) == name.encode("utf-8", "surrogateescape"), (word, _pasted(word))
    assert explain.match('failed to find plugin "p$(x)" in path [/b]')[0].checks()[1].startswith("command -v 'p$(x)';")


def test_the_journal_summary_escapes_the_line_and_the_title(tmp_path, monkeypatch):
    log = tmp_path / "crio.log"
    log.write_bytes(b'\x1b]52;c;aGk=\x07 ' + ESC.encode() + b"\n")
    monkeypatch.setattr(explain, "_doctor", lambda *a, **k: 0)
    out = io.StringIO()
    opts = types.SimpleNamespace(log_file=[str(log)], color="never", json=False)
    assert explain.explain_journal(opts, out) == 0
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue(), out.getvalue()
    assert "\\x1b]52;c;aGk=\\x07" in out.getvalue()
