"""libcni, the runtime side of CNI: load network configurations and run them the way runtimes do.

What ``skb add|check|del|status|gc`` and ``skb doctor`` stand on. It follows Go's libcni (main, after
v1.3.0; docs/REFERENCE.md#the-runtime-side-libcni) because that is what containerd, CRI-O and podman
run, so a configuration behaves here as it will on a node:

- loading: ``.conflist`` files first, then the deprecated single configs (``.conf``, ``.json``), each set
  in byte order of the file name; extensions match exactly (``foo.conflist.bak`` is ignored); the first
  file with the wanted ``name`` wins; any file that fails to parse aborts the whole lookup; a single
  config is up-converted to a list; plugin objects from ``<dir>/<network name>/*.conf`` are appended
  unless ``loadOnlyInlinedPlugins``. Error strings are libcni's (docs/REFERENCE.md#loading-configurations), except that invalid JSON is
  located by line and column instead of Go's decoder text.
- running: each plugin's stdin is its object with ``name``, ``cniVersion``, ``prevResult`` and matching
  ``runtimeConfig`` injected, keys sorted as Go's map encoding writes them; ADD chains results, DEL runs
  in reverse with the cached result as prevResult (0.4.0 and later), CHECK honours ``disableCheck``,
  STATUS stops at the first error, GC DELs stale cached attachments and then sends GC to every plugin
  (``cni.dev/valid-attachments`` and the older ``cni.dev/attachments`` when a list is given).
- the result cache: ``<cacheDir>/results/<network>-<containerID>-<ifname>``, a ``cniCacheV1`` record
  (config as base64, CNI args, capability args, result), written after a successful ADD and removed
  after DEL, exactly as libcni writes it so runtimes and this tool can read each other's.

Results are held as ``skb.cni.result.Result`` values; the CLI is not on a plugin's call path, so this package
imports what it likes. Its modules, in dependency order: ``errors`` (LibcniError), ``gojson`` (Go's JSON
encoding and messages), ``conf`` (loading), ``results``, ``rawexec`` (finding and running a plugin, over
``skb.cni.invoke``), ``aside`` (a RawExec whose calls record themselves in none of the runtime's call
logs: skb's own calls), ``runner`` (CNIConfig and the cache), ``cnitool`` (cnitool's conventions). The
names the rest of skb uses are re-exported here.
"""
from skb.cni import jsonio  # the doctor reads JSON the way libcni does
from skb.cni import result as cniresult
from skb.cni.errors import CNIError
from skb.tool.libcni.errors import LibcniError, NoConfigsFound, NotFound, describe
from skb.tool.libcni.gojson import MAX_DEPTH, _field, go_marshal, go_quote, go_type, too_deep
from skb.tool.libcni.conf import (CURRENT_VERSION, DEFAULT_CONF_DIR, NetworkConfigList, PluginConfig,
                                  conf_files, conf_from_file, conflist_from_bytes, conflist_from_conf,
                                  conflist_from_file, default_network_files, go_ext, inject_conf, load_any,
                                  load_conf, load_network, plugin_conf_from_bytes, speaks_1_1, version_ge)
from skb.tool.libcni.results import parse_plugin_result, result_dict
from skb.tool.libcni.rawexec import RawExec, find_in_path, parse_plugin_error
from skb.tool.libcni.runner import (CACHE_KIND, DEFAULT_CACHE_DIR, Attachment, CNIConfig, RuntimeConf,
                                    decode_version_info, validate_container_id, validate_network_name)
from skb.tool.libcni.cnitool import cnitool_container_id, go_abs, parse_cnitool_args

__all__ = ["jsonio", "cniresult", "CNIError", "LibcniError", "NoConfigsFound", "NotFound", "describe",
           "_field", "go_marshal", "go_quote", "go_type", "MAX_DEPTH", "too_deep", "CURRENT_VERSION", "DEFAULT_CONF_DIR",
           "NetworkConfigList", "PluginConfig", "conf_files", "conf_from_file", "conflist_from_bytes",
           "conflist_from_conf", "conflist_from_file", "default_network_files", "go_ext", "inject_conf",
           "load_any", "load_conf", "load_network", "plugin_conf_from_bytes", "speaks_1_1", "version_ge",
           "parse_plugin_result", "result_dict", "RawExec", "find_in_path", "parse_plugin_error",
           "CACHE_KIND", "DEFAULT_CACHE_DIR", "Attachment", "CNIConfig", "RuntimeConf",
           "decode_version_info", "validate_container_id", "validate_network_name", "cnitool_container_id",
           "go_abs", "parse_cnitool_args"]
