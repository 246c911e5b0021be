"""Results on the runtime side: ``skb.cni.result`` values, with the one shape it refuses to write (a
0.1/0.2 result without an address, which Go's 0.2 type holds and writes) handled here."""
from skb.cni import invoke
from skb.cni import result as cniresult
from skb.cni.errors import CNIError
from skb.tool.libcni.conf import CURRENT_VERSION
from skb.tool.libcni.errors import LibcniError

def result_dict(res, version=None):
    """``res`` as JSON-ready dicts in ``version`` (default: its own)."""
    version = version if version is not None else (res.cni_version or CURRENT_VERSION)
    try:
        return res.to_dict(version)
    except CNIError:
        if cniresult.version_family(version) == "020" and not res.ips and \
                cniresult.version_family(res.cni_version or "0.1.0") == "020":
            return {"cniVersion": version or "0.1.0", "dns": {} if res.dns is None else res.dns._dict0x()}
        raise


def parse_plugin_result(netconf_version, stdout):
    """libcni's ExecPluginWithResult after the plugin ran: a missing cniVersion is the configuration's,
    then the result is read with its own version's parser."""
    try:
        raw = invoke.decode_result(stdout, netconf_version)
    except invoke.ResultUnreadable as e:
        raise LibcniError(f"failed to unmarshal raw result: {e.msg}") from None
    version = raw["cniVersion"]
    return _create(version, raw)


def _create(version, raw):
    try:
        cniresult.version_family(version)
    except CNIError:
        raise LibcniError(f'unsupported CNI result version "{version}"') from None
    return cniresult.parse_result(raw, version)
