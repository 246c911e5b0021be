"""``skb doctor``: find what is wrong with a node's CNI set-up, one line per problem.

Each finding says what is wrong, the evidence, and the fix. Severities: ``error`` (pods will not get a
working network), ``warning`` (something will bite: a shadowed file, a leaked address, runtimes that
disagree), ``note`` (worth knowing, not a problem: which file wins). Errors and warnings make the exit
status 1.

Where it looks. The conf dir and bin dirs come from ``--conf-dir``/``--bin-dir``; from containerd's
``config.toml`` (``[plugins."io.containerd.grpc.v1.cri".cni] conf_dir, bin_dir``; containerd 2's
``[plugins."io.containerd.cri.v1.runtime".cni] conf_dir, bin_dirs``); and from CRI-O's ``crio.conf`` and
``crio.conf.d/*`` (``[crio.network] network_dir, plugin_dirs, cni_default_network``). Every distinct
set of directories is checked; a runtime whose directories differ from another's (or from the flags) is
reported. With no flag and no runtime configuration the defaults ``/etc/cni/net.d`` and
``/opt/cni/bin`` are used.

What it checks, with the finding codes:

- ``no-config``: the conf dir is missing, or holds no ``.conf``/``.conflist``/``.json`` file (containerd:
  "cni config uninitialized", kubelet: "cni plugin not initialized").
- ``wrong-extension``: a CNI configuration under an extension libcni ignores (``10-net.conflist.bak``,
  ``net.yaml``), or a conflist in a ``.conf``/``.json`` file (read as a single plugin: "missing 'type'").
- ``no-plugins``: a ``.conflist`` without ``plugins`` ("no 'plugins' key" before libcni 1.3, "no plugin
  configs found" since).
- ``invalid-json``: with line and column; ``load-error``: any other reason libcni rejects a file. Either
  breaks every network lookup in the directory, not only that file's.
- ``shadowed``: the same network name in several files (libcni uses the first: ``.conflist`` before
  ``.conf``/``.json``, then by file name); a note names the file a runtime takes as the pod network (the
  first by name; CRI-O's ``cni_default_network`` by name) and those it never reads.
- ``plugin-missing`` / ``plugin-not-executable``: a ``type`` (or ``ipam.type``) with no regular file in
  any bin dir, or one that cannot be executed. ``plugin-dangling``: the plugin's file in a bin dir is a
  symbolic link to nothing (an error; a warning naming what runs instead when a later bin dir has one).
- ``version-failed`` / ``version-unsupported``: a plugin that fails VERSION, or whose ``supportedVersions``
  lacks the network's ``cniVersion`` (podman then drops the network; libcni's ``ValidateNetworkList``).
- ``host-lo-down``: the node's ``lo`` is DOWN (the reference loopback's DEL through a reused
  ``/proc/PID/ns/net`` did this).
- ``forwarding-off`` / ``rp-filter-strict``: for networks whose pods are routed through the node (``ptp``,
  ``bridge``): IPv4/IPv6 forwarding disabled, or strict reverse-path filtering (``rp_filter=1`` on
  ``all``/``default`` or on a pod's host-side interface), which drops pod traffic that arrives by an
  interface other than the one the reply route uses (health checks from another node address,
  multi-homed nodes, policy routing).
- ``leaked-reservation``: a host-local reservation (a file ``<dataDir>/<network>/<ip>`` holding
  ``<containerID>\\r\\n<ifname>``) is *leaked* when the runtime can no longer release it: its attachment
  has no cached result in ``<cache-dir>/results`` (no runtime will DEL it), or it has one whose recorded
  netns no longer exists (the container is gone and its DEL never completed). The fix is ``skb gc``:
  ``--keep-live`` DELs the cached attachments whose netns is gone and sends GC with the live ones as
  ``cni.dev/valid-attachments`` (cniVersion 1.1.0 and an IPAM that implements GC free the rest);
  otherwise the files named in the evidence can be removed by hand once the containers are confirmed gone.
- ``skipped-entry`` / ``unreadable-entry``: a directory named like a config (libcni skips it); a FIFO,
  device, socket, dangling link or unreadable file named like one (the runtime's load fails or hangs).
- ``no-cniversion``: a config without ``cniVersion`` (read as 0.1.0: no CHECK, STATUS or GC, lossy chained
  results). ``several-networks``: more than one network in the conf dir (CRI uses the first by name).
- ``plugin-elsewhere``: plugins not in the runtime's bin dirs but installed elsewhere (one finding per
  directory they are in, with the setting to change). ``status-failed``: STATUS through the chain
  (cniVersion 1.1.0 and later) fails.
- ``config-invalid`` (``ipamconf``): what fails every ADD, seen without running anything: a ptp without
  ``ipam``/``ipam.type``; host-local ranges host-local refuses (a subnet that does not parse, has host bits
  set or is too small; a gateway, rangeStart or rangeEnd outside its subnet); a ``dataDir`` on a
  read-only mount. ``range-exhausted``: a range set whose every address is reserved (an error, naming the
  leaked reservations among them).
- ``pod-range-overlap`` (``overlap``): a routed network's range overlaps the node's own network (an
  address of the node in it, a router of the node in it, a route into it), with what ptp's ADD answers.
- ``warm-start-off`` (``warmcallers``, a note): a runtime process (containerd, crio, cri-dockerd, podman)
  running as root whose plugins never start warm, because of what they inherit from it: ``SKB_WARM`` set to turn it off,
  a variable acted on when a process starts (``LD_PRELOAD``, ``MALLOC_*``...), a uid other than root, a
  seccomp filter. The launcher then goes by exec without asking a server, so no server counts such calls.
  Also a plugin dir of skb-cni's holding the opt-out file ``.skb-warm-off`` (every runtime's calls there).
- ``runtime-config-invalid``: a runtime configuration that does not parse or has an unknown version is
  an error, and the doctor then checks no other directories (the runtime does not start).
- ``--probe``: ADD of the pod network (the first file) with CRI's CNI_ARGS, then DEL, in a scratch node
  of its own (network and mount namespaces, host-local stores under an overlay): the node is never
  changed. ``probe-failed`` when ADD or DEL fails; ``probe-no-ip`` when the result has no address on the
  interface the runtime looks up (``eth0``: containerd then fails the sandbox with "failed to find network
  info for sandbox"; addresses are attributed as go-cni does: an IP without an ``interface`` index belongs
  to the default interface); what the ADD needed from the node (``forwarding-off``, ``probe-needs``; not
  the kernel's side effects of switching forwarding on, such as ``accept_redirects``); ``probe-leftover``
  for links the DEL left; ``probe-skipped`` when a directory cannot be isolated (or, as a note, when no
  network loads). A read-only ``dataDir`` stays read-only in the probe. A probe outcome that an error
  about its network predicts is a note: one cause, one finding.
"""
from skb.tool.doctor.command import add_parser, run  # noqa: F401 (the package's interface)
