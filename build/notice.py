"""NOTICE of a staged bundle: every piece of third-party software the bundle ships, found by reading the
bundle itself, with its origin, version, license and the full copyright text it came with.

    notice.py BUNDLE_DIR --launcher FILE --pyinstaller PYTHON --out FILE

How each file of the bundle is traced (standard library only; run on the build host by bundle.py stage):

- ELF libraries and extension modules (``lib/``, ``_internal/``): the Debian package that installed the
  file of the same name on this build host (``dpkg -S``), preferring this machine's multiarch dir and the
  interpreter's ``lib-dynload``; grouped by Debian *source* package (libc6 -> glibc).
- Standard-library modules (``_internal/**/*.pyc`` outside skb and skb_plugins): the package owning
  ``/usr/lib/python3.X/<module>.py``.
- ``skb-cni`` (the program the launchers start): PyInstaller's bootloader and bootstrap modules, from the
  PyInstaller the build ran (its version and license file from its dist-info).
- The launchers: static, with the C library they were linked with (musl, or glibc's static libc).
- ``skb/`` and ``skb_plugins/``: this project (LICENSE).

A file that cannot be traced fails the build: a NOTICE that misses something is worse than none. The
output is deterministic for a given bundle and build host (sorted, no dates), so two builds of one
commit give the same bytes.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig

ELF_MAGIC = b"\x7fELF"
OURS = ("_internal/skb/", "_internal/skb_plugins/")
PROGRAM = "skb-cni"
SKIP = {"MANIFEST", "NOTICE", "LICENSE"}
COMMON_LICENSES = "/usr/share/common-licenses"

# What each Debian source package is, and its license in one line (the copyright file in the appendix is
# the full text). A source package not listed here is still listed, with "see its copyright file".
KNOWN = {
    "glibc": ("GNU C Library (loader, libc, libm and their stubs)", "LGPL-2.1-or-later, with other notices"),
    "musl": ("musl C library (linked statically into the launchers)", "MIT"),
    "zlib": ("zlib compression library", "Zlib"),
    "expat": ("Expat XML parser", "MIT"),
    "libffi": ("libffi foreign function interface", "MIT (Expat)"),
    "openssl": ("OpenSSL (TLS of skb install's Kubernetes API client)", "Apache-2.0"),
    "mpdecimal": ("libmpdec decimal arithmetic", "BSD-2-Clause"),
    "util-linux": ("libuuid", "BSD-3-Clause"),
    "bzip2": ("libbz2", "bzip2-1.0.6"),
    "xz-utils": ("liblzma", "public domain"),
}
PYTHON_RE = re.compile(r"^python3\.\d+$")


def die(msg):
    sys.stderr.write(f"notice.py: {msg}\n")
    sys.exit(1)


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == ELF_MAGIC


def bundle_files(bundle):
    out = []
    for dirpath, dirnames, filenames in os.walk(bundle):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, bundle)
            if rel not in SKIP and not os.path.islink(path):
                out.append(rel)
    return sorted(out)


def dpkg_search(patterns):
    """{pattern: [(binary package, path), ...]} of ``dpkg-query -S`` (one call for all)."""
    if not patterns:
        return {}
    proc = subprocess.run(["dpkg-query", "-S", *patterns], capture_output=True, text=True)
    found = {}
    for line in proc.stdout.splitlines():
        pkgs, sep, path = line.partition(": ")
        if not sep or pkgs.startswith("diversion by"):
            continue
        for pkg in pkgs.split(", "):
            found.setdefault(os.path.basename(path), []).append((pkg, path))
            found.setdefault(path, []).append((pkg, path))
    return found


def source_of(pkgs):
    """{binary package: (source package, source version, binary version)}"""
    out = {}
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${binary:Package}\t${source:Package}\t${source:Version}\t${Version}\n",
                           *sorted(pkgs)], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        binary, source, sversion, version = line.split("\t")
        out[binary] = (source, sversion, version)
        out[binary.split(":")[0]] = (source, sversion, version)
    missing = [p for p in pkgs if p not in out]
    if missing:
        die(f"dpkg does not know the packages {missing}")
    return out


def pick(candidates, rel, multiarch, pyver):
    """The one (package, path) a bundled file was copied from, among dpkg's matches of its name."""
    name = os.path.basename(rel)
    exact = [(p, path) for p, path in candidates if os.path.basename(path) == name and os.path.exists(path)]
    if "/lib-dynload/" in rel:
        exact = [c for c in exact if f"/python{pyver}/lib-dynload/" in c[1]]
    preferred = [c for c in exact if f"/{multiarch}/" in c[1]] or exact
    return sorted(preferred)[0] if preferred else None


