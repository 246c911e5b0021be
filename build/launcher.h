/* skb-cni launcher: what its three files share (launcher.c: the exec path; warm_client.c: the warm-start
 * client; warm_snapshot.c: the snapshot text). No stdio, no free/realloc: the static binary stays small. */
#ifndef SKB_LAUNCHER_H
#define SKB_LAUNCHER_H
#include <limits.h>
#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

/* Print {"code":999,"msg":"<what><path>","details":"<detail>"} on stdout and return 1. */
int fail(const char *what, const char *path, const char *detail);
/* Append the NULL-terminated strings to dst (which holds a string); false when they do not fit. */
int cat(char *dst, size_t size, ...);
/* v in decimal, in buf (at least 12 bytes): its first digit. */
const char *decimal(char *buf, unsigned v);

/* A byte buffer of a size fixed when it is made (calloc only); oom is set when something did not fit. */
struct msg {
    char *p;
    size_t n, cap;
    int oom;
};
int make(struct msg *m, size_t cap);
void add(struct msg *m, const void *s, size_t l);
void adds(struct msg *m, const char *s);
void addu(struct msg *m, unsigned long long v);
void addi(struct msg *m, long long v);

/* The namespaces a call passes (as fds, after cwd and root) and compares; skb/plugin/warm/wire.py: NS. */
#define NNS 10
extern const char *const NS[NNS];
#define NFIXED (2 + NNS)        /* cwd, root, the namespaces */
#define MAX_FDS 253             /* the kernel's SCM_MAX_FD */

/* The snapshot text (warm_snapshot.c): key part, then adopted part. fixed: NFIXED fds (cwd, root,
 * namespaces), or NULL for the process's own paths; inherited: the caller's fds without close-on-exec,
 * ascending, or NULL for its own; locale: NULL for the environment's. False when this process cannot be
 * served warm (a seccomp filter, no /proc) or the buffer is full. */
int snapshot_key(struct msg *m, const char *bundle, const int *fixed, const char *locale);
int snapshot_adopted(struct msg *m, const int *fixed, const int *inherited, int ninherited);
void snapshot_begin(void);
/* The fds an exec would keep (open, without close-on-exec), ascending, into out; their count, or -1. */
int own_fds(int *out, int max);
uint64_t fnv1a(const char *s, size_t n);
/* Whether process pid has our ids, capabilities, no_new_privs, seccomp mode and memory nodes. */
int same_privileges(pid_t pid);
#define PROOF_FD "255"      /* the server's fd of its proof file (skb/plugin/warm/admission.py PROOF_FD) */
#define PROOF_LEN 32        /* bytes of the secret in it (skb/plugin/warm/admission.py PROOF_LEN) */
#define PROOF_NAME "skb-warm-proof-" /* its name, before the server's key (admission.py PROOF_NAME) */
/* The secret of server pid's proof file, if we may read it: 1 (-1: the server of another context); 0 if not. */
int proof_of_reading(pid_t pid, const char *key, unsigned char *secret);

/* Whether warm start applies to this call (launcher.c): a plugin applet, not turned off, root, ... */
int warm_applies(const char *bindir, const char *applet, const char *execfn);
/* Offer the call to the context's warm server. Returns only when the call is to go by exec; once the call
 * has begun in the server's child, exits as that child ended. */
void warm(const char *bindir, const char *bundle, const char *applet, int argc, char **argv, const char *loader,
          const char *libpath, const char *program);
#endif
