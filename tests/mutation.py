"""Mutation testing of the protocol layer and host-local's config and allocator: `make mutation`.

mutmut (its configuration is pyproject.toml's [tool.mutmut]) names a mutant after its file's path, and the
tests import the plugins as ``skb_plugins`` from plugins/, so it runs in a stage, build/work/mutation: a copy
of the checkout's files (tracked and new, as git lists them) where plugins/ is also laid out as
skb_plugins/. One module at a time: ``mutmut run 'MODULE.*'`` (the first run makes every mutant and
records which unit tests reach which function; later runs reuse that), then a score per module.

Score = killed / (killed + survived), where a timeout or a crash of the tests counts as killed, and a
mutant no unit test reaches ("no tests") or that made the tests suspiciously slow counts as survived.
A second score leaves out the survivors docs/MUTATION.md names as equivalent (each with its line, the
mutation and why no test can tell it apart); a survivor it does not name is a blind spot to fix.

    .venv/bin/python tests/mutation.py [--jobs N] [--min PERCENT] [--report] [MODULE...]

Without MODULE, every module of [tool.mutmut] source_paths; --report scores the last run again without
running it. Exit status 1 when a module scores below --min (default 90) without its equivalent mutants,
or when a survivor is neither killed nor named. Survivors are listed in build/work/mutation/survivors.txt
(those not named as equivalent in unexplained.txt); to see one:
``cd build/work/mutation && ../../../.venv/bin/mutmut show NAME``. Needs neither root nor the sandbox:
the unit tests run as they do outside tests/run (kernel tests skip themselves).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGE = os.path.join(ROOT, "build", "work", "mutation")
MUTMUT = os.path.join(os.path.dirname(sys.executable), "mutmut")

KILLED = {"killed", "timeout", "segfault", "caught by type check"}
SURVIVED = {"survived", "no tests", "suspicious"}


def stage():
    """A fresh copy of the checkout's files, plugins/ also as skb_plugins/ (the name the tests import)."""
    shutil.rmtree(STAGE, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):        # deleted in the work tree but still in the index
            continue
        dst = os.path.join(STAGE, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    shutil.copytree(os.path.join(STAGE, "plugins"), os.path.join(STAGE, "skb_plugins"))


def modules():
    """(module, its path in the stage) of every file [tool.mutmut] source_paths names, __init__ aside."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        paths = tomllib.load(f)["tool"]["mutmut"]["source_paths"]
    out = []
    for path in paths:
        if path.endswith(".py"):
            found = [path]
        else:
            top = os.path.join(ROOT, path.replace("skb_plugins/", "plugins/", 1))
            found = sorted(os.path.join(path, f) for f in os.listdir(top) if f.endswith(".py"))
        out += [(p[:-3].replace("/", "."), p) for p in found if not p.endswith("__init__.py")]
    return out


def equivalents():
    """The mutants docs/MUTATION.md names as equivalent (full mutmut names, in backquotes)."""
    with open(os.path.join(ROOT, "docs", "MUTATION.md"), encoding="utf-8") as f:
        return set(re.findall(r"`((?:skb|skb_plugins)\.[\w.]+\.x[_\u01c1][^`]*__mutmut_\d+)`", f.read()))


def statuses(path):
    from mutmut.stats import status_by_exit_code
    meta = os.path.join(STAGE, "mutants", path + ".meta")
    with open(meta, encoding="utf-8") as f:
        codes = json.load(f)["exit_code_by_key"]
    return {name: status_by_exit_code[code] for name, code in codes.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="parallel mutmut workers (default 2)")
    ap.add_argument("--min", type=float, default=90.0, help="lowest acceptable score per module, in percent")
    ap.add_argument("--report", action="store_true", help="score the last run again, without running mutmut")
    ap.add_argument("module", nargs="*", help="e.g. skb.cni.env or skb_plugins.hostlocal_ipam.allocator")
    args = ap.parse_args(argv)
    known = modules()
    unknown = set(args.module) - {m for m, _ in known}
    if unknown:
        ap.error(f"not in [tool.mutmut] source_paths: {', '.join(sorted(unknown))}")
    chosen = [(m, p) for m, p in known if not args.module or m in args.module]
    if not args.report:
        stage()
    named = equivalents()
    rows, survivors = [], []
    for module, path in chosen:
        log = os.path.join(STAGE, module + ".log")
        if not args.report:
            print(f"mutation: {module} (log: {os.path.relpath(log, ROOT)})", flush=True)
            with open(log, "wb") as out:
                rc = subprocess.run([MUTMUT, "run", "--max-children", str(args.jobs), f"{module}.*"], cwd=STAGE,
                                    stdout=out, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                print(f"mutation: mutmut failed on {module} (exit {rc}); see {log}", file=sys.stderr)
                return 2
        st = statuses(path)
        count = {s: sum(1 for v in st.values() if v == s) for s in set(st.values())}
        killed = sum(n for s, n in count.items() if s in KILLED)
        survived = sum(n for s, n in count.items() if s in SURVIVED)
        other = len(st) - killed - survived            # "not checked", "skipped", interrupted
        equivalent = sum(1 for n, v in st.items() if v in SURVIVED and n in named)
        score = 100.0 * killed / (killed + survived) if killed + survived else 100.0
        net = 100.0 * killed / (killed + survived - equivalent) if killed + survived - equivalent else 100.0
        rows.append((module, len(st), count.get("killed", 0), killed - count.get("killed", 0),
                     count.get("survived", 0), survived - count.get("survived", 0), other, equivalent, score, net))
        survivors += sorted(n for n, v in st.items() if v in SURVIVED)
    with open(os.path.join(STAGE, "survivors.txt"), "w", encoding="utf-8") as f:
        f.write("".join(n + "\n" for n in survivors))
    unexplained = [n for n in survivors if n not in named]
    with open(os.path.join(STAGE, "unexplained.txt"), "w", encoding="utf-8") as f:
        f.write("".join(n + "\n" for n in unexplained))
    print(f"\n{'module':38} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} {'untested':>8} "
          f"{'other':>5} {'equiv':>5} {'score':>6} {'w/o eq':>6}")
    for module, total, killed, timeout, survived, untested, other, equivalent, score, net in rows:
        print(f"{module:38} {total:7} {killed:6} {timeout:7} {survived:8} {untested:8} {other:5} {equivalent:5} "
              f"{score:5.1f}% {net:5.1f}%")
    low = [r[0] for r in rows if r[-1] < args.min]
    if low:
        print(f"mutation: below {args.min:g}% without the equivalent mutants: {', '.join(low)}", file=sys.stderr)
    if unexplained:
        print(f"mutation: {len(unexplained)} survivors neither killed nor named in docs/MUTATION.md "
              f"({os.path.relpath(os.path.join(STAGE, 'unexplained.txt'), ROOT)})", file=sys.stderr)
    return 1 if low or unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
