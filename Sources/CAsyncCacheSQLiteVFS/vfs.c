#define _GNU_SOURCE
#include "CAsyncCacheSQLiteVFS.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

// MARK: The attempt on this thread

static _Thread_local int nowait_active;
/// 0, or why the attempt failed: 1 a read or sleep would have waited, 2 the file system or
/// kernel cannot read without waiting.
static _Thread_local int nowait_blocked;

void asynccache_sqlite_nowait_begin(void) {
  nowait_active = 1;
  nowait_blocked = 0;
}

int asynccache_sqlite_nowait_end(void) {
  nowait_active = 0;
  return nowait_blocked;
}

int asynccache_sqlite_can_read_without_waiting(void) {
#if defined(__linux__) && defined(RWF_NOWAIT)
  return 1;
#else
  return 0;
#endif
}

// MARK: Held reads (tests)

#define HOLD_SLOTS 16
static pthread_mutex_t hold_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_released = PTHREAD_COND_INITIALIZER;
static pthread_cond_t hold_entered = PTHREAD_COND_INITIALIZER;
static atomic_int hold_count;
static char *hold_prefixes[HOLD_SLOTS];
static int hold_waiting[HOLD_SLOTS];
/// Bumped when a slot is released, so that a reader woken after its slot was reused for
/// another prefix does not count itself out of that one.
static unsigned hold_generation[HOLD_SLOTS];

static int hold_slot(const char *name) {
  for (int slot = 0; slot < HOLD_SLOTS; slot++) {
    const char *prefix = hold_prefixes[slot];
    if (prefix && strncmp(name, prefix, strlen(prefix)) == 0) return slot;
  }
  return -1;
}

int asynccache_sqlite_hold_reads(const char *path_prefix) {
  pthread_mutex_lock(&hold_mutex);
  int found = 0;
  for (int slot = 0; slot < HOLD_SLOTS && !found; slot++) {
    if (hold_prefixes[slot] == NULL) {
      hold_prefixes[slot] = strdup(path_prefix);
      hold_waiting[slot] = 0;
      atomic_fetch_add(&hold_count, 1);
      found = 1;
    }
  }
  pthread_mutex_unlock(&hold_mutex);
  return found;
}

void asynccache_sqlite_release_reads(const char *path_prefix) {
  pthread_mutex_lock(&hold_mutex);
  for (int slot = 0; slot < HOLD_SLOTS; slot++) {
    if (hold_prefixes[slot] && strcmp(hold_prefixes[slot], path_prefix) == 0) {
      free(hold_prefixes[slot]);
      hold_prefixes[slot] = NULL;
      hold_waiting[slot] = 0;
      hold_generation[slot] += 1;
      atomic_fetch_sub(&hold_count, 1);
    }
  }
  pthread_cond_broadcast(&hold_released);
  pthread_mutex_unlock(&hold_mutex);
}

int asynccache_sqlite_held_reads(const char *path_prefix) {
  pthread_mutex_lock(&hold_mutex);
  int waiting = 0;
  for (int slot = 0; slot < HOLD_SLOTS; slot++) {
    if (hold_prefixes[slot] && strcmp(hold_prefixes[slot], path_prefix) == 0) waiting += hold_waiting[slot];
  }
  pthread_mutex_unlock(&hold_mutex);
  return waiting;
}

int asynccache_sqlite_wait_for_held_reads(const char *path_prefix, int count, int timeout_milliseconds) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_milliseconds / 1000;
  deadline.tv_nsec += (long)(timeout_milliseconds % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&hold_mutex);
  int waiting = 0;
  while (1) {
    waiting = 0;
    for (int slot = 0; slot < HOLD_SLOTS; slot++) {
      if (hold_prefixes[slot] && strcmp(hold_prefixes[slot], path_prefix) == 0) waiting += hold_waiting[slot];
    }
    if (waiting >= count || pthread_cond_timedwait(&hold_entered, &hold_mutex, &deadline) != 0) break;
  }
  pthread_mutex_unlock(&hold_mutex);
  return waiting >= count;
}

