"""The allocator over a fake store: the reference's round-robin order and our deliberate differences."""
import pytest

from skb.cni.addr import IP
from skb.cni import netconf
from skb.cni.errors import CNIError
from skb_plugins.hostlocal_ipam import config as hcfg
from skb_plugins.hostlocal_ipam.allocator import allocate, candidates


class FakeStore:
    def __init__(self, reserved=(), last=None):
        self.files = {IP.parse(ip): owner for ip, owner in reserved}
        self.last = {0: IP.parse(last)} if last else {}

    def owned(self, owner):
        return [ip for ip, o in self.files.items() if o == owner]

    def is_free(self, ip):
        return ip not in self.files

    def reserve(self, ip, owner):
        if ip in self.files:
            return False
        self.files[ip] = owner
        return True

    def release(self, ip, owner):
        self.files.pop(ip, None)

    def holder(self, ip):
        return self.files.get(ip)

    def last_reserved(self, index):
        return self.last.get(index)


def rset(*ranges, version="1.0.0"):
    raw = {"name": "n", "cniVersion": version, "ipam": {"ranges": [list(ranges)]}}
    return netconf.load(raw, hcfg.HostLocalConf).range_sets[0]


def order(rs, last=None, n=None):
    out = [str(ip) for ip in candidates(rs, IP.parse(last) if last else None)]
    return out[:n] if n else out


def test_default_range_starts_at_1_skipping_gateway():
    rs = rset({"subnet": "10.0.0.0/29"})
    assert order(rs) == ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]  # .1 gateway, .7 broadcast


def test_round_robin_after_last_reserved_and_last_tried_last():
    rs = rset({"subnet": "10.0.0.0/29"})
    assert order(rs, "10.0.0.4") == ["10.0.0.5", "10.0.0.6", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert order(rs, "10.0.0.6") == ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]


def test_last_reserved_outside_set_restarts_at_range_start():
    rs = rset({"subnet": "10.0.0.0/29"})
    assert order(rs, "10.9.9.9", 1) == ["10.0.0.2"] and order(rs, "fd00::1", 1) == ["10.0.0.2"]


def test_gateway_other_than_first_and_explicit_bounds():
    """Observed with Go: gateway .254 -> the first address handed out is .1; explicit bounds may include
    the network and broadcast addresses."""
    assert order(rset({"subnet": "10.22.0.0/24", "gateway": "10.22.0.254"}), n=1) == ["10.22.0.1"]
    rs = rset({"subnet": "10.22.0.0/24", "rangeStart": "10.22.0.0", "rangeEnd": "10.22.0.255"})
    assert order(rs, "10.22.0.254", 3) == ["10.22.0.255", "10.22.0.0", "10.22.0.2"]


def test_multi_range_wrap():
    rs = rset({"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"})
    assert order(rs) == ["10.0.0.2", "10.0.1.2"]  # each range's .1 is its gateway
    assert order(rs, "10.0.0.2") == ["10.0.1.2", "10.0.0.2"]


def test_observed_go_sequence():
    """Go v1.1.1, range .252-.254 with gateway .253: a -> .252, b -> .254, c -> exhausted, then after
    releasing a, d -> .252 (wrapped)."""
    rs = rset({"subnet": "10.22.0.0/24", "rangeStart": "10.22.0.252", "rangeEnd": "10.22.0.254", "gateway": "10.22.0.253"})
    store = FakeStore()
    got = []
    for cid in "ab":
        ip, new, _ = allocate(store, rs, (cid, "eth0"), [])
        store.last[0] = ip
        got.append(str(ip))
    assert got == ["10.22.0.252", "10.22.0.254"]
    with pytest.raises(CNIError) as ei:
        allocate(store, rs, ("c", "eth0"), [])
    assert ei.value.code == 100
    assert ei.value.msg == "failed to allocate for range 0: no IP addresses available in range set: 10.22.0.252-10.22.0.254"
    assert "GC" in ei.value.details and "2 addresses" in ei.value.details
    store.release(IP.parse("10.22.0.252"), ("a", "eth0"))
    assert str(allocate(store, rs, ("d", "eth0"), [])[0]) == "10.22.0.252"


