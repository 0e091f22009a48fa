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
