"""The CNI protocol, as both sides speak it: spec versions, error codes, the JSON codec, CNI_* environment,
network configuration, addresses and results. No Linux specifics here; imported on every plugin call.
"""