/// Whether a read of `name` is held; outside a no-wait attempt, waits until it is released.
static int held(const char *name) {
  if (atomic_load_explicit(&hold_count, memory_order_acquire) == 0 || name == NULL) return 0;
  pthread_mutex_lock(&hold_mutex);
  int slot = hold_slot(name);
  if (slot >= 0 && nowait_active) {
    pthread_mutex_unlock(&hold_mutex);
    return 1;
  }
  while (slot >= 0) {
    hold_waiting[slot] += 1;
    pthread_cond_broadcast(&hold_entered);
    unsigned generation = hold_generation[slot];
    pthread_cond_wait(&hold_released, &hold_mutex);
    // A released slot's count went with it.
    if (hold_generation[slot] == generation) hold_waiting[slot] -= 1;
    slot = hold_slot(name);
  }
  pthread_mutex_unlock(&hold_mutex);
  return 0;
}

// MARK: The wrapper

/// A file of this VFS: the wrapped VFS's file follows it in the same allocation.
typedef struct {
  sqlite3_file base;
  /// The wrapped file.
  sqlite3_file *inner;
  /// Its descriptor, for reads that must not wait; -1 when unknown.
  int descriptor;
  /// Its path (SQLite keeps it valid until the file is closed); NULL for temporary files.
  const char *name;
  /// Set when this file cannot be read without waiting (its system or the kernel cannot, or the
  /// process may not keep its access time): attempts report so, and the caller stops trying.
  int unsupported;
} WrappedFile;

/// Records why the attempt failed; the worse reason wins (an unsupported file over a wait).
static void attempt_failed(int reason) {
  if (reason > nowait_blocked) nowait_blocked = reason;
}

static sqlite3_vfs *inner_vfs;
static sqlite3_vfs wrapper_vfs;
/// The methods of a wrapped file, by the version of the wrapped file's methods (1 to 3): a file
/// must not offer methods (shared memory, memory mapping) that the one it wraps lacks.
static sqlite3_io_methods wrapper_methods[3];

#define INNER(file) (((WrappedFile *)(file))->inner)

/// A read that must not wait: from the page cache, or SQLITE_IOERR_READ with the attempt marked.
static int read_without_waiting(WrappedFile *file, void *buffer, int amount, sqlite3_int64 offset) {
#if defined(__linux__) && defined(RWF_NOWAIT)
  if (file->unsupported) {
    attempt_failed(2);
    return SQLITE_IOERR_READ;
  }
  if (file->descriptor < 0 || held(file->name)) {
    attempt_failed(1);
    return SQLITE_IOERR_READ;
  }
  int done = 0;
  while (done < amount) {
    struct iovec vector = {(char *)buffer + done, (size_t)(amount - done)};
    ssize_t result = preadv2(file->descriptor, &vector, 1, offset + done, RWF_NOWAIT);
    if (result < 0) {
      if (errno == EINTR) continue;
      if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL) {
        // The file system (or the kernel, before 4.14) cannot: this file is read on the
        // layer's thread from now on, and the caller stops trying.
        file->unsupported = 1;
        attempt_failed(2);
        return SQLITE_IOERR_READ;
      }
      // EAGAIN: not in the page cache; anything else: let the layer's thread read it and report.
      attempt_failed(1);
      return SQLITE_IOERR_READ;
    }
    if (result == 0) {
      // The end of the file, as the unix VFS answers it.
      memset((char *)buffer + done, 0, (size_t)(amount - done));
      return SQLITE_IOERR_SHORT_READ;
    }
    done += (int)result;
  }
  return SQLITE_OK;
#else
  (void)buffer;
  (void)amount;
  (void)offset;
  (void)file;
  attempt_failed(2);
  return SQLITE_IOERR_READ;
#endif
}

static int wrapped_read(sqlite3_file *file, void *buffer, int amount, sqlite3_int64 offset) {
  WrappedFile *wrapped = (WrappedFile *)file;
  if (nowait_active) return read_without_waiting(wrapped, buffer, amount, offset);
  held(wrapped->name);
  return INNER(file)->pMethods->xRead(INNER(file), buffer, amount, offset);
}

static int wrapped_close(sqlite3_file *file) { return INNER(file)->pMethods->xClose(INNER(file)); }

static int wrapped_write(sqlite3_file *file, const void *buffer, int amount, sqlite3_int64 offset) {
  return INNER(file)->pMethods->xWrite(INNER(file), buffer, amount, offset);
}

