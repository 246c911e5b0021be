"""skb explain's catalogue: the CNI error messages operators meet, as data.

An entry is one message of one program (``family``: kubelet, containerd, CRI-O, podman, libcni, a
reference plugin, flannel, Calico, AWS VPC CNI, Multus, the kernel's tools): the message's ``shapes``
(its fixed words with ``<placeholders>``), a ``title`` and a ``cause`` in this project's words, the
``checks`` an operator runs, the ``fix``, and the doctor finding codes and check groups that bear on it.
The matcher is compiled from the shapes, so what an entry cites is exactly what it matches. A
placeholder's kind is its name without trailing digits or, for a name like ``config_version``, its
last word (PLACEHOLDERS); ``<rest>`` is a wrapped message, explained in turn, ``<detail>`` the rest of a
line that the entry explains itself (its ``derive`` reads it), and ``<...>`` skips words. Texts name the
values the message carried (``{plugin}``, ``{config_version}``, ``{path}``), the values of the messages
around it included (a version mismatch wrapped by ``plugin type="flannel"`` names flannel); ``derive``
computes more of them.

The entries are in ``runtimes`` (kubelet, containerd, CRI-O, podman), ``protocol`` (libcni, how a plugin
is run, versions), ``reference`` (the reference plugins, iptables) and ``addons`` (flannel, Calico, AWS
VPC CNI, Multus). tests/unit/explain_messages.json holds real messages for them, each with its source.
"""
from skb.tool.catalogue import addons, protocol, reference, runtimes
from skb.tool.catalogue.entry import Entry, Values, fill  # noqa: F401 (the package's interface)

ENTRIES = runtimes.ENTRIES + protocol.ENTRIES + reference.ENTRIES + addons.ENTRIES
