"""host-local: IP address management from local ranges, with the Go plugin's on-disk store."""