static int wrapped_truncate(sqlite3_file *file, sqlite3_int64 size) {
  return INNER(file)->pMethods->xTruncate(INNER(file), size);
}

static int wrapped_sync(sqlite3_file *file, int flags) { return INNER(file)->pMethods->xSync(INNER(file), flags); }

static int wrapped_file_size(sqlite3_file *file, sqlite3_int64 *size) {
  return INNER(file)->pMethods->xFileSize(INNER(file), size);
}

static int wrapped_lock(sqlite3_file *file, int level) { return INNER(file)->pMethods->xLock(INNER(file), level); }

static int wrapped_unlock(sqlite3_file *file, int level) {
  return INNER(file)->pMethods->xUnlock(INNER(file), level);
}

static int wrapped_check_reserved_lock(sqlite3_file *file, int *result) {
  return INNER(file)->pMethods->xCheckReservedLock(INNER(file), result);
}

static int wrapped_file_control(sqlite3_file *file, int operation, void *argument) {
  return INNER(file)->pMethods->xFileControl(INNER(file), operation, argument);
}

static int wrapped_sector_size(sqlite3_file *file) { return INNER(file)->pMethods->xSectorSize(INNER(file)); }

static int wrapped_device_characteristics(sqlite3_file *file) {
  return INNER(file)->pMethods->xDeviceCharacteristics(INNER(file));
}

static int wrapped_shm_map(sqlite3_file *file, int region, int size, int extend, void volatile **pointer) {
  return INNER(file)->pMethods->xShmMap(INNER(file), region, size, extend, pointer);
}

static int wrapped_shm_lock(sqlite3_file *file, int offset, int count, int flags) {
  return INNER(file)->pMethods->xShmLock(INNER(file), offset, count, flags);
}

static void wrapped_shm_barrier(sqlite3_file *file) {
  // The unix VFS's barrier also takes its process-wide lock, "for redundancy", which another
  // connection may hold across a close() or an fstat() that waits for its device: inside a
  // no-wait attempt, the fence alone.
  if (nowait_active) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return;
  }
  INNER(file)->pMethods->xShmBarrier(INNER(file));
}

static int wrapped_shm_unmap(sqlite3_file *file, int delete_flag) {
  return INNER(file)->pMethods->xShmUnmap(INNER(file), delete_flag);
}

static int wrapped_fetch(sqlite3_file *file, sqlite3_int64 offset, int amount, void **pointer) {
  // A memory-mapped page may fault in from the device: none inside a no-wait attempt (SQLite
  // reads the page with xRead instead).
  if (nowait_active) {
    *pointer = NULL;
    return SQLITE_OK;
  }
  return INNER(file)->pMethods->xFetch(INNER(file), offset, amount, pointer);
}

static int wrapped_unfetch(sqlite3_file *file, sqlite3_int64 offset, void *pointer) {
  return INNER(file)->pMethods->xUnfetch(INNER(file), offset, pointer);
}

/// The descriptor of a file the unix VFS opened, or -1.
///
/// The unix VFS keeps it right after three pointers (its methods, its VFS and its inode) in
/// every release since 2008. The value is used only when it is an open descriptor of the very
/// file named `name` (same device and inode), so a different layout can only turn reads
/// without waiting off, never read another file.
static int descriptor_of(sqlite3_file *inner, const char *name) {
#if defined(__linux__)
  if (name == NULL || inner_vfs->szOsFile < (int)(3 * sizeof(void *) + sizeof(int))) return -1;
  if (strcmp(inner_vfs->zName, "unix") != 0) return -1;
  int descriptor;
  memcpy(&descriptor, (char *)inner + 3 * sizeof(void *), sizeof descriptor);
  struct stat opened, named;
  if (descriptor < 0 || fstat(descriptor, &opened) != 0 || stat(name, &named) != 0) return -1;
  if (opened.st_dev != named.st_dev || opened.st_ino != named.st_ino) return -1;
  return descriptor;
#else
  (void)inner;
  (void)name;
  return -1;
#endif
}

