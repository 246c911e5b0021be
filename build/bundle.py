"""Lay out, install and package the frozen skb-cni suite. Standard library only: runs on /usr/bin/python3.

    bundle.py stage   --pyi DIR --launcher FILE --pyinstaller PYTHON --out DIR
                                        PyInstaller output -> a ready-to-install bin dir
    bundle.py install SRC DEST          atomic, idempotent install of a staged bin dir
    bundle.py dist    SRC TARBALL       the release tarball of a staged bin dir, and its .sha256 and .sha512

A staged (and installed) bin dir::

    loopback, skb, ...        the static launcher, one copy per applet of skb/applets.py, each naming
                              its bundle dir (written into it here), which it starts while .skb is
                              missing (see build/launcher.c)
    .skb -> .skb-<version>-<hash>
    .skb-<version>-<hash>/
        skb-cni               PyInstaller bootloader + PKG archive (the Python code, in one PYZ)
        _internal/            libpython, base_library.zip, extension modules and their libraries
        lib/                  what PyInstaller leaves to the host: the loader and glibc, plus any other
                              library NEEDED by a bundled ELF that the bundle lacks
        LICENSE, NOTICE       this project's license; what the bundle ships from others (build/notice.py)
        MANIFEST              sha256, mode and path of every file, checked before a dir is reused

<hash> is a digest of the bundle's content, so the same build installs under the same name (a no-op
reinstall) and any change gets a new dir beside the running one.
"""
import argparse
import ast
import gzip
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from skb.install import files, suite  # noqa: E402  standard library only, like this script
from skb.install.files import (BUNDLE_MARK, BUNDLE_RE, BUNDLE_SLOT, LINK, TMP_PREFIX, launchers, manifest_lines,  # noqa: E402,F401
                               tree_files, verify)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import notice  # noqa: E402

DOCS = ("LICENSE", "NOTICE", "README.md")  # beside the suite in the tarball, as upstream ships LICENSE and README

LOADER = "ld-linux-x86-64.so.2"
ELF_MAGIC = b"\x7fELF"


def die(msg):
    sys.stderr.write(f"bundle.py: {msg}\n")
    sys.exit(1)


# ---------------------------------------------------------------------------------------------- stage

