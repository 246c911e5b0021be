/* The snapshot text of the calling process (docs/WARM.md, "What a call inherits"): its key part (up to
 * the line "adopt") names the server's socket; its adopted part is what a server's child takes on. One
 * implementation for both sides: linked into the launcher, which sends its own; and built as a shared
 * library (-DSKB_WARM_LIB: libskbwarm.so in the bundle) that the server's child calls (through ctypes,
 * skb/plugin/warm/snapshot.py) once it has taken the call on, for its own. The two texts must be equal for
 * the child to begin. Every value is read from the kernel, one system call or one /proc read each. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>
#include <dirent.h>

#include "launcher.h"

#include <sys/auxv.h>
#ifndef PR_GET_SPECULATION_CTRL
#define PR_GET_SPECULATION_CTRL 52
#endif
#ifndef PR_GET_THP_DISABLE
#define PR_GET_THP_DISABLE 42
#endif
#define NODEMASK_LONGS 16
#define PR_GET_TSC_ 25
#define PR_MCE_KILL_GET_ 34
#define PR_GET_CHILD_SUBREAPER_ 37
#define PR_GET_IO_FLUSHER_ 58
#define PR_SCHED_CORE_ 62
#define PR_GET_MDWE_ 66

const char *const NS[NNS] = {"net", "mnt", "pid", "pid_for_children", "user", "uts", "ipc", "cgroup", "time",
                             "time_for_children"};

int make(struct msg *m, size_t cap)
{
    m->p = calloc(1, cap), m->n = 0, m->cap = cap, m->oom = !m->p;
    return !m->oom;
}

void add(struct msg *m, const void *s, size_t l)
{
    if (m->oom || m->n + l > m->cap) {
        m->oom = 1;
        return;
    }
    memcpy(m->p + m->n, s, l);
    m->n += l;
}

void adds(struct msg *m, const char *s) { add(m, s, strlen(s)); }

void addu(struct msg *m, unsigned long long v)
{
    char d[24];
    int i = sizeof(d);
    do
        d[--i] = (char)('0' + v % 10);
    while ((v /= 10));
    add(m, d + i, sizeof(d) - (size_t)i);
}

void addi(struct msg *m, long long v)
{
    if (v < 0) {
        adds(m, "-");
        addu(m, (unsigned long long)-v);
    } else {
        addu(m, (unsigned long long)v);
    }
}

static void addx(struct msg *m, unsigned long long v)
{
    static const char hex[] = "0123456789abcdef";
    char d[17];
    int i = sizeof(d);
    do
        d[--i] = hex[v & 15];
    while ((v >>= 4));
    add(m, d + i, sizeof(d) - (size_t)i);
}

static void addo(struct msg *m, unsigned long long v)
{
    char d[24];
    int i = sizeof(d);
    do
        d[--i] = (char)('0' + (v & 7));
    while ((v >>= 3));
    add(m, d + i, sizeof(d) - (size_t)i);
}

static void add_dev_ino(struct msg *m, const struct stat *st)
{
    addu(m, (unsigned long long)st->st_dev), adds(m, ":"), addu(m, (unsigned long long)st->st_ino);
}

/* The whole of a small file into b (NUL-terminated); its length, or -1. */
static ssize_t slurp(const char *path, char *b, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n, got = 0;
    if (fd < 0)
        return -1;
    while (got < (ssize_t)size - 1 && (n = read(fd, b + got, size - 1 - (size_t)got)) > 0)
        got += n;
    close(fd);
    if (got >= (ssize_t)size - 1)
        return -1;
    b[got] = 0;
    return got;
}

/* "value" of a one-value /proc file, trailing newlines and NULs dropped; "none" when absent or empty. */
static void add_value(struct msg *m, const char *path, int first_word)
{
    char b[4096];
    ssize_t n = slurp(path, b, sizeof(b));
    while (n > 0 && (b[n - 1] == '\n' || b[n - 1] == 0))
        n--;
    if (n > 0 && first_word)
        for (ssize_t i = 0; i < n; i++)
            if (b[i] == ' ') {
                n = i;
                break;
            }
    if (n > 0)
        add(m, b, (size_t)n);
    else
        adds(m, "none");
}

/* /proc/self/status, read once per snapshot (it is the costliest /proc read): both parts of the launcher's
 * come from the same instant. */
