#ifndef C_ASYNC_CACHE_SHIMS_H
#define C_ASYNC_CACHE_SHIMS_H

/// Asks the processor to bring the cache line at `address` in, for a write soon, without waiting
/// for it: a hint that never faults and never orders memory (a fence or a locked instruction
/// does not wait for it), so a lookup can start the miss of a later write and let the lock go
/// at once. A no-op where the compiler has no prefetch builtin.
static inline __attribute__((always_inline)) void async_cache_prefetch_for_write(const void *address) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address, 1, 3);
#else
  (void)address;
#endif
}

/// Asks the processor to bring the cache line at `address` in, for a read soon; a hint like
/// ``async_cache_prefetch_for_write``, and like it safe on any address, even one freed since.
static inline __attribute__((always_inline)) void async_cache_prefetch(const void *address) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address, 0, 3);
#else
  (void)address;
#endif
}

/// Tells the processor that this thread spins on a lock (x86 `pause`, arm64 `yield`), so that it
/// yields its core's resources to a sibling hyperthread and leaves the spin loop sooner when the
/// lock word changes. Nothing elsewhere.
static inline __attribute__((always_inline)) void async_cache_spin_hint(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

#if defined(__linux__)
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

// 32-bit targets with 64-bit time only (riscv32) name the call futex_time64; without a timeout
// it is the same call.
#if !defined(SYS_futex) && defined(SYS_futex_time64)
#define SYS_futex SYS_futex_time64
#endif

/// Sleeps while the 32-bit word at `address` holds `expected` (or until a wake, or a signal):
/// `futex(FUTEX_WAIT_PRIVATE)`, which Swift cannot call (`syscall` is variadic). Returns at once
/// when the word holds anything else. The caller rechecks the word either way.
static inline __attribute__((always_inline)) void async_cache_futex_wait(uint32_t *address, uint32_t expected) {
  syscall(SYS_futex, address, FUTEX_WAIT_PRIVATE, expected, (void *)0, (void *)0, 0);
}

/// Wakes one thread sleeping in ``async_cache_futex_wait`` on `address`, if any.
static inline __attribute__((always_inline)) void async_cache_futex_wake_one(uint32_t *address) {
  syscall(SYS_futex, address, FUTEX_WAKE_PRIVATE, 1, (void *)0, (void *)0, 0);
}

#include <errno.h>
#include <sys/resource.h>

/// Asks the scheduler for time slices of `nanoseconds` for the calling thread, which keeps its
/// policy (`SCHED_FLAG_KEEP_POLICY`: normal, batch or idle) and its nice value: with the EEVDF
/// scheduler (Linux 6.12 and later) a thread with a short slice gets an earlier deadline, so
/// that it runs soon after it wakes rather than after the compute threads' slices.
/// Unprivileged. Returns 0, or -1 with `errno` (a real-time thread, a kernel before 5.3 or a
/// seccomp filter refuses it, and nothing changes; kernels before 6.12 ignore the slice).
static inline int async_cache_request_slice(uint64_t nanoseconds) {
#if defined(SYS_sched_setattr)
  struct {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
  } attributes = {0};
  attributes.size = sizeof(attributes);
  attributes.sched_policy = 0;  // SCHED_OTHER, unless the flag below keeps the thread's own
  attributes.sched_flags = 0x08;  // SCHED_FLAG_KEEP_POLICY
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, 0);
  if (nice == -1 && errno != 0) return -1;
  attributes.sched_nice = nice;
  attributes.sched_runtime = nanoseconds;
  return (int)syscall(SYS_sched_setattr, 0, &attributes, 0);
#else
  (void)nanoseconds;
  return -1;
#endif
}
#endif

#if defined(__linux__)
#include <sys/prctl.h>

/// Names the calling thread, as `top -H`, `ps -L`, gdb, perf and `/proc/<pid>/task/*/comm` show
/// it: `prctl(PR_SET_NAME)`, which Swift cannot call (`prctl` is variadic). The kernel keeps the
/// first 15 bytes of `name`. Returns 0, or -1 with `errno`.
static inline int async_cache_name_this_thread(const char *name) {
  return prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}
#endif

#if defined(__linux__)
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

// glibc defines O_NOATIME only with _GNU_SOURCE (always as __O_NOATIME); musl and bionic
// define it plainly.
#if defined(O_NOATIME)
#define ASYNC_CACHE_O_NOATIME O_NOATIME
#else
#define ASYNC_CACHE_O_NOATIME __O_NOATIME
#endif

/// Opens `path` read-only, but only if every component of it is in the kernel's lookup caches
/// (`openat2` with `RESOLVE_CACHED`, Linux 5.12 and later), so that opening never waits for a
/// device; and with `O_NOATIME`, so that reading it does not write its inode (with `relatime`,
/// the first read after a change would, in a journal transaction that may wait). Returns the
/// descriptor, or `-errno`: `-ENOENT` when the file is known not to exist, `-EAGAIN` when a
/// lookup would need the device (or a network file system's revalidation), `-ENOSYS` or
/// `-EINVAL` on a kernel without it, `-EPERM` for a file the process does not own (or where a
/// seccomp filter refuses the call).
static inline int async_cache_open_cached(const char *path) {
#if defined(SYS_openat2)
  struct {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
  } how = {(uint64_t)(O_RDONLY | O_CLOEXEC | ASYNC_CACHE_O_NOATIME), 0, 0x20 /* RESOLVE_CACHED */};
  long result = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
  return result < 0 ? -errno : (int)result;
#else
  (void)path;
  return -ENOSYS;
#endif
}

