/* A smoke test of the loaderx C ABI, for platforms where Python cannot run
 * the suite (Windows under Wine, musl, emulated arm64).
 *
 *     abi_smoke LIBRARY DIR
 *
 * loads LIBRARY at run time (dlopen, or LoadLibrary on Windows), then in the
 * directory DIR, which must not exist yet, creates a zstd store and runs
 * create -> append -> gather -> delete -> compact -> close -> reopen ->
 * gather through the lx_* exports, checking every byte it reads back.
 * Prints one line per step and "abi_smoke: N passed, 0 failed" at the end;
 * exits 1 at the first failure, naming the step, the record and the status.
 *
 * Built by `make abi-smoke` with zig cc for each target.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <windows.h>
typedef HMODULE lib_t;
static lib_t lib_open(const char *path) { return LoadLibraryA(path); }
static void *lib_sym(lib_t h, const char *name) { return (void *)GetProcAddress(h, name); }
static const char *lib_error(void) {
    static char buf[64];
    snprintf(buf, sizeof buf, "Windows error %lu", (unsigned long)GetLastError());
    return buf;
}
#else
#include <dlfcn.h>
typedef void *lib_t;
static lib_t lib_open(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static void *lib_sym(lib_t h, const char *name) { return dlsym(h, name); }
static const char *lib_error(void) { return dlerror(); }
#endif

#define ERRLEN 1024
/* The error buffer starts with the errno of an I/O failure (int64), then
 * the NUL-terminated message (LX_ERROR_HEAD in the library's header). */
#define ERRHEAD 8
#define NREC 64
#define RECLEN 4096

typedef int (*abi_version_fn)(int64_t *, char *, int64_t);
typedef int (*create_fn)(char *, char *, char *, int64_t, void *, int64_t, int64_t *, int64_t, char *, char *,
                         int64_t *, int64_t, int64_t, int64_t *, int64_t *, char *, int64_t);
typedef int (*open_fn)(char *, int, int64_t *, char *, int64_t);
typedef int (*handle_fn)(int64_t, char *, int64_t);
typedef int (*len_fn)(int64_t, int64_t *, char *, int64_t);
typedef int (*append_fn)(int64_t, void *, int64_t, int64_t *, int64_t, int64_t *, char *, int64_t);
typedef int (*gather_fn)(int64_t, int64_t *, int64_t, void *, int64_t, int64_t, char *, int64_t);
typedef int (*delete_fn)(int64_t, int64_t *, int64_t, char *, int64_t);

static int passed;
static char err[ERRLEN];

static void fail(const char *step, const char *what, int status) {
    fprintf(stderr, "abi_smoke: %s failed: %s (status %d: %s)\n", step, what, status, err + ERRHEAD);
    printf("abi_smoke: %d passed, 1 failed\n", passed);
    exit(1);
}

static void ok(const char *step) {
    passed++;
    printf("ok %d - %s\n", passed, step);
    fflush(stdout);
}

static void *need(lib_t h, const char *name) {
    void *p = lib_sym(h, name);
    if (!p) {
        snprintf(err + ERRHEAD, sizeof err - ERRHEAD, "%s", lib_error());
        fail("lookup", name, -1);
    }
    return p;
}

/* The content of record i: a byte pattern no other record shares. */
static unsigned char pattern(int64_t rec, int64_t byte) {
    return (unsigned char)((rec * 131 + byte * 7 + (byte >> 8)) & 0xff);
}

/* Gathers the records whose ids (the i of pattern) are want[0..n) at the
 * given store indices and checks their bytes. */