def project_version():
    """``__version__`` of skb/__init__.py, the one place the version is written, read without importing."""
    with open(os.path.join(ROOT, "skb", "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"]:
            return ast.literal_eval(node.value)
    die("skb/__init__.py sets no __version__")


def applet_names():
    """The keys of APPLETS in skb/applets.py, read without importing it."""
    path = os.path.join(ROOT, "skb", "applets.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "APPLETS" for t in node.targets):
            return sorted(ast.literal_eval(node.value))
    die(f"no APPLETS dict in {path}")


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == ELF_MAGIC


def elf_files(top):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if not os.path.islink(path) and is_elf(path):
                yield path


def elf_interpreter(path):
    out = subprocess.run(["readelf", "-l", "-W", path], check=True, capture_output=True, text=True).stdout
    m = re.search(r"\[Requesting program interpreter: ([^\]]+)\]", out)
    return m.group(1) if m else None


def ldd(path):
    """{soname: resolved path} of everything ``path`` loads (transitively), as the build host resolves it."""
    proc = subprocess.run(["ldd", path], capture_output=True, text=True)
    if proc.returncode != 0 and "not a dynamic executable" in proc.stdout + proc.stderr:
        return {}
    deps = {}
    for line in proc.stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+) => (\S+) \(0x[0-9a-f]+\)$", line)
        if m:
            deps[m.group(1)] = m.group(2)
        elif "=> not found" in line:
            die(f"{path} needs {line.split()[0]}, which this build host does not have")
    return deps


def add_host_libraries(bundle):
    """Copy into <bundle>/lib the loader and every library a bundled ELF needs that PyInstaller did not
    collect: glibc (libc, libm, libpthread/libdl/librt stubs ...) and whatever else ldd finds. Computed,
    not listed, so a new extension module with a new dependency is covered."""
    lib = os.path.join(bundle, "lib")
    os.makedirs(lib, exist_ok=True)
    have = {name for _, _, files in os.walk(bundle) for name in files}
    program = os.path.join(bundle, "skb-cni")
    interp = elf_interpreter(program)
    if not interp or os.path.basename(interp) != LOADER:
        die(f"{program}: unexpected ELF interpreter {interp!r}, the launchers start {LOADER}")
    needed = {LOADER: interp}
    for path in elf_files(bundle):
        for soname, resolved in ldd(path).items():
            if soname not in have:
                needed[soname] = resolved
    for soname, resolved in sorted(needed.items()):
        dst = os.path.join(lib, soname)
        shutil.copyfile(resolved, dst)  # follows symlinks: libc.so.6 is one on some distros
        os.chmod(dst, 0o755 if soname == LOADER else 0o644)
        print(f"  lib/{soname:28} <- {os.path.realpath(resolved)}")
    # Every ELF must now resolve within the bundle alone.
    for path in elf_files(bundle):
        for soname in ldd(path):
            if not os.path.exists(os.path.join(lib, soname)) and soname not in have:
                die(f"{path}: {soname} still missing from the bundle")


def stage(args):
    version = project_version()
    applets = applet_names()
    # Built beside its final place and renamed in: whoever reads the staged dir (an install, a test run,
    # another engineer's build in the same tree) sees the old tree or the new one, never half of one.
    final_out = os.path.abspath(args.out)
    parent = os.path.dirname(final_out)
    os.makedirs(parent, exist_ok=True)
    out = tempfile.mkdtemp(prefix=f".{os.path.basename(final_out)}.tmp-", dir=parent)
    os.chmod(out, 0o755)
    work = os.path.join(out, TMP_PREFIX + "stage")
    shutil.copytree(args.pyi, work, symlinks=True)
    if args.warm_lib:  # the snapshot of warm start (build/warm_snapshot.c), beside the module that loads it
        dst = os.path.join(work, "_internal", "skb", "plugin", "warm", os.path.basename(args.warm_lib))
        shutil.copyfile(args.warm_lib, dst)
        os.chmod(dst, 0o755)
    print(f"stage: host libraries for {work}")
    add_host_libraries(work)
    shutil.copyfile(os.path.join(ROOT, "LICENSE"), os.path.join(work, "LICENSE"))
    notice.write_notice(work, args.launcher, args.pyinstaller, os.path.join(work, "NOTICE"), version)
    for name in ("LICENSE", "NOTICE"):
        os.chmod(os.path.join(work, name), 0o644)
    normalize_modes(work)
    lines = manifest_lines(work)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
    with open(os.path.join(work, "MANIFEST"), "w") as f:
        f.write("\n".join(lines) + "\n")
    name = f".skb-{version}-{digest}"
    os.rename(work, os.path.join(out, name))
    os.symlink(name, os.path.join(out, LINK))
    launcher = named_launcher(args.launcher, name)
    for applet in applets:
        dst = os.path.join(out, applet)
        with open(dst, "wb") as f:
            f.write(launcher)
        os.chmod(dst, 0o755)
    size = sum(os.lstat(p).st_size for _, p in tree_files(os.path.join(out, name)))
    old = None
    if os.path.lexists(final_out):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(final_out)}.old-", dir=parent)
        os.rename(final_out, os.path.join(old, "bin"))
    os.rename(out, final_out)
    if old:
        shutil.rmtree(old)
    print(f"stage: {final_out}: {name} ({size / 1e6:.1f} MB), launchers: {' '.join(applets)} "
          f"({os.path.getsize(args.launcher)} bytes each)")


def normalize_modes(top):
    """Dirs 755, files 755 when any execute bit is set and 644 otherwise: what PyInstaller and the copies
    above wrote carries the build's umask, which must change neither the MANIFEST, nor the bundle's name,
    nor the release's bytes."""
    for dirpath, dirnames, filenames in os.walk(top):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o111 else 0o644)


def named_launcher(path, bundle_name):
    """The launcher's bytes with ``bundle_name`` written into its slot (after BUNDLE_MARK, NUL padded)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = data.find(BUNDLE_MARK)
    if at < 0 or data.find(BUNDLE_MARK, at + 1) >= 0:
        die(f"{path}: expected exactly one bundle slot ({BUNDLE_MARK.decode()!r}) in the launcher")
    start = at + len(BUNDLE_MARK)
    name = bundle_name.encode()
    if any(data[start:start + BUNDLE_SLOT + 1]):
        die(f"{path}: the launcher's bundle slot is not empty (a launcher already staged?)")
    if len(name) > BUNDLE_SLOT:
        die(f"{path}: the bundle slot has room for {BUNDLE_SLOT} bytes, not {len(name)} ({bundle_name})")
    data[start:start + len(name) + 1] = name + b"\0"
    return bytes(data)


# --------------------------------------------------------------------------------------------- install

def staged_bundle(src):
    try:
        return files.staged_bundle(src)
    except files.InstallError as e:
        die(str(e))


def install(args):
    """The logic is skb/install/suite.py's (shared with `skb install`, which a DaemonSet runs on each node)."""
    try:
        suite.install_suite(args.src, args.dest)
    except files.InstallError as e:
        die(str(e))


