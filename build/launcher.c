/*
 * skb-cni launcher: the file a runtime executes as /opt/cni/bin/<applet>.
 *
 * One copy is installed per applet name (loopback, ptp, host-local, debug, skb). It is a tiny static
 * binary, so it needs nothing from the node: no libc, no loader, no Python. Its whole job is one execve:
 *
 *   <bundle>/lib/ld-linux-x86-64.so.2 --library-path <bundle>/lib:<bundle>/_internal --inhibit-cache
 *       --argv0 <bundle>/skb-cni <bundle>/skb-cni <applet> [args...]
 *
 * where <bundle> is realpath(<own dir>/.skb), or while .skb is missing the bundle dir named in this
 * launcher (see find_bundle), and <applet> is the launcher's own basename.
 *
 * Why each piece:
 * - The bundle ships its own glibc and loader (copied from the build host), and we start the PyInstaller
 *   bootloader through that loader rather than through the ELF interpreter path baked into it
 *   (/lib64/ld-linux-x86-64.so.2, i.e. the node's). So the node's glibc version does not matter.
 * - --library-path is the loader's own search path; it replaces LD_LIBRARY_PATH for this process, so the
 *   runtime's (containerd passes LD_LIBRARY_PATH=<opt>/lib:) cannot make us load a foreign libc.
 *   The variable itself is left untouched and reaches the plugin's children as the runtime set it.
 * - --inhibit-cache: never consult the node's /etc/ld.so.cache; everything we need is in the bundle.
 * - The bootloader finds its _internal dir from argv[0] when /proc/self/exe is the loader, so argv[0]
 *   must be the bundle executable's real path (--argv0 makes that explicit).
 * - A PyInstaller 6 onedir bootloader on Linux normally sets LD_LIBRARY_PATH and re-executes itself
 *   (one more exec + dynamic link per call, and it drops our --library-path). It skips that when it
 *   believes it is already the restarted process: _PYI_ARCHIVE_FILE equal to its own (realpath'd)
 *   executable and _PYI_PARENT_PROCESS_LEVEL=0. We set both. _PYI_LINUX_PROCESS_NAME makes the
 *   bootloader prctl(PR_SET_NAME) the applet name, so ps/top show "loopback" rather than "ld-linux-x86-64".
 * - The bundle path is resolved once and used for the loader, the libraries and the program alike: an
 *   install that swaps .skb while we start cannot mix two versions.
 *
 * Errors (bundle missing, exec failed) are printed as a CNI error object on stdout, exit 1: the runtime
 * shows that message to the operator instead of a bare "exit status 127".
 *
 * Warm start (docs/WARM.md): before the exec, a plugin applet first offers the call to a resident server
 * of the same bundle in the same context (skb/plugin/warm.py), over a unix socket in the root-only dir
 * /run/skb-cni/warm. The socket's name is a hash of everything the context is made of (namespaces,
 * root, cgroup, credentials, capabilities, ...), so callers in different contexts never meet; the server
 * checks it all again against what the kernel attests. No server, a refusal, a timeout before the server
 * accepted: the call goes on by exec, exactly as without warm start. Once accepted ("A", answered "G"),
 * the call is the server's: its exit status comes back ("X") and we exit with it (or "R": its child
 * could not start it, exec); a server that dies mid-call is reported as a CNI error (code 999). The first call in a context without a server starts one
 * (detached, at most every SPAWN_EVERY seconds) and itself goes by exec. Off with SKB_WARM=0 in the
 * environment or a file <bin dir>/.skb-warm-off.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUNDLE_LINK ".skb"
#define BUNDLE_MARK "skb-cni bundle dir="
#define LOADER "lib/ld-linux-x86-64.so.2"
#define PROGRAM "skb-cni"
#define RUN_DIR "/run/skb-cni"
#define WARM_DIR "warm"
#define WARM_OFF ".skb-warm-off"
#define SPAWN_EVERY 10      /* seconds between two attempts to start a server for one context */
#define MAX_SERVERS 16      /* no new server while this many sockets are in the dir */
#define ACCEPT_TIMEOUT 2000 /* ms for the server to accept or refuse, else exec */

extern char **environ;

/* A small append-only buffer: no stdio, so the static binary stays small. */
struct buf {
    char s[3 * PATH_MAX];
    size_t n;
};

static void put(struct buf *b, const char *s)
{
    while (*s && b->n < sizeof(b->s) - 1)
        b->s[b->n++] = *s++;
    b->s[b->n] = 0;
}

