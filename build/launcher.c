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
 * of the same bundle in the same context (warm_client.c). Only when that returns does the exec happen.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher.h"

#define BUNDLE_LINK ".skb"
#define BUNDLE_MARK "skb-cni bundle dir="
#define LOADER "lib/ld-linux-x86-64.so.2"
#define PROGRAM "skb-cni"
#define WARM_OFF ".skb-warm-off"
/* skb itself is a launcher of the same bundle: the release tarball (or the image) is what can reinstall it */
#define REINSTALL "reinstall skb-cni: extract its release tarball to a temporary dir and run its skb install (make install from a source tree)"
#define MIN_STACK (256 << 10) /* a soft RLIMIT_STACK below this: exec (the warm path's own buffers) */

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
int fail(const char *what, const char *path, const char *detail)
{
    static struct buf b;
    b.n = 0;
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
int cat(char *dst, size_t size, ...)
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

/* v in decimal, in buf (12 bytes), for cat(): a pid or an fd number in a /proc path. */
const char *decimal(char *buf, unsigned v)
{
    int j = 11;
    buf[j] = 0;
    do
        buf[--j] = (char)('0' + v % 10);
    while ((v /= 10) && j > 0);
    return buf + j;
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
    static char own[PATH_MAX];
    own[0] = link[0] = 0;
    if (!cat(link, size, dir, "/" BUNDLE_LINK, NULL))
        return 0;
    if (realpath(link, bundle))
        return 1;
    return *name && cat(own, sizeof(own), dir, "/", name, NULL) && realpath(own, bundle);
}

/* access() as the exec below will find the file: by the effective ids. access() itself goes by the real
 * ones, which differ only in a set-id caller; faccessat's AT_EACCESS needs faccessat2, which some seccomp
 * profiles refuse with EPERM, so it is used only then. */
static int usable(const char *path, int mode)
{
    if (getuid() == geteuid() && getgid() == getegid())
        return access(path, mode) == 0;
    return faccessat(AT_FDCWD, path, mode, AT_EACCESS) == 0;
}

/* SKB_WARM unset, empty or a spelling of "on". Any other value turns warm start off: an operator writes
 * false, off or no as often as 0, and a value not understood is never read as "on" (exec is always right). */
static int warm_wanted(const char *v)
{
    static const char *const on[] = {"", "1", "true", "yes", "on"};
    if (!v)
        return 1;
    for (size_t i = 0; i < sizeof(on) / sizeof(on[0]); i++)
        if (strcasecmp(v, on[i]) == 0)
            return 1;
    return 0;
}

/* A variable that the dynamic loader, the C library or the bundle's bootloader acts on when a process
 * starts: an exec'd plugin would (LD_DEBUG writes to its stderr, LD_TRACE_LOADED_OBJECTS has it list its
 * libraries and exit, LD_PRELOAD loads a library, GLIBC_TUNABLES and MALLOC_* set up its allocator,
 * LOCPATH and GCONV_PATH say where its locale and character set data come from), a forked child cannot.
 * Not LD_LIBRARY_PATH (the loader's --library-path replaces it) nor the three _PYI_ variables the exec
 * path sets itself. */
static int acted_on_at_start(const char *entry)
{
    static const char *const none[] = {"LD_LIBRARY_PATH=", "_PYI_ARCHIVE_FILE=", "_PYI_PARENT_PROCESS_LEVEL=",
                                       "_PYI_LINUX_PROCESS_NAME="};
    static const char *const start[] = {"LD_",      "GLIBC_TUNABLES=", "MALLOC_",      "LOCPATH=",
                                        "GCONV_PATH=", "_PYI_",         "_MEIPASS",     "PYINSTALLER_"};
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        if (strncmp(entry, none[i], strlen(none[i])) == 0)
            return 0;
    for (size_t i = 0; i < sizeof(start) / sizeof(start[0]); i++)
        if (strncmp(entry, start[i], strlen(start[i])) == 0)
            return 1;
    return 0;
}

/* The opt-out file in the first len bytes of dir: there, even as a dangling symlink (the doctor's test), or
 * the path too long to tell. */
static int turned_off_in(const char *dir, size_t len)
{
    char path[PATH_MAX] = "";
    struct stat st;
    if (len + sizeof("/" WARM_OFF) > sizeof(path))
        return 1;
    memcpy(path, dir, len);
    memcpy(path + len, "/" WARM_OFF, sizeof("/" WARM_OFF));
    return fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Warm start applies: one of the plugin applets (a server serves nothing else), not turned off (SKB_WARM,
 * or the opt-out file in the launcher's own dir or in the dir of the path the runtime executed, execfn, the
 * kernel's AT_EXECFN, not the caller's argv[0]: a plugin dir of symlinks to an install elsewhere), root,
 * stdio open and not terminals (a closed fd 0-2 or a terminal are not something the child's Python stdio
 * could be set up like an exec'd one's), and a process group the child can join: one whose leader is
 * outside this pid namespace reads 0 here. */
int warm_applies(const char *bindir, const char *applet, const char *execfn)
{
    static const char *const applets[] = {"loopback", "ptp", "host-local", "debug"};
    const char *slash = execfn ? strrchr(execfn, '/') : NULL;
    struct rlimit stack;
    int known = 0;
    for (size_t i = 0; i < sizeof(applets) / sizeof(applets[0]); i++)
        known |= strcmp(applet, applets[i]) == 0;
    if (!known || !warm_wanted(getenv("SKB_WARM")))
        return 0;
    /* A seccomp filter first, with a call the exec path makes too (the bootloader's prctl): the warm path
     * makes system calls the exec path does not (getpgid, lstat, open, fstat, statx...), and a filter may
     * kill on one. Any filter means exec (the snapshot refuses it later anyway). */
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0 || getuid() != 0 || geteuid() != 0 || getpgrp() == 0)
        return 0;
    if (turned_off_in(bindir, strlen(bindir)) || (slash && turned_off_in(execfn, (size_t)(slash - execfn))))
        return 0;
    if (getrlimit(RLIMIT_STACK, &stack) != 0 || stack.rlim_cur < MIN_STACK)
        return 0;
    for (int i = 0; i < 3; i++)
        if (fcntl(i, F_GETFD) < 0 || isatty(i))
            return 0;
    for (char **e = environ; *e; e++)
        if (acted_on_at_start(*e))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    /* (static: a caller may give us little stack, and an exec'd plugin must still run there) */
    static char self[PATH_MAX], link[PATH_MAX], bundle[PATH_MAX];
    static char loader[PATH_MAX], libpath[2 * PATH_MAX + 16], program[PATH_MAX];
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
        return fail("skb-cni bundle missing: ", link, REINSTALL);
    if (!cat(loader, sizeof(loader), bundle, "/" LOADER, NULL) || !cat(program, sizeof(program), bundle, "/" PROGRAM, NULL) ||
        !cat(libpath, sizeof(libpath), bundle, "/lib:", bundle, "/_internal", NULL))
        return fail("skb-cni bundle path too long: ", bundle, "install into a shorter directory");
    if (!usable(loader, X_OK))
        return fail("skb-cni bundle missing: ", loader, REINSTALL);
    if (!usable(program, R_OK))
        return fail("skb-cni bundle missing: ", program, REINSTALL);

    if (warm_applies(self, applet, (const char *)getauxval(AT_EXECFN)))
        warm(self, bundle, applet, argc, argv, loader, libpath, program); /* returns when it goes by exec */

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
    cat(detail, sizeof(detail), "execve failed: ", strerror(errno), "; ", REINSTALL, NULL);
    return fail("skb-cni bundle cannot be started: ", loader, detail);
}
