#ifndef CSBBENCH_LINUX_H
#define CSBBENCH_LINUX_H

#include <stdint.h>

// What sbbench's fan-out reader needs from Linux that the Glibc module does not bring: epoll, and naming a thread.
// Thin wrappers, so that no system type leaks into Swift through this module.

/// epoll_create1(EPOLL_CLOEXEC).
int csbbench_epoll_create(void);

/// Watches `fd` for input (EPOLLIN, edge-triggered), reported as `token`; 0, or -1 with errno.
int csbbench_epoll_add(int epoll, int fd, uint64_t token);

/// Stops watching `fd`; 0, or -1 with errno.
int csbbench_epoll_remove(int epoll, int fd);

/// epoll_wait for at most `capacity` (up to 1024) ready descriptors, `timeout_ms`; writes their tokens to `tokens` and
/// returns how many, or -1 with errno.
int csbbench_epoll_wait(int epoll, uint64_t *tokens, int capacity, int timeout_ms);

/// Names the calling thread (pthread_setname_np, a GNU extension); 0 or an error number.
int csbbench_name_thread(const char *name);

#endif
