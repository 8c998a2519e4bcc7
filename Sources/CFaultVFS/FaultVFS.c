// A power-cut and I/O-error VFS wrapped around SQLite's default (unix) VFS, for tests only.
//
// Model: the real file is the disk. A write is not put on it at once: it is kept aside, in order, per file path
// (shared by every handle on that path, so a second connection of the process reads what the first wrote, as it
// would read the page cache). xSync puts the kept writes and truncations on the real file, then fsyncs it. A power
// cut (at a chosen sync or write) keeps none of them ("drop") or a random subset of them, the last one cut to a
// random prefix ("torn"), and then SIGKILLs the process: nothing else reaches the disk. Since unsynced writes live
// only in the process, an outside SIGKILL is a power cut in "drop" mode too.
//
// A file created by this process is lost by a power cut until its directory was fsynced: SQLite does that at the
// first sync of a new WAL or rollback journal; for a new database file the opener must (the SQLite wrapper does,
// and reports it with askrelay_fault_vfs_directory_synced). The -shm file is passed through: it is memory, and
// the first connection after a cut rebuilds it from the WAL.
//
// Faults: EIO on the N-th fsync that has unsynced writes to put on the disk (they are dropped, as Linux drops dirty
// pages whose writeback failed, so a retried fsync "succeeds" with the data gone), EIO or ENOSPC on the N-th write;
// "N+" repeats the fault on every later one too; only=SUFFIX limits faults (and their counts) to the paths ending
// so, for example "-wal". Cuts count every sync and write of every file.

#include "CFaultVFS.h"

#ifdef ASKRELAY_FAULT_VFS

#include <sqlite3.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct Op {
    sqlite3_int64 offset;  // a write's offset, or a truncation's new size
    int length;            // bytes written; -1 for a truncation
    unsigned char *data;
} Op;

// What the process holds of one path that the disk does not have.
typedef struct Shared {
    char *path;
    int handles;
    Op *ops;
    int count;
    int capacity;
    int undurableEntry;  // created by this process; its directory entry is not on the disk yet
    struct Shared *next;
} Shared;

typedef struct FaultFile {
    sqlite3_file base;
    sqlite3_file *real;
    Shared *shared;       // NULL: a temporary file, passed through
    int syncsDirectory;   // the unix VFS fsyncs the directory at this handle's first sync
} FaultFile;

typedef struct Trigger {
    long at;      // 0: never
    int repeats;  // "N+": at and every later one
} Trigger;

static struct {
    int torn;
    long cutAtSync;
    long cutAtWrite;
    Trigger fsyncEIO;
    Trigger writeEIO;
    Trigger writeENOSPC;
    const char *only;  // faults hit only paths ending so (all when NULL)
    uint64_t random;
} settings;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Shared *files;
static long syncs;
static long writes;
static long faultSyncs;   // syncs with unsynced writes, of the files faults hit
static long faultWrites;  // writes to the files faults hit
static sqlite3_vfs *realVFS;
static sqlite3_vfs faultVFS;

static uint64_t nextRandom(void) {
    // xorshift64*
    uint64_t x = settings.random;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    settings.random = x;
    return x * 2685821657736338717ULL;
}

static int fires(const Trigger *t, long n) { return t->at != 0 && (n == t->at || (t->repeats && n > t->at)); }

static int faultable(const Shared *s) {
    if (!settings.only) return 1;
    size_t length = strlen(s->path);
    size_t suffix = strlen(settings.only);
    return length >= suffix && strcmp(s->path + length - suffix, settings.only) == 0;
}

static void say(const char *text) {
    ssize_t ignored = write(2, text, strlen(text));
    (void)ignored;
}

static void freeOps(Shared *s) {
    for (int i = 0; i < s->count; i++) free(s->ops[i].data);
    free(s->ops);
    s->ops = NULL;
    s->count = 0;
    s->capacity = 0;
}

static Shared *findShared(const char *path) {
    for (Shared *s = files; s; s = s->next) {
        if (strcmp(s->path, path) == 0) return s;
    }
    return NULL;
}

