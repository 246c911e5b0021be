"""debug: records every call and injects behaviour for testing runtimes and chains."""
