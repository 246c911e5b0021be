"""The release as an operator gets it: a tarball carrying LICENSE, NOTICE and README.md with checksum files
beside it in sha256sum's format, the same bytes from the same staged suite, a NOTICE naming everything
the bundle ships, and an in-place upgrade (a newer tarball extracted over the install by GNU tar) that
no call in flight notices.

What GNU tar does when it extracts over an existing file (observed with strace, tar 1.34 and 1.35): a
regular file is opened O_CREAT|O_EXCL, and on EEXIST the old one is unlinked and a new one created and
written; a symlink is made with symlinkat, and on EEXIST the old one is unlinked first. So for a moment
each name is missing, and nothing makes that atomic. A launcher therefore also names its own bundle dir
(written into it when the suite is staged) and starts that one while .skb is missing: tar completes the
new bundle, under a new name, before it makes the link or writes a launcher naming it, and never removes
the old one.

SKB_BIN_DIR names an installed bin dir (tests/run builds and installs one into a temp dir).
"""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from skb.install import files

pytestmark = pytest.mark.frozen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLE_PY = os.path.join(ROOT, "build", "bundle.py")
DOCS = ["LICENSE", "NOTICE", "README.md"]


@pytest.fixture(scope="module")
def installed():
    return os.environ["SKB_BIN_DIR"]


def dist(src, tarball):
    subprocess.run([sys.executable, BUNDLE_PY, "dist", str(src), str(tarball)], check=True, capture_output=True)
    return tarball