/// Stops reads of `descriptor` from updating the file's access time, which on a file system
/// mounted `relatime` writes the inode (a journal transaction, which may wait) at the first read
/// after each change: reads that must not wait need it. Returns whether that worked (it needs
/// the file's owner, or CAP_FOWNER).
static int without_access_times(int descriptor) {
#if defined(__linux__) && defined(O_NOATIME)
  int flags = fcntl(descriptor, F_GETFL);
  if (flags < 0) return 0;
  if (flags & O_NOATIME) return 1;
  return fcntl(descriptor, F_SETFL, flags | O_NOATIME) == 0;
#else
  (void)descriptor;
  return 0;
#endif
}

static int wrapped_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags, int *out_flags) {
  (void)vfs;
  WrappedFile *wrapped = (WrappedFile *)file;
  wrapped->base.pMethods = NULL;
  wrapped->inner = (sqlite3_file *)(wrapped + 1);
  wrapped->descriptor = -1;
  wrapped->name = name;
  wrapped->unsupported = 0;
  int result = inner_vfs->xOpen(inner_vfs, name, wrapped->inner, flags, out_flags);
  // SQLite calls xClose on a file whose xOpen failed only if pMethods is set.
  if (wrapped->inner->pMethods == NULL) return result;
  int version = wrapped->inner->pMethods->iVersion;
  wrapped->base.pMethods = &wrapper_methods[(version < 1 ? 1 : version > 3 ? 3 : version) - 1];
  // Reads without waiting are for a read-only connection's files (see SQLiteReaders): its
  // database, and its WAL, which every connection opens read-write, so that WALs are prepared
  // alike. Their access times stop changing (nobody reads them).
  if (result == SQLITE_OK && (flags & (SQLITE_OPEN_READONLY | SQLITE_OPEN_WAL)) != 0) {
    int descriptor = descriptor_of(wrapped->inner, name);
    if (descriptor >= 0 && without_access_times(descriptor)) {
      wrapped->descriptor = descriptor;
    } else {
      // No descriptor to read (the unix VFS laid out otherwise), or one whose access time this
      // process may not keep: this file is never read without waiting.
      wrapped->unsupported = 1;
    }
  }
  return result;
}

static int wrapped_sleep(sqlite3_vfs *vfs, int microseconds) {
  (void)vfs;
  if (nowait_active) {
    attempt_failed(1);
    return 0;
  }
  return inner_vfs->xSleep(inner_vfs, microseconds);
}

static pthread_once_t registration = PTHREAD_ONCE_INIT;

static void register_vfs(void) {
  inner_vfs = sqlite3_vfs_find(NULL);
  wrapper_vfs = *inner_vfs;
  wrapper_vfs.pNext = NULL;
  wrapper_vfs.zName = "asynccache";
  // The wrapped file right after ours (`WrappedFile` ends on a pointer's alignment).
  wrapper_vfs.szOsFile = (int)sizeof(WrappedFile) + inner_vfs->szOsFile;
  wrapper_vfs.xOpen = wrapped_open;
  wrapper_vfs.xSleep = wrapped_sleep;

  for (int index = 0; index < 3; index++) {
    sqlite3_io_methods *methods = &wrapper_methods[index];
    methods->iVersion = index + 1;
    methods->xClose = wrapped_close;
    methods->xRead = wrapped_read;
    methods->xWrite = wrapped_write;
    methods->xTruncate = wrapped_truncate;
    methods->xSync = wrapped_sync;
    methods->xFileSize = wrapped_file_size;
    methods->xLock = wrapped_lock;
    methods->xUnlock = wrapped_unlock;
    methods->xCheckReservedLock = wrapped_check_reserved_lock;
    methods->xFileControl = wrapped_file_control;
    methods->xSectorSize = wrapped_sector_size;
    methods->xDeviceCharacteristics = wrapped_device_characteristics;
    if (methods->iVersion >= 2) {
      methods->xShmMap = wrapped_shm_map;
      methods->xShmLock = wrapped_shm_lock;
      methods->xShmBarrier = wrapped_shm_barrier;
      methods->xShmUnmap = wrapped_shm_unmap;
    }
    if (methods->iVersion >= 3) {
      methods->xFetch = wrapped_fetch;
      methods->xUnfetch = wrapped_unfetch;
    }
  }
  sqlite3_vfs_register(&wrapper_vfs, 0);
}

const char *asynccache_sqlite_vfs_name(void) {
  pthread_once(&registration, register_vfs);
  return wrapper_vfs.zName;
}