def test_existing_reservation_is_returned_not_duplicated():
    rs = rset({"subnet": "10.0.0.0/24"})
    store = FakeStore([("10.0.0.7", ("c1", "eth0"))], last="10.0.0.9")
    assert allocate(store, rs, ("c1", "eth0"), []) == (IP.parse("10.0.0.7"), False, [])
    assert allocate(store, rs, ("c1", "eth1"), []) == (IP.parse("10.0.0.10"), True, [])


def test_requested_ip():
    rs = rset({"subnet": "10.0.0.0/24"})
    store = FakeStore([("10.0.0.50", ("other", "eth0")), ("10.0.0.7", ("c1", "eth0"))])
    assert allocate(store, rs, ("c1", "eth0"), [IP.parse("10.0.0.7")]) == (IP.parse("10.0.0.7"), False, [])
    # the request replaces the old address, which the caller releases once the whole ADD succeeded
    assert allocate(store, rs, ("c1", "eth0"), [IP.parse("10.0.0.8")]) == (IP.parse("10.0.0.8"), True,
                                                                          [IP.parse("10.0.0.7")])
    assert store.holder(IP.parse("10.0.0.7")) == ("c1", "eth0")
    with pytest.raises(CNIError, match="requested ip 10.0.0.1 is subnet's gateway"):
        allocate(store, rs, ("c2", "eth0"), [IP.parse("10.0.0.1")])
    with pytest.raises(CNIError) as ei:
        allocate(store, rs, ("c2", "eth0"), [IP.parse("10.0.0.50")])
    assert "requested IP address 10.0.0.50 is not available in range set 10.0.0.1-10.0.0.254" in ei.value.msg
    assert "'other'" in ei.value.details


def test_ipv6_range_end_is_last_address():
    assert order(rset({"subnet": "fd00::/126"})) == ["fd00::2", "fd00::3"]


# exact edges: a single-address range, ranges touching at one address, the last address of a range,
# three ranges in one set

def test_a_single_address_range_hands_out_that_address_then_none():
    rs = rset({"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.9"})
    assert order(rs) == ["10.0.0.9"] and order(rs, "10.0.0.9") == ["10.0.0.9"]
    store = FakeStore()
    assert allocate(store, rs, ("a", "eth0"), []) == (IP.parse("10.0.0.9"), True, [])
    with pytest.raises(CNIError) as ei:
        allocate(store, rs, ("b", "eth0"), [])
    assert ei.value.code == 100 and "1 addresses" in ei.value.details


def test_the_last_address_of_a_range_is_handed_out_and_then_the_walk_wraps():
    rs = rset({"subnet": "10.0.0.0/29"})                     # .1 gateway, .2-.6, .7 broadcast
    assert order(rs, "10.0.0.5") == ["10.0.0.6", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]
    assert order(rs, "10.0.0.6") == ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
    store = FakeStore([(f"10.0.0.{i}", ("x", f"e{i}")) for i in (2, 3, 4, 5)], last="10.0.0.4")
    assert allocate(store, rs, ("a", "eth0"), []) == (IP.parse("10.0.0.6"), True, [])