/* Append s as the inside of a JSON string. */
static void put_json(struct buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    char esc[7];
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
            put(b, esc);
        } else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4], esc[5] = hex[c & 15], esc[6] = 0;
            put(b, esc);
        } else {
            esc[0] = (char)c, esc[1] = 0;
            put(b, esc);
        }
    }
}

/* Print {"code":999,"msg":"<what><path>","details":"<detail>"} on stdout and return 1. */
static int fail(const char *what, const char *path, const char *detail)
{
    struct buf b = {.n = 0};
    put(&b, "{\"code\":999,\"msg\":\"");
    put_json(&b, what);
    put_json(&b, path);
    put(&b, "\",\"details\":\"");
    put_json(&b, detail);
    put(&b, "\"}\n");
    for (size_t off = 0; off < b.n;) {
        ssize_t w = write(1, b.s + off, b.n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    return 1;
}

/* Append the NULL-terminated strings to dst (which holds a string); false when they do not fit. */
static int cat(char *dst, size_t size, ...)
{
    size_t n = strlen(dst);
    const char *s;
    va_list ap;
    va_start(ap, size);
    while ((s = va_arg(ap, const char *))) {
        size_t l = strlen(s);
        if (n + l + 1 > size) {
            va_end(ap);
            return 0;
        }
        memcpy(dst + n, s, l + 1);
        n += l;
    }
    va_end(ap);
    return 1;
}

/* ------------------------------------------------------------------------------------- warm start */

/* A byte buffer of a size fixed when it is made (calloc only: no free or realloc, so musl links its
 * small allocator); oom is set when something did not fit. */
struct msg {
    char *p;
    size_t n, cap;
    int oom;
};

static int make(struct msg *m, size_t cap)
{
    m->p = calloc(1, cap), m->n = 0, m->cap = cap, m->oom = !m->p;
    return !m->oom;
}

static void add(struct msg *m, const void *s, size_t l)
{
    if (m->oom || m->n + l > m->cap) {
        m->oom = 1;
        return;
    }
    memcpy(m->p + m->n, s, l);
    m->n += l;
}

static void adds(struct msg *m, const char *s) { add(m, s, strlen(s)); }

static void addu(struct msg *m, unsigned long long v)
{
    char d[24];
    int i = sizeof(d);
    do
        d[--i] = (char)('0' + v % 10);
    while ((v /= 10));
    add(m, d + i, sizeof(d) - (size_t)i);
}

static void addi(struct msg *m, long long v)
{
    if (v < 0) {
        adds(m, "-");
        addu(m, (unsigned long long)-v);
    } else {
        addu(m, (unsigned long long)v);
    }
}

/* One record of the request: tag byte, 4-byte little-endian length, bytes. */
static void rec(struct msg *m, char tag, const void *s, size_t l)
{
    unsigned char h[5] = {(unsigned char)tag, (unsigned char)l, (unsigned char)(l >> 8), (unsigned char)(l >> 16),
                          (unsigned char)(l >> 24)};
    add(m, h, 5);
    add(m, s, l);
}

/* Append the whole of a small /proc file (with a "name\n" header line) to the context text. */
static int add_file(struct msg *m, const char *path)
{
    char b[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n, got = 0;
    if (fd < 0)
        return 0;
    while (got < (ssize_t)sizeof(b) && (n = read(fd, b + got, sizeof(b) - (size_t)got)) > 0)
        got += n;
    close(fd);
    if (got <= 0 || got == (ssize_t)sizeof(b))
        return 0;
    adds(m, path);
    adds(m, "\n");
    add(m, b, (size_t)got);
    return 1;
}

/* "name value\n" for a one-value /proc file (the audit login uid and session), "name none\n" when the
 * kernel has no such file (no audit support): the server writes the same (warm.py: _proc_value). */
static void add_value(struct msg *m, const char *name, const char *path)
{
    char b[64];
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, b, sizeof(b) - 1);
        close(fd);
    }
    while (n > 0 && (b[n - 1] == '\n' || b[n - 1] == 0))
        n--;
    if (n > 0)
        b[n] = 0;
    adds(m, name), adds(m, " "), adds(m, n > 0 ? b : "none"), adds(m, "\n");
}

/* The lines of /proc/self/status that an exec'd plugin inherits and the server's child must share. */
static const char *const STATUS_KEYS[] = {"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:",
                                          "CapAmb:", "NoNewPrivs:", "Seccomp:", "Cpus_allowed_list:",
                                          "Mems_allowed_list:", NULL};

static int add_status(struct msg *m)
{
    char b[8192];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC), seccomp = -1;
    ssize_t n, got = 0;
    if (fd < 0)
        return 0;
    while (got < (ssize_t)sizeof(b) - 1 && (n = read(fd, b + got, sizeof(b) - 1 - (size_t)got)) > 0)
        got += n;
    close(fd);
    b[got > 0 ? got : 0] = 0;
    for (char *line = b, *nl; *line; line = nl + 1) {
        if (!(nl = strchr(line, '\n')))
            break;
        for (const char *const *k = STATUS_KEYS; *k; k++)
            if (strncmp(line, *k, strlen(*k)) == 0) {
                add(m, line, (size_t)(nl - line) + 1);
                if (strcmp(*k, "Seccomp:") == 0)
                    seccomp = strncmp(line, "Seccomp:\t0\n", 11) != 0;
            }
    }
    /* A seccomp filter cannot be compared with another: a filtered caller always goes by exec. */
    return seccomp == 0;
}

