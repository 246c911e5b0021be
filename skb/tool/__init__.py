"""The ``skb`` operator command: the cnitool-compatible runner over libcni, doctor, replay, log, netns and
the installer's subcommands. Never on a plugin's call path.
"""