def test_ranges_touching_at_one_address_overlap_and_adjacent_ones_do_not():
    touching = [{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20"},
                {"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.20", "rangeEnd": "10.0.0.30"}]
    with pytest.raises(CNIError) as ei:
        rset(*touching)
    assert ei.value.code == 7 and "overlap" in ei.value.msg
    touching[1]["rangeStart"] = "10.0.0.21"
    rs = rset(*touching)
    assert order(rs, "10.0.0.20", 2) == ["10.0.0.21", "10.0.0.22"]   # from one range into the next


def test_three_ranges_in_one_set_are_walked_in_order_and_wrap():
    rs = rset({"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"}, {"subnet": "10.0.2.0/30"})
    assert order(rs) == ["10.0.0.2", "10.0.1.2", "10.0.2.2"]
    assert order(rs, "10.0.1.2") == ["10.0.2.2", "10.0.0.2", "10.0.1.2"]
    assert order(rs, "10.0.2.2") == ["10.0.0.2", "10.0.1.2", "10.0.2.2"]


# the store is asked about each candidate and told the owner; the errors are exact objects

class SpyStore(FakeStore):
    """Records what the allocator asks; ``busy`` addresses are reported not free (reserve would take them)."""

    def __init__(self, busy=(), refuse=False, **kw):
        super().__init__(**kw)
        self.busy = {IP.parse(ip) for ip in busy}
        self.refuse = refuse
        self.asked = []

    def is_free(self, ip):
        self.asked.append(str(ip))
        return ip not in self.busy and super().is_free(ip)

    def reserve(self, ip, owner):
        return not self.refuse and super().reserve(ip, owner)


def test_the_store_is_asked_about_each_candidate_and_records_the_owner():
    rs = rset({"subnet": "10.0.0.0/29"})
    store = SpyStore(busy=["10.0.0.2", "10.0.0.3"])
    assert allocate(store, rs, ("a", "eth0"), []) == (IP.parse("10.0.0.4"), True, [])
    assert store.asked == ["10.0.0.2", "10.0.0.3", "10.0.0.4"] and store.holder(IP.parse("10.0.0.4")) == ("a", "eth0")
    assert allocate(store, rs, ("b", "eth0"), [IP.parse("10.0.0.6")]) == (IP.parse("10.0.0.6"), True, [])
    assert store.holder(IP.parse("10.0.0.6")) == ("b", "eth0")


def test_the_errors_of_a_request_are_code_101_with_their_details():
    rs = rset({"subnet": "10.0.0.0/24"})
    with pytest.raises(CNIError) as ei:
        allocate(FakeStore(), rs, ("c", "eth0"), [IP.parse("10.0.0.1")])
    assert ei.value.to_dict() == {"code": 101, "msg": "failed to allocate for range 0: requested ip 10.0.0.1 is "
                                  "subnet's gateway", "details": "10.0.0.1 is the gateway of ipam.ranges[0][0]; request "
                                  "another address"}
    with pytest.raises(CNIError) as ei:
        allocate(FakeStore([("10.0.0.9", ("x", "eth1"))]), rs, ("c", "eth0"), [IP.parse("10.0.0.9")])
    assert ei.value.to_dict() == {"code": 101, "msg": "failed to allocate for range 0: requested IP address 10.0.0.9 "
                                  "is not available in range set 10.0.0.1-10.0.0.254",
                                  "details": "10.0.0.9 is reserved by container 'x' ifname 'eth1'"}
    with pytest.raises(CNIError) as ei:          # taken meanwhile, by no one the store can name
        allocate(SpyStore(refuse=True), rs, ("c", "eth0"), [IP.parse("10.0.0.9")])
    assert (ei.value.code, ei.value.details) == (101, "10.0.0.9 is taken")


def test_an_exhausted_set_is_code_100_with_its_details():
    rs = rset({"subnet": "10.0.0.0/30"})
    with pytest.raises(CNIError) as ei:
        allocate(FakeStore([("10.0.0.2", ("x", "eth0"))]), rs, ("c", "eth0"), [])
    assert ei.value.to_dict() == {"code": 100, "msg": "failed to allocate for range 0: no IP addresses available in "
                                  "range set: 10.0.0.1-10.0.0.2", "details": "all 1 addresses of ipam.ranges[0] are "
                                  "reserved. Reservations of containers that no longer exist are reclaimed by GC (CNI "
                                  "1.1: the runtime's GC, or `skb gc NETWORK --keep-live`); add a range to grow it"}