static void forgetIfUnused(Shared *s) {
    if (s->handles > 0 || s->count > 0 || s->undurableEntry) return;
    for (Shared **p = &files; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    free(s->path);
    free(s);
}

static int addOp(Shared *s, sqlite3_int64 offset, int length, const void *data) {
    if (length > 0 && s->count > 0) {
        Op *last = &s->ops[s->count - 1];
        if (last->offset == offset && last->length == length) {
            memcpy(last->data, data, (size_t)length);
            return SQLITE_OK;
        }
    }
    if (s->count == s->capacity) {
        int capacity = s->capacity ? s->capacity * 2 : 16;
        Op *ops = realloc(s->ops, sizeof(Op) * (size_t)capacity);
        if (!ops) return SQLITE_NOMEM;
        s->ops = ops;
        s->capacity = capacity;
    }
    Op op = {offset, length, NULL};
    if (length > 0) {
        op.data = malloc((size_t)length);
        if (!op.data) return SQLITE_NOMEM;
        memcpy(op.data, data, (size_t)length);
    }
    s->ops[s->count++] = op;
    return SQLITE_OK;
}

// The file's size as the process sees it: the disk's, then every kept write and truncation in order.
static int logicalSize(FaultFile *f, sqlite3_int64 *size) {
    int rc = f->real->pMethods->xFileSize(f->real, size);
    if (rc != SQLITE_OK) return rc;
    Shared *s = f->shared;
    for (int i = 0; i < s->count; i++) {
        Op *op = &s->ops[i];
        if (op->length < 0) {
            *size = op->offset;
        } else if (op->offset + op->length > *size) {
            *size = op->offset + op->length;
        }
    }
    return SQLITE_OK;
}

// A power cut: keep nothing (or, torn, a random part) of what was not synced, lose files whose directory entry
// never reached the disk, and die at once.
static void powerCut(const char *why, long n) {
    int kept = 0;
    int unsynced = 0;
    int lostFiles = 0;
    for (Shared *s = files; s; s = s->next) {
        if (s->undurableEntry) {
            unlink(s->path);
            lostFiles++;
            continue;
        }
        unsynced += s->count;
        if (!settings.torn || s->count == 0) continue;
        int fd = open(s->path, O_WRONLY);
        if (fd < 0) continue;
        for (int i = 0; i < s->count; i++) {
            Op *op = &s->ops[i];
            int last = i == s->count - 1;
            if (!last && (nextRandom() & 1)) continue;
            if (op->length < 0) {
                if (ftruncate(fd, op->offset) != 0) break;
            } else {
                size_t length = last ? (size_t)(nextRandom() % ((uint64_t)op->length + 1)) : (size_t)op->length;
                if (pwrite(fd, op->data, length, op->offset) != (ssize_t)length) break;
            }
            kept++;
        }
        close(fd);
    }
    char line[256];
    snprintf(
        line, sizeof line, "fault-vfs: power cut at %s %ld (%s): kept %d of %d unsynced writes, lost %d new files\n",
        why, n, settings.torn ? "torn" : "drop", kept, unsynced, lostFiles);
    say(line);
    kill(getpid(), SIGKILL);
    _exit(137);
}

// MARK: File methods

static int faultClose(sqlite3_file *file) {
    FaultFile *f = (FaultFile *)file;
    int rc = f->real->pMethods ? f->real->pMethods->xClose(f->real) : SQLITE_OK;
    if (f->shared) {
        pthread_mutex_lock(&lock);
        f->shared->handles--;
        forgetIfUnused(f->shared);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

static int faultRead(sqlite3_file *file, void *buffer, int amount, sqlite3_int64 offset) {
    FaultFile *f = (FaultFile *)file;
    if (!f->shared) return f->real->pMethods->xRead(f->real, buffer, amount, offset);
    pthread_mutex_lock(&lock);
    int rc = f->real->pMethods->xRead(f->real, buffer, amount, offset);
    if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) {
        pthread_mutex_unlock(&lock);
        return rc;
    }
    // A short read zero-fills the rest (the unix VFS does too); the kept writes and truncations then apply.
    sqlite3_int64 size;
    rc = f->real->pMethods->xFileSize(f->real, &size);
    if (rc != SQLITE_OK) {
        pthread_mutex_unlock(&lock);
        return rc;
    }
    unsigned char *bytes = buffer;
    if (size < offset + amount) {
        sqlite3_int64 from = size > offset ? size : offset;
        memset(bytes + (from - offset), 0, (size_t)(offset + amount - from));
    }
    Shared *s = f->shared;
    for (int i = 0; i < s->count; i++) {
        Op *op = &s->ops[i];
        if (op->length < 0) {
            size = op->offset;
            if (size < offset + amount) {
                sqlite3_int64 from = size > offset ? size : offset;
                memset(bytes + (from - offset), 0, (size_t)(offset + amount - from));
            }
            continue;
        }
        sqlite3_int64 end = op->offset + op->length;
        if (end > size) size = end;
        sqlite3_int64 from = op->offset > offset ? op->offset : offset;
        sqlite3_int64 to = end < offset + amount ? end : offset + amount;
        if (from < to) memcpy(bytes + (from - offset), op->data + (from - op->offset), (size_t)(to - from));
    }
    pthread_mutex_unlock(&lock);
    return size < offset + amount ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

static int faultWrite(sqlite3_file *file, const void *buffer, int amount, sqlite3_int64 offset) {
    FaultFile *f = (FaultFile *)file;
    if (!f->shared) return f->real->pMethods->xWrite(f->real, buffer, amount, offset);
    pthread_mutex_lock(&lock);
    long n = ++writes;
    if (faultable(f->shared)) {
        long w = ++faultWrites;
        if (fires(&settings.writeEIO, w)) {
            pthread_mutex_unlock(&lock);
            return SQLITE_IOERR_WRITE;
        }
        if (fires(&settings.writeENOSPC, w)) {
            pthread_mutex_unlock(&lock);
            return SQLITE_FULL;
        }
    }
    int rc = addOp(f->shared, offset, amount, buffer);
    if (rc == SQLITE_OK && settings.cutAtWrite == n) powerCut("write", n);
    pthread_mutex_unlock(&lock);
    return rc;
}

static int faultTruncate(sqlite3_file *file, sqlite3_int64 size) {
    FaultFile *f = (FaultFile *)file;
    if (!f->shared) return f->real->pMethods->xTruncate(f->real, size);
    pthread_mutex_lock(&lock);
    int rc = addOp(f->shared, size, -1, NULL);
    pthread_mutex_unlock(&lock);
    return rc;
}

static int faultSync(sqlite3_file *file, int flags) {
    FaultFile *f = (FaultFile *)file;
    if (!f->shared) return f->real->pMethods->xSync(f->real, flags);
    pthread_mutex_lock(&lock);
    long n = ++syncs;
    if (settings.cutAtSync == n) powerCut("sync", n);
    Shared *s = f->shared;
    if (s->count > 0 && faultable(s) && fires(&settings.fsyncEIO, ++faultSyncs)) {
        // The kernel dropped the dirty pages whose writeback failed: the disk never gets them.
        freeOps(s);
        pthread_mutex_unlock(&lock);
        char line[160];
        snprintf(line, sizeof line, "fault-vfs: EIO on fsync %ld of %s\n", faultSyncs, s->path);
        say(line);
        return SQLITE_IOERR_FSYNC;
    }
    int rc = SQLITE_OK;
    for (int i = 0; i < s->count && rc == SQLITE_OK; i++) {
        Op *op = &s->ops[i];
        rc = op->length < 0 ? f->real->pMethods->xTruncate(f->real, op->offset)
                            : f->real->pMethods->xWrite(f->real, op->data, op->length, op->offset);
    }
    if (rc == SQLITE_OK) {
        freeOps(s);
        rc = f->real->pMethods->xSync(f->real, flags);
    }
    if (rc == SQLITE_OK && f->syncsDirectory) {
        s->undurableEntry = 0;
        f->syncsDirectory = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int faultFileSize(sqlite3_file *file, sqlite3_int64 *size) {
    FaultFile *f = (FaultFile *)file;
    if (!f->shared) return f->real->pMethods->xFileSize(f->real, size);
    pthread_mutex_lock(&lock);
    int rc = logicalSize(f, size);
    pthread_mutex_unlock(&lock);
    return rc;
}

static int faultLock(sqlite3_file *file, int level) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xLock(f->real, level);
}

static int faultUnlock(sqlite3_file *file, int level) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xUnlock(f->real, level);
}

static int faultCheckReservedLock(sqlite3_file *file, int *out) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int faultFileControl(sqlite3_file *file, int op, void *arg) {
    FaultFile *f = (FaultFile *)file;
    if (op == SQLITE_FCNTL_VFSNAME) {
        *(char **)arg = sqlite3_mprintf("askrelay-fault");
        return SQLITE_OK;
    }
    // A size hint or chunk size would grow the disk's file past what the process wrote: not needed for a test.
    if (f->shared && (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_CHUNK_SIZE)) return SQLITE_OK;
    return f->real->pMethods->xFileControl(f->real, op, arg);
}

static int faultSectorSize(sqlite3_file *file) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xSectorSize(f->real);
}

static int faultDeviceCharacteristics(sqlite3_file *file) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int faultShmMap(sqlite3_file *file, int region, int size, int extend, void volatile **out) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xShmMap(f->real, region, size, extend, out);
}

static int faultShmLock(sqlite3_file *file, int offset, int n, int flags) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void faultShmBarrier(sqlite3_file *file) {
    FaultFile *f = (FaultFile *)file;
    f->real->pMethods->xShmBarrier(f->real);
}

static int faultShmUnmap(sqlite3_file *file, int deleteFlag) {
    FaultFile *f = (FaultFile *)file;
    return f->real->pMethods->xShmUnmap(f->real, deleteFlag);
}

// No memory mapping: a mapped page would show the disk, not the kept writes. SQLite falls back to xRead.
static int faultFetch(sqlite3_file *file, sqlite3_int64 offset, int amount, void **out) {
    (void)file;
    (void)offset;
    (void)amount;
    *out = NULL;
    return SQLITE_OK;
}

static int faultUnfetch(sqlite3_file *file, sqlite3_int64 offset, void *page) {
    (void)file;
    (void)offset;
    (void)page;
    return SQLITE_OK;
}

static const sqlite3_io_methods faultMethods = {
    3,
    faultClose,
    faultRead,
    faultWrite,
    faultTruncate,
    faultSync,
    faultFileSize,
    faultLock,
    faultUnlock,
    faultCheckReservedLock,
    faultFileControl,
    faultSectorSize,
    faultDeviceCharacteristics,
    faultShmMap,
    faultShmLock,
    faultShmBarrier,
    faultShmUnmap,
    faultFetch,
    faultUnfetch,
};

// MARK: VFS methods

static int faultOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *outFlags) {
    (void)vfs;
    FaultFile *f = (FaultFile *)file;
    f->real = (sqlite3_file *)&f[1];
    f->shared = NULL;
    f->syncsDirectory = 0;
    int isNew = name && access(name, F_OK) != 0;
    int rc = realVFS->xOpen(realVFS, name, f->real, flags, outFlags);
    if (rc != SQLITE_OK) {
        f->base.pMethods = NULL;
        return rc;
    }
    f->base.pMethods = &faultMethods;
    int kinds = SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL;
    if (!name || (flags & SQLITE_OPEN_DELETEONCLOSE) || !(flags & kinds)) return SQLITE_OK;
    pthread_mutex_lock(&lock);
    Shared *s = findShared(name);
    if (!s) {
        s = calloc(1, sizeof(Shared));
        if (s) s->path = strdup(name);
        if (!s || !s->path) {
            free(s);
            pthread_mutex_unlock(&lock);
            f->real->pMethods->xClose(f->real);
            f->base.pMethods = NULL;
            return SQLITE_NOMEM;
        }
        s->next = files;
        files = s;
    }
    s->handles++;
    if (isNew) s->undurableEntry = 1;
    f->shared = s;
    f->syncsDirectory = (flags & SQLITE_OPEN_CREATE) && !(flags & SQLITE_OPEN_MAIN_DB);
    pthread_mutex_unlock(&lock);
    return SQLITE_OK;
}

