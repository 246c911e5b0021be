"""CNI_* validation: order, codes and messages of Go's skel (docs/REFERENCE.md#the-execution-protocol)."""
import pytest

from skb.cni import env
from skb.cni.errors import CNIError


def full(command, **over):
    e = {"CNI_COMMAND": command, "CNI_CONTAINERID": "ctr1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
         "CNI_ARGS": "", "CNI_PATH": "/opt/cni/bin"}
    e.update(over)
    return e


def err(environ):
    with pytest.raises(CNIError) as ei:
        env.from_environ(environ)
    return ei.value


@pytest.mark.parametrize("command,missing", [
    ("ADD", "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH"),
    ("CHECK", "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH"),
    ("DEL", "CNI_CONTAINERID,CNI_IFNAME,CNI_PATH"),
    ("STATUS", "CNI_PATH"),
    ("GC", "CNI_PATH"),
])
def test_missing_variables_listed_in_go_order(command, missing):
    e = err({"CNI_COMMAND": command})
    assert (e.code, e.msg) == (4, f"required env variables [{missing}] missing")


def test_empty_means_missing():
    e = err(full("ADD", CNI_NETNS="", CNI_PATH=""))
    assert e.msg == "required env variables [CNI_NETNS,CNI_PATH] missing"


def test_del_tolerates_missing_netns():
    args = env.from_environ(full("DEL", CNI_NETNS=""))
    assert args.netns == "" and args.ifname == "eth0"


def test_version_needs_nothing_else():
    assert env.from_environ({"CNI_COMMAND": "VERSION"}).command == "VERSION"


def test_no_command_is_signalled():
    with pytest.raises(env.MissingCommand):
        env.from_environ({})


def test_invalid_container_id_reported_before_missing_vars():
    e = err({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "bad/id"})
    assert (e.code, e.msg) == (4, "invalid characters in containerID")
    assert "bad/id" in e.details


@pytest.mark.parametrize("cid", ["a", "0abc", "ab_c.d-e", "k8s_POD.1-x"])
def test_valid_container_ids(cid):
    assert env.from_environ(full("ADD", CNI_CONTAINERID=cid)).container_id == cid


@pytest.mark.parametrize("cid", ["_a", ".a", "-a", "a b", "a/b", "é", "a:b"])
def test_invalid_container_ids(cid):
    assert err(full("ADD", CNI_CONTAINERID=cid)).msg == "invalid characters in containerID"


@pytest.mark.parametrize("c", ["a", "z", "A", "Z", "0", "9"])
def test_the_edges_of_each_character_range_are_valid_anywhere(c):
    assert env.valid_name(c) and env.valid_name("x" + c) and env.valid_name(c + "_.-")


@pytest.mark.parametrize("c", ["`", "{", "@", "[", "/", ":", "^", "\\", "\x00", "\u0430"])
def test_the_neighbours_of_each_character_range_are_invalid_anywhere(c):
    assert not env.valid_name(c) and not env.valid_name("x" + c) and not env.valid_name(c + "x")


def test_a_container_id_of_the_longest_length_is_taken_and_one_more_is_refused_by_add_and_check():
    longest = "i" * 1024
    assert env.from_environ(full("ADD", CNI_CONTAINERID=longest)).container_id == longest
    for command in ("ADD", "CHECK"):
        e = err(full(command, CNI_CONTAINERID=longest + "i"))
        assert (e.code, e.msg) == (4, "CNI_CONTAINERID is longer than 1024 characters") and "1025" in e.details
    assert env.from_environ(full("DEL", CNI_CONTAINERID=longest * 5)).container_id == longest * 5   # DEL never blocks


@pytest.mark.parametrize("name,msg", [
    ("a" * 16, "interface name is too long"),
    ("é" * 8, "interface name is too long"),  # 16 bytes: the limit counts bytes
    (".", "interface name is . or .."),
    ("..", "interface name is . or .."),
    ("eth/0", "interface name contains / or : or whitespace characters"),
    ("eth:0", "interface name contains / or : or whitespace characters"),
    ("eth 0", "interface name contains / or : or whitespace characters"),
    ("eth\u00a00", "interface name contains / or : or whitespace characters"),
])
def test_invalid_ifnames(name, msg):
    e = err(full("ADD", CNI_IFNAME=name))
    assert (e.code, e.msg) == (4, msg)


def test_ifname_15_bytes_ok():
    assert env.from_environ(full("ADD", CNI_IFNAME="a" * 15)).ifname == "a" * 15


def test_ifname_not_validated_when_not_required():
    assert env.from_environ(full("GC", CNI_IFNAME="not valid!")).command == "GC"


def test_path_split_and_override():
    args = env.from_environ(full("ADD", CNI_PATH="/a::/b", CNI_NETNS_OVERRIDE="TRUE"))
    assert args.path == ("/a", "/b") and args.netns_override


@pytest.mark.parametrize("raw,expected", [
    ("", {}),
    ("IP=10.0.0.5", {"IP": "10.0.0.5"}),
    ("IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.0.0.5", {"IP": "10.0.0.5"}),
    ("K8S_POD_NAME=p;IgnoreUnknown=true", {}),  # position of IgnoreUnknown does not matter
    ("IP=", {"IP": ""}),
])
def test_cni_args(raw, expected):
    assert env.parse_cni_args(raw, {"IP": str}) == expected


@pytest.mark.parametrize("raw,fragment", [
    ("IP=1;", "invalid pair ''"),
    ("A=b=c;IgnoreUnknown=1", "invalid pair 'A=b=c'"),
    ("K8S_POD_NAME=p", "unknown args ['K8S_POD_NAME=p']"),
    ("ignoreunknown=1;X=1", "unknown args"),  # the key is case-sensitive
    ("IgnoreUnknown=yes", "error parsing value of pair 'IgnoreUnknown=yes'"),
    ("IgnoreUnknown=0;X=1", "unknown args"),
])
def test_cni_args_errors(raw, fragment):
    with pytest.raises(CNIError) as ei:
        env.parse_cni_args(raw, {"IP": str})
    assert ei.value.code == 4 and fragment in ei.value.msg and "CNI_ARGS" in ei.value.msg


def test_a_non_utf8_interface_name_is_code_4_not_a_crash():
    """os.environ turns a non-UTF-8 byte into a lone surrogate; the name could not go into the JSON result."""
    from skb.cni.env import check_ifname
    from skb.cni.errors import CNIError
    with pytest.raises(CNIError) as ei:
        check_ifname("eth\udcff")
    assert ei.value.code == 4 and "not valid UTF-8" in ei.value.msg


def test_every_variable_is_read_into_its_field():
    args = env.from_environ(full("ADD", CNI_NETNS="/run/netns/p1", CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAME=a",
                                 CNI_PATH="/opt/cni/bin::/usr/lib/cni", CNI_NETNS_OVERRIDE="TRUE"))
    assert (args.command, args.container_id, args.netns, args.ifname, args.args, args.path, args.netns_override) == \
        ("ADD", "ctr1", "/run/netns/p1", "eth0", "IgnoreUnknown=1;K8S_POD_NAME=a", ("/opt/cni/bin", "/usr/lib/cni"), True)
    assert env.from_environ(full("ADD", CNI_NETNS_OVERRIDE="yes")).netns_override is False
