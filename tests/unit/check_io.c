/*
 * The disk IO engines (tiers/io.c): every alignment of buffer, offset and length reads what
 * pread reads; a read the device does not finish in time fails EIO, is counted, leaves the
 * caller's memory alone, and the engine goes on serving.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "src/clock.h"
#include "tests/unit/unit.h"
#include "tiers/io.h"

#define FILE_LEN (3 * IO_SEG + 12345) /* several segments, and a last page read short */

struct iofix {
	char dir[4096], path[4200];
	int fd, dfd;   /* buffered, O_DIRECT */
	char *want;    /* the file's bytes */
};

static void fix_open(struct iofix *f)
{
	uint64_t st = 42;

	ut_mkdtemp(f->dir, sizeof(f->dir));
	ck_assert_int_eq(io_probe_direct(f->dir, "test"), 0);
	snprintf(f->path, sizeof(f->path), "%s/f", f->dir);
	f->fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(f->fd, 0);
	f->want = malloc(FILE_LEN);
	for (size_t i = 0; i < FILE_LEN; i += 8) {
		uint64_t v = ut_rand(&st);

		memcpy(f->want + i, &v, FILE_LEN - i < 8 ? FILE_LEN - i : 8);
	}
	ck_assert_int_eq(io_pwrite_full(f->fd, f->want, FILE_LEN, 0), FILE_LEN);
	ck_assert_int_eq(fsync(f->fd), 0);
	f->dfd = open(f->path, O_RDONLY | O_DIRECT);
	ck_assert_int_ge(f->dfd, 0);
}

static void fix_close(struct iofix *f)
{
	close(f->fd);
	close(f->dfd);
	free(f->want);
}

static struct io_engine *engine(bool aio, unsigned depth, int64_t timeout_ns, int64_t stall_ns)
{
	struct io_config c = { .aio = aio, .depth = depth, .timeout_ns = timeout_ns,
			       .test_stall_ns = stall_ns };
	struct io_engine *e = NULL;

	ck_assert_int_eq(io_engine_create(&c, &e), 0);
	ck_assert(io_engine_direct(e) == aio);
	return e;
}

/* Read [off, off + len) into memory at misalign bytes past a page and compare. */
static void check_read(struct io_engine *e, struct iofix *f, int fd, uint64_t off, size_t len,
		       size_t misalign)
{
	size_t room = len + misalign + IO_ALIGN;
	char *mem = aligned_alloc(IO_ALIGN, (room + IO_ALIGN - 1) / IO_ALIGN * IO_ALIGN);
	size_t expect = off >= FILE_LEN ? 0 : (FILE_LEN - off < len ? FILE_LEN - off : len);
	ssize_t n;

	memset(mem, 0xee, room);
	n = io_pread(e, fd, mem + misalign, len, off);
	UT_CHECK(n == (ssize_t)expect, "read of %zu at %llu (+%zu): %zd, want %zu", len,
		 (unsigned long long)off, misalign, n, expect);
	UT_CHECK(memcmp(mem + misalign, f->want + off, expect) == 0,
		 "read of %zu at %llu (+%zu): wrong bytes", len, (unsigned long long)off, misalign);
	/* nothing written past what was asked for */
	for (size_t i = misalign + len; i < room; i++)
		UT_CHECK((unsigned char)mem[i] == 0xee, "byte %zu past a read of %zu at %llu",
			 i - misalign - len, len, (unsigned long long)off);
	for (size_t i = 0; i < misalign; i++)
		UT_CHECK((unsigned char)mem[i] == 0xee, "byte before a read at +%zu", misalign);
	free(mem);
}

static void every_alignment(bool aio, unsigned depth)
{
	static const uint64_t offs[] = { 0, 1, 4095, 4096, 8191, IO_SEG - 1, IO_SEG, IO_SEG + 4096,
					 FILE_LEN - 4096, FILE_LEN - 1, FILE_LEN, FILE_LEN + 9 };
	static const size_t lens[] = { 1, 100, 4095, 4096, 4097, 65536, IO_SEG, IO_SEG + 1,
				       2 * IO_SEG + 8192, FILE_LEN };
	static const size_t mis[] = { 0, 1, 512, 4095 };
	struct iofix f;
	struct io_engine *e = engine(aio, depth, 10 * 1000000000LL, 0);
	struct io_stats s;

	fix_open(&f);
	for (size_t a = 0; a < sizeof(offs) / sizeof(offs[0]); a++)
		for (size_t b = 0; b < sizeof(lens) / sizeof(lens[0]); b++)
			for (size_t c = 0; c < sizeof(mis) / sizeof(mis[0]); c++)
				check_read(e, &f, aio ? f.dfd : f.fd, offs[a], lens[b], mis[c]);
	io_engine_stats(e, &s);
	ck_assert_uint_eq(s.errors, 0);
	ck_assert_uint_eq(s.timeouts, 0);
	ck_assert_uint_eq(s.inflight, 0);
	if (aio) {
		ck_assert_uint_gt(s.requests, 0);
		ck_assert_uint_ge(s.segments, s.requests);
	}
	io_engine_destroy(e);
	fix_close(&f);
}