static int faultDelete(sqlite3_vfs *vfs, const char *name, int syncDirectory) {
    (void)vfs;
    pthread_mutex_lock(&lock);
    Shared *s = findShared(name);
    if (s) {
        freeOps(s);
        s->undurableEntry = 0;
        forgetIfUnused(s);
    }
    pthread_mutex_unlock(&lock);
    return realVFS->xDelete(realVFS, name, syncDirectory);
}

static int faultAccess(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs;
    return realVFS->xAccess(realVFS, name, flags, out);
}

static int faultFullPathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    return realVFS->xFullPathname(realVFS, name, size, out);
}

static void *faultDlOpen(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return realVFS->xDlOpen(realVFS, name);
}

static void faultDlError(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    realVFS->xDlError(realVFS, size, out);
}

static void (*faultDlSym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void) {
    (void)vfs;
    return realVFS->xDlSym(realVFS, handle, symbol);
}

static void faultDlClose(sqlite3_vfs *vfs, void *handle) {
    (void)vfs;
    realVFS->xDlClose(realVFS, handle);
}

static int faultRandomness(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return realVFS->xRandomness(realVFS, size, out);
}

static int faultSleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return realVFS->xSleep(realVFS, microseconds);
}

static int faultCurrentTime(sqlite3_vfs *vfs, double *out) {
    (void)vfs;
    return realVFS->xCurrentTime(realVFS, out);
}