def trace(bundle, launcher):
    """{'debian': {binary package: [bundle files]}, 'pyinstaller': [...], 'ours': [...], 'launcher_libc': str}"""
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    files = bundle_files(bundle)
    pyvers = {m.group(1) for rel in files for m in [re.search(r"python(3\.\d+)", rel)] if m}
    if len(pyvers) != 1:
        die(f"cannot tell the bundled Python version (found {sorted(pyvers) or 'none'})")
    pyver = pyvers.pop()
    ours, compiled, pyinstaller, elves, modules = [], [], [], [], {}
    for rel in files:
        path = os.path.join(bundle, rel)
        if rel == PROGRAM:
            pyinstaller.append(rel)
        elif rel.startswith(OURS):
            ours.append(rel)
            if is_elf(path):
                compiled.append(rel)
        elif is_elf(path):
            elves.append(rel)
        elif rel.startswith("_internal/") and rel.endswith(".pyc"):
            module = rel[len("_internal/"):-len(".pyc")]
            modules[rel] = f"/usr/lib/python{pyver}/{module}.py"
        else:
            die(f"{rel}: not a library, a module or a file of ours: cannot tell where it comes from "
                "(teach build/notice.py)")
    found = dpkg_search(sorted({f"*/{os.path.basename(r)}" for r in elves} | set(modules.values())))
    debian, untraced = {}, []
    for rel in elves:
        hit = pick(found.get(os.path.basename(rel), []), rel, multiarch, pyver)
        if hit is None:
            untraced.append(rel)
        else:
            debian.setdefault(hit[0].split(":")[0], []).append(rel)
    for rel, src in modules.items():
        hits = found.get(src)
        if hits:
            debian.setdefault(hits[0][0].split(":")[0], []).append(rel)
        elif os.path.basename(rel).startswith(("pyimod", "pyi_")):
            pyinstaller.append(rel)
        else:
            untraced.append(rel)
    if untraced:
        die("no Debian package on this build host installed these bundled files: " + ", ".join(untraced[:10]))
    with open(launcher, "rb") as f:
        data = f.read()
    libc = "glibc" if b"GLIBC_TUNABLES" in data else "musl"
    return {"debian": debian, "pyinstaller": sorted(pyinstaller), "ours": ours, "ours_compiled": compiled,
            "launcher_libc": libc, "pyver": pyver}


def pyinstaller_info(python):
    """(version, [(license file name, text)]) of the PyInstaller that ``python`` imports."""
    code = ("import importlib.metadata as m, json; d = m.distribution('pyinstaller'); "
            "fs = [str(f) for f in (d.files or []) if '/licenses/' in str(f) or str(f).endswith(('COPYING.txt', 'LICENSE'))]; "
            "print(json.dumps([d.version, [(f, d.locate_file(f).read_text(encoding='utf-8')) for f in sorted(fs)]]))")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        die(f"cannot read PyInstaller's metadata with {python}: {proc.stderr.strip()}")
    version, texts = json.loads(proc.stdout)
    if not texts:
        die("PyInstaller's dist-info holds no license file")
    return version, [(os.path.basename(f), t) for f, t in texts]


def copyright_text(pkg):
    path = f"/usr/share/doc/{pkg}/copyright"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return path, f.read()
    except OSError:
        die(f"{path} is missing: the NOTICE needs the copyright file of every package the bundle ships")


def summarize(files):
    """The files of a component, with its compiled modules counted rather than listed."""
    pyc = [f for f in files if f.endswith(".pyc")]
    parts = [f for f in files if not f.endswith(".pyc")]
    if pyc:
        parts.append(f"{len(pyc)} compiled modules (.pyc) under _internal/")
    return parts


