"""Installing the frozen suite and the node's network configuration, atomically (``skb install``, the
DaemonSet, ``make install``). Standard library only: it runs on nodes from the bundle.
"""
