/*
 * The inode table (fs/inode.h): which node a lookup, a reader and a writer get, and which
 * readers the kernel may read through a backing file. The races these cases pin down were
 * seen through the mount (tests/mount/kcache.py); here they are replayed one step at a time.
 */
#include <errno.h>
#include <string.h>

#include "fs/inode.h"
#include "tests/unit/unit.h"

struct backing {
	int id;    /* what open_backing() returns */
	int calls; /* how often it was asked */
};

static int open_backing(void *arg)
{
	struct backing *b = arg;

	b->calls++;
	return b->id;
}

static struct itable *new_table(void)
{
	struct itable *t;

	ck_assert_int_eq(itable_create(&t), 0);
	return t;
}

/* A lookup of id at version v (the kernel holds the node from now on). */
static struct inode *lookup(struct itable *t, const struct blockid *id, int64_t v)
{
	struct stat st;
	struct inode *ino;

	memset(&st, 0, sizeof(st));
	st.st_size = 4096;
	ino = itable_get_version(t, id, v, &st, true);
	ck_assert_ptr_nonnull(ino);
	return ino;
}

/* A reader opening ino at version v: what itable_add_reader() said. */
static int add_reader(struct itable *t, struct inode *ino, int64_t v, void *mine)
{
	struct reader_grant g;
	struct stat st;

	memset(&st, 0, sizeof(st));
	return itable_add_reader(t, ino, v, &st, mine, &g);
}

/*
 * A direct reader's open may reach the kernel after a later passthrough open of the same
 * node (the kernel completes opens in any order), and the kernel fails a non-passthrough open
 * of a node with a backing file (EIO). So no reader of a node gets a new backing id while a
 * direct reader of it is open.
 */
START_TEST(test_inode_no_backing_while_direct_readers)
{
	struct itable *t = new_table();
	struct blockid id = ut_id(1);
	struct backing b = { .id = 7 };
	struct inode *ino = lookup(t, &id, 100);
	int h1, h2, h3;

	ck_assert_int_eq(itable_add_writer(t, ino), 0);
	ck_assert_int_eq(add_reader(t, ino, 100, &h1), READ_DIRECT); /* the writer's node */
	itable_del_writer(t, ino);

	/* the writer is gone, the direct reader is not: a cached reader reads through the daemon */
	ck_assert_int_eq(add_reader(t, ino, 100, &h2), READ_CACHED);
	ck_assert_int_eq(itable_pt_join(t, ino, false, open_backing, &b), 0);
	ck_assert_int_eq(b.calls, 0);

	/* and so do the cached readers after it, while it reads */
	itable_del_reader(t, ino, false);
	ck_assert_int_eq(add_reader(t, ino, 100, &h3), READ_CACHED);
	ck_assert_int_eq(itable_pt_join(t, ino, false, open_backing, &b), 0);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_int_eq(itable_pt_leave(t, ino, 0), 0);
	itable_del_reader(t, ino, true);
	ck_assert_int_eq(itable_pt_leave(t, ino, 0), 0);
	itable_del_reader(t, ino, true);

	/* once nobody reads through the daemon, the next cached reader passes through, and the
	 * id goes with the last passthrough reader */
	ck_assert_int_eq(add_reader(t, ino, 100, &h1), READ_CACHED);
	ck_assert_int_eq(itable_pt_join(t, ino, false, open_backing, &b), 7);
	ck_assert_int_eq(add_reader(t, ino, 100, &h2), READ_CACHED);
	ck_assert_int_eq(itable_pt_join(t, ino, false, open_backing, &b), 7);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(itable_pt_leave(t, ino, 7), 0);
	itable_del_reader(t, ino, true);
	ck_assert_int_eq(itable_pt_leave(t, ino, 7), 7);
	itable_del_reader(t, ino, true);

	itable_forget(t, ino, 1);
	itable_destroy(t);
}
END_TEST

/*
 * A writer told -ESTALE retries through the node the name shows next, which its readers
 * read direct. A lookup that raced the last commit can bind that node to the older version,
 * and the next lookup then makes a newer node: the writer is due there too, so its retry
 * finds no page-cache readers and succeeds.
 */
START_TEST(test_inode_writer_due_survives_a_stale_lookup)
{
	struct itable *t = new_table();
	struct blockid id = ut_id(2);
	struct inode *a, *b, *c;
	int h1, h2;

	a = lookup(t, &id, 200);
	ck_assert_int_eq(add_reader(t, a, 200, &h1), READ_CACHED);
	ck_assert_int_eq(itable_add_writer(t, a), -ESTALE);

	b = lookup(t, &id, 100); /* answered from before the commit of version 200 */
	ck_assert_ptr_ne(b, a);
	ck_assert(b->writer_due);
	c = lookup(t, &id, 200);
	ck_assert_ptr_ne(c, b);
	ck_assert(c->writer_due);

	ck_assert_int_eq(add_reader(t, c, 200, &h2), READ_DIRECT);
	ck_assert_int_eq(itable_add_writer(t, c), 0);
	ck_assert(!c->writer_due);

	itable_del_writer(t, c);
	itable_del_reader(t, c, false);
	itable_del_reader(t, a, true);
	itable_forget(t, a, 1);
	itable_forget(t, b, 1);
	itable_forget(t, c, 1);
	itable_destroy(t);
}
END_TEST

Suite *inode_suite(void)
{
	Suite *s = suite_create("inode");
	TCase *tc = tcase_create("rules");

	tcase_add_test(tc, test_inode_no_backing_while_direct_readers);
	tcase_add_test(tc, test_inode_writer_due_survives_a_stale_lookup);
	suite_add_tcase(s, tc);
	return s;
}
