"""The CNI spec versions this suite speaks, and its VERSION reply (the same for every plugin).

Kept apart from everything else so that VERSION, which podman sends to every plugin before each command,
is answered without loading any plugin code (see skb.applets).
"""
SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = SUPPORTED_VERSIONS[-1]
# Like Go's skel: the newest version we speak, whatever the request says (runtimes only read the list).
VERSION_REPLY = ('{"cniVersion":"%s","supportedVersions":[%s]}\n'
                 % (LATEST, ",".join(f'"{v}"' for v in SUPPORTED_VERSIONS)))