def render(version, traced, pyinstaller, licence_dir):
    sources = source_of(set(traced["debian"]) | {traced["launcher_libc"] if traced["launcher_libc"] != "glibc"
                                                   else "libc6"})
    by_source = {}
    for pkg, files in traced["debian"].items():
        src, sversion, _ = sources[pkg]
        entry = by_source.setdefault(src, {"version": sversion, "packages": set(), "files": []})
        entry["packages"].add(pkg)
        entry["files"] += files
    launcher_pkg = "musl" if traced["launcher_libc"] == "musl" else "libc6"
    src, sversion, _ = sources[launcher_pkg]
    by_source.setdefault(src, {"version": sversion, "packages": set(), "files": []})["packages"].add(launcher_pkg)
    by_source[src]["files"].append("the launchers (loopback, ptp, host-local, debug, skb), statically linked")

    out = [f"skb-cni {version}", "",
           "skb-cni is licensed under the Apache License, Version 2.0 (the LICENSE file beside this one).", "",
           "The frozen bundle (.skb-<version>-<hash>/) and the launchers also contain the third-party software",
           "listed below, as built and packaged by Debian and PyPI. This file is generated from the bundle's",
           "contents at build time (build/notice.py). Each entry names the files it covers, where they came",
           "from and their license; the appendix holds each component's complete copyright and license text.",
           "The corresponding sources are those of the Debian source packages and PyPI releases named.", ""]
    appendix = []
    n = 0
    for src in sorted(by_source):
        n += 1
        e = by_source[src]
        what, lic = KNOWN.get(src, (src, "see its copyright file in the appendix"))
        if PYTHON_RE.match(src):
            what, lic = f"CPython {traced['pyver']}: the interpreter, its standard library and extension modules", \
                "PSF-2.0 (Python Software Foundation License), with other notices"
        out += [f"{n}. {what}",
                f"   Debian source package {src} {e['version']} (binary packages: {', '.join(sorted(e['packages']))})",
                f"   license: {lic}"]
        out += ["   files:"] + [f"     {f}" for f in summarize(sorted(e["files"]))]
        out.append("")
        for pkg in sorted(e["packages"]):
            appendix.append(copyright_text(pkg))
    n += 1
    py_version, py_texts = pyinstaller
    out += [f"{n}. PyInstaller {py_version} bootloader and bootstrap modules (the program skb-cni)",
            f"   PyPI release pyinstaller {py_version}",
            "   license: GPL-2.0-or-later with PyInstaller's bootloader exception (the bootloader may be",
            "            distributed with programs under any license)",
            f"   files: {', '.join(summarize(traced['pyinstaller']))}", ""]
    for name, text in py_texts:
        appendix.append((f"PyInstaller {py_version}: {name}", text))
    n += 1
    compiled = traced.get("ours_compiled", [])
    out += [f"{n}. skb-cni itself: _internal/skb/, _internal/skb_plugins/ ({len(traced['ours'])} files)",
            "   license: Apache-2.0 (LICENSE)"]
    out += [f"   compiled from its C sources: {', '.join(compiled)}"] if compiled else []
    out.append("")

    referenced = sorted({m for _, text in appendix for m in re.findall(re.escape(COMMON_LICENSES) + r"/([A-Za-z0-9.+-]+[A-Za-z0-9+])", text)
                         if os.path.isfile(os.path.join(licence_dir, m))})
    out += ["=" * 100, "Appendix: the copyright and license text of each component", "=" * 100, ""]
    seen = set()
    for title, text in appendix:
        if title in seen:
            continue
        seen.add(title)
        out += ["-" * 100, title, "-" * 100, text.rstrip("\n"), ""]
    if referenced:
        out += ["=" * 100, f"Appendix: the license texts the copyright files refer to as {COMMON_LICENSES}/<name>",
                "=" * 100, ""]
        for name in referenced:
            with open(os.path.join(licence_dir, name), encoding="utf-8", errors="replace") as f:
                out += ["-" * 100, f"{COMMON_LICENSES}/{name}", "-" * 100, f.read().rstrip("\n"), ""]
    return "\n".join(out) + "\n"


def write_notice(bundle, launcher, python, out, version):
    traced = trace(bundle, launcher)
    text = render(version, traced, pyinstaller_info(python), COMMON_LICENSES)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return traced


def main(argv=None):
    p = argparse.ArgumentParser(prog="notice.py", description=__doc__.split("\n")[0])
    p.add_argument("bundle")
    p.add_argument("--launcher", required=True)
    p.add_argument("--pyinstaller", required=True, help="the Python that ran PyInstaller (its venv's)")
    p.add_argument("--out", required=True)
    p.add_argument("--version", default="")
    a = p.parse_args(argv)
    write_notice(a.bundle, a.launcher, a.pyinstaller, a.out, a.version)


if __name__ == "__main__":
    main()