static char status_text[8192];
static ssize_t status_got = -1;

/* The lines of /proc/self/status that start with one of keys, in the file's order. */
static int add_status(struct msg *m, const char *const *keys)
{
    char *b = status_text;
    if (status_got < 0 && (status_got = slurp("/proc/self/status", status_text, sizeof(status_text))) < 0)
        return 0;
    for (char *line = b, *nl; *line; line = nl + 1) {
        if (!(nl = strchr(line, '\n')))
            break;
        for (const char *const *k = keys; *k; k++)
            if (strncmp(line, *k, strlen(*k)) == 0)
                add(m, line, (size_t)(nl - line) + 1);
    }
    return 1;
}

/* KSM's merge-any flag (systemd's MemoryKSM=), from /proc/self/ksm_stat; "none" without KSM. */
static void add_ksm(struct msg *m)
{
    char b[1024];
    const char *at;
    if (slurp("/proc/self/ksm_stat", b, sizeof(b)) < 0 || !(at = strstr(b, "ksm_merge_any: "))) {
        adds(m, "none");
        return;
    }
    at += 15;
    add(m, at, strcspn(at, "\n"));
}

static const char *const KEY_STATUS[] = {"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:",
                                         "CapAmb:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:",
                                         "Mems_allowed_list:", NULL};
static const char *const ADOPTED_STATUS[] = {"Umask:", "TracerPid:", "SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:",
                                             "Cpus_allowed_list:", NULL};

#ifndef SKB_WARM_LIB /* (the launcher's: a client's check of its server) */
/* The line of a /proc status text that starts with key, or NULL. */
static const char *status_line(const char *text, const char *key)
{
    size_t n = strlen(key);
    for (const char *line = text, *nl;; line = nl + 1) {
        if (strncmp(line, key, n) == 0)
            return line;
        if (!(nl = strchr(line, '\n')))
            return NULL;
    }
}

/* Whether process pid has our privileges: the key's lines of its /proc/<pid>/status (ids, groups,
 * capabilities, no_new_privs, seccomp, memory nodes) are ours, in our user namespace (the capability lines
 * are a process's capabilities in its own user namespace: a root process without any, in a user namespace
 * of its own, may set them to anything). A genuine server of our context has them (it stops when its own
 * context no longer hashes to its key); a root process that dropped capabilities, which can still bind a
 * socket in the root-owned socket dir, has not, and gets no call (row 31b). (Its other namespaces are the
 * server's to compare: a server of another context, reached by another name, refuses the call.) */
