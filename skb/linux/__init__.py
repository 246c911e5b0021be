"""The Linux side of a plugin: network namespaces and the host-netns guard, rtnetlink (a pure codec and a
client), sysctls, masquerade rules and running programs. Imported by plugins on their call path.
"""
