/* The warm-start client: offer the call to the context's resident server (docs/WARM.md).
 *
 * warm() goes through its steps in order; any step that fails returns, and main() execs the bundle exactly
 * as without warm start (once launcher.c's warm_applies() let it try): open_fds() (the caller's inherited
 * fds, then cwd, root and the namespaces), the snapshot (warm_snapshot.c) and its key, request(),
 * connect_server() (starting a server, detached, when there is none; the request carries no fd of the
 * caller's), handshake() (ACCEPTED within ACCEPT_TIMEOUT, then GO with the caller's fds), and follow()
 * until the child's exit status comes back. The call is committed only once the child says it has BEGUN:
 * before that, a refusal, an EOF or an exit status sends the call to exec, so a call never runs twice and
 * never turns into an error because a server ended. After it, every signal the launcher can catch is
 * passed on to the child; a server that dies mid-call is reported as a CNI error (code 999). Wire
 * format: skb/plugin/warm/wire.py.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

#define RUN_DIR "/run/skb-cni"
#define WARM_DIR "warm"
#define SPAWN_EVERY 10      /* seconds between two attempts to start a server for one context */
#define MAX_SERVERS 16      /* no new server while this many servers listen in the dir */
#define MAX_ENTRIES 16384   /* nor in a dir with more entries than this */
#define MAX_REQUEST (160 << 10) /* bytes, the proof included (skb/plugin/warm/wire.py MAX_REQUEST): larger, exec */
#define ACCEPT_TIMEOUT 2000 /* ms for the server to accept or refuse, else exec */
#define REC_PROOF 'K'
#define SKB_SO_PEERPIDFD 77 /* (asm-generic; older libc headers lack it) */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* request records (wire.py) */
#define REC_SNAPSHOT 'C'
#define REC_APPLET 'P'
#define REC_ARG 'A'
#define REC_ENV 'E'
#define REC_FDS 'D'

extern char **environ;

/* One record of the request: tag byte, 4-byte little-endian length, bytes. */
static void rec(struct msg *m, char tag, const void *s, size_t l)
{
    unsigned char h[5] = {(unsigned char)tag, (unsigned char)l, (unsigned char)(l >> 8), (unsigned char)(l >> 16),
                          (unsigned char)(l >> 24)};
    add(m, h, 5);
    add(m, s, l);
}

/* Open dir (relative to at) without following a symlink, creating it with mode if missing; only a dir
 * owned by root that nobody else may write (and, for the socket dir, nobody else may enter) is used. */
static int safe_dir(int at, const char *name, mode_t mode, mode_t forbidden)
{
    struct stat st;
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && (mkdirat(at, name, mode) == 0 || errno == EEXIST))
        fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) || st.st_uid != 0 || (st.st_mode & forbidden)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The address of name + ext in the socket dir, reached through our fd of it (a rename of the dir cannot
 * redirect us), or of the file of fd dir itself (name NULL); 0 when it does not fit. */
static int in_dir(struct sockaddr_un *sa, int dir, const char *name, const char *ext)
{
    char path[sizeof(sa->sun_path)] = "/proc/self/fd/", num[12];
    if (!cat(path, sizeof(path), decimal(num, (unsigned)dir), name ? "/" : NULL, name, ext, NULL))
        return 0;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, path, strlen(path) + 1);
    return 1;
}

/* Whether the process that listens on sock is still alive, so that the pid whose privileges and proof we
 * read (SO_PEERCRED's) was not recycled meanwhile: its pidfd (SO_PEERPIDFD, Linux 6.5) says so. A kernel
 * without it: taken as alive (a residue, docs/WARM.md "Who may ask"). */
static int still_the_peer(int sock)
{
    int pidfd = -1;
    socklen_t l = sizeof(pidfd);
    if (getsockopt(sock, SOL_SOCKET, SKB_SO_PEERPIDFD, &pidfd, &l) || pidfd < 0)
        return errno == ENOPROTOOPT; /* (EINVAL, on 6.5-6.15: the listener is gone) */
    int alive = syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0 || errno == EPERM;
    close(pidfd);
    return alive;
}

