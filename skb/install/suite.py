"""Installing and removing the suite (launchers + versioned bundle) in a bin dir: each file atomic, the
``.skb`` link switched last, idempotent, and a rerun completes what a killed run left (see
``skb.install``)."""
import os
import time

from skb.install.files import (BUNDLE_RE, InstallError, LINK, TMP_PREFIX, DirLock, crash_point,
                               remove_any, say, copy_tree_durably, is_our_launcher, launcher_bundle, launchers,
                               mapped_by_someone, remove_dir, replace_file, staged_bundle, verify)


def install_suite(src, dest, log=print, old_bundle_wait=5.0):
    """Install the staged or installed suite in ``src`` into the bin dir ``dest``; returns True when
    anything changed. Atomic per file, idempotent, and a rerun completes what a killed run left."""
    src, dest = os.path.abspath(src), os.path.abspath(dest)
    name = staged_bundle(src)
    if not os.path.isdir(os.path.join(src, name)):
        raise InstallError(f"{os.path.join(src, name)} is missing: {src} holds a dangling {LINK} link")
    os.makedirs(dest, exist_ok=True)
    changed = False
    with DirLock(dest) as dfd:
        # Leftovers of an install that was killed (we hold the lock: nobody else is using them).
        for entry in sorted(os.listdir(dest)):
            if entry.startswith(TMP_PREFIX):
                remove_any(os.path.join(dest, entry))
                say(log, f"install: removed {os.path.join(dest, entry)} (left by an install that did not finish)")

        # 1. The bundle, under its versioned name, made complete before it gets that name.
        final = os.path.join(dest, name)
        if os.path.isdir(final) and verify(final):
            say(log, f"install: {final} already installed")
        else:
            tmp = os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.{name.lstrip('.')}")
            copy_tree_durably(os.path.join(src, name), tmp)
            if not verify(tmp):
                remove_any(tmp)
                raise InstallError(f"the copy of {os.path.join(src, name)} does not match its MANIFEST: is {src} "
                                   "being replaced, or was a file of it changed? Extract the release again")
            crash_point("bundle-copied")
            if os.path.lexists(final):
                # Incomplete or altered, and maybe what .skb points at: moved aside only now that its
                # replacement is complete, so .skb dangles for two renames, not for a whole copy.
                os.rename(final, os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.trash-{name.lstrip('.')}"))
            os.rename(tmp, final)
            changed = True
            say(log, f"install: {final}")

        # 2. Point .skb at it: a new symlink renamed over the old one is atomic.
        link = os.path.join(dest, LINK)
        previous = os.readlink(link) if os.path.islink(link) else None
        if not (os.path.islink(link) and os.readlink(link) == name):
            if os.path.lexists(link) and not os.path.islink(link):
                say(log, f"install: replacing {link}: it was a {'directory' if os.path.isdir(link) else 'file'}, "
                         f"not the link to the bundle in use")
            if os.path.isdir(link) and not os.path.islink(link):
                os.rename(link, os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.olddir"))
            tmp = os.path.join(dest, f"{TMP_PREFIX}{os.getpid()}.link")
            os.symlink(name, tmp)  # relative: the bin dir stays relocatable
            crash_point("link-made")
            os.rename(tmp, link)
            changed = True
            say(log, f"install: {link} -> {name}")

        # 3. The launchers, after the bundle they start (a new applet never appears before its code).
        for applet in launchers(src):
            path = os.path.join(dest, applet)
            new = os.path.join(src, applet)
            if os.path.isfile(path) and not os.path.islink(path) and _same_bytes(path, new) \
                    and os.access(path, os.X_OK):
                continue
            foreign = os.path.lexists(path) and not is_our_launcher(path)
            replace_file(new, dest, applet)
            changed = True
            say(log, f"install: {path}" + (" (replacing a plugin that was not skb-cni's, such as the reference's: "
                                          "reinstall that to go back)" if foreign else ""))
        os.fsync(dfd)

        # 4. Bundles no launcher uses: each launcher names its own (an older release extracted by tar, or
        # an applet this release no longer has, may have left launchers naming older bundles; those stay).
        # The one .skb pointed at until now also stays until the next upgrade: a plugin started from it a
        # moment ago still loads modules from it, and an installer in a container cannot see the node's
        # processes to know. The others go once no visible process maps them.
        used = {name, previous}
        for entry in os.listdir(dest):
            path = os.path.join(dest, entry)
            if not entry.startswith(".") and is_our_launcher(path):
                used.add(launcher_bundle(path) or name)
        for entry in sorted(os.listdir(dest)):
            path = os.path.join(dest, entry)
            if entry in used or not BUNDLE_RE.match(entry) or os.path.islink(path) or not os.path.isdir(path):
                continue
            deadline = time.monotonic() + old_bundle_wait
            while mapped_by_someone(path) and time.monotonic() < deadline:
                time.sleep(0.05)
            remove_dir(dest, entry)
            changed = True
            say(log, f"install: removed {path} (no launcher uses it)")
        for entry in os.listdir(dest):
            if entry.startswith(TMP_PREFIX):
                remove_any(os.path.join(dest, entry))
        os.fsync(dfd)
    return changed


def suite_installed(src, dest):
    """True when ``dest`` holds exactly the suite of ``src`` (cheap: no MANIFEST check of the bundle)."""
    try:
        name = staged_bundle(dest)
        return name == staged_bundle(src) and os.path.isdir(os.path.join(dest, name)) and all(
            os.path.isfile(os.path.join(dest, a)) and _same_bytes(os.path.join(dest, a), os.path.join(src, a))
            for a in launchers(src))
    except (InstallError, OSError):
        return False


# What the release tarball puts beside the suite (build/bundle.py, DOCS); skb install copies none of them.
TARBALL_DOCS = ("LICENSE", "NOTICE", "README.md")
README_TITLE = b"# skb-cni\n"


def our_docs(dest):
    """The tarball's LICENSE, NOTICE and README.md in ``dest`` that are ours: LICENSE and NOTICE byte for
    byte a copy of a bundle's own there, README.md when it opens with our title. An operator's own file
    of the same name stays."""
    bundles = [os.path.join(dest, e) for e in os.listdir(dest) if BUNDLE_RE.match(e)]
    found = []
    for name in TARBALL_DOCS:
        path = os.path.join(dest, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        if name == "README.md":
            with open(path, "rb") as f:
                ours = f.read(len(README_TITLE)) == README_TITLE
        else:
            ours = any(os.path.isfile(os.path.join(b, name)) and _same_bytes(path, os.path.join(b, name))
                       for b in bundles)
        if ours:
            found.append(path)
    return found


def uninstall_suite(dest, applets, log=print):
    """Remove our launchers (only files that are ours: a Go plugin of the same name stays), the .skb link,
    every bundle dir and the tarball's LICENSE, NOTICE and README.md when they are ours (``our_docs``).
    Launchers go first, so nothing is left that could exec a missing bundle."""
    dest = os.path.abspath(dest)
    if not os.path.isdir(dest):
        return False
    changed = False
    with DirLock(dest) as dfd:
        for path in our_docs(dest):     # judged against the bundles, before they go
            os.unlink(path)
            changed = True
            say(log, f"uninstall: removed {path}")
        for applet in sorted(applets):
            path = os.path.join(dest, applet)
            if is_our_launcher(path):
                os.unlink(path)
                changed = True
                say(log, f"uninstall: removed {path}")
            elif os.path.lexists(path):
                say(log, f"uninstall: kept {path}: not an skb-cni launcher")
        os.fsync(dfd)
        link = os.path.join(dest, LINK)
        if os.path.islink(link):
            os.unlink(link)
            changed = True
        for entry in sorted(os.listdir(dest)):
            path = os.path.join(dest, entry)
            if (BUNDLE_RE.match(entry) or entry.startswith(TMP_PREFIX)) and os.path.lexists(path):
                remove_any(path)
                changed = True
                say(log, f"uninstall: removed {path}")
        os.fsync(dfd)
    return changed


def _same_bytes(a, b):
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()