static const char *const NS[] = {"net", "mnt", "pid", "user", "uts", "ipc", "cgroup", "time"};
#define NNS 8
#define NFDS (3 + 2 + NNS) /* stdin, stdout, stderr, cwd, root, the namespaces */

/* The context text (also the socket's name, hashed): what must be equal for a server's child to be what
 * an exec'd plugin would be. The server builds its own the same way (skb/plugin/warm.py: context()). */
static int context(struct msg *m, const char *bundle, int *fds)
{
    static const char *const LOCALE[] = {"LC_ALL", "LC_CTYPE", "LANG", NULL};
    struct stat st;
    adds(m, "skb-warm 1\nbundle ");
    adds(m, bundle);
    for (int i = 0; i < NNS + 1; i++) {
        if (fstat(fds[5 + i - (i == NNS ? NNS + 1 : 0)], &st))
            return 0;
        adds(m, i == NNS ? "\nroot " : "\nns ");
        if (i < NNS)
            adds(m, NS[i]), adds(m, " ");
        addu(m, (unsigned long long)st.st_dev), adds(m, ":"), addu(m, (unsigned long long)st.st_ino);
    }
    adds(m, "\n");
    if (!add_status(m) || !add_file(m, "/proc/self/cgroup") || !add_file(m, "/proc/self/oom_score_adj"))
        return 0;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    if (errno)
        return 0;
    adds(m, "nice "), addi(m, nice);
    adds(m, "\nsched "), addi(m, syscall(SYS_sched_getscheduler, 0)); /* musl: ENOSYS stub */
    adds(m, "\npersonality "), addi(m, personality(0xffffffff));
    adds(m, "\nsecurebits "), addi(m, prctl(PR_GET_SECUREBITS, 0, 0, 0, 0));
    adds(m, "\ntimerslack "), addi(m, prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0));
    adds(m, "\nioprio "), addi(m, syscall(SYS_ioprio_get, 1, 0)); /* IOPRIO_WHO_PROCESS, self */
    adds(m, "\n");
    adds(m, "sid "), addi(m, getsid(0)), adds(m, "\n");
    add_value(m, "loginuid", "/proc/self/loginuid");
    add_value(m, "sessionid", "/proc/self/sessionid");
    for (const char *const *k = LOCALE; *k; k++) {
        const char *v = getenv(*k);
        adds(m, *k), adds(m, v ? "=" : " unset"), adds(m, v ? v : ""), adds(m, "\n");
    }
    return !m->oom;
}

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return h;
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

/* True when the dir holds fewer than MAX_SERVERS sockets (getdents on a dup of the dir fd). */
static int room_for_a_server(int dir)
{
    char b[4096];
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n, socks = 0;
    long got;
    if (fd < 0)
        return 0;
    while ((got = syscall(SYS_getdents64, fd, b, sizeof(b))) > 0)
        for (long off = 0; off < got; off += n) {
            n = *(unsigned short *)(b + off + 16);  /* d_reclen */
            if (b[off + 18] == 12 /* DT_SOCK */)
                socks++;
        }
    close(fd);
    return got == 0 && socks < MAX_SERVERS;
}

/* Start a server for this context, detached (a process group of its own, stdio on /dev/null): the caller
 * never waits for it. It stays in the caller's session, which the context compares: its children then
 * share the caller's session, and with it the kernel's CPU autogroup where that applies. At most one
 * attempt per SPAWN_EVERY seconds per context (a marker file's mtime), and none while MAX_SERVERS are
 * running (callers that make a new namespace per call must not pile servers up). */