/* Whether the socket name in dir has a server listening: a connect, closed at once, to a listener with
 * our privileges in our user namespace, still the process whose privileges were read (its other
 * namespaces may be others: callers that make a namespace per call must not pile servers up). Neither a
 * killed server's socket (ECONNREFUSED) nor a capability-less root's listener counts (nor a full backlog). */
static int listening(int dir, const char *name)
{
    struct sockaddr_un sa;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    int s, live;
    if (!in_dir(&sa, dir, name, ""))
        return 0;
    if ((s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
        return 1;
    live = connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
           getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && cred.uid == 0 && cred.pid > 0 &&
           same_privileges(cred.pid) && still_the_peer(s); /* (its pid not recycled by a privileged process) */
    close(s);
    return live;
}

/* Whether the dir entry name is another context's spawn marker (not own's) touched within SPAWN_EVERY
 * seconds, with no socket of that key yet: a server that is starting (its Python start-up and imports take
 * 0.1 s and more, several under load), not yet listening. */
static int starting(int dir, const char *name, const char *own)
{
    size_t l = strlen(name);
    char sock[64] = "";
    struct stat st;
    struct timespec now;
    if (l < 7 || l - 6 + sizeof(".sock") > sizeof(sock) || strcmp(name + l - 6, ".spawn") != 0 ||
        (strncmp(name, own, l - 6) == 0 && own[l - 6] == 0))
        return 0;
    memcpy(sock, name, l - 6);
    memcpy(sock + l - 6, ".sock", sizeof(".sock"));
    clock_gettime(CLOCK_REALTIME, &now);
    return fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           now.tv_sec - st.st_mtime < SPAWN_EVERY && st.st_mtime <= now.tv_sec &&
           fstatat(dir, sock, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
}

/* True when the servers of the dir, with those starting (other contexts' first calls that came at the same
 * moment: each would find room), are fewer than MAX_SERVERS: counting sockets (getdents on a dup of the dir
 * fd) or, at that count, servers listening (killed servers' sockets, which nothing removes, never keep a new
 * context from a server). A dir of more than MAX_ENTRIES entries is no servers' (each context leaves up to
 * 4 files, until boot): no room, after a bounded read (a few ms). */
static int room_for_a_server(int dir, const char *own)
{
    char b[4096];
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n, socks = 0, live = 0, entries = 0, begun = 0;
    long got = -1;
    if (fd < 0)
        return 0;
    for (int pass = 0; pass < 2 && live + begun < MAX_SERVERS; pass++) {
        if (pass && (socks + begun < MAX_SERVERS || lseek(fd, 0, SEEK_SET) != 0))
            break;
        while (entries <= MAX_ENTRIES && (got = syscall(SYS_getdents64, fd, b, sizeof(b))) > 0)
            for (long off = 0; off < got; off += n) {
                n = *(unsigned short *)(b + off + 16);  /* d_reclen */
                entries += !pass;
                if (!pass && b[off + 18] == 8 /* DT_REG */)
                    begun += starting(dir, b + off + 19 /* d_name */, own);
                if (b[off + 18] != 12 /* DT_SOCK */)
                    continue;
                if (!pass)
                    socks++;
                else if (live + begun < MAX_SERVERS && listening(dir, b + off + 19))
                    live++;
            }
        if (got != 0 || entries > MAX_ENTRIES)
            break;
    }
    close(fd);
    return got == 0 && entries <= MAX_ENTRIES && (socks + begun < MAX_SERVERS || live + begun < MAX_SERVERS);
}

/* Start a server for this context, detached (a process group of its own, stdio on /dev/null): the caller
 * never waits for it. It stays in the caller's session, which the context compares: its children then
 * share the caller's session, and with it the kernel's CPU autogroup where that applies. At most one
 * attempt per SPAWN_EVERY seconds per context (a marker file's mtime), and none while MAX_SERVERS are
 * running or starting (callers that make a new namespace or session per call must not pile servers up: the
 * detached child looks). */
static void spawn(int dir, const char *key, const char *bindir, const char *loader, const char *libpath,
                  const char *program)
{
    char marker[64] = "";
    struct stat st;
    struct timespec now;
    cat(marker, sizeof(marker), key, ".spawn", NULL);
    int fd = openat(dir, marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        close(fd);
    } else {
        clock_gettime(CLOCK_REALTIME, &now);
        if (errno != EEXIST || fstatat(dir, marker, &st, AT_SYMLINK_NOFOLLOW) ||
            (now.tv_sec - st.st_mtime < SPAWN_EVERY && st.st_mtime <= now.tv_sec) ||
            utimensat(dir, marker, NULL, AT_SYMLINK_NOFOLLOW))
            return;
    }
    char k1[128] = "_PYI_ARCHIVE_FILE=", lc[3][256] = {"LC_ALL=", "LC_CTYPE=", "LANG="};
    char caller[48] = "SKB_WARM_CALLER=", num[12];
    /* (the server leaves at once where this caller was alone: a cgroup, session or namespace per call) */
    char *env[9] = {k1, "_PYI_PARENT_PROCESS_LEVEL=0", "_PYI_LINUX_PROCESS_NAME=skb-warm",
                    "PATH=/usr/sbin:/usr/bin:/sbin:/bin", caller, NULL};
    int e = 5;
    if (!cat(k1, sizeof(k1), program, NULL) || !cat(caller, sizeof(caller), decimal(num, (unsigned)getpid()), NULL))
        return;
    for (int i = 0; i < 3; i++) {
        char name[16] = "";
        memcpy(name, lc[i], strlen(lc[i]) - 1);
        const char *v = getenv(name);
        if (v && cat(lc[i], sizeof(lc[i]), v, NULL))
            env[e++] = lc[i];
        else if (v)
            return; /* the server could not match this caller's locale */
    }
    env[e] = NULL;
    /* A fork whose end signals nothing (exit signal 0, reaped with __WALL): a SIGCHLD would stay pending
     * where the caller blocks it, and pending signals survive the exec, so the exec'd plugin would start
     * with one its caller never had. */
    pid_t pid = (pid_t)syscall(SYS_clone, 0UL, 0UL, NULL, NULL, 0UL);
    if (pid < 0)
        return;
    if (pid == 0) {
        sigset_t all;
        /* none of the caller's fds: an exec'd plugin's end closes them, a server would hold them for its
         * whole life (a lock, a pipe's write end, a namespace) */
        if (setpgid(0, 0) < 0 || syscall(SYS_clone, (unsigned long)SIGCHLD, 0UL, NULL, NULL, 0UL) != 0)
            _exit(0); /* (raw clones: the C library's fork is not for a child of a raw clone) */
        /* (the socket dir kept, as fd 3, for the count of servers below; closed by the exec) */
        if ((dir != 3 && dup3(dir, 3, O_CLOEXEC) < 0) || syscall(SYS_close_range, 4, ~0U, 0) != 0) {
            struct rlimit nofile = {0, 0}; /* (close_range: ENOSYS before Linux 5.9) */
            getrlimit(RLIMIT_NOFILE, &nofile);
            for (rlim_t fd = 4; fd < nofile.rlim_cur && fd < (1 << 20); fd++)
                close((int)fd);
        }
        dir = 3;
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
            _exit(1);
        if (null > 2)
            close(null);
        if (chdir("/"))
            _exit(1);
        umask(022);
        for (int sig = 1; sig < 32; sig++)
            signal(sig, SIG_DFL);
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        /* Not the first caller's real-time (or idle, batch) policy: a server, its spares and their holders
         * at SCHED_RR would preempt the node's ordinary work for their forks and preparation, which must
         * only take time no call wants. Its nice stays (docs/WARM.md, Ready for bursts); each call's child
         * sets its own caller's policy (row 84). (A raw call: musl's sched_setscheduler is ENOSYS.) */
        struct sched_param other = {0};
        syscall(SYS_sched_setscheduler, 0, SCHED_OTHER, &other);
        /* Nor its real-time (or idle) I/O class: the server's own is the default one, from its nice. */
        syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0, 0 /* IOPRIO_CLASS_NONE */);
        /* Room for it, looked for here, detached and holding none of the caller's fds: the caller never
         * waits for the reading of a dir a root process filled (a context made per call would pay it on
         * every call), and its stdout reaches EOF when its plugin ends. */
        if (!room_for_a_server(dir, key))
            _exit(0);
        char *args[] = {(char *)loader, "--library-path", (char *)libpath, "--inhibit-cache", "--argv0",
                        (char *)program, (char *)program, "--warm-serve", (char *)key, (char *)bindir, NULL};
        execve(loader, args, env);
        _exit(127);
    }
    while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
        ;
}

/* Offer the call to the context's server. Returns only when the call is to go by exec; once the server
 * has accepted it, exits with the call's status. */

/* ------------------------------------------------------------------------------------- the steps */

struct call {
    int fixed[NFIXED];          /* cwd, root, the namespaces (close-on-exec: never reach the plugin) */
    int inherited[MAX_FDS];     /* the caller's fds an exec would keep, ascending */
    int ninherited;
    int dir, run, sock;
    char key[17];
};

/* The fds an exec'd plugin would inherit (open, without close-on-exec), listed before this process opens
 * any of its own; then cwd, root and the namespaces the call is compared by. The time namespace is the
 * one for children: execve moves a process into it (an exec'd plugin runs there). */
static int open_fds(struct call *c)
{
    if ((c->ninherited = own_fds(c->inherited, MAX_FDS - NFIXED - 1)) < 0) /* (more than one message carries: exec) */
        return 0;
    c->fixed[0] = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    c->fixed[1] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; i < NNS; i++) {
        char ns[48] = "/proc/self/ns/";
        cat(ns, sizeof(ns), strcmp(NS[i], "time") == 0 ? "time_for_children" : NS[i], NULL);
        c->fixed[2 + i] = open(ns, O_RDONLY | O_CLOEXEC);
    }
    for (int i = 0; i < NFIXED; i++)
        if (c->fixed[i] < 0)
            return 0;
    return 1;
}

/* The request: the snapshot, the call (applet, arguments, environment) and the inherited fds' numbers. */
static int request(struct msg *m, const struct msg *snap, const char *applet, int argc, char **argv,
                   const struct call *c)
{
    size_t size = snap->n + 1024 + (size_t)c->ninherited * 4;
    for (int i = 0; i < argc; i++)
        size += strlen(argv[i]) + 5;
    for (char **e = environ; *e; e++)
        size += strlen(*e) + 5;
    if (!make(m, size))
        return 0;
    adds(m, "W");
    rec(m, REC_SNAPSHOT, snap->p, snap->n);
    rec(m, REC_APPLET, applet, strlen(applet));
    for (int i = 1; i < argc; i++)
        rec(m, REC_ARG, argv[i], strlen(argv[i]));
    for (char **e = environ; *e; e++)
        rec(m, REC_ENV, *e, strlen(*e));
    uint32_t nums[MAX_FDS];
    for (int i = 0; i < c->ninherited; i++)
        nums[i] = (uint32_t)c->inherited[i]; /* (x86_64 is little-endian) */
    rec(m, REC_FDS, nums, (size_t)c->ninherited * 4);
    return !m->oom;
}

/* One message with fds (SCM_RIGHTS), never blocking, never raising SIGPIPE. */
static int send_fds(int sock, const void *p, size_t n, const int *fds, size_t nfds)
{
    char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * nfds)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET, cm->cmsg_type = SCM_RIGHTS, cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n;
}

