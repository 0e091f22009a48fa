// The little a freestanding Embedded Swift program needs on wasm32, for .ci/check-32bit: memory
// (a bump allocator that never frees: the check is short), the C string functions the compiler
// calls, output through WASI's fd_write, and the entry point. Nothing here is part of the package.

typedef unsigned long size_t;
typedef struct {
  const void *buffer;
  size_t length;
} wasi_iovec;

__attribute__((import_module("wasi_snapshot_preview1"), import_name("fd_write")))
int wasi_fd_write(int fd, const wasi_iovec *vectors, size_t count, size_t *written);
__attribute__((import_module("wasi_snapshot_preview1"), import_name("proc_exit")))
_Noreturn void wasi_proc_exit(int code);

int putchar(int c) {
  char byte = (char)c;
  wasi_iovec vector = {&byte, 1};
  size_t written;
  wasi_fd_write(1, &vector, 1, &written);
  return c;
}

void *memset(void *destination, int c, size_t n) {
  unsigned char *d = destination;
  while (n--) *d++ = (unsigned char)c;
  return destination;
}

void *memcpy(void *destination, const void *source, size_t n) {
  unsigned char *d = destination;
  const unsigned char *s = source;
  while (n--) *d++ = *s++;
  return destination;
}

void *memmove(void *destination, const void *source, size_t n) {
  unsigned char *d = destination;
  const unsigned char *s = source;
  if (d < s) {
    while (n--) *d++ = *s++;
  } else {
    d += n;
    s += n;
    while (n--) *--d = *--s;
  }
  return destination;
}

int memcmp(const void *a, const void *b, size_t n) {
  const unsigned char *p = a, *q = b;
  for (; n; n--, p++, q++)
    if (*p != *q) return *p - *q;
  return 0;
}

size_t strlen(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

extern unsigned char __heap_base;
static unsigned long heap_top;

int posix_memalign(void **result, size_t alignment, size_t size) {
  if (!heap_top) heap_top = (unsigned long)&__heap_base;
  if (alignment < 16) alignment = 16;
  unsigned long start = (heap_top + alignment - 1) & ~(unsigned long)(alignment - 1);
  unsigned long end = start + size;
  unsigned long available = __builtin_wasm_memory_size(0) * 65536ul;
  if (end > available && __builtin_wasm_memory_grow(0, (end - available + 65535) / 65536) == (size_t)-1) return 12;
  heap_top = end;
  *result = (void *)start;
  return 0;
}

void *malloc(size_t size) {
  void *result;
  return posix_memalign(&result, 16, size) ? 0 : result;
}

void *calloc(size_t count, size_t size) {
  void *result = malloc(count * size);
  if (result) memset(result, 0, count * size);
  return result;
}

void free(void *pointer) { (void)pointer; }

// Hashing seeds: any fixed bytes make the run repeatable.
void arc4random_buf(void *buffer, size_t n) { memset(buffer, 7, n); }

// `Double.rounded()` (the hit-ratio curve's capacities): halfway cases away from zero, as C's.
// Values past 2^52 are whole already; the others fit a long long.
double round(double x) {
  if (!(x == x) || x >= 4503599627370496.0 || x <= -4503599627370496.0) return x;
  double whole = (double)(long long)x;  // towards zero
  double rest = x - whole;
  if (rest >= 0.5) return whole + 1.0;
  if (rest <= -0.5) return whole - 1.0;
  return whole;
}

_Noreturn void abort(void) { wasi_proc_exit(134); }

unsigned long __stack_chk_guard = 0x5eed5eed;
_Noreturn void __stack_chk_fail(void) { wasi_proc_exit(135); }

extern int run(void);
void _start(void) { wasi_proc_exit(run()); }
