"""Warm start: plugin calls served by fork from a resident server of the same bundle (docs/WARM.md).

One job per module: ``wire`` the protocol, ``snapshot`` a process's inherited state as text,
``admission`` what the server checks, ``server`` its life and event loop, ``children`` the spares and
calls in flight, ``adopt`` the child's side of a call, ``pages`` page learning, ``syscalls`` the system
calls the os module lacks, ``client`` ``skb warm status|stop``. Never on a plugin's call path: the
server imports it (build/entry.py), the ``skb`` command imports ``client``.
"""
