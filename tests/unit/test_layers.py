"""The layers of skb and their rules (docs/ARCHITECTURE.md#layers), checked on the source with ``ast``:
every import counts, also those inside functions.

- ``skb.cni`` <- ``skb.linux`` <- ``skb.plugin`` <- ``skb_plugins`` (plugins/) <- ``skb.applets``: a module
  imports only from its own layer or the ones to its left.
- ``skb.tool`` (the ``skb`` command) may import anything but a plugin; ``skb.install`` imports nothing of
  skb but itself (build/bundle.py runs it on the build host's Python); the library never imports a plugin
  (in-process IPAM goes through ``skb.plugin.skel.IN_PROCESS``, filled by the applet entry).
- no import cycles between modules.
- the import budget of each applet: the exact set of skb modules that one call loads, and a bound on the
  standard-library modules it loads, run from source in a subprocess.
- every ``docs/<file>.md#<anchor>`` cited in the code names a heading that exists.
"""
import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import in_sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = {"skb": os.path.join(ROOT, "skb"), "skb_plugins": os.path.join(ROOT, "plugins")}
RANK = {"cni": 0, "linux": 1, "plugin": 2, "plugins": 3, "applets": 4}


def source_modules():
    found = {}
    for package, top in PACKAGES.items():
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, top)
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for f in filenames:
                if f.endswith(".py"):
                    found[prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"] = os.path.join(dirpath, f)
    return found


MODULES = source_modules()


def imports_of(path, name):
    """(imported module, line) of every import in the file, at any depth, resolved to our modules."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for t in targets:
            if t.split(".")[0] in PACKAGES:
                out.append((t, node.lineno))
    return out


def layer(module):
    parts = module.split(".")
    if parts[0] == "skb_plugins":
        return "plugins"
    if len(parts) == 1:
        return "root"
    return parts[1]


def graph():
    return {m: imports_of(p, m) for m, p in MODULES.items()}


def test_layers_import_only_downwards():
    bad = []
    for module, imports in graph().items():
        src = layer(module)
        for target, line in imports:
            dst = layer(target)
            where = f"{MODULES[module]}:{line}: {module} imports {target}"
            if dst == "root" or target.startswith(module.rsplit(".", 1)[0] + ".") and src == dst:
                continue
            if src == "install":
                if dst != "install":
                    bad.append(f"{where} (skb.install imports nothing of skb but itself)")
            elif src == "tool":
                if dst == "plugins":
                    bad.append(f"{where} (the skb command never imports a plugin)")
            elif dst == "plugins" and src != "plugins":
                bad.append(f"{where} (the library never imports a plugin)")
            elif src in RANK and (dst not in RANK or RANK[dst] > RANK[src]):
                bad.append(f"{where} (layer {src} may import only {[k for k, v in RANK.items() if v <= RANK[src]]})")
    assert not bad, "\n".join(bad)


def test_bundle_script_imports_only_the_installer():
    path = os.path.join(ROOT, "build", "bundle.py")
    wrong = [(t, line) for t, line in imports_of(path, "bundle") if not t.startswith("skb.install")]
    assert not wrong, f"build/bundle.py runs on the build host's python: {wrong}"


def test_no_import_cycles():
    edges = {m: sorted({t for t, _ in imps if t in MODULES and t != m}) for m, imps in graph().items()}
    # Tarjan's strongly connected components
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


# ---------------------------------------------------------------------------------------------------
# import budget
#
# Each case runs one applet call from source in a fresh ``python -I -S`` (no site: only what the call
# itself loads) and records the modules it added to sys.modules. The skb/skb_plugins modules must be
# exactly those in tests/unit/import_budget.json; the standard-library modules (built into the interpreter
# or not: that differs between builds) must be among those listed (a newer Python may load fewer, or
# others: list both, e.g. _sha512 and _sha2).
# After a deliberate change (a new module on the call path, measured: see docs/REFERENCE.md#where-the-time-goes), update the
# file with:   SKB_UPDATE_IMPORT_BUDGET=1 bash tests/run tests/unit/test_layers.py
# and say in the commit what the new module costs.

BUDGET_FILE = os.path.join(os.path.dirname(__file__), "import_budget.json")

CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    before = set(sys.modules)
    out_path = sys.argv[2]
    real_exit = os._exit

    def dump(code=0):
        new = sorted(set(sys.modules) - before)
        with open(out_path, "w") as f:
            f.write("\\n".join(new))
        real_exit(code)

    os._exit = dump
    from skb.applets import main
    dump(main(sys.argv[3:]) or 0)
""")