/* Connect c->sock to <key>.sock in the socket dir: the socket file itself, opened without following a
 * link (O_PATH), then reached through that fd. A symlink there (a root process's to plant) would cost every
 * call the walk of its chain; it, or anything but a socket, fails as a missing socket (ENOENT), which a
 * new server's rename replaces. 0 on failure, with errno (ECONNREFUSED: a socket nobody listens on). */
static int connect_socket_file(struct call *c)
{
    char name[sizeof(c->key) + 5] = "";
    struct sockaddr_un sa;
    struct stat st;
    int at = cat(name, sizeof(name), c->key, ".sock", NULL) ? openat(c->dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC)
                                                            : -1;
    if (at < 0)
        return 0;
    int ok = 0; /* (O_PATH | O_NOFOLLOW opens a symlink itself) */
    if (fstat(at, &st) || !S_ISSOCK(st.st_mode))
        errno = ENOENT;
    else if (in_dir(&sa, at, NULL, NULL) &&
             (c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) >= 0)
        ok = connect(c->sock, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    int e = errno;
    close(at);
    errno = e;
    return ok;
}

/* Connect to the context's server through the checked socket dir (a rename of the dir cannot redirect
 * us), check it is root and that we may read it (proof_of_reading), and send the request with the proof,
 * and no fd: the caller's own fds go with GO (handshake), once a child has the call, so that a request
 * nobody accepts, left queued on the socket after we gave up, holds none of them (a pipe's write end
 * held there would keep the runtime from ever reading EOF). No server: maybe start one, and exec. */
static int connect_server(struct call *c, struct msg *req, const char *bindir, const char *loader,
                          const char *libpath, const char *program)
{
    if (req->n + 5 + PROOF_LEN > MAX_REQUEST) /* (no server would take it: the caller's environment, say) */
        return 0;
    if ((c->run = safe_dir(AT_FDCWD, RUN_DIR, 0755, 022)) < 0 || (c->dir = safe_dir(c->run, WARM_DIR, 0700, 077)) < 0)
        return 0;
    if (!connect_socket_file(c)) {
        if (errno == ENOENT || errno == ECONNREFUSED)
            spawn(c->dir, c->key, bindir, loader, libpath, program);
        return 0;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    unsigned char secret[PROOF_LEN];
    int proof = 0;
    if (getsockopt(c->sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cred.uid != 0 || cred.pid <= 0 ||
        !same_privileges(cred.pid) || !(proof = proof_of_reading(cred.pid, c->key, secret)) || !still_the_peer(c->sock))
        return 0;
    if (proof < 0) { /* (another context's server, which would refuse the call: ours replaces the link) */
        spawn(c->dir, c->key, bindir, loader, libpath, program);
        return 0;
    }
    rec(req, REC_PROOF, secret, PROOF_LEN); /* (last: request() left room for it) */
    return !req->oom && send(c->sock, req->p, req->n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)req->n;
}

/* ACCEPTED within the timeout, answered with GO and the caller's fds (cwd, root, the namespaces, then the
 * inherited ones, in the request's order); anything else: exec. */
static int handshake(const struct call *c)
{
    struct pollfd pf = {.fd = c->sock, .events = POLLIN};
    char r[64];
    if (poll(&pf, 1, ACCEPT_TIMEOUT) <= 0 || recv(c->sock, r, sizeof(r), MSG_DONTWAIT) < 1 || r[0] != 'A')
        return 0;
    int fds[MAX_FDS];
    memcpy(fds, c->fixed, sizeof(c->fixed));
    memcpy(fds + NFIXED, c->inherited, (size_t)c->ninherited * sizeof(int));
    return send_fds(c->sock, "G", 1, fds, (size_t)(NFIXED + c->ninherited));
}

/* --------------------------------------------------------------- passing signals on to the child */

static volatile int child_pidfd = -1;

static void pass_on(int sig)
{
    int e = errno;
    syscall(SYS_pidfd_send_signal, child_pidfd, sig, NULL, 0);
    /* The default action of these is to stop, unless the process group is orphaned (then the kernel
     * discards them): the launcher takes that default action itself, as the kernel decides it, and goes
     * on here once continued. The child, in the same group, got the same signal. */
    if (sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
        struct sigaction dfl, mine;
        sigset_t one;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, &mine);
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        kill(getpid(), sig);
        sigprocmask(SIG_BLOCK, &one, NULL);
        sigaction(sig, &mine, NULL);
    }
    errno = e;
}

/* Every signal the launcher can catch, and that the caller left at its default, is passed on to the
 * child from now on (an ignored one stays ignored here and is ignored in the child too). */
static void pass_signals_on(pid_t child)
{
    child_pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    if (child_pidfd < 0)
        return;
    struct sigaction old, sa;
    sigset_t all, was;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = pass_on;
    sa.sa_flags = SA_RESTART;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &was); /* (none is handled while a disposition the caller chose is replaced) */
    for (int sig = 1; sig < _NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, &sa, &old) != 0)
            continue; /* (sigaction refuses the C library's own signals, 32-34) */
        if (old.sa_handler == SIG_IGN) /* ignored by the caller: ignored here as in the child (setting */
            sigaction(sig, &old, NULL); /* SIG_IGN discards one that came meanwhile, as ignoring does) */
    }
    sigprocmask(SIG_SETMASK, &was, NULL);
}

