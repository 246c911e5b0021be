"""The plugins of the skb-cni suite, installed as ``skb_plugins``."""