def _conf(plugin, tmp_path, version="1.1.0"):
    conf = {"cniVersion": version, "name": "budget", "type": plugin}
    if plugin in ("ptp", "host-local"):
        conf["ipam"] = {"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/24"}]],
                        "dataDir": str(tmp_path / "data")}
    return conf


CASES = [("loopback", "STATUS"), ("ptp", "STATUS"), ("ptp", "VERSION"), ("host-local", "ADD"), ("debug", "ADD")]


def _load(applet, command, tmp_path):
    if command == "ADD" and not in_sandbox():
        pytest.skip("a plugin's ADD runs only inside the sandbox (tests/run)")
    paths = tmp_path / "path"
    paths.mkdir()
    for package, top in PACKAGES.items():
        os.symlink(top, paths / package)
    cni_bin = tmp_path / "bin"
    cni_bin.mkdir()
    fake = cni_bin / "host-local"          # ptp STATUS delegates: an IPAM that answers "ready"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command, "CNI_CONTAINERID": "budget1",
           "CNI_NETNS": "/run/netns/skb-budget-none" if command == "ADD" else "", "CNI_IFNAME": "eth0",
           "CNI_ARGS": "", "CNI_PATH": str(cni_bin)}
    out = tmp_path / "modules"
    p = subprocess.run([sys.executable, "-I", "-S", "-c", CHILD, str(paths), str(out), applet], env=env,
                       input=json.dumps(_conf(applet, tmp_path)).encode(), capture_output=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    loaded = out.read_text().split()
    ours = sorted(m for m in loaded if m.split(".")[0] in PACKAGES)
    stdlib = sorted(m for m in loaded if m.split(".")[0] not in PACKAGES)
    return ours, stdlib


@pytest.mark.parametrize("applet,command", CASES)
def test_import_budget(applet, command, tmp_path):
    ours, stdlib = _load(applet, command, tmp_path)
    key = f"{applet} {command}"
    if os.environ.get("SKB_UPDATE_IMPORT_BUDGET") == "1":
        budget = json.load(open(BUDGET_FILE)) if os.path.exists(BUDGET_FILE) else {}
        old = budget.get(key, {}).get("stdlib", [])
        budget[key] = {"skb": ours, "stdlib": sorted(set(old) | set(stdlib))}
        with open(BUDGET_FILE, "w") as f:
            json.dump(budget, f, indent=1, sort_keys=True)
            f.write("\n")
        return
    with open(BUDGET_FILE) as f:
        want = json.load(f)[key]
    assert ours == want["skb"], (f"{key} loads other skb modules than its budget: added "
                                 f"{sorted(set(ours) - set(want['skb']))}, gone {sorted(set(want['skb']) - set(ours))}")
    extra = sorted(set(stdlib) - set(want["stdlib"]))
    assert not extra, f"{key} loads standard-library modules beyond its budget: {extra}"


# ---------------------------------------------------------------------------------------------------
# citations

def _anchors(doc):
    out = set()
    with open(doc, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"#+\s+(.*)", line)
            if m:
                slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
                out.add(slug)
    return out


def test_every_docs_citation_resolves():
    cited = []
    for top in (os.path.join(ROOT, "skb"), os.path.join(ROOT, "plugins"), os.path.join(ROOT, "build"),
                os.path.join(ROOT, "tests")):
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "work")]
            for f in filenames:
                if f.endswith((".py", ".c")):
                    path = os.path.join(dirpath, f)
                    with open(path, encoding="utf-8") as fh:
                        for n, line in enumerate(fh, 1):
                            for doc, anchor in re.findall(r"docs/([A-Za-z_-]+\.md)(?:#([\w-]+))?", line):
                                cited.append((path, n, doc, anchor))
    assert cited
    missing = []
    for path, n, doc, anchor in cited:
        full = os.path.join(ROOT, "docs", doc)
        if not os.path.exists(full):
            missing.append(f"{path}:{n}: docs/{doc} does not exist")
        elif anchor and anchor not in _anchors(full):
            missing.append(f"{path}:{n}: docs/{doc} has no heading #{anchor}")
    assert not missing, "\n".join(missing)


def test_no_citation_of_documents_outside_the_repository():
    """Facts from the specification and the reference plugins are written in docs/, in the project's
    words; code cites docs/..., never reference documents that are not in the repository."""
    bad = []
    for m, path in MODULES.items():
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if re.search(r"(cni-spec|reference-plugins|runtimes|performance)\.md", line) and "docs/" not in line:
                    bad.append(f"{path}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)