static void spawn(int dir, const char *key, const char *bindir, const char *loader, const char *libpath,
                  const char *program)
{
    char marker[64] = "";
    struct stat st;
    struct timespec now;
    if (!room_for_a_server(dir))
        return;
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
    char *env[8] = {k1, "_PYI_PARENT_PROCESS_LEVEL=0", "_PYI_LINUX_PROCESS_NAME=skb-warm",
                    "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    int e = 4;
    if (!cat(k1, sizeof(k1), program, NULL))
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
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid == 0) {
        sigset_t all;
        if (setpgid(0, 0) < 0 || fork() != 0)
            _exit(0);
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
        char *args[] = {(char *)loader, "--library-path", (char *)libpath, "--inhibit-cache", "--argv0",
                        (char *)program, (char *)program, "--warm-serve", (char *)key, (char *)bindir, NULL};
        execve(loader, args, env);
        _exit(127);
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Offer the call to the context's server. Returns only when the call is to go by exec; once the server
 * has accepted it, exits with the call's status. */
static void warm(const char *bindir, const char *bundle, const char *applet, int argc, char **argv,
                 const char *loader, const char *libpath, const char *program)
{
    const char *off = getenv("SKB_WARM");
    int fds[NFDS], dir = -1, run = -1, sock = -1, i;
    struct msg m = {0}, ctx = {0};
    char path[PATH_MAX] = "";
    if (strcmp(applet, "skb") == 0 || (off && strcmp(off, "0") == 0) || getuid() != 0 || geteuid() != 0)
        return;
    if (!cat(path, sizeof(path), bindir, "/" WARM_OFF, NULL) || access(path, F_OK) == 0)
        return;
    /* stdin, stdout and stderr must be open and not terminals: a closed fd or a controlling terminal are
     * things the server's child could not reproduce exactly. */
    for (i = 0; i < 3; i++) {
        if (fcntl(i, F_GETFD) < 0 || isatty(i))
            return;
        fds[i] = i;
    }
    for (i = 3; i < NFDS; i++)
        fds[i] = -1;
    fds[3] = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    fds[4] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (i = 0; i < NNS; i++) {
        char ns[32] = "/proc/self/ns/";
        cat(ns, sizeof(ns), NS[i], NULL);
        fds[5 + i] = open(ns, O_RDONLY | O_CLOEXEC);
    }
    for (i = 3; i < NFDS; i++)
        if (fds[i] < 0)
            goto out;
    if (!make(&ctx, 16384) || !context(&ctx, bundle, fds))
        goto out;
    static const char hex[] = "0123456789abcdef";
    char key[17], name[32] = "";
    uint64_t h = fnv1a(ctx.p, ctx.n);
    for (i = 15; i >= 0; i--, h >>= 4)
        key[i] = hex[h & 15];
    key[16] = 0;

    /* The request: the context, the call (applet, arguments, environment) and what the child adopts.
     * Built before connecting: the server waits for it. */
    size_t size = ctx.n + 1024 + sizeof(uint64_t) * 2 * RLIM_NLIMITS;
    for (i = 0; i < argc; i++)
        size += strlen(argv[i]) + 5;
    for (char **e = environ; *e; e++)
        size += strlen(*e) + 5;
    if (!make(&m, size))
        goto out;
    adds(&m, "W");
    rec(&m, 'C', ctx.p, ctx.n);
    rec(&m, 'P', applet, strlen(applet));
    for (i = 1; i < argc; i++)
        rec(&m, 'A', argv[i], strlen(argv[i]));
    for (char **e = environ; *e; e++)
        rec(&m, 'E', *e, strlen(*e));
    mode_t mask = umask(0);
    umask(mask);
    uint32_t um = (uint32_t)mask;
    rec(&m, 'U', &um, sizeof(um));
    uint64_t lim[2 * RLIM_NLIMITS];
    for (i = 0; i < RLIM_NLIMITS; i++) {
        struct rlimit rl;
        if (getrlimit(i, &rl))
            goto out;
        lim[2 * i] = rl.rlim_cur, lim[2 * i + 1] = rl.rlim_max;
    }
    rec(&m, 'R', lim, sizeof(lim));
    sigset_t set;
    uint64_t blocked = 0, ignored = 0;
    sigprocmask(SIG_BLOCK, NULL, &set);
    for (i = 1; i <= 64; i++) {
        struct sigaction sa_old;
        if (sigismember(&set, i) == 1)
            blocked |= 1ULL << (i - 1);
        if (syscall(SYS_rt_sigaction, i, NULL, &sa_old, 8) == 0 && sa_old.sa_handler == SIG_IGN)
            ignored |= 1ULL << (i - 1);
    }
    rec(&m, 'M', &blocked, 8);
    rec(&m, 'I', &ignored, 8);
    if (m.oom)
        goto out;

    if ((run = safe_dir(AT_FDCWD, RUN_DIR, 0755, 022)) < 0 || (dir = safe_dir(run, WARM_DIR, 0700, 077)) < 0)
        goto out;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char dirpath[40] = "/proc/self/fd/";
    struct buf num = {.n = 0};
    { /* the socket is reached through the dir fd checked above: a rename of the dir cannot redirect us */
        char d[12];
        int v = dir, j = sizeof(d) - 1;
        d[j] = 0;
        do
            d[--j] = (char)('0' + v % 10);
        while ((v /= 10));
        put(&num, d + j);
    }
    cat(name, sizeof(name), key, ".sock", NULL);
    if (!cat(dirpath, sizeof(dirpath), num.s, "/", name, NULL))
        goto out;
    memcpy(sa.sun_path, dirpath, strlen(dirpath) + 1);
    sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0)
        goto out;
    if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno == ENOENT || errno == ECONNREFUSED)
            spawn(dir, key, bindir, loader, libpath, program);
        goto out;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cred.uid != 0)
        goto out;

    char cbuf[CMSG_SPACE(sizeof(fds))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = m.p, .iov_len = m.n};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(c), fds, sizeof(fds));
    if (sendmsg(sock, &mh, MSG_NOSIGNAL) != (ssize_t)m.n)
        goto out;

    /* Accepted ("A") within the timeout, or exec. The server's child runs nothing before our "G": if we
     * time out and go by exec, it sees us gone and ends, so a call never runs twice. Until the child has
     * started the call, the server may still refuse it ("R", e.g. the child could not adopt it): exec. */
    struct pollfd pf = {.fd = sock, .events = POLLIN};
    char r[64];
    int t = poll(&pf, 1, ACCEPT_TIMEOUT);
    if (t <= 0 || recv(sock, r, sizeof(r), MSG_DONTWAIT) < 1 || r[0] != 'A' ||
        send(sock, "G", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
        goto out;
    for (;;) {
        pf.revents = 0;
        if (poll(&pf, 1, -1) < 0 && errno == EINTR)
            continue;
        ssize_t n = recv(sock, r, sizeof(r), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n >= 1 && r[0] == 'R')
            goto out;
        if (n == 5 && r[0] == 'X') {
            int status = (unsigned char)r[1] | (unsigned char)r[2] << 8 | (unsigned char)r[3] << 16 |
                         (unsigned char)r[4] << 24;
            if (WIFSIGNALED(status)) { /* end as the plugin process ended: by the same signal */
                int sig = WTERMSIG(status);
                sigset_t one;
                signal(sig, SIG_DFL);
                sigemptyset(&one);
                sigaddset(&one, sig);
                sigprocmask(SIG_UNBLOCK, &one, NULL);
                kill(getpid(), sig);
                _exit(128 + sig);
            }
            _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
        }
        _exit(fail("skb-cni warm server ended during the call", "",
                   "the plugin's child process was killed with it; retry the call, or turn warm start off "
                   "(SKB_WARM=0 or a file .skb-warm-off in the plugin dir) if this repeats"));
    }
out:
    for (i = 3; i < NFDS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (sock >= 0)
        close(sock);
    if (dir >= 0)
        close(dir);
    if (run >= 0)
        close(run);
}

/* The name of this launcher's own bundle dir, written after the mark by build/bundle.py stage (NUL padded;
 * empty in an unstaged build). Not const, not static: the compiler must read it at run time. */
char bundle_slot[sizeof(BUNDLE_MARK) + 96] = BUNDLE_MARK;

/* realpath(<dir>/.skb) into bundle, else realpath(<dir>/<the bundle this launcher names>). tar, extracting
 * a newer release over an install, unlinks .skb before it makes the new link: a call starting in between
 * starts the bundle its launcher names instead, which tar never removes (and tar writes each launcher
 * only after the bundle it names). link is left holding the .skb path, for the error message. */
static int find_bundle(const char *dir, char *link, size_t size, char *bundle)
{
    const char *name = bundle_slot + sizeof(BUNDLE_MARK) - 1;
    char own[PATH_MAX] = "";
    link[0] = 0;
    if (!cat(link, size, dir, "/" BUNDLE_LINK, NULL))
        return 0;
    if (realpath(link, bundle))
        return 1;
    return *name && cat(own, sizeof(own), dir, "/", name, NULL) && realpath(own, bundle);
}

int main(int argc, char **argv)
{
    char self[PATH_MAX], link[PATH_MAX] = "", bundle[PATH_MAX];
    char loader[PATH_MAX] = "", libpath[2 * PATH_MAX + 16] = "", program[PATH_MAX] = "";
    const char *applet;
    char *slash;
    ssize_t n;

    /* Our own path: /proc/self/exe names the hard link or copy that was executed. Without /proc (a bare
     * chroot), fall back to argv[0], which runtimes always pass as an absolute path. */
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = 0;
        /* An install may rename a new launcher over this one while we start: the link then reads
         * "<path> (deleted)". The name is still ours; the bundle is found by path, so drop the suffix. */
        if (n > 10 && strcmp(self + n - 10, " (deleted)") == 0)
            self[n - 10] = 0;
    } else if (argc > 0 && strchr(argv[0], '/') && realpath(argv[0], self)) {
        /* resolved from argv[0] */
    } else {
        return fail("skb-cni launcher cannot find its own path", "",
                    "mount /proc or run the launcher by its absolute path");
    }
    slash = strrchr(self, '/');
    applet = slash + 1;
    *slash = 0; /* self is now our directory */

    if (!find_bundle(self, link, sizeof(link), bundle))
        return fail("skb-cni bundle missing: ", link, "reinstall with make install");
    if (!cat(loader, sizeof(loader), bundle, "/" LOADER, NULL) || !cat(program, sizeof(program), bundle, "/" PROGRAM, NULL) ||
        !cat(libpath, sizeof(libpath), bundle, "/lib:", bundle, "/_internal", NULL))
        return fail("skb-cni bundle path too long: ", bundle, "install into a shorter directory");
    if (access(loader, X_OK) != 0)
        return fail("skb-cni bundle missing: ", loader, "reinstall with make install");
    if (access(program, R_OK) != 0)
        return fail("skb-cni bundle missing: ", program, "reinstall with make install");

    warm(self, bundle, applet, argc, argv, loader, libpath, program); /* returns when the call goes by exec */

    /* The environment as the runtime passed it, plus the bootloader's three variables (replacing any
     * the runtime set). Built by hand rather than with setenv: that would link musl's full allocator. */
    size_t nenv = 0;
    for (char **e = environ; *e; e++)
        nenv++;
    char **env = calloc(nenv + 4, sizeof(char *));
    char *pyi[3] = {calloc(1, strlen(program) + 19), "_PYI_PARENT_PROCESS_LEVEL=0", calloc(1, strlen(applet) + 25)};
    if (!env || !pyi[0] || !pyi[2])
        return fail("skb-cni launcher: out of memory", "", "");
    cat(pyi[0], strlen(program) + 19, "_PYI_ARCHIVE_FILE=", program, NULL);
    cat(pyi[2], strlen(applet) + 25, "_PYI_LINUX_PROCESS_NAME=", applet, NULL);
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "_PYI_ARCHIVE_FILE=", 18) && strncmp(*e, "_PYI_PARENT_PROCESS_LEVEL=", 26) &&
            strncmp(*e, "_PYI_LINUX_PROCESS_NAME=", 24))
            env[k++] = *e;
    env[k++] = pyi[0], env[k++] = pyi[1], env[k++] = pyi[2], env[k] = NULL;

    /* loader + 7 fixed arguments + applet + the caller's arguments + NULL */
    char **args = calloc((size_t)argc + 10, sizeof(char *));
    if (!args)
        return fail("skb-cni launcher: out of memory", "", "");
    int i = 0;
    args[i++] = loader;
    args[i++] = "--library-path";
    args[i++] = libpath;
    args[i++] = "--inhibit-cache";
    args[i++] = "--argv0";
    args[i++] = program;
    args[i++] = program;
    args[i++] = (char *)applet;
    for (int j = 1; j < argc; j++)
        args[i++] = argv[j];
    args[i] = NULL;

    execve(loader, args, env);
    char detail[256] = "";
    cat(detail, sizeof(detail), "execve failed: ", strerror(errno), "; reinstall with make install", NULL);
    return fail("skb-cni bundle cannot be started: ", loader, detail);
}
