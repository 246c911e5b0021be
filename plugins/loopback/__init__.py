"""loopback: brings ``lo`` up inside the container netns."""
