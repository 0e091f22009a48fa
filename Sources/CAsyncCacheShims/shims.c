// The shims are static inline functions in include/CAsyncCacheShims.h; a C target needs one
// source file.
#include "CAsyncCacheShims.h"