/* The disk tier's write stages come from the engine's pool: aligned, and a buffer given back
 * is the one handed out next (its pages stay faulted in); more than the pool keeps are freed
 * (a leak shows under ASan). */
START_TEST(test_io_buf_pool)
{
	struct io_engine *e = engine(true, 16, 0, 0);
	void *b[20];

	for (int i = 0; i < 20; i++) {
		b[i] = io_buf_get(e, 1u << 20);
		ck_assert_ptr_nonnull(b[i]);
		ck_assert_uint_eq((uintptr_t)b[i] % IO_ALIGN, 0);
		memset(b[i], i, 1u << 20);
	}
	io_buf_put(e, b[7], 1u << 20);
	ck_assert_ptr_eq(io_buf_get(e, 1u << 20), b[7]);
	for (int i = 0; i < 20; i++)
		io_buf_put(e, b[i], 1u << 20);
	b[0] = io_buf_get(e, 3u << 20); /* a size between classes: from the 4 MiB one */
	ck_assert_ptr_nonnull(b[0]);
	memset(b[0], 1, 3u << 20);
	io_buf_put(e, b[0], 3u << 20);
	io_engine_destroy(e);
}
END_TEST

START_TEST(test_io_psync_reads)
{
	every_alignment(false, 1);
}
END_TEST

START_TEST(test_io_aio_reads)
{
	every_alignment(true, 16);
}
END_TEST

/* a depth smaller than a request's segments: submitted in waves */
START_TEST(test_io_aio_shallow)
{
	every_alignment(true, 1);
}
END_TEST

/* reads from several threads at once share the depth */
struct par {
	struct io_engine *e;
	struct iofix *f;
	int seed;
};

static void *par_reader(void *arg)
{
	struct par *p = arg;
	uint64_t st = (uint64_t)p->seed;

	for (int i = 0; i < 200; i++) {
		uint64_t off = ut_rand(&st) % FILE_LEN;
		size_t len = 1 + ut_rand(&st) % (2 * IO_SEG);

		if (i % 3 == 0)
			off &= ~(uint64_t)(IO_ALIGN - 1);
		check_read(p->e, p->f, p->f->dfd, off, len, i % 2 ? 0 : 100);
	}
	return NULL;
}

