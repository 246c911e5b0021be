"""Container images built here, offline, from Debian's static binaries: no registry is ever contacted.

``oci_archive`` writes an OCI image layout as a tar (``oci-layout``, ``index.json``, ``blobs/sha256/``) with
one uncompressed layer; both ``ctr image import`` and ``podman load`` read it. ``busybox`` is
busybox-static with a link per applet (sh, ping, ip, sleep, ...); ``pause`` is ``catatonit -P``, the
pause process podman itself uses for its infra containers.
"""
import hashlib
import io
import json
import subprocess
import tarfile

BUSYBOX = "/bin/busybox"
CATATONIT = "/usr/bin/catatonit"
BUSYBOX_REF = "skb.local/e2e/busybox:1"
PAUSE_REF = "skb.local/e2e/pause:1"
_DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "run", "var", "root")


def _tarinfo(name, **kw):
    ti = tarfile.TarInfo(name)
    ti.uid = ti.gid = 0
    ti.mtime = 0
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def rootfs_tar(files, links=()):
    """A layer: ``files`` {path in image: host file to copy (0755)}, ``links`` [(path, target)]."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in _DIRS:
            tar.addfile(_tarinfo(d, type=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755))
        tar.addfile(_tarinfo("etc/passwd", size=len(b"root:x:0:0:root:/root:/bin/sh\n"), mode=0o644),
                    io.BytesIO(b"root:x:0:0:root:/root:/bin/sh\n"))
        tar.addfile(_tarinfo("etc/group", size=len(b"root:x:0:\n"), mode=0o644), io.BytesIO(b"root:x:0:\n"))
        for path, src in sorted(files.items()):
            with open(src, "rb") as f:
                data = f.read()
            tar.addfile(_tarinfo(path, size=len(data), mode=0o755), io.BytesIO(data))
        for path, target in sorted(links):
            tar.addfile(_tarinfo(path, type=tarfile.SYMTYPE, linkname=target, mode=0o777))
    return buf.getvalue()


def _blob(tar, data):
    digest = hashlib.sha256(data).hexdigest()
    tar.addfile(_tarinfo(f"blobs/sha256/{digest}", size=len(data), mode=0o644), io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_archive(path, ref, layer, entrypoint=None, cmd=None):
    """Write the OCI image ``ref`` (one layer) as an OCI layout tar at ``path``."""
    config = {
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/bin"], "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        layer_desc = _blob(tar, layer)
        config_desc = _blob(tar, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
        }
        manifest_desc = _blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest_desc,
            "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}}]}
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           ("index.json", json.dumps(index).encode())):
            tar.addfile(_tarinfo(name, size=len(data), mode=0o644), io.BytesIO(data))
    return path


def busybox_applets():
    out = subprocess.run([BUSYBOX, "--list"], check=True, capture_output=True, text=True).stdout
    return sorted(set(out.split()) - {"busybox"})


def busybox(path):
    links = [(f"bin/{a}", "busybox") for a in busybox_applets()]
    layer = rootfs_tar({"bin/busybox": BUSYBOX}, links)
    return oci_archive(path, BUSYBOX_REF, layer, cmd=["sh"])


def pause(path):
    layer = rootfs_tar({"pause": CATATONIT})
    return oci_archive(path, PAUSE_REF, layer, entrypoint=["/pause", "-P"])