static int faultGetLastError(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return realVFS->xGetLastError(realVFS, size, out);
}

static int faultCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    (void)vfs;
    return realVFS->xCurrentTimeInt64(realVFS, out);
}

// MARK: Installing

static int parseTrigger(const char *value, Trigger *t) {
    char *end;
    long n = strtol(value, &end, 10);
    if (end == value || n < 1) return 0;
    t->at = n;
    t->repeats = *end == '+';
    if (t->repeats) end++;
    return *end == '\0';
}

static int parseCount(const char *value, long *out) {
    char *end;
    long n = strtol(value, &end, 10);
    if (end == value || *end != '\0' || n < 1) return 0;
    *out = n;
    return 1;
}

static void badSpec(const char *item) {
    char line[512];
    snprintf(
        line, sizeof line,
        "ASKRELAY_FAULT_VFS: bad item \"%.200s\"; items are mode=drop|torn, cut-at-sync=N, cut-at-write=N, "
        "fsync-eio=N[+], write-eio=N[+], write-enospc=N[+], only=SUFFIX, seed=N (comma-separated)\n",
        item);
    say(line);
    exit(64);
}

int askrelay_fault_vfs_install_from_environment(void) {
    const char *spec = getenv("ASKRELAY_FAULT_VFS");
    if (!spec || !*spec) return 0;
    settings.random = 0x9E3779B97F4A7C15ULL;
    char *copy = strdup(spec);
    if (!copy) return 0;
    for (char *item = strtok(copy, ","); item; item = strtok(NULL, ",")) {
        char *equals = strchr(item, '=');
        if (!equals) badSpec(item);
        *equals = '\0';
        const char *key = item;
        const char *value = equals + 1;
        int ok = 1;
        if (strcmp(key, "mode") == 0) {
            ok = strcmp(value, "drop") == 0 || strcmp(value, "torn") == 0;
            settings.torn = strcmp(value, "torn") == 0;
        } else if (strcmp(key, "cut-at-sync") == 0) {
            ok = parseCount(value, &settings.cutAtSync);
        } else if (strcmp(key, "cut-at-write") == 0) {
            ok = parseCount(value, &settings.cutAtWrite);
        } else if (strcmp(key, "fsync-eio") == 0) {
            ok = parseTrigger(value, &settings.fsyncEIO);
        } else if (strcmp(key, "write-eio") == 0) {
            ok = parseTrigger(value, &settings.writeEIO);
        } else if (strcmp(key, "write-enospc") == 0) {
            ok = parseTrigger(value, &settings.writeENOSPC);
        } else if (strcmp(key, "only") == 0) {
            ok = *value != '\0';
            settings.only = strdup(value);
        } else if (strcmp(key, "seed") == 0) {
            long seed;
            ok = parseCount(value, &seed);
            settings.random ^= (uint64_t)seed * 0xBF58476D1CE4E5B9ULL;
        } else {
            ok = 0;
        }
        if (!ok) {
            *equals = '=';
            badSpec(item);
        }
    }
    free(copy);
    realVFS = sqlite3_vfs_find(NULL);
    if (!realVFS) return 0;
    faultVFS.iVersion = 3;
    faultVFS.szOsFile = (int)sizeof(FaultFile) + realVFS->szOsFile;
    faultVFS.mxPathname = realVFS->mxPathname;
    faultVFS.zName = "askrelay-fault";
    faultVFS.xOpen = faultOpen;
    faultVFS.xDelete = faultDelete;
    faultVFS.xAccess = faultAccess;
    faultVFS.xFullPathname = faultFullPathname;
    faultVFS.xDlOpen = faultDlOpen;
    faultVFS.xDlError = faultDlError;
    faultVFS.xDlSym = faultDlSym;
    faultVFS.xDlClose = faultDlClose;
    faultVFS.xRandomness = faultRandomness;
    faultVFS.xSleep = faultSleep;
    faultVFS.xCurrentTime = faultCurrentTime;
    faultVFS.xGetLastError = faultGetLastError;
    faultVFS.xCurrentTimeInt64 = faultCurrentTimeInt64;
    return sqlite3_vfs_register(&faultVFS, 1) == SQLITE_OK ? 1 : 0;
}

void askrelay_fault_vfs_directory_synced(const char *directory) {
    size_t length = strlen(directory);
    while (length > 1 && directory[length - 1] == '/') length--;
    pthread_mutex_lock(&lock);
    for (Shared *s = files; s; s = s->next) {
        const char *slash = strrchr(s->path, '/');
        if (slash && (size_t)(slash - s->path) == length && strncmp(s->path, directory, length) == 0) {
            s->undurableEntry = 0;
        }
    }
    pthread_mutex_unlock(&lock);
}

#endif
