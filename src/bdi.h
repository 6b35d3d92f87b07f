/*
 * The kernel's read-ahead window of a mounted filesystem (its backing device info,
 * /sys/class/bdi/MAJ:MIN/read_ahead_kb). A FUSE mount starts with the kernel's default of
 * 128 KiB, so buffered reads of a block arrive as 128 KiB requests; a larger window lets the
 * kernel ask for up to max_pages (1 MiB) per request and keep several in flight.
 */
#ifndef UCM_BDI_H
#define UCM_BDI_H

#include <stddef.h>
#include <stdint.h>

/*
 * Set the read-ahead window of the filesystem mounted at mountpoint (the most recent mount
 * there, found in mountinfo without touching the mount itself, so it works before the
 * daemon serves requests). bytes is rounded down to KiB. 0, or -errno with a one-line
 * reason in err.
 */
int bdi_set_readahead(const char *mountpoint, uint64_t bytes, char *err, size_t errlen);

/* The device "MAJ:MIN" of the most recent mount at mountpoint, from mountinfo (a file in
 * that format, normally /proc/self/mountinfo). 0 or -ENOENT / -errno. */
int bdi_mount_device(const char *mountinfo, const char *mountpoint, char *dev, size_t devlen);

#endif