/* End as the child ended: with its exit code, or by the same signal (without a core dump of the launcher:
 * the child's was the one to dump, where the caller's limits allowed it). */
static void mirror(int status)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit none = {0, 0};
        sigset_t one;
        setrlimit(RLIMIT_CORE, &none);
        signal(sig, SIG_DFL);
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        kill(getpid(), sig);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

/* After GO: wait for the child to begin (BEGAN + its pid), then for its exit status. Returns (to exec)
 * only when the call ended before it began. */
static void follow(int sock)
{
    struct pollfd pf = {.fd = sock, .events = POLLIN};
    unsigned char r[64];
    int began = 0;
    for (;;) {
        pf.revents = 0;
        if (poll(&pf, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        ssize_t n = recv(sock, r, sizeof(r), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 1)
            break;
        if (r[0] == 'B' && n == 5 && !began) {
            began = 1;
            pass_signals_on((pid_t)(r[1] | r[2] << 8 | r[3] << 16 | (uint32_t)r[4] << 24));
        } else if (r[0] == 'X' && n == 5) {
            if (!began)
                return; /* it ended before beginning: the call is not started, exec */
            mirror((int)(r[1] | r[2] << 8 | r[3] << 16 | (uint32_t)r[4] << 24));
        } else if (r[0] == 'R' && !began) {
            return;
        }
    }
    if (!began)
        return;
    _exit(fail("skb-cni warm server ended during the call", "",
               "the plugin's child process was killed with it, mid-call, and what it did stays, as when an "
               "exec'd plugin is killed: DEL the attachment before an ADD again (a runtime does); turn warm "
               "start off (SKB_WARM=0 or a file .skb-warm-off in the plugin dir) if this repeats"));
}

void warm(const char *bindir, const char *bundle, const char *applet, int argc, char **argv, const char *loader,
          const char *libpath, const char *program)
{
    struct call c = {.ninherited = 0, .dir = -1, .run = -1, .sock = -1};
    struct msg snap = {0}, req = {0};
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < NFIXED; i++)
        c.fixed[i] = -1;
    if (!open_fds(&c))
        goto out;
    if (!make(&snap, 32768) || !snapshot_key(&snap, bundle, c.fixed, NULL))
        goto out;
    uint64_t h = fnv1a(snap.p, snap.n);
    for (int i = 15; i >= 0; i--, h >>= 4)
        c.key[i] = hex[h & 15];
    c.key[16] = 0;
    if (!snapshot_adopted(&snap, c.fixed, c.inherited, c.ninherited) || !request(&req, &snap, applet, argc, argv, &c))
        goto out;
    if (!connect_server(&c, &req, bindir, loader, libpath, program) || !handshake(&c))
        goto out;
    follow(c.sock);
out:
    for (int i = 0; i < NFIXED; i++)
        if (c.fixed[i] >= 0)
            close(c.fixed[i]);
    if (c.sock >= 0)
        close(c.sock);
    if (c.dir >= 0)
        close(c.dir);
    if (c.run >= 0)
        close(c.run);
}
