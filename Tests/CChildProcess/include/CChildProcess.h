#ifndef C_CHILD_PROCESS_H
#define C_CHILD_PROCESS_H

#if defined(__linux__)
#include <spawn.h>

/// Adds to `actions` the closing of every file descriptor from `lowest` up, in the child, after
/// the actions added before it (the `dup2`s of its standard streams): glibc's
/// `posix_spawn_file_actions_addclosefrom_np`, which Swift's Glibc module does not declare (it
/// is a GNU extension). Returns 0, an error number, or `ENOSYS` where glibc is older than 2.34.
int child_process_add_close_from(posix_spawn_file_actions_t *actions, int lowest);
#endif

#endif
