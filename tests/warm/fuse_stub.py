"""A FUSE file system for the warm tests, speaking /dev/fuse directly: a root directory holding one file,
"f". It answers everything at once (attributes never cached: valid for 0 s), until the file FLAG names
the inode (1: the root, 2: "f") whose GETATTR it must leave unanswered from then on, as a network or FUSE
file system whose server is gone does.

    python3 fuse_stub.py MOUNTPOINT FLAG
"""
import errno
import os
import struct
import sys
import time
import ctypes

INIT, LOOKUP, FORGET, GETATTR, OPEN, READ, RELEASE, INTERRUPT, BATCH_FORGET = 26, 1, 2, 3, 14, 15, 18, 36, 42


def attr(ino, mode):
    now = int(time.time())
    return struct.pack("<QQQQQQIIIIIIIIII", ino, 5, 1, now, now, now, 0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)


def main(mnt, flag):
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"skb-test-fuse", mnt.encode(), b"fuse", 6, opts) != 0:     # MS_NOSUID | MS_NODEV
        sys.exit(f"mount: {os.strerror(ctypes.get_errno())}")

    def reply(unique, err=0, data=b""):
        os.write(fd, struct.pack("<Iiq", 16 + len(data), -err, unique) + data)
    while True:
        try:
            buf = os.read(fd, 1 << 20)
        except OSError as e:
            if e.errno == errno.EINTR:
                continue
            return                                    # ENODEV: unmounted
        length, op, unique, node = struct.unpack_from("<IIQQ", buf)
        body = buf[40:length]
        try:
            with open(flag) as f:
                held = str(node) in f.read().split()
        except OSError:
            held = False
        if op == INIT:
            _major, _minor, readahead, _flags = struct.unpack_from("<IIII", body)
            reply(unique, 0, struct.pack("<IIIIHHIIHHII", 7, 31, readahead, 0, 16, 12, 65536, 1, 32, 0, 0, 0)
                  + bytes(24))
        elif op == LOOKUP:
            if body.split(b"\0")[0] == b"f":
                reply(unique, 0, struct.pack("<QQQQII", 2, 0, 0, 0, 0, 0) + attr(2, 0o100644))
            else:
                reply(unique, errno.ENOENT)
        elif op == GETATTR:
            if not held:
                reply(unique, 0, struct.pack("<QII", 0, 0, 0) + attr(node, 0o40755 if node == 1 else 0o100644))
        elif op == OPEN:
            reply(unique, 0, struct.pack("<QIi", 1, 1 << 5, 0))
        elif op == READ:
            reply(unique, 0, b"hello")
        elif op == RELEASE:
            reply(unique)
        elif op not in (FORGET, BATCH_FORGET, INTERRUPT):
            reply(unique, errno.ENOSYS)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