int same_privileges(pid_t pid)
{
    static char peer[8192];
    char path[40] = "/proc/", num[12];
    const char *n = decimal(num, (unsigned)pid);
    if (!cat(path, sizeof(path), n, "/status", NULL) || slurp(path, peer, sizeof(peer)) < 0)
        return 0;
    if (status_got < 0 && (status_got = slurp("/proc/self/status", status_text, sizeof(status_text))) < 0)
        return 0;
    for (const char *const *k = KEY_STATUS; *k; k++) {
        const char *a = status_line(status_text, *k), *b = status_line(peer, *k);
        if (!a || !b)
            return 0;
        size_t na = strcspn(a, "\n"), nb = strcspn(b, "\n");
        if (na != nb || memcmp(a, b, na))
            return 0;
    }
    struct stat a, b; /* (the user namespace: /proc/<pid>/ns/user, ours) */
    path[0] = '\0';
    return cat(path, sizeof(path), "/proc/", n, "/ns/user", NULL) && stat(path, &a) == 0 &&
           stat("/proc/self/ns/user", &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The secret in the file the server holds at fd PROOF_FD, read through /proc/<pid>/fd, which only a
 * process allowed to read the server's process (PTRACE_MODE_READ) may open; 0 if we may not. Landlock lets
 * a process in a domain read only processes in that domain or one nested in it: the server checks the
 * same of us, and the two answers together say that the server's children are in our Landlock domain, the
 * one an exec'd plugin keeps (row 31). The secret goes with the request as the proof: bytes, not an fd,
 * so that a request carries no fd at all (a server can then refuse every fd a client would pass it:
 * SO_PASSRIGHTS). O_NONBLOCK: a FIFO there cannot block us; only a regular file of the secret's size.
 * The file's name holds the server's key (it checked its own context hashes to it): -1 (the secret read)
 * for a server of another context, whose socket a hard link put at our socket's name. */
int proof_of_reading(pid_t pid, const char *key, unsigned char *secret)
{
    char path[48] = "/proc/", num[12], name[64], want[64] = "/memfd:" PROOF_NAME;
    if (!cat(path, sizeof(path), decimal(num, (unsigned)pid), "/fd/" PROOF_FD, NULL) ||
        !cat(want, sizeof(want), key, " (deleted)", NULL))
        return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), ok = 0;
    if (fd < 0)
        return 0;
    struct stat st;
    ssize_t n = (path[0] = '\0', cat(path, sizeof(path), "/proc/self/fd/", decimal(num, (unsigned)fd), NULL)) ?
                readlink(path, name, sizeof(name)) : -1;
    if (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size == PROOF_LEN &&
        pread(fd, secret, PROOF_LEN, 0) == PROOF_LEN)
        ok = n == (ssize_t)strlen(want) && !memcmp(name, want, (size_t)n) ? 1 : -1;
    close(fd);
    return ok;
}
#endif


/* The identity (device, inode, type) of dirfd + path from what the kernel holds already: statx with
 * AT_STATX_DONT_SYNC, so that a FUSE or network file system that does not answer (a caller's cwd or an
 * inherited fd there) never blocks a call, which an exec'd plugin, that looks at neither, would not wait
 * for (review 15: fstat hung, unkillable). fstatat where statx is missing. (A raw call: musl before 1.2.5
 * has no statx.) */
static int ident(int dirfd, const char *path, int flags, struct stat *st)
{
    unsigned char sx[256];
    if (syscall(SYS_statx, dirfd, path, flags | 0x4000 /* AT_STATX_DONT_SYNC */,
                0x1 | 0x100 /* STATX_TYPE | STATX_INO */, sx) != 0)
        return errno == ENOSYS ? fstatat(dirfd, path, st, flags) : -1;
    memset(st, 0, sizeof(*st));
    st->st_mode = *(uint16_t *)(sx + 28);                                   /* stx_mode */
    st->st_ino = *(uint64_t *)(sx + 32);                                    /* stx_ino */
    st->st_dev = makedev(*(uint32_t *)(sx + 136), *(uint32_t *)(sx + 140)); /* stx_dev_major, _minor */
    return 0;
}

/* The identity of a fixed item (0 cwd, 1 root, 2.. the namespaces): of the passed fd, or without fds (the
 * server's child, about itself) of the path. */
static int fixed_stat(const int *fixed, int i, struct stat *st)
{
    char ns[48] = "/proc/self/ns/";
    if (fixed)
        return ident(fixed[i], "", AT_EMPTY_PATH, st);
    if (i < 2)
        return ident(AT_FDCWD, i ? "/" : ".", 0, st);
    strncat(ns, NS[i - 2], sizeof(ns) - strlen(ns) - 1);
    return ident(AT_FDCWD, ns, 0, st);
}

/* The mount id of the root (fixed[1], or "/"), statx's STATX_MNT_ID (Linux 5.8): its device and inode
 * alone do not tell a chroot into a bind mount of the same directory from the server's root (row 53).
 * 0 where the kernel cannot say. (A raw call: musl before 1.2.5 has no statx.) */
static unsigned long long root_mount(const int *fixed)
{
    unsigned char sx[256];
    memset(sx, 0, sizeof(sx));
    if (syscall(SYS_statx, fixed ? fixed[1] : AT_FDCWD, fixed ? "" : "/",
                (fixed ? AT_EMPTY_PATH : 0) | 0x4000 /* AT_STATX_DONT_SYNC */, 0x1000 /* STATX_MNT_ID */, sx) != 0 ||
        !(*(uint32_t *)sx & 0x1000))
        return 0;
    return *(unsigned long long *)(sx + 144); /* stx_mnt_id */
}

int snapshot_key(struct msg *m, const char *bundle, const int *fixed, const char *locale)
{
    static const char *const LOCALE[] = {"LC_ALL", "LC_CTYPE", "LANG", NULL};
    struct stat st;
    char b[4096];
    adds(m, "skb-warm 3\nbundle "), adds(m, bundle), adds(m, "\n");
    for (int i = 0; i < NNS; i++) {
        if (fixed_stat(fixed, 2 + i, &st))
            return 0;
        adds(m, "ns "), adds(m, NS[i]), adds(m, " "), add_dev_ino(m, &st), adds(m, "\n");
    }
    if (fixed_stat(fixed, 1, &st))
        return 0;
    adds(m, "root "), add_dev_ino(m, &st), adds(m, " mount "), addu(m, root_mount(fixed)), adds(m, "\n");
    size_t at = m->n;
    if (!add_status(m, KEY_STATUS))
        return 0;
    /* A seccomp filter cannot be compared with another: a filtered caller always goes by exec. */
    if (m->oom || !memmem(m->p + at, m->n - at, "\nSeccomp:\t0\n", 12))
        return 0;
    ssize_t n = slurp("/proc/self/cgroup", b, sizeof(b));
    if (n < 0)
        return 0;
    adds(m, "/proc/self/cgroup\n"), add(m, b, (size_t)n);
    adds(m, "sid "), addi(m, getsid(0));
    adds(m, "\nloginuid "), add_value(m, "/proc/self/loginuid", 0);
    adds(m, "\nsessionid "), add_value(m, "/proc/self/sessionid", 0);
    adds(m, "\npersonality "), addi(m, personality(0xffffffff));
    adds(m, "\nsecurebits "), addi(m, prctl(PR_GET_SECUREBITS, 0, 0, 0, 0));
    adds(m, "\ndumpable "), addi(m, prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
    adds(m, "\nkeyring "), addi(m, (int)syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* SESSION */, 0));
    adds(m, "\nreqkey "), addi(m, (int)syscall(SYS_keyctl, 14 /* SET_REQKEY_KEYRING */, -1 /* NO_CHANGE */));
    adds(m, "\nsecure "), addu(m, getauxval(AT_SECURE));
    int v = 0;
    adds(m, "\nsubreaper "), addi(m, prctl(PR_GET_CHILD_SUBREAPER_, &v, 0, 0, 0) == 0 ? v : -1);
    adds(m, "\nkeepcaps "), addi(m, prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0));
    adds(m, "\nmdwe "), addi(m, prctl(PR_GET_MDWE_, 0, 0, 0, 0));
    unsigned long long cookie = 0;
    adds(m, "\ncore_sched ");
    if (prctl(PR_SCHED_CORE_, 0 /* GET */, 0, 0 /* PIDTYPE_PID */, &cookie) == 0)
        addu(m, cookie);
    else
        adds(m, "none");
    adds(m, "\nautogroup "), add_value(m, "/proc/self/autogroup", 1);
    adds(m, "\nlabel "), add_value(m, "/proc/self/attr/current", 0);
    adds(m, "\n");
    if (locale) { /* the server's: what its interpreter set its stdio up with, at its start */
        adds(m, locale);
    } else {
        for (const char *const *k = LOCALE; *k; k++) {
            const char *v = getenv(*k);
            adds(m, *k), adds(m, v ? "=" : " unset"), adds(m, v ? v : ""), adds(m, "\n");
        }
    }
    adds(m, "adopt\n");
    return !m->oom;
}

