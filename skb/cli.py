"""The ``skb`` command: tools for people debugging CNI on a node.

Not on a plugin's call path, so it may import what it likes (argparse, json, pyroute2).
"""
import sys


def _cmd_version(opts):
    from skb import __version__
    from skb.config import SUPPORTED_VERSIONS
    print(f"skb-cni {__version__}; CNI spec versions {', '.join(SUPPORTED_VERSIONS)}")
    return 0


def _cmd_log(opts):
    """Pretty-print a debug log written by skbDebugLog / SKB_DEBUG_LOG."""
    import json
    try:
        f = open(opts.file, encoding="utf-8")
    except OSError as e:
        print(f"skb log: cannot open {opts.file}: {e.strerror}", file=sys.stderr)
        return 1
    with f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except ValueError:
                print(f"{opts.file}:{n}: not a JSON line, skipped", file=sys.stderr)
                continue
            env = rec.get("env", {})
            status = "ok" if rec.get("exitCode") == 0 else f"FAILED (exit {rec.get('exitCode')})"
            print(f"{rec.get('time', '?')} {rec.get('plugin', '?')} {rec.get('command', '?')} "
                  f"container={env.get('CNI_CONTAINERID', '')} ifname={env.get('CNI_IFNAME', '')} "
                  f"netns={env.get('CNI_NETNS', '')} {status} {rec.get('durationMs', '?')} ms")
            if rec.get("exitCode") != 0 or opts.verbose:
                for key in ("stdin", "stdout", "stderr"):
                    if rec.get(key):
                        print(f"    {key}: {rec[key].strip()}")
    return 0


def build_parser():
    import argparse
    p = argparse.ArgumentParser(
        prog="skb", description="Debugging tools for CNI, from the skb-cni plugin suite.",
        epilog="examples:\n  skb version\n  skb log /var/log/skb-cni.jsonl\n  skb log -v /tmp/calls.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    v = sub.add_parser("version", help="print the suite's version and the CNI versions it speaks")
    v.set_defaults(func=_cmd_version)
    lg = sub.add_parser("log", help="show the calls recorded by skbDebugLog / SKB_DEBUG_LOG",
                        epilog="example: skb log -v /var/log/skb-cni.jsonl")
    lg.add_argument("file", help="the JSON-lines debug log")
    lg.add_argument("-v", "--verbose", action="store_true", help="show stdin/stdout of successful calls too")
    lg.set_defaults(func=_cmd_log)
    return p


def main(argv):
    parser = build_parser()
    opts = parser.parse_args(argv)
    if not getattr(opts, "func", None):
        parser.print_help()
        return 2
    return opts.func(opts)
