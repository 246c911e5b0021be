"""Every finding code skb doctor can print is listed in its --help and in docs/DIAGNOSTICS.md (an operator
looks a code up there), read from the source: each Finding(...) call's code argument."""
import ast
import glob
import os
import re

from skb.tool.doctor.command import EPILOG

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _codes():
    codes = set()
    for path in glob.glob(os.path.join(ROOT, "skb", "tool", "doctor", "*.py")):
        tree = ast.parse(open(path).read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and len(node.args) > 1:
                code = node.args[1]
                if isinstance(code, ast.Constant):   # (probe.py's NEEDS names its codes: all literals here too)
                    codes.add(code.value)
    from skb.tool.doctor.probe import NEEDS
    return codes | {code for _what, code in NEEDS.values()}


def test_the_source_has_finding_codes():
    assert {"no-config", "rp-filter-strict", "default-network", "probe", "forwarding-off"} <= _codes()


def test_every_code_is_in_the_help():
    listed = set(re.findall(r"[a-z]+(?:-[a-z]+)*", EPILOG.split("Codes:", 1)[1].split(". A leaked")[0]))
    assert _codes() - listed == set()


def test_every_code_is_in_diagnostics_md():
    text = open(os.path.join(ROOT, "docs", "DIAGNOSTICS.md")).read()
    table = "\n".join(line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `"))
    documented = set(re.findall(r"`([a-z]+(?:-[a-z]+)*)`", table))
    assert _codes() - documented == set()