int snapshot_adopted(struct msg *m, const int *fixed, const int *inherited, int ninherited)
{
    struct stat st;
    char b[4096];
    adds(m, "pgid "), addi(m, getpgrp());
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    if (errno)
        return 0;
    adds(m, "\nnice "), addi(m, nice);
    /* struct sched_attr (56 bytes with the utilization clamps) */
    struct {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
        uint32_t util_min, util_max;
    } sa;
    memset(&sa, 0, sizeof(sa));
    adds(m, "\nsched ");
    if (syscall(SYS_sched_getattr, 0, &sa, sizeof(sa), 0) == 0) {
        addu(m, sa.policy), adds(m, " "), addu(m, sa.flags), adds(m, " "), addu(m, sa.priority), adds(m, " ");
        addu(m, sa.runtime), adds(m, " "), addu(m, sa.deadline), adds(m, " "), addu(m, sa.period), adds(m, " ");
        addu(m, sa.util_min), adds(m, " "), addu(m, sa.util_max);
    } else {
        adds(m, "none");
    }
    adds(m, "\nioprio "), addi(m, syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, 0));
    adds(m, "\ntimerslack "), addi(m, prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0));
    adds(m, "\noom_score_adj "), add_value(m, "/proc/self/oom_score_adj", 0);
    adds(m, "\nthp_disable "), addi(m, prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));
    adds(m, "\nspec ");
    for (int i = 0; i < 3; i++)
        addi(m, prctl(PR_GET_SPECULATION_CTRL, i, 0, 0, 0)), adds(m, i < 2 ? " " : "");
    int tsc = 0;
    adds(m, "\ntsc "), addi(m, prctl(PR_GET_TSC_, &tsc, 0, 0, 0) == 0 ? tsc : -1);
    adds(m, "\nmce_kill "), addi(m, prctl(PR_MCE_KILL_GET_, 0, 0, 0, 0));
    adds(m, "\nio_flusher "), addi(m, prctl(PR_GET_IO_FLUSHER_, 0, 0, 0, 0));
    adds(m, "\ncoredump_filter "), add_value(m, "/proc/self/coredump_filter", 0);
    adds(m, "\nksm "), add_ksm(m);
    int mode = 0;
    unsigned long mask[NODEMASK_LONGS];
    memset(mask, 0, sizeof(mask));
    adds(m, "\nmempolicy ");
    if (syscall(SYS_get_mempolicy, &mode, mask, NODEMASK_LONGS * 64, NULL, 0) == 0) {
        addi(m, mode), adds(m, " ");
        for (int i = 0; i < NODEMASK_LONGS; i++)
            addx(m, mask[i]), adds(m, i < NODEMASK_LONGS - 1 ? "," : "");
    } else {
        adds(m, "none");
    }
    adds(m, "\n");
    if (!add_status(m, ADOPTED_STATUS))
        return 0;
    adds(m, "rlimits");
    for (int i = 0; i < RLIM_NLIMITS; i++) {
        struct rlimit rl;
        if (getrlimit(i, &rl))
            return 0;
        adds(m, " "), addu(m, rl.rlim_cur), adds(m, ":"), addu(m, rl.rlim_max);
    }
    adds(m, "\nitimers");
    for (int i = 0; i < 3; i++) {
        struct itimerval it;
        if (getitimer(i, &it))
            return 0;
        adds(m, it.it_value.tv_sec || it.it_value.tv_usec ? " 1" : " 0");
    }
    /* tty_nr and tpgid: the 5th and 6th fields after the command's closing parenthesis */
    if (slurp("/proc/self/stat", b, sizeof(b)) < 0)
        return 0;
    char *p = strrchr(b, ')'), *field[7];
    int nf = 0;
    for (p = p ? p + 1 : b; *p && nf < 7;) {
        while (*p == ' ')
            p++;
        field[nf++] = p;
        while (*p && *p != ' ')
            p++;
        if (*p)
            *p++ = 0;
    }
    if (nf < 6)
        return 0;
    adds(m, "\ntty "), adds(m, field[4]), adds(m, " "), adds(m, field[5]);
    if (fixed_stat(fixed, 0, &st))
        return 0;
    adds(m, "\ncwd "), add_dev_ino(m, &st), adds(m, "\n");
    int own[MAX_FDS];
    if (!inherited) { /* about itself: the fds an exec would keep */
        if ((ninherited = own_fds(own, MAX_FDS)) < 0)
            return 0;
        inherited = own;
    }
    for (int i = 0; i < ninherited; i++) {
        int fl = fcntl(inherited[i], F_GETFL);
        if (fl < 0 || ident(inherited[i], "", AT_EMPTY_PATH, &st))
            return 0;
        adds(m, "fd "), addi(m, inherited[i]), adds(m, " "), add_dev_ino(m, &st), adds(m, " "), addo(m, (unsigned)fl);
        adds(m, "\n");
    }
    return !m->oom;
}

