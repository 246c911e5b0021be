"""skb-cni: CNI plugins in pure Python. The layers and their rules are in docs/ARCHITECTURE.md."""
# The one place the version is written: pyproject.toml, the Makefile and build/bundle.py read it here.
__version__ = "0.1.0"