START_TEST(test_io_aio_parallel)
{
	struct iofix f;
	struct io_engine *e = engine(true, 3, 10 * 1000000000LL, 0);
	struct par ps[4];
	pthread_t th[4];

	fix_open(&f);
	for (int i = 0; i < 4; i++) {
		ps[i] = (struct par){ e, &f, i + 1 };
		ck_assert_int_eq(pthread_create(&th[i], NULL, par_reader, &ps[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	io_engine_destroy(e);
	fix_close(&f);
}
END_TEST

/*
 * Writes of several IO_WSEG segments, from the engine's huge-page memory, in either class and
 * with a foreground read running at the same time, land whole: read back they are what was
 * written, at every depth (a depth of 1 takes the segments one after the other).
 */
struct rd_loop {
	struct io_engine *e;
	struct iofix *f;
	atomic_int stop;
};

static void *rd_loop_main(void *arg)
{
	struct rd_loop *l = arg;

	while (!atomic_load(&l->stop))
		check_read(l->e, l->f, l->f->dfd, 0, 2 * IO_SEG, 0);
	return NULL;
}

START_TEST(test_io_aio_writes)
{
	size_t len = 2 * IO_WSEG + 3 * IO_ALIGN;
	unsigned depths[] = { 1, 16 };
	uint64_t st = 9;

	for (unsigned d = 0; d < 2; d++) {
		struct iofix f;
		struct io_engine *e = engine(true, depths[d], 10 * 1000000000LL, 0);
		char *buf = io_buf_get(e, len), *back = malloc(len);
		struct rd_loop l = { .e = e, .f = &f };
		char wpath[4300];
		pthread_t th;
		int wfd, rfd;

		fix_open(&f);
		ck_assert_ptr_nonnull(buf);
		ck_assert_ptr_nonnull(back);
		snprintf(wpath, sizeof(wpath), "%s/w", f.dir);
		wfd = open(wpath, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
		ck_assert_int_ge(wfd, 0);
		ck_assert_int_eq(pthread_create(&th, NULL, rd_loop_main, &l), 0);
		for (int bg = 0; bg < 2; bg++) {
			struct io_req *r;

			for (size_t i = 0; i < len; i += 8) {
				uint64_t v = ut_rand(&st);

				memcpy(buf + i, &v, 8);
			}
			io_set_background(bg);
			if (bg) {
				r = io_write_start(e, wfd, buf, len, IO_ALIGN);
				ck_assert_ptr_nonnull(r);
				ck_assert_int_eq(io_write_wait(e, r), (ssize_t)len);
			} else {
				ck_assert_int_eq(io_pwrite(e, wfd, buf, len, IO_ALIGN), (ssize_t)len);
			}
			io_set_background(false);
			rfd = open(wpath, O_RDONLY); /* through the page cache */
			ck_assert_int_ge(rfd, 0);
			ck_assert_int_eq(io_pread_full(rfd, back, len, IO_ALIGN), (ssize_t)len);
			close(rfd);
			ck_assert_msg(memcmp(back, buf, len) == 0,
				      "depth %u, %s: the bytes read back differ", depths[d],
				      bg ? "background" : "foreground");
		}
		atomic_store(&l.stop, 1);
		pthread_join(th, NULL);
		close(wfd);
		io_buf_put(e, buf, len);
		free(back);
		io_engine_destroy(e);
		fix_close(&f);
	}
}
END_TEST

/* A device slower than io_timeout: EIO, counted; the caller's memory is its own again. */
START_TEST(test_io_aio_timeout)
{
	struct iofix f;
	struct io_engine *e = engine(true, 8, 50 * 1000000LL, 400 * 1000000LL);
	size_t len = 2 * IO_SEG;
	char *direct = aligned_alloc(IO_ALIGN, len), *odd = malloc(100);
	struct io_stats s;
	int64_t t0;

	fix_open(&f);
	/* straight into the caller's pages */
	memset(direct, 0x11, len);
	t0 = mono_ns();
	ck_assert_int_eq(io_pread(e, f.dfd, direct, len, 0), -EIO);
	ck_assert_int_lt(mono_ns() - t0, 300 * 1000000LL); /* it did not wait for the device */
	/* the late transfer must not land here: the caller reuses its buffer at once */
	memset(direct, 0x22, len);
	/* through the engine's memory */
	ck_assert_int_eq(io_pread(e, f.dfd, odd, 100, 7), -EIO);
	io_engine_stats(e, &s);
	ck_assert_uint_eq(s.timeouts, 2);
	ck_assert_uint_eq(s.errors, 2);
	ut_sleep_ms(1000); /* the device "finishes" both reads */
	for (size_t i = 0; i < len; i += 4096)
		ck_assert_int_eq((unsigned char)direct[i], 0x22);
	io_engine_stats(e, &s);
	ck_assert_uint_eq(s.inflight, 0);
	io_engine_destroy(e);

	/* the same device, with time enough: the engine serves */
	e = engine(true, 8, 5 * 1000000000LL, 100 * 1000000LL);
	ck_assert_int_eq(io_pread(e, f.dfd, direct, len, 0), (ssize_t)len);
	ck_assert_int_eq(memcmp(direct, f.want, len), 0);
	io_engine_stats(e, &s);
	ck_assert_uint_eq(s.timeouts, 0);
	io_engine_destroy(e);
	free(direct);
	free(odd);
	fix_close(&f);
}
END_TEST

/* Destroying an engine whose timed-out reads are still in the kernel waits for them. */
START_TEST(test_io_aio_destroy_with_late_reads)
{
	struct iofix f;
	struct io_engine *e = engine(true, 4, 20 * 1000000LL, 200 * 1000000LL);
	char buf[300];

	fix_open(&f);
	ck_assert_int_eq(io_pread(e, f.dfd, buf, sizeof(buf), 5000), -EIO);
	io_engine_destroy(e); /* under ASan: neither a leak nor a use after free */
	fix_close(&f);
}
END_TEST

/* A prefetch reads into the engine's memory; waited for, it gives the bytes; dropped unread,
 * it frees itself when the device is done (ASan would see a leak or a use after free). */
START_TEST(test_io_prefetch)
{
	struct iofix f;
	struct io_engine *e = engine(true, 4, 10 * 1000000000LL, 0);
	struct io_engine *ps = engine(false, 1, 0, 0);
	static const uint64_t offs[] = { 0, 7, 4096, IO_SEG + 100, FILE_LEN - 5000 };
	const char *b;

	fix_open(&f);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		struct io_req *r = io_prefetch(e, f.dfd, offs[i], 2 * IO_SEG);
		size_t want = FILE_LEN - offs[i] < 2 * IO_SEG ? FILE_LEN - offs[i] : 2 * IO_SEG;

		ck_assert_ptr_nonnull(r);
		ck_assert_int_eq(io_prefetch_wait(e, r, 2 * IO_SEG, &b), (ssize_t)want);
		ck_assert_int_eq(memcmp(b, f.want + offs[i], want), 0);
		/* asked again: the same answer */
		ck_assert_int_eq(io_prefetch_wait(e, r, 2 * IO_SEG, &b), (ssize_t)want);
		io_prefetch_drop(e, r);
	}
	io_prefetch_drop(e, io_prefetch(e, f.dfd, 0, 3 * IO_SEG)); /* never waited for */
	ck_assert_ptr_null(io_prefetch(ps, f.fd, 0, 4096)); /* psync: nothing to prefetch */
	io_engine_destroy(e);
	io_engine_destroy(ps);
	fix_close(&f);
}
END_TEST

/* Prefetches larger than the depth allows at once are read whole without being waited for:
 * the completion thread submits what is left as room frees up, oldest first. One dropped
 * before it was read leaves the queue (ASan would see a use after free). */
START_TEST(test_io_prefetch_goes_on_unwaited)
{
	struct iofix f;
	struct io_engine *e = engine(true, 4, 10 * 1000000000LL, 0); /* background: 2 in flight */
	const uint64_t half = 6 * (256u << 10);
	struct io_req *r1, *r2;
	struct io_stats st;
	const char *b;
	int64_t until;

	fix_open(&f);
	r1 = io_prefetch(e, f.dfd, 0, (size_t)half);
	r2 = io_prefetch(e, f.dfd, half, FILE_LEN - half);
	io_prefetch_drop(e, io_prefetch(e, f.dfd, 0, IO_SEG));
	ck_assert_ptr_nonnull(r1);
	ck_assert_ptr_nonnull(r2);
	/* 6 segments of 256 KiB, then 7 (the last one a page long): all read, none waited for */
	until = mono_ns() + 10 * 1000000000LL;
	do {
		ut_sleep_ms(5);
		io_engine_stats(e, &st);
	} while ((st.segments < 13 || st.inflight) && mono_ns() < until);
	ck_assert_uint_ge(st.segments, 13);
	ck_assert_uint_eq(st.inflight, 0);
	ck_assert_int_eq(io_prefetch_wait(e, r1, (size_t)half, &b), (ssize_t)half);
	ck_assert_int_eq(memcmp(b, f.want, (size_t)half), 0);
	ck_assert_int_eq(io_prefetch_wait(e, r2, FILE_LEN - half, &b), (ssize_t)(FILE_LEN - half));
	ck_assert_int_eq(memcmp(b, f.want + half, FILE_LEN - half), 0);
	io_prefetch_drop(e, r1);
	io_prefetch_drop(e, r2);
	io_engine_destroy(e);
	fix_close(&f);
}
END_TEST

Suite *io_suite(void)
{
	Suite *s = suite_create("io");
	TCase *c = ut_tcase("core", UT_TIMEOUT);

	tcase_add_test(c, test_io_psync_reads);
	tcase_add_test(c, test_io_buf_pool);
	tcase_add_test(c, test_io_aio_reads);
	tcase_add_test(c, test_io_aio_shallow);
	tcase_add_test(c, test_io_aio_parallel);
	tcase_add_test(c, test_io_aio_writes);
	tcase_add_test(c, test_io_aio_timeout);
	tcase_add_test(c, test_io_aio_destroy_with_late_reads);
	tcase_add_test(c, test_io_prefetch);
	tcase_add_test(c, test_io_prefetch_goes_on_unwaited);
	suite_add_tcase(s, c);
	return s;
}