# ------------------------------------------------------------------------------------------------ dist

def source_date_epoch():
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    try:
        out = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%ct"], capture_output=True, text=True)
        return int(out.stdout.strip())
    except (OSError, ValueError):
        return 0


def dist(args):
    """The tarball holds the bin dir exactly as installed, plus LICENSE, NOTICE and README.md: extracting it
    into /opt/cni/bin is an install. Entries are ordered bundle, link, launchers: an extraction completes
    the bundle before the link names it, and each launcher after the bundle it names (GNU tar replaces an
    existing file by unlinking it and writing a new one, a link by unlinking it first: while .skb is
    missing, a launcher starts the bundle it names). The same
    staged dir and commit give the same bytes: fixed mtimes (the commit's time), owners, modes and order.
    Writes <tarball>.sha256 and .sha512 beside it, in sha256sum's format, as upstream publishes them."""
    src = os.path.abspath(args.src)
    name = staged_bundle(src)
    mtime = source_date_epoch()
    entries = [(os.path.join(name, rel), path) for rel, path in tree_files(os.path.join(src, name))]
    dirs = sorted({os.path.dirname(rel) for rel, _ in entries} - {""})
    dirs = sorted({d for rel in dirs for d in _parents(rel)})
    out = os.path.abspath(args.tarball)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"

    def info(arcname, path):
        ti = tarfile.TarInfo("./" + arcname)
        st = os.lstat(path)
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = mtime, 0, 0, "root", "root"
        if stat.S_ISLNK(st.st_mode):
            ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
        elif stat.S_ISDIR(st.st_mode):
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
        else:
            ti.size, ti.mode = st.st_size, stat.S_IMODE(st.st_mode)
        return ti

    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=mtime) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in dirs:
            tar.addfile(info(d, os.path.join(src, d)))
        for arcname, path in entries:
            ti = info(arcname, path)
            if ti.isreg():
                with open(path, "rb") as f:
                    tar.addfile(ti, f)
            else:
                tar.addfile(ti)
        tar.addfile(info(LINK, os.path.join(src, LINK)))
        for applet in launchers(src):
            with open(os.path.join(src, applet), "rb") as f:
                tar.addfile(info(applet, os.path.join(src, applet)), f)
        for doc in DOCS:
            path = os.path.join(src, name, doc) if doc != "README.md" else os.path.join(ROOT, doc)
            ti = info(doc, path)
            ti.mode = 0o644
            with open(path, "rb") as f:
                tar.addfile(ti, f)
    os.rename(tmp, out)
    for algo in ("sha256", "sha512"):
        h = hashlib.new(algo)
        with open(out, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        line = f"{h.hexdigest()}  {os.path.basename(out)}\n"
        with open(f"{out}.{algo}.tmp", "w") as f:
            f.write(line)
        os.rename(f"{out}.{algo}.tmp", f"{out}.{algo}")
    print(f"dist: {out} ({os.path.getsize(out) / 1e6:.1f} MB), {os.path.basename(out)}.sha256 and .sha512")


def _parents(rel):
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def main(argv=None):
    p = argparse.ArgumentParser(prog="bundle.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage", help="PyInstaller output -> ready-to-install bin dir")
    s.add_argument("--pyi", required=True, help="the PyInstaller onedir output (dir holding skb-cni)")
    s.add_argument("--launcher", required=True, help="the compiled static launcher")
    s.add_argument("--pyinstaller", default=sys.executable,
                   help="the Python that ran PyInstaller (for its version and license, in NOTICE)")
    s.add_argument("--out", required=True, help="bin dir to create (replaced if present)")
    s.add_argument("--warm-lib", help="libskbwarm.so, the warm-start snapshot library (build/warm_snapshot.c)")
    i = sub.add_parser("install", help="install a staged bin dir into DEST")
    i.add_argument("src")
    i.add_argument("dest")
    d = sub.add_parser("dist", help="release tarball of a staged bin dir")
    d.add_argument("src")
    d.add_argument("tarball")
    args = p.parse_args(argv)
    {"stage": stage, "install": install, "dist": dist}[args.cmd](args)


if __name__ == "__main__":
    main()
