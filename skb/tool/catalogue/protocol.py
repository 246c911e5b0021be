"""The messages of libcni, the runtimes' CNI library: finding and running a plugin, versions, cached
results; and what the kernel and Go print when a plugin dies or a deadline passes."""
from skb.tool.catalogue.entry import BINS, CONF, RUN, VERSIONS, Entry, newest, versions_list


def _versions(v):
    """The versions the plugin speaks, and the fix: the newest of them, or a plugin that speaks the
    configuration's (named when a wrapping message named it)."""
    supported = versions_list(v.get("versions"))
    best = newest(supported)
    plugin = v.get("plugin")
    wanted = v.get("config_version") or "(none)"
    other = f"upgrade {plugin} to a release that speaks {wanted}" if plugin else f"install plugins that speak {wanted}"
    out = {"supported": ", ".join(supported) or "other versions"}
    if best:
        out["choice"] = (f'set "cniVersion": "{best}" in the network configuration (the newest '
                         f"{plugin or 'the plugin'} speaks), or {other}")
    else:
        out["choice"] = f"set cniVersion to one {plugin or 'the plugin'} speaks (VERSION lists them), or {other}"
    return out


# what a runtime wraps around libcni's reason (go-cni's ErrInvalidConfig, containerd's ErrLoad), and the
# quote that ends a log's error="..."
_WRAPPERS = (": invalid cni config", ": failed to load cni config")
_SYNTAX = ("invalid character", "unexpected end of json input", "looking for beginning")


def _parse_error(v):
    """libcni's reason without what the runtime put after it, what kind of fault it names, and the file."""
    error = v.get("rest") or ""
    low = error.lower()
    cut = min([low.find(w) for w in _WRAPPERS if w in low] or [len(error)])
    error = error[:cut].strip().rstrip('"').strip()
    if len(error) > 300:
        error = error[:300] + "..."
    low = error.lower()
    if any(w in low for w in _SYNTAX):
        why = ("The file is not valid JSON: a trailing or missing comma, a missing quote or brace, a comment (JSON "
               "has none), or a file cut short while it was written. Go's error names the fault but not where it "
               "is; skb doctor and the JSON check below name the line and column")
    elif "cannot unmarshal" in low:
        why = "A field has the wrong JSON type (a number or a list where libcni expects a string, or the reverse)"
    else:
        why = ("The JSON parses, but it is not a network configuration libcni accepts (no name, no plugins, a "
               ".conf without a type, a field of the wrong type)")
    have = "path" in v
    return {"error": error or "(no reason given)", "why": why,
            "where": v["path"] if have else "a network configuration file", "file": v["path"] if have else "FILE"}


