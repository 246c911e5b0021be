"""ptp: a veth pair per attachment, point-to-point routing through the host."""
