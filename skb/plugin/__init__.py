"""The plugin runtime: the dispatcher every plugin runs (``skel``), IPAM delegation, the undo stack.
A plugin file holds only its networking story; everything protocol-shaped happens here.
"""