static int ascending(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int own_fds(int *out, int max)
{
    char b[4096];
    int d = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0;
    long got;
    if (d < 0)
        return -1;
    while ((got = syscall(SYS_getdents64, d, b, sizeof(b))) > 0)
        for (long off = 0; off < got; off += *(unsigned short *)(b + off + 16)) {
            const char *name = b + off + 19;
            if (name[0] < '0' || name[0] > '9')
                continue;
            int fd = atoi(name), fl = fd == d ? -1 : fcntl(fd, F_GETFD);
            if (fl < 0 || (fl & FD_CLOEXEC))
                continue;
            if (n == max) {
                close(d);
                return -1;
            }
            out[n++] = fd;
        }
    close(d);
    if (got < 0)
        return -1;
    qsort(out, (size_t)n, sizeof(int), ascending);
    return n;
}

void snapshot_begin(void) { status_got = -1; }

#ifdef SKB_WARM_LIB
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* For the server's child (ctypes): part 0, the key part (bundle and locale: the server's); 1, the adopted
 * part. The text's length in out, or -1 (no /proc, a seccomp filter, out too small). With the part 0 of
 * a call, fixed: the NFIXED fds the launcher passed (cwd, root, the namespaces), each but cwd checked to
 * be what this process's own path names: -(100 + i) when fixed[i] is not. */