#include <sys/vfs.h>

/// Whether the file system that holds `path` is one whose reads from memory (the page cache)
/// never wait: a local one on a block device, or in memory. Network and FUSE file systems are
/// not, even when a read is cached: opening and closing a file, or taking a lock, asks a server
/// or a daemon there. 1 or 0 (0 when `statfs` fails).
static inline int async_cache_file_system_is_local(const char *path) {
  struct statfs info;
  if (statfs(path, &info) != 0) return 0;
  switch ((unsigned long)info.f_type) {
  case 0xEF53UL:      // ext2, ext3, ext4
  case 0x58465342UL:  // xfs
  case 0x9123683EUL:  // btrfs
  case 0xF2F52010UL:  // f2fs
  case 0x01021994UL:  // tmpfs
  case 0x858458F6UL:  // ramfs
  case 0x794C7630UL:  // overlayfs (containers), over a local file system
  case 0x2FC12FC1UL:  // zfs
  case 0xCA451A4EUL:  // bcachefs
  case 0x3153464AUL:  // jfs
    return 1;
  default:
    return 0;
  }
}

/// Reads up to `count` bytes at `offset` from the page cache only (`preadv2` with
/// `RWF_NOWAIT`), never waiting for the device. Returns the bytes read (0 at the end of the
/// file, fewer than asked when the rest is not in memory), or `-errno`: `-EAGAIN` when none of
/// them is in memory, `-EOPNOTSUPP` or `-ENOSYS` where the file system or kernel cannot.
static inline long async_cache_read_cached(int descriptor, void *buffer, size_t count, int64_t offset) {
#if defined(SYS_preadv2)
  struct iovec vector = {buffer, count};
  // The offset as the kernel takes it: low and high halves of a long each (the high one is 0
  // where a long has 64 bits).
  unsigned long low = (unsigned long)(uint64_t)offset;
  unsigned long high = (unsigned long)(((uint64_t)offset >> (sizeof(long) * 4)) >> (sizeof(long) * 4));
  long result = syscall(SYS_preadv2, descriptor, &vector, 1, low, high, 0x00000008 /* RWF_NOWAIT */);
  return result < 0 ? -errno : result;
#else
  (void)descriptor;
  (void)buffer;
  (void)count;
  (void)offset;
  return -ENOSYS;
#endif
}
#endif

#if defined(__linux__)
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

// glibc defines POLLRDHUP (the peer closed its end; Linux 2.6.17 and later) only with
// _GNU_SOURCE.
#if defined(POLLRDHUP)
#define ASYNC_CACHE_POLLRDHUP POLLRDHUP
#elif defined(__sparc__)
#define ASYNC_CACHE_POLLRDHUP 0x800
#else
#define ASYNC_CACHE_POLLRDHUP 0x2000
#endif

/// Waits at most `nanoseconds` for `descriptor` to have bytes to read (or to close or fail):
/// `ppoll`, whose time limit is finer than `poll`'s milliseconds, which glibc declares only
/// with `_GNU_SOURCE`. Returns 1 when it has, 0 when the time ran out, or `-errno` (`-EINTR`
/// after a signal). Returns `-ENOSYS` where the kernel's `ppoll` takes a 64-bit time only
/// (32-bit targets without the old call).
static inline int async_cache_wait_readable(int descriptor, int64_t nanoseconds) {
#if defined(SYS_ppoll)
  // The call's own time layout (`__kernel_old_timespec`: two kernel longs, 64-bit on x32), whatever
  // `time_t` the C library was built with.
#if defined(__x86_64__) && defined(__ILP32__)
  typedef long long kernel_long;
#else
  typedef long kernel_long;
#endif
  struct {
    kernel_long seconds;
    kernel_long nanoseconds;
  } limit = {(kernel_long)(nanoseconds / 1000000000), (kernel_long)(nanoseconds % 1000000000)};
  struct pollfd entry = {descriptor, POLLIN, 0};
  long result = syscall(SYS_ppoll, &entry, 1UL, &limit, (void *)0, (size_t)0);
  return result < 0 ? -errno : (int)result;
#else
  (void)descriptor;
  (void)nanoseconds;
  return -ENOSYS;
#endif
}
#endif

#if defined(__APPLE__)
#include <mach/mach_init.h>

/// This task's port, for `task_info`: what `mach_task_self()` returns. Swift cannot call that
/// macro, and the global it reads, `mach_task_self_`, is a mutable variable to Swift 6, which
/// older SDKs do not mark safe to read from any thread (it is set once, before `main`).
static inline __attribute__((always_inline)) mach_port_t async_cache_mach_task_self(void) {
  return mach_task_self();
}
#endif

#endif