ENTRIES = [
    Entry("plugin-failed", "libcni",
          ['plugin type="<plugin>" failed (<verb>): <rest>', 'plugin type="<plugin>" name="<name>" failed (<verb>): <rest>'],
          "plugin {plugin} failed during {verb}",
          "libcni ran the network's plugins in order and {plugin} failed for {verb}; what follows is the "
          "plugin's own error, explained below when skb knows it.",
          ["CNI_COMMAND=VERSION {plugin} </dev/null (is it a CNI plugin, and which versions does it speak?)"],
          "", BINS + VERSIONS + ("status-failed",), ("version",)),
    Entry("plugin-not-found", "libcni", 'failed to find plugin "<plugin>" in path [<dirs>]',
          'the plugin "{plugin}" is in none of the directories [{dirs}]',
          'libcni looked for an executable named "{plugin}" (a "type" or "ipam.type" of the network) in each '
          "of [{dirs}] and found no regular file of that name. Usual causes: the plugin is not installed, it "
          "is installed in another directory than the runtime's bin_dir / bin_dirs / plugin_dirs (Debian's "
          "packages use /usr/lib/cni, most add-ons /opt/cni/bin), the file there is a broken symbolic link, "
          "or the type is misspelt.", ["ls -l {dirs}", "command -v {plugin}; ls /usr/lib/cni /opt/cni/bin"],
          'install {plugin} into one of [{dirs}], or add the directory that has it to the runtime\'s plugin '
          "dirs", BINS),
    Entry("config-parse", "libcni", ["error parsing configuration list: <rest>", "error parsing configuration: <rest>"],
          "libcni refused {where}: {error}",
          "libcni reads a .conflist (\"configuration list\") or a .conf or .json (\"configuration\") as JSON, then "
          "as a network configuration, and refused this one: {error}. {why}. While it fails, a runtime that "
          "loads the whole conf dir (containerd) has no network, and one that skips it (CRI-O, podman) takes "
          "another file or none.",
          ["skb doctor (names the file, and the line and column of a JSON error)",
           "python3 -m json.tool {file} >/dev/null (or: jq empty {file})"],
          "fix {where} where skb doctor says, or have the network add-on write it again; a file that is no "
          "network's: move it out of the conf dir", CONF, derive=_parse_error),
    Entry("no-plugins-key", "libcni", ["no 'plugins' key", "no plugin configs found"],
          "a .conflist without a plugins list",
          "libcni read a .conflist that has no 'plugins' array (before libcni 1.3: \"no 'plugins' key\"; "
          "since: \"no plugin configs found\"). Usually a single plugin's config saved as .conflist.",
          ["ls -l /etc/cni/net.d/"], 'rename it to .conf, or wrap the object: {{"plugins": [ ... ]}}', CONF),
    Entry("incompatible-versions", "libcni",
          ['incompatible CNI versions<...>config is "<config_version>", plugin supports [<versions>]',
           'plugin <plugin> does not support config version "<config_version>"'],
          "{plugin} does not speak cniVersion {config_version}",
          "The network's cniVersion is {config_version}, and {plugin} speaks {supported} (error code 1). "
          "Either the configuration was written for newer plugins than those installed (the Go plugins speak "
          "up to 0.4.0 before v1.0.0, up to 1.0.0 before v1.6.0), or a runtime sets the version itself "
          "(containerd 1.6.3 gave its own loopback 1.0.0). podman drops such a network without a word.",
          ["CNI_COMMAND=VERSION {plugin} </dev/null"], "{choice}", VERSIONS + BINS, ("version",),
          derive=_versions),
    Entry("empty-version", "libcni", 'invalid version "<version>": the version is empty',
          "the network's configuration has no cniVersion, and this runtime's libcni cannot read that",
          "libcni 1.0 (containerd 1.6.0 to 1.6.3, and CRI-O built with it) refuses a configuration or cached "
          "result without a cniVersion, so DEL and CHECK of such a network fail and the pod cannot be "
          "stopped; libcni 1.1 (containerd 1.6.4) reads a missing version as 0.1.0 again. Older runtimes also "
          "handed the empty version to the plugins, some of which stumble on it.",
          ["grep -L cniVersion /etc/cni/net.d/*"],
          'add "cniVersion" to the network\'s file (skb doctor names the newest every plugin of the chain '
          "speaks); the next DEL then succeeds. Or upgrade containerd to 1.6.4 or later", VERSIONS, ("version",)),
    Entry("cached-result", "libcni",
          ['failed to get network "<network>" cached result: <rest>', "decoding version from network config: <rest>"],
          "libcni could not read the cached result of network {network}",
          "For DEL and CHECK libcni reads the result it cached at ADD (/var/lib/cni/results); it failed: the "
          "file is damaged or empty (a crash while writing, a full disk), or written by another version.",
          ["ls -l /var/lib/cni/results/ | grep {network}"],
          "remove the damaged file; DEL then runs without the cached result", VERSIONS, ("version",)),
    Entry("netplugin-no-message", "libcni",
          ["netplugin failed with no error message: <rest>", "netplugin failed with no error message",
           "netplugin failed but error parsing its diagnostic message", "netplugin failed: <rest>"],
          "the plugin failed without a CNI error on its standard output",
          "The plugin exited non-zero and printed no CNI error object: it crashed, was killed (below), is not "
          "a CNI plugin (a wrapper script, the wrong architecture) or printed plain text; what libcni saw "
          "follows.", ["the plugin's own log (most add-ons write one under /var/log)"], "",
          BINS + ("version-failed",), ("version",)),
    Entry("signal-killed", "Go runtime", "signal: killed",
          "the plugin was killed (SIGKILL) while it ran",
          "Two things send that signal: the runtime, when its deadline for the call passes (Go kills the "
          "process when the context ends), and the kernel's OOM killer, when the memory cgroup the plugin runs "
          "in (the runtime's or kubelet's) is full. The call stopped half way: the runtime retries, and a "
          "plugin that leaves things behind on failure leaves them now.",
          ["journalctl -k --since -1h | grep -iE 'out of memory|oom-kill|killed process'",
           "the runtime's log before that moment (slow calls, timeouts)"],
          "an OOM kill: give the runtime's (or kubelet's) cgroup more memory; a timeout: find why the plugin is "
          "slow, usually an unreachable daemon or API server (the plugin's own log)", RUN),
    Entry("deadline", "Go runtime", "context deadline exceeded",
          "a deadline passed: the runtime's (the plugin never ran) or the plugin's own request",
          "Go code prints this when its context times out. After 'netplugin failed with no error message' it "
          "is the runtime's deadline for the whole sandbox, already over before the plugin could start (an "
          "earlier step was slow: runc, an image, another plugin), so nothing of the network was set up. From "
          "a plugin (Calico: 'Error adding network: context deadline exceeded') it is the plugin's own request "
          "to its datastore or the API server that timed out.",
          ["the runtime's log: how long the sandbox took before this", "the plugin's daemon and its log"],
          "find the slow step; a plugin's timeout: reach its datastore or API server from the node", RUN),
    Entry("exec-failed", "libcni", "fork/exec <path>: <reason>",
          "{path} could not be executed: {reason}",
          "libcni found the file but the kernel refused to run it: not executable (permission denied), built "
          "for another architecture (exec format error), a script whose interpreter is missing (no such file "
          "or directory), or a mount with noexec.", ["ls -l {path}; file {path}"],
          "chmod 755 {path}, or install a build for this machine", BINS, ("version",)),
    Entry("statfs-proc", "reference plugins",
          ['failed to Statfs "/proc/<n>/ns/net"', 'failed to Statfs "/proc/<n>/task/<n2>/ns/net"'],
          "the container's network namespace (through /proc/{n}) was gone when the plugin ran",
          "The runtime passed CNI_NETNS as /proc/{n}/ns/net and process {n} had already exited: the sandbox "
          "died (or was killed) before its network was set up, or this is a DEL for a container long gone. A "
          "PID can be reused: a later DEL through such a path may reach another process's namespace (the "
          "reference loopback's DEL once set a node's lo down that way).",
          ["the runtime's and kubelet's log around that time (why the sandbox died: OOM, restarts)"],
          "usually transient; if it repeats, find why sandboxes die", ("host-lo-down", "leaked-reservation"),
          ("node", "leaks")),
    Entry("statfs", "reference plugins", 'failed to Statfs "<path>"',
          "the network namespace {path} does not exist",
          "A plugin could not open CNI_NETNS={path}: the named namespace was deleted (or never made) before "
          "the call. For ADD the runtime is racing its own cleanup; for DEL most plugins treat it as done.",
          ["ls -l {path}"], "usually transient", ("leaked-reservation",), ("leaks",)),
]
