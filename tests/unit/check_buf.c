/* Block buffers (src/buf.h): zeroed, page-aligned, disjoint, resizable, reused after free. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/buf.h"
#include "tests/unit/unit.h"

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static bool all_byte(const unsigned char *p, size_t n, unsigned char b)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != b)
			return false;
	return true;
}

/* Every size class and a mapped size: aligned, zeroed, writable to its rounded end. */
START_TEST(test_buf_sizes)
{
	static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, 12288, 65536, 200000,
					(256u << 10) - 1, 256u << 10, (1u << 20) + 3, 2u << 20,
					(16u << 20) + 3 };

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = buf_round(sizes[k] ? sizes[k] : 1);
		unsigned char *p = buf_alloc(sizes[k], k % 2);

		ck_assert_ptr_nonnull(p);
		UT_CHECK((uintptr_t)p % BUF_ALIGN == 0, "size %zu: %p is not page-aligned",
			 sizes[k], (void *)p);
		UT_CHECK(all_zero(p, n), "size %zu: not zero-filled", sizes[k]);
		memset(p, 0xa5, n);
		buf_free(p, sizes[k]);
	}
}
END_TEST

/* Many live buffers of one class never overlap, and a freed slot comes back zeroed. */
START_TEST(test_buf_disjoint_and_reused_zeroed)
{
	enum { N = 2000 };
	unsigned char **v = calloc(N, sizeof(*v));

	ck_assert_ptr_nonnull(v);
	for (int i = 0; i < N; i++) {
		v[i] = buf_alloc(4096, false);
		ck_assert_ptr_nonnull(v[i]);
		memset(v[i], i & 0xff, 4096);
	}
	for (int i = 0; i < N; i++)
		UT_CHECK(all_byte(v[i], 4096, (unsigned char)(i & 0xff)),
			 "buffer %d was overwritten by another", i);
	for (int i = 0; i < N; i += 2)
		buf_free(v[i], 4096);
	for (int i = 0; i < N; i += 2) {
		v[i] = buf_alloc(4096, false);
		ck_assert_ptr_nonnull(v[i]);
		UT_CHECK(all_zero(v[i], 4096), "a reused buffer (%d) is not zero-filled", i);
	}
	for (int i = 1; i < N; i += 2)
		UT_CHECK(all_byte(v[i], 4096, (unsigned char)(i & 0xff)),
			 "buffer %d changed when its neighbours were reused", i);
	for (int i = 0; i < N; i++)
		buf_free(v[i], 4096);
	free(v);
}
END_TEST

/*
 * Resize a buffer of `first` bytes through steps[]: each step keeps the bytes that fit, the
 * buffer stays page-aligned, and the part it grew by reads as zeros.
 */
static void resize_through(size_t first, const size_t *steps, size_t n)
{
	size_t cur = first;
	unsigned char *p = buf_alloc(cur, false);

	ck_assert_ptr_nonnull(p);
	memset(p, 0x3c, cur);
	for (size_t k = 0; k < n; k++) {
		size_t keep = cur < steps[k] ? cur : steps[k];

		p = buf_resize(p, cur, steps[k]);
		ck_assert_ptr_nonnull(p);
		UT_CHECK((uintptr_t)p % BUF_ALIGN == 0, "resize %zu -> %zu: not page-aligned",
			 cur, steps[k]);
		UT_CHECK(all_byte(p, keep, 0x3c), "resize %zu -> %zu lost bytes", cur, steps[k]);
		UT_CHECK(all_zero(p + buf_round(keep), buf_round(steps[k]) - buf_round(keep)),
			 "resize %zu -> %zu: the grown part is not zero-filled", cur, steps[k]);
		memset(p, 0x3c, steps[k]);
		cur = steps[k];
	}
	buf_free(p, cur);
}

/* Resizing keeps the bytes that fit, across classes and to and from mappings. */
START_TEST(test_buf_resize)
{
	static const size_t steps[] = { 4096, 8192, 8000, 100000, 300000, 2u << 20, 50000, 4096 };

	resize_through(1000, steps, sizeof(steps) / sizeof(steps[0]));
}
END_TEST

/*
 * A block written without a declared size grows geometrically across the huge-page size
 * (its buffer moves to a huge-page boundary, its first 2 MiB copied, the rest moved), and
 * shrinks back at commit.
 */
START_TEST(test_buf_resize_across_huge)
{
	static const size_t steps[] = { 1u << 20, 2u << 20, (4u << 20) + 4097, 16u << 20,
					3u << 20, (32u << 20) + 1 };

	resize_through(300000, steps, sizeof(steps) / sizeof(steps[0]));
}
END_TEST

struct churn {
	unsigned seed;
	int id;  /* 0..3: the tag of buffer k is id * 64 + k, distinct across threads */
	int bad;
};

