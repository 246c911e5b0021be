"""Installing the frozen suite and the node's network configuration: what ``skb install``/``skb uninstall``,
``make install`` (build/bundle.py) and the DaemonSet's container all run.

Two things are written, and a runtime must never see either half-done:

- **The suite** (``install_suite``): the versioned bundle dir ``.skb-<version>-<hash>`` is copied under a
  temporary name, checked against its MANIFEST and only then renamed into place; the ``.skb`` symlink is
  switched by renaming a new link over it; each launcher is written to a temporary file and renamed. So a
  runtime execs the old suite or the new one, never a mix or a half-copied file. A bundle already in
  place and matching its MANIFEST is reused: a rerun is a no-op. One install at a time per bin dir (flock
  on the dir). Leftovers of an install killed half-way all carry ``TMP_PREFIX`` and are removed by the
  next run, which then completes.
- **The network configuration** (``install_config``): rendered from a template (``render``), checked to be
  a conflist, written to a temporary file beside it (a name libcni never loads: it does not end in
  .conf/.conflist/.json) and renamed over the target. Writing the same bytes again changes nothing (no
  spurious inotify event for the runtime). A file of another network at the target path, or another
  network's config that libcni would load before ours (CRI uses the first file by name), is a refusal
  unless ``force``.

``uninstall_config`` removes our config only: the runtime then reports the node's network as not ready
and kubelet marks the node NotReady, rather than starting pods with no network. ``uninstall_suite``
(``--purge``) removes the launchers and bundles too; pods still running then cannot be torn down, so it
is for a drained node.

Modules: ``files`` (the bundle's files, our launchers, durable writes, ``InstallError``), ``suite``
(``install_suite``, ``uninstall_suite``), ``conflist`` (``install_config`` and the template). Errors are
``InstallError`` with a message that names the file and the fix. Standard library only, and no import
of the rest of skb: build/bundle.py runs this package on the build host's /usr/bin/python3.
"""