def members(tarball):
    """(name, type, uid, gid, mtime, mode) of every entry, read by GNU tar (not by our tarfile code)."""
    out = subprocess.run(["tar", "--numeric-owner", "--full-time", "-tvzf", str(tarball)], check=True,
                         capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        mode, owner, _size, day, clock, name = line.split(None, 5)
        rows.append((name.split(" -> ")[0], mode[0], owner, f"{day} {clock}", mode))
    return rows


def test_tarball_carries_license_notice_and_readme_with_checksums_beside_it(installed, tmp_path):
    tgz = dist(installed, tmp_path / "skb-cni-linux-amd64-v9.9.9.tgz")
    names = [m[0] for m in members(tgz)]
    for doc in DOCS:
        assert f"./{doc}" in names
    with tarfile.open(tgz) as tar:
        assert tar.extractfile("./LICENSE").read() == open(os.path.join(ROOT, "LICENSE"), "rb").read()
        assert b"Apache License" in tar.extractfile("./LICENSE").read()
        notice = tar.extractfile("./NOTICE").read()
        bundle = os.readlink(os.path.join(installed, ".skb"))
        assert notice == tar.extractfile(f"./{bundle}/NOTICE").read(), "the bundle carries the same NOTICE"
    for algo, width in (("sha256", 64), ("sha512", 128)):
        text = (tmp_path / f"{tgz.name}.{algo}").read_text()
        assert re.fullmatch(rf"[0-9a-f]{{{width}}}  {re.escape(tgz.name)}\n", text), text
        check = subprocess.run([f"{algo}sum", "-c", f"{tgz.name}.{algo}"], cwd=tmp_path, capture_output=True, text=True)
        assert check.returncode == 0 and f"{tgz.name}: OK" in check.stdout, check.stdout + check.stderr


def test_same_staged_suite_gives_the_same_bytes(installed, tmp_path):
    first = dist(installed, tmp_path / "a" / "skb.tgz")
    # Another copy of the same suite, with other mtimes, another umask's modes on its dirs, elsewhere.
    copy = tmp_path / "elsewhere" / "bin"
    shutil.copytree(installed, copy, symlinks=True)
    for dirpath, dirnames, filenames in os.walk(copy):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.utime(p, (1, 1))
        os.chmod(dirpath, 0o700)
    second = dist(copy, tmp_path / "b" / "other-name.tgz")
    assert first.read_bytes() == second.read_bytes()
    rows = members(first)
    assert {r[2] for r in rows} == {"0/0"}
    assert len({r[3] for r in rows}) == 1, "one fixed mtime for every entry"
    assert all(r[4] == "drwxr-xr-x" for r in rows if r[1] == "d")


def test_notice_names_every_library_the_bundle_ships_with_its_copyright(installed):
    bundle = os.path.realpath(os.path.join(installed, ".skb"))
    notice = open(os.path.join(bundle, "NOTICE"), encoding="utf-8").read()
    elves = []
    for dirpath, _, filenames in os.walk(bundle):
        for n in filenames:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    elves.append(os.path.relpath(p, bundle))
    assert elves
    for rel in elves:
        if rel != "skb-cni":
            assert rel in notice, f"{rel} is shipped but NOTICE does not name it"
    assert "PyInstaller" in notice and "bootloader" in notice
    # The Debian packages those files came from, found by dpkg here, and their copyright files' text.
    libs = sorted({os.path.basename(r) for r in elves if r.startswith("lib/")})
    owners = subprocess.run(["dpkg-query", "-S", *[f"*/{n}" for n in libs]], capture_output=True, text=True).stdout
    pkgs = {line.split(":")[0] for line in owners.splitlines() if "x86_64-linux-gnu" in line}
    assert pkgs, owners
    for pkg in pkgs:
        head = open(f"/usr/share/doc/{pkg}/copyright", encoding="utf-8", errors="replace").read()[:400]
        assert head in notice, f"NOTICE lacks the copyright text of {pkg}"
    launcher = open(os.path.join(installed, "loopback"), "rb").read()
    assert ("musl" in notice) if b"GLIBC_TUNABLES" not in launcher else True


# ------------------------------------------------------------------------------------------ upgrades

def _release(installed, where, digest):
    """A staged copy of the suite whose bundle dir is named .skb-<version>-<digest>, launchers naming it:
    to the launchers and to tar, a release other than ``installed``."""
    old = os.readlink(os.path.join(installed, ".skb"))
    new = old[:-12] + digest
    os.makedirs(where)
    shutil.copytree(os.path.join(installed, old), os.path.join(where, new), symlinks=True)
    os.symlink(new, os.path.join(where, ".skb"))
    for applet in files.launchers(installed):
        data = open(os.path.join(installed, applet), "rb").read()
        assert files.launcher_bundle(os.path.join(installed, applet)) == old
        with open(os.path.join(where, applet), "wb") as f:
            f.write(data.replace(files.BUNDLE_MARK + old.encode() + b"\0", files.BUNDLE_MARK + new.encode() + b"\0"))
        os.chmod(os.path.join(where, applet), 0o755)
        assert files.launcher_bundle(os.path.join(where, applet)) == new
    return new


def _unnamed(path):
    """The launcher at ``path`` turned into one that follows .skb (as every launcher did before)."""
    data = bytearray(open(path, "rb").read())
    at = data.find(files.BUNDLE_MARK) + len(files.BUNDLE_MARK)
    data[at:at + files.BUNDLE_SLOT] = bytes(files.BUNDLE_SLOT)
    with open(path, "wb") as f:
        f.write(data)


def _version(exe):
    env = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": "VERSION", "SKB_WARM": "0"}
    return subprocess.run([exe], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


def test_a_launcher_needs_no_skb_link(installed, tmp_path):
    """What a call sees while tar has unlinked .skb and not yet made the new one: each launcher starts the
    bundle it names. One that names none (the launcher before this change) fails right there."""
    bin_dir = tmp_path / "bin"
    _release(installed, str(bin_dir), "a" * 12)
    os.unlink(bin_dir / ".skb")
    for applet in files.launchers(str(bin_dir)):
        if applet == "skb":
            r = subprocess.run([str(bin_dir / "skb"), "version"], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and "skb-cni" in r.stdout, r
        else:
            r = _version(str(bin_dir / applet))
            assert r.returncode == 0 and '"supportedVersions"' in r.stdout, r
    _unnamed(str(bin_dir / "loopback"))
    r = _version(str(bin_dir / "loopback"))
    assert r.returncode == 1 and "skb-cni bundle missing" in r.stdout, r


@pytest.mark.kernel
def test_extracting_newer_tarballs_over_an_install_while_calls_run(installed, tmp_path):
    """Calls run in a loop while three newer releases are extracted over the install by GNU tar, slowed
    by strace (every unlink sleeps 0.2 s after it returns, which stretches each moment a name is missing
    from microseconds to 0.2 s). No call that started may fail. Calls that could not even start because
    tar had just unlinked the launcher's own name (the runtime would report "failed to find plugin", as
    with any plugin replaced in place) are counted apart and shown. Then skb install removes the old
    bundles no launcher names any more."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (make deps installs it)")
    releases = []
    for i, digest in enumerate(["1" * 12, "2" * 12, "3" * 12, "4" * 12]):
        src = tmp_path / f"r{i}"
        releases.append((_release(installed, str(src), digest), dist(src, tmp_path / f"r{i}.tgz")))
    bin_dir = tmp_path / "opt" / "cni" / "bin"
    bin_dir.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(bin_dir), "-xzf", str(releases[0][1])], check=True)

    stop = threading.Event()
    extracting = threading.Event()
    counts = {"ok": 0, "during": 0, "not-started": 0}
    failures = []
    lock = threading.Lock()

    def loop(applet):
        exe = str(bin_dir / applet)
        while not stop.is_set():
            during = extracting.is_set()
            try:
                r = _version(exe)
            except OSError:               # ENOENT or ETXTBSY at exec: tar is rewriting this very name
                with lock:
                    counts["not-started"] += 1
                continue
            with lock:
                if r.returncode != 0 or '"supportedVersions"' not in r.stdout:
                    failures.append((applet, r.returncode, r.stdout, r.stderr))
                else:
                    counts["ok"] += 1
                    counts["during"] += during

    threads = [threading.Thread(target=loop, args=(a,)) for a in ("loopback", "ptp", "host-local")]
    for t in threads:
        t.start()
    try:
        for name, tgz in releases[1:]:
            extracting.set()
            subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=unlinkat",
                            "-e", "inject=unlinkat:delay_exit=200000", "tar", "-C", str(bin_dir), "-xzf", str(tgz)],
                           check=True, timeout=300)
            extracting.clear()
            assert os.readlink(bin_dir / ".skb") == name
            assert all(files.launcher_bundle(str(bin_dir / a)) == name for a in files.launchers(str(bin_dir)))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    print(f"calls: {counts['ok']} ok, {counts['during']} of them during an extraction; "
          f"{counts['not-started']} could not exec the launcher while tar rewrote its name")
    assert not failures, failures[:5]
    assert counts["during"] > 0, "no call ran while tar extracted: the test proved nothing"

    bundles = sorted(e for e in os.listdir(bin_dir) if files.BUNDLE_RE.match(e))
    assert bundles == sorted(n for n, _ in releases), "tar removes nothing"
    r = subprocess.run([str(bin_dir / "skb"), "install", "--from", str(bin_dir), "--bin-dir", str(bin_dir),
                        "--no-config"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(bin_dir)) == sorted([".skb", releases[-1][0], *files.launchers(installed), *DOCS])
    assert r.stderr.count("no launcher uses it") == 3
    assert _version(str(bin_dir / "loopback")).returncode == 0
