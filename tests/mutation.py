"""Mutation testing of the protocol layer and host-local's config and allocator: `make mutation`.

mutmut (its configuration is pyproject.toml's [tool.mutmut]) names a mutant after its file's path, and the
tests import the plugins as ``skb_plugins`` from plugins/, so it runs in a stage, build/work/mutation: a copy
of the checkout's files (tracked and new, as git lists them) where plugins/ is also laid out as
skb_plugins/. One module at a time: ``mutmut run 'MODULE.*'`` (the first run makes every mutant and
records which unit tests reach which function; later runs reuse that), then a score per module.

Score = killed / (killed + survived), where a timeout or a crash of the tests counts as killed, and a
mutant no unit test reaches ("no tests") or that made the tests suspiciously slow counts as survived.
The equivalent mutants and the scores are recorded in docs/MUTATION.md.

    .venv/bin/python tests/mutation.py [--jobs N] [--min PERCENT] [MODULE...]

Without MODULE, every module of [tool.mutmut] source_paths. Exit status 1 when a module scores below
--min (default 90). Survivors are listed in build/work/mutation/survivors.txt; to see one:
``cd build/work/mutation && ../../../.venv/bin/mutmut show NAME``. Needs neither root nor the sandbox:
the unit tests run as they do outside tests/run (kernel tests skip themselves).
"""
import argparse
import json
import os
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
    ap.add_argument("module", nargs="*", help="e.g. skb.cni.env or skb_plugins.hostlocal_ipam.allocator")
    args = ap.parse_args(argv)
    known = modules()
    unknown = set(args.module) - {m for m, _ in known}
    if unknown:
        ap.error(f"not in [tool.mutmut] source_paths: {', '.join(sorted(unknown))}")
    chosen = [(m, p) for m, p in known if not args.module or m in args.module]
    stage()
    rows, survivors = [], []
    for module, path in chosen:
        log = os.path.join(STAGE, module + ".log")
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
        score = 100.0 * killed / (killed + survived) if killed + survived else 100.0
        rows.append((module, len(st), count.get("killed", 0), killed - count.get("killed", 0),
                     count.get("survived", 0), survived - count.get("survived", 0), other, score))
        survivors += sorted(n for n, v in st.items() if v in SURVIVED)
    with open(os.path.join(STAGE, "survivors.txt"), "w", encoding="utf-8") as f:
        f.write("".join(n + "\n" for n in survivors))
    print(f"\n{'module':40} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} {'untested':>8} "
          f"{'other':>5} {'score':>6}")
    for module, total, killed, timeout, survived, untested, other, score in rows:
        print(f"{module:40} {total:7} {killed:6} {timeout:7} {survived:8} {untested:8} {other:5} {score:5.1f}%")
    low = [r[0] for r in rows if r[-1] < args.min]
    if low:
        print(f"mutation: below {args.min:g}%: {', '.join(low)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