static void check_gather(gather_fn gather, int64_t h, int64_t *idx, const int64_t *want, int64_t n,
                         const char *step) {
    unsigned char *buf = malloc((size_t)(n * RECLEN));
    int st = gather(h, idx, n, buf, n * RECLEN, RECLEN, err, ERRLEN);
    if (st != 0) fail(step, "lx_store_gather", st);
    for (int64_t i = 0; i < n; i++) {
        for (int64_t b = 0; b < RECLEN; b++) {
            if (buf[i * RECLEN + b] != pattern(want[i], b)) {
                char what[128];
                snprintf(what, sizeof what, "index %lld byte %lld: got %u, want %u (record %lld)", (long long)idx[i],
                         (long long)b, buf[i * RECLEN + b], pattern(want[i], b), (long long)want[i]);
                fail(step, what, 0);
            }
        }
    }
    free(buf);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBRARY DIR\n", argv[0]);
        return 2;
    }
    lib_t lib = lib_open(argv[1]);
    if (!lib) {
        snprintf(err + ERRHEAD, sizeof err - ERRHEAD, "%s", lib_error());
        fail("load", argv[1], -1);
    }
    abi_version_fn abi_version = (abi_version_fn)need(lib, "lx_abi_version");
    create_fn create = (create_fn)need(lib, "lx_store_create");
    open_fn open_store = (open_fn)need(lib, "lx_store_open");
    handle_fn close_store = (handle_fn)need(lib, "lx_store_close");
    handle_fn compact = (handle_fn)need(lib, "lx_store_compact");
    handle_fn sync = (handle_fn)need(lib, "lx_store_sync");
    len_fn length = (len_fn)need(lib, "lx_store_len");
    append_fn append = (append_fn)need(lib, "lx_store_append");
    gather_fn gather = (gather_fn)need(lib, "lx_store_gather");
    delete_fn delete_ = (delete_fn)need(lib, "lx_store_delete");
    ok("load library and look up exports");

    int64_t version = 0, h = 0, n = 0, first = -1;
    int st = abi_version(&version, err, ERRLEN);
    if (st != 0 || version <= 0) fail("abi_version", "lx_abi_version", st);
    ok("abi version");

    int64_t shape[1] = {RECLEN};
    st = create(argv[2], "zstd", "balanced", 0, NULL, 0, NULL, 0, "dense", "|u1", shape, 1, 0, NULL, &h, err, ERRLEN);
    if (st != 0) fail("create", argv[2], st);
    ok("create zstd store");

    unsigned char *data = malloc(NREC * RECLEN);
    int64_t offsets[NREC + 1];
    for (int64_t i = 0; i < NREC; i++) {
        offsets[i] = i * RECLEN;
        for (int64_t b = 0; b < RECLEN; b++) data[i * RECLEN + b] = pattern(i, b);
    }
    offsets[NREC] = NREC * RECLEN;
    /* two appends: 40 records, then 24 */
    st = append(h, data, 40 * RECLEN, offsets, 40, &first, err, ERRLEN);
    if (st != 0 || first != 0) fail("append", "first batch", st);
    int64_t offsets2[25];
    for (int i = 0; i <= 24; i++) offsets2[i] = offsets[40 + i] - offsets[40];
    st = append(h, data + 40 * RECLEN, 24 * RECLEN, offsets2, 24, &first, err, ERRLEN);
    if (st != 0 || first != 40) fail("append", "second batch", st);
    st = sync(h, err, ERRLEN);
    if (st != 0) fail("append", "lx_store_sync", st);
    st = length(h, &n, err, ERRLEN);
    if (st != 0 || n != NREC) fail("append", "length after append", st);
    ok("append 64 records of 4 KiB in two batches");

    int64_t idx[NREC], want[NREC];
    for (int64_t i = 0; i < NREC; i++) {
        idx[i] = (i * 37) % NREC; /* a permutation */
        want[i] = idx[i];
    }
    check_gather(gather, h, idx, want, NREC, "gather");
    ok("gather all 64 in permuted order, bytes exact");

    /* delete records 3 and 10: the tail (63, then 62) moves into the holes */
    int64_t del[2] = {3, 10};
    st = delete_(h, del, 2, err, ERRLEN);
    if (st != 0) fail("delete", "lx_store_delete", st);
    st = length(h, &n, err, ERRLEN);
    if (st != 0 || n != NREC - 2) fail("delete", "length after delete", st);
    /* the surviving records, whatever their new index, are exactly 0..63 minus {3, 10} */
    int64_t all[NREC - 2];
    unsigned char *buf = malloc((NREC - 2) * RECLEN);
    for (int64_t i = 0; i < NREC - 2; i++) all[i] = i;
    st = gather(h, all, NREC - 2, buf, (NREC - 2) * RECLEN, RECLEN, err, ERRLEN);
    if (st != 0) fail("delete", "gather after delete", st);
    int seen[NREC] = {0};
    for (int64_t i = 0; i < NREC - 2; i++) {
        int64_t id = -1;
        for (int64_t r = 0; r < NREC; r++)
            if (memcmp(buf + i * RECLEN, data + r * RECLEN, RECLEN) == 0) id = r;
        if (id < 0 || id == 3 || id == 10 || seen[id]++) {
            char what[96];
            snprintf(what, sizeof what, "index %lld holds record %lld", (long long)i, (long long)id);
            fail("delete", what, 0);
        }
        want[i] = id;
    }
    ok("delete 2 records, survivors exact");

    st = compact(h, err, ERRLEN);
    if (st != 0) fail("compact", "lx_store_compact", st);
    check_gather(gather, h, all, want, NREC - 2, "gather after compact");
    ok("compact, then gather all survivors");

    st = close_store(h, err, ERRLEN);
    if (st != 0) fail("close", "lx_store_close", st);
    st = open_store(argv[2], 1, &h, err, ERRLEN);
    if (st != 0) fail("reopen", argv[2], st);
    st = length(h, &n, err, ERRLEN);
    if (st != 0 || n != NREC - 2) fail("reopen", "length after reopen", st);
    check_gather(gather, h, all, want, NREC - 2, "gather after reopen");
    st = close_store(h, err, ERRLEN);
    if (st != 0) fail("reopen", "lx_store_close", st);
    ok("close, reopen read-only, gather all survivors");

    free(data);
    free(buf);
    printf("abi_smoke: %d passed, 0 failed\n", passed);
    return 0;
}
