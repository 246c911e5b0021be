"""Where a fix must change containerd's CNI settings when an imported file sets them (review 16): the
file that set the key last, as containerd merges imports over config.toml."""
from skb.tool.doctor import runtimes

MAIN = """version = 2
imports = ["{dropins}/*.toml"]
[plugins."io.containerd.grpc.v1.cri".cni]
  conf_dir = "/etc/cni/net.d"
  bin_dir = "/opt/cni/bin"
"""


def test_a_key_set_by_an_imported_file_is_named_in_that_file(tmp_path):
    dropins = tmp_path / "conf.d"
    dropins.mkdir()
    (tmp_path / "config.toml").write_text(MAIN.format(dropins=dropins))
    (dropins / "10-cni.toml").write_text('[plugins."io.containerd.grpc.v1.cri".cni]\n  conf_dir = "/opt/cni/net.d"\n')
    (dropins / "20-other.toml").write_text('[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "x"\n')
    findings = []
    view = runtimes.containerd_view(str(tmp_path / "config.toml"), findings)
    assert findings == []
    assert view.conf_dir == "/opt/cni/net.d"
    assert view.conf_key == f'conf_dir in [plugins."io.containerd.grpc.v1.cri".cni] of {dropins}/10-cni.toml'
    assert view.bin_key == f'bin_dir in [plugins."io.containerd.grpc.v1.cri".cni] of {tmp_path}/config.toml'


def test_without_imports_the_main_file_is_named(tmp_path):
    (tmp_path / "config.toml").write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\n  conf_dir = "/x"\n')
    view = runtimes.containerd_view(str(tmp_path / "config.toml"), [])
    assert view.conf_key.endswith(f"of {tmp_path}/config.toml") and view.bin_key.endswith(f"of {tmp_path}/config.toml")
