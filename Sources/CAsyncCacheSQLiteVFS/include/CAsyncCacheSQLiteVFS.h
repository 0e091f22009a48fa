// A SQLite VFS that wraps the system's default one (unix) for the connections of SQLiteLayer.
//
// It forwards every call, with two exceptions:
// - On a thread inside asynccache_sqlite_nowait_begin/end, a read is answered only from the
//   kernel's page cache (Linux preadv2 with RWF_NOWAIT). A read that would wait for the device
//   fails at once with SQLITE_IOERR_READ, and a sleep (SQLite's retry of a busy shared-memory
//   lock) returns at once; either marks the thread's attempt as one that must be done elsewhere.
//   That lets a read that can be answered from memory run on the caller's thread (a thread of
//   Swift's cooperative pool) and every other read go to the layer's own thread.
// - For tests, reads of chosen files can be held, as a slow device would hold them.
#ifndef C_ASYNC_CACHE_SQLITE_VFS_H
#define C_ASYNC_CACHE_SQLITE_VFS_H

#include <sqlite3.h>

/// The name of the VFS, registered (not as the default) on the first call. Thread-safe.
const char *asynccache_sqlite_vfs_name(void);

/// 1 where reads can be answered from the page cache without waiting (Linux), 0 elsewhere.
int asynccache_sqlite_can_read_without_waiting(void);

/// Starts an attempt on this thread in which reads must not wait for the device.
void asynccache_sqlite_nowait_begin(void);

/// Ends the attempt; returns 0 when nothing would have waited, 1 when a read (or a sleep)
/// would have (and failed), 2 when a file's system or the kernel cannot read without waiting
/// (the attempt failed, and that file's later attempts fail at once).
int asynccache_sqlite_nowait_end(void);

/// Test seam: reads of files whose path starts with `path_prefix` wait until released, as on a
/// slow device (at most 16 prefixes at a time; returns 0 when there is no room). Reads inside
/// a no-wait attempt fail as would-block instead.
int asynccache_sqlite_hold_reads(const char *path_prefix);

/// Releases the reads held for `path_prefix`.
void asynccache_sqlite_release_reads(const char *path_prefix);

/// How many reads of files under `path_prefix` are waiting now.
int asynccache_sqlite_held_reads(const char *path_prefix);

/// Blocks the calling thread until `count` reads of files under `path_prefix` wait, or
/// `timeout_milliseconds` pass; returns 1 when they wait.
int asynccache_sqlite_wait_for_held_reads(const char *path_prefix, int count, int timeout_milliseconds);

#endif