long skb_warm_snapshot(int part, const char *bundle, const char *locale, const int *fixed, char *out, long cap)
{
    struct msg m = {.p = out, .n = 0, .cap = (size_t)cap, .oom = 0};
    struct stat a, b;
    snapshot_begin();
    if (!(part ? snapshot_adopted(&m, NULL, NULL, 0) : snapshot_key(&m, bundle, NULL, locale)))
        return -1;
    /* (the namespaces first, then the root: another mount namespace has another root mount, and its
     * reason is the namespace) */
    for (int j = 2; !part && fixed && j <= NFIXED; j++) {
        int i = j < NFIXED ? j : 1;
        if (fixed_stat(fixed, i, &a) || fixed_stat(NULL, i, &b) || a.st_dev != b.st_dev || a.st_ino != b.st_ino ||
            (i == 1 && root_mount(fixed) != root_mount(NULL)))
            return -(100 + i);
    }
    return (long)m.n;
}

/* Put each fds[i] at targets[i] (without close-on-exec, as an exec would keep it) and each internal[j]
 * at or above base (close-on-exec), its new number in out[j]; close every other fd. base must be above
 * every target. 0, or -errno (a number at or past the fd limit: EINVAL). */
int skb_warm_place(const int *targets, const int *fds, int n, const int *internal, int m, int base, int *out)
{
    int tmp[MAX_FDS], keep[2 * MAX_FDS + 2], k = 0;
    if (n > MAX_FDS || m > MAX_FDS)
        return -E2BIG;
    for (int j = 0; j < m; j++)
        if ((out[j] = fcntl(internal[j], F_DUPFD_CLOEXEC, base)) < 0)
            return -errno;
    for (int i = 0; i < n; i++)
        if ((tmp[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, base)) < 0)
            return -errno;
    for (int i = 0; i < n; i++)
        if (dup2(tmp[i], targets[i]) < 0)
            return -errno;
    for (int i = 0; i < n; i++)
        keep[k++] = targets[i];
    for (int j = 0; j < m; j++)
        keep[k++] = out[j];
    qsort(keep, (size_t)k, sizeof(int), ascending);
    unsigned lo = 0;
    for (int i = 0; i <= k; i++) {
        unsigned hi = i < k ? (unsigned)keep[i] : ~0U;
        if (hi > lo)
            syscall(SYS_close_range, lo, hi - 1, 0);
        if (i < k)
            lo = (unsigned)keep[i] + 1;
    }
    return 0;
}

#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* A spare's prefault step: fault in, writable, the page runs runs[2i] (first page) and runs[2i+1] (count)
 * from run ``at`` on, until about ``budget`` pages (a system call counted as one) are done. The next run
 * to do; n when all are done, or when the kernel has no MADV_POPULATE_WRITE (before Linux 5.14). */
long skb_warm_prefault(const uint64_t *runs, long n, long at, long budget)
{
    for (; at < n && budget > 0; at++) {
        if (madvise((void *)(uintptr_t)(runs[2 * at] << 12), (size_t)(runs[2 * at + 1] << 12), MADV_POPULATE_WRITE)
            && errno == EINVAL)
            return n;
        budget -= (long)runs[2 * at + 1] + 1;
    }
    return at;
}
#endif

uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return h;
}
