"""``skb warm status`` and ``skb warm stop``: the warm-start servers of this node (docs/WARM.md)."""
import json

from skb.tool.style import fail

EPILOG = """\
A warm-start server is a resident copy of the suite that serves plugin calls by fork, one per runtime
context (namespaces, cgroup, credentials ...), started by the first plugin call in that context. It exits
by itself when idle, when the suite is upgraded, or when its context is gone. Turn warm start off with
SKB_WARM=0 in the runtime's environment or a file .skb-warm-off in the plugin dir.

examples:
  skb warm status           the servers, calls served and refused (by reason), children, memory
  skb warm status --json
  skb warm stop             stop them all (calls in flight finish first)
"""


def add_parser(sub, formatter, parents=()):
    w = sub.add_parser("warm", help="show or stop the warm-start servers", parents=list(parents),
                       description="Show or stop the resident warm-start servers of this node.",
                       epilog=EPILOG, formatter_class=formatter)
    w.add_argument("action", choices=("status", "stop"))
    w.add_argument("--json", action="store_true", help="machine-readable output (status)")
    w.set_defaults(func=command)
    return w


def command(opts):
    # Local import: the warm client and its wire protocol (~1.5 ms) are loaded by ``skb warm`` alone, not
    # by every other skb command (the skb command builds every sub-command's parser at start).
    from skb.plugin.warm import client as warm
    try:
        return _act(warm, opts)
    except warm.Unreadable as e:
        return fail("skb warm", str(e), opts)


def _act(warm, opts):
    if opts.action == "stop":
        stopped = warm.stop_all()
        ended = sum(1 for _, _, e in stopped if e)
        print(f"stopped {ended} warm-start server(s)" + (f" of {len(stopped)}" if ended < len(stopped) else "") +
              "".join(f"\n  {key} ({_how_stopped(pid, e)})" for key, pid, e in stopped))
        return 0
    servers = warm.status_all()
    if opts.json:
        print(json.dumps(servers, indent=1, sort_keys=True))
        return 0
    if not servers:
        print(f"no warm-start server running (socket dir {warm.WARM_DIR})")
        return 0
    for s in servers:
        if "error" in s:
            print(f"{s['key']}: not answering ({s['error']})")
            continue
        try:  # (a status with fields missing or of another type: a server of another version, or no server)
            refused = ", ".join(f"{k} {v}" for k, v in sorted(s["refused"].items())) or "none"
            print(f"{s['key']}: pid {s['pid']}, bundle {s['bundle']}{' (stopping: ' + s['stopping'] + ')' if s['stopping'] else ''}\n"
                  f"  served {s['served']}, refused {refused}; children {s['children']} now, {s['peakChildren']} at most "
                  f"(cap {s['maxChildren']}); idle {s['idleSeconds']} s\n"
                  f"  server RSS {s['rssKB']} KB; " + (
                      "per call: none served yet\n" if s["acceptToExitMs"] is None else
                      f"per call (median of the last 64): child peak RSS {s['childMaxRssKB']} KB, "
                      f"own pages {s['childFaultedKB']} KB, {s['acceptToExitMs']} ms accept to exit "
                      f"(p90 {s.get('acceptToExitP90Ms')} ms), {s['acceptToForkMs']} ms accept to hand-off "
                      f"(p90 {s.get('acceptToForkP90Ms')} ms)\n") +
                  f"  spare child: {'pid ' + str(s['sparePid']) if s.get('sparePid') else 'none now'}, "
                  + (f"learning (reports the pages its call writes; {s.get('prefaultPages', 0)} learnt so far)"
                     if s.get("spareLearns") else f"faulting in {s.get('prefaultPages', 0)} learnt pages ahead of its call"))
        except (KeyError, TypeError, AttributeError, ValueError):
            print(f"{s.get('key')}: pid {s.get('pid')}, an answer this version cannot read")
    return 0


def _how_stopped(pid, ended):
    if ended:
        return f"pid {pid}"
    if pid:
        return f"pid {pid}: still running, to finish its calls in flight; it ends when they have"
    if ended is None:
        return "asked to stop; its pid namespace is not this command's: its end cannot be watched"
    return "not answering: asked to stop, it ends once it runs again"
