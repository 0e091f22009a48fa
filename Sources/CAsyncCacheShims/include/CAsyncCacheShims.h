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

#endif