static void *churn_thread(void *arg)
{
	struct churn *c = arg;
	enum { LIVE = 64 };
	unsigned char *live[LIVE] = { 0 };
	size_t size[LIVE] = { 0 };

	for (int i = 0; i < 4000; i++) {
		int k = (int)(rand_r(&c->seed) % LIVE);
		unsigned char tag = (unsigned char)(c->id * LIVE + k);

		if (live[k]) {
			if (!all_byte(live[k], buf_round(size[k]), tag))
				c->bad++;
			buf_free(live[k], size[k]);
			live[k] = NULL;
		} else {
			/* mostly slab sizes, some mapped ones */
			size[k] = 1 + rand_r(&c->seed) % (i % 8 ? 64u << 10 : 300u << 10);
			live[k] = buf_alloc(size[k], false);
			if (!live[k]) {
				c->bad++;
				continue;
			}
			if (!all_zero(live[k], buf_round(size[k])))
				c->bad++;
			memset(live[k], tag, buf_round(size[k]));
		}
	}
	for (int k = 0; k < LIVE; k++)
		buf_free(live[k], size[k]);
	return NULL;
}

/* Threads allocating and freeing random sizes see only their own bytes. */
START_TEST(test_buf_threads)
{
	enum { T = 4 };
	pthread_t t[T];
	struct churn c[T];

	for (int i = 0; i < T; i++) {
		c[i] = (struct churn){ .seed = 7u + (unsigned)i, .id = i };
		ck_assert_int_eq(pthread_create(&t[i], NULL, churn_thread, &c[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(t[i], NULL);
		UT_CHECK(c[i].bad == 0, "thread %d saw %d wrong buffers", i, c[i].bad);
	}
}
END_TEST

/* --- buffers as files of a private tmpfs (buf_use_files(); needs CAP_SYS_ADMIN) --------- */

static bool have_files;

static void files_setup(void)
{
	have_files = ut_use_file_buffers("buf");
}

/* The file of a buffer reads as exactly its bytes, cut to the size asked; its pages stay
 * with whoever maps it after the buffer is freed. */
START_TEST(test_buf_file_reads_the_bytes)
{
	const size_t cap = 4u << 20, size = (3u << 20) + 5;
	unsigned char *p, *m;
	struct stat st;
	int fd;

	if (!have_files)
		return;
	ck_assert_int_ne(buf_kind(), BUF_ANON);
	p = buf_alloc(cap, true);
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < cap; i++)
		p[i] = (unsigned char)(i * 7 + 1);
	ck_assert_int_eq(buf_file(p, 4096, 4096), -ENOTSUP); /* a slab-sized buffer */
	fd = buf_file(p, cap, size);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, size);
	m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	close(fd);
	buf_free(p, cap);
	/* another buffer at the same address must not take over the mapped file's pages */
	p = buf_alloc(cap, false);
	memset(p, 0xee, cap);
	for (size_t i = 0; i < size; i++)
		UT_CHECK(m[i] == (unsigned char)(i * 7 + 1), "byte %zu of a freed buffer's file "
			 "changed", i);
	munmap(m, size);
	buf_free(p, cap);
}
END_TEST

/* A growing file buffer keeps its file: buf_file() after resizes still finds it. */
START_TEST(test_buf_file_after_resize)
{
	size_t cur = 300000;
	unsigned char *p = buf_alloc(cur, false), *back;
	static const size_t steps[] = { 1u << 20, (4u << 20) + 4097, 3u << 20 };
	int fd;

	if (!have_files) {
		buf_free(p, cur);
		return;
	}
	for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
		p = buf_resize(p, cur, steps[k]);
		ck_assert_ptr_nonnull(p);
		cur = steps[k];
		memset(p, (int)k + 1, cur);
	}
	fd = buf_file(p, cur, cur);
	ck_assert_int_ge(fd, 0);
	back = malloc(cur);
	ck_assert_int_eq(pread(fd, back, cur, 0), (ssize_t)cur);
	UT_CHECK(all_byte(back, cur, 3), "the file of a resized buffer holds other bytes");
	free(back);
	close(fd);
	buf_free(p, cur);
}
END_TEST

Suite *buf_suite(void)
{
	Suite *s = suite_create("buf");
	TCase *core = ut_tcase("core", UT_TIMEOUT);

	tcase_add_test(core, test_buf_sizes);
	tcase_add_test(core, test_buf_disjoint_and_reused_zeroed);
	tcase_add_test(core, test_buf_resize);
	tcase_add_test(core, test_buf_resize_across_huge);
	tcase_add_test(core, test_buf_threads);
	suite_add_tcase(s, core);
	/* the same, with large buffers as files, and what only files do */
	TCase *files = ut_tcase("files", UT_TIMEOUT);

	tcase_add_checked_fixture(files, files_setup, NULL);
	tcase_add_test(files, test_buf_sizes);
	tcase_add_test(files, test_buf_resize);
	tcase_add_test(files, test_buf_resize_across_huge);
	tcase_add_test(files, test_buf_threads);
	tcase_add_test(files, test_buf_file_reads_the_bytes);
	tcase_add_test(files, test_buf_file_after_resize);
	suite_add_tcase(s, files);
	return s;
}
