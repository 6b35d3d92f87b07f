/*
 * Disk IO engines (-o io=): how the disk tier's reads of stored bytes reach the disk.
 *
 *   psync  pread() in the calling thread, through the page cache.
 *   aio    Linux native AIO (libaio) on O_DIRECT descriptors: no copy into the page cache,
 *          a request of many segments submitted at once, at most `depth` segments of all
 *          requests in flight, one completion thread, and a bounded wait. See tiers/io.c.
 *
 * Writes: aio writes aligned pieces O_DIRECT through the same queue (io_pwrite); the disk
 * tier stages the rest (tiers/posix.c).
 */
#ifndef UCM_IO_H
#define UCM_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IO_ALIGN 4096u       /* O_DIRECT alignment of memory, offsets and lengths */
#define IO_SEG (1u << 20)    /* the largest single read of a request */
#define IO_WSEG (4u << 20)   /* the largest single write of a request (tiers/io.c) */

struct io_config {
	bool aio;               /* false: psync */
	unsigned depth;         /* aio: segments in flight, all requests together (>= 1) */
	int64_t timeout_ns;     /* aio: a request not done by then fails -EIO; 0 = no limit */
	int64_t test_stall_ns;  /* tests only: the completion thread sleeps this long before
				   it looks at each batch of completions (a slow device) */
};

struct io_engine;
struct metrics;

/* pread()/pwrite() until len bytes are done (a read stops early at the end of the file),
 * retrying EINTR. Bytes done or -errno. */
ssize_t io_pread_full(int fd, void *buf, size_t len, uint64_t off);
ssize_t io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/* 0, or -errno (io_setup failed: the caller may fall back to psync). */
int io_engine_create(const struct io_config *c, struct io_engine **out);

/* Waits for every IO in flight (abandoned ones too, up to one timeout), then frees. */
void io_engine_destroy(struct io_engine *e);

/* Whether descriptors read through e should be opened O_DIRECT. */
bool io_engine_direct(const struct io_engine *e);

/*
 * Read up to len bytes at off, as many as the file holds (short only at its end). fd must be
 * O_DIRECT when io_engine_direct(e). Any buffer, offset and length: unaligned parts go
 * through the engine's own aligned memory. Bytes read, or -EIO (also on timeout), -ENOMEM.
 */
ssize_t io_pread(struct io_engine *e, int fd, void *buf, size_t len, uint64_t off);

struct io_req;

/*
 * Prefetch: start reading [off, off + len) of fd into the engine's memory as a background
 * request (as much as the depth allows now; the rest as IOs in flight complete, or when it
 * is waited for, so fd stays open until io_prefetch_drop()). NULL if the engine does not
 * prefetch (psync) or is out of memory: then just read.
 */
struct io_req *io_prefetch(struct io_engine *e, int fd, uint64_t off, size_t len);
/* Wait until the first `want` bytes of a prefetch are in (or all it will read). Bytes read
 * from off so far (at least want, unless the file is shorter), *bytes pointing at them
 * (valid until dropped), or -EIO (then for good). Several threads may wait for one prefetch
 * at once (none after it is dropped). */
ssize_t io_prefetch_wait(struct io_engine *e, struct io_req *r, size_t want, const char **bytes);
/* Give a prefetch back, waited for or not (NULL is fine). */
void io_prefetch_drop(struct io_engine *e, struct io_req *r);

/*
 * Mark the calling thread's reads as background (prefetch nobody waits for yet): they use
 * smaller segments, at most half the depth, and none while a foreground read waits.
 */
void io_set_background(bool on);

/*
 * Write len bytes at off. psync: pwrite. aio: buf, off and len must be multiples of IO_ALIGN
 * (else -EINVAL) and fd O_DIRECT. Bytes written, -ENOSPC (or -EDQUOT), -EIO (also on
 * timeout), -ENOMEM.
 */
ssize_t io_pwrite(struct io_engine *e, int fd, const void *buf, size_t len, uint64_t off);

/*
 * Start writing len bytes at off without waiting (as io_pwrite: aligned, O_DIRECT fd); buf
 * must stay as it is, and fd open, until io_write_wait(): what the depth does not take now
 * is submitted by the wait, with this fd number. NULL if the engine does not (psync,
 * unaligned, out of memory): then write with io_pwrite().
 */
struct io_req *io_write_start(struct io_engine *e, int fd, const void *buf, size_t len,
			      uint64_t off);
/* Wait for a write started by io_write_start() and give it back: as io_pwrite(). */
ssize_t io_write_wait(struct io_engine *e, struct io_req *r);

/* IO_ALIGN-aligned memory of at least len bytes for a caller's direct IO, from the engine's
 * pool (a reused buffer's pages are already faulted in), or NULL; give it back to the same
 * engine with io_buf_put(e, p, len). */
void *io_buf_get(struct io_engine *e, size_t len);
void io_buf_put(struct io_engine *e, void *p, size_t len);

/* Samples of e under `labels` (a Prometheus label list, e.g. store="/x"). */
void io_engine_metrics(struct io_engine *e, struct metrics *m, const char *labels);

struct io_stats {
	uint64_t requests, segments, bytes, errors, timeouts, inflight;
	uint64_t writes, wbytes, werrors;
};
void io_engine_stats(struct io_engine *e, struct io_stats *out);

/*
 * Whether files in directory dir can be read O_DIRECT: a probe file is created, written and
 * read back with O_DIRECT, and removed. 0 if they can, else the -errno that refused it.
 */
int io_probe_direct(const char *dir, const char *tag);

#endif
