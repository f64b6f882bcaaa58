/* A file system without flock, for one process tree: LD_PRELOAD=no_flock.so makes every flock()
 * fail with ENOSYS, as Lustre mounted without -o flock answers (tests/test_no_flock.py builds it). */
#include <errno.h>

int flock(int fd, int operation) {
    (void)fd;
    (void)operation;
    errno = ENOSYS;
    return -1;
}
