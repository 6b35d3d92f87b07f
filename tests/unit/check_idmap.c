/* The sharded intrusive id map (src/idmap.h). */
#include <stdlib.h>
#include <string.h>

#include "src/idmap.h"
#include "tests/unit/unit.h"

struct item {
	struct idnode node;
	int visits;
	bool inserted;
};

#define ITEM(n) ((struct item *)((char *)(n) - offsetof(struct item, node)))

static struct idmap *new_map(void)
{
	struct idmap *m = malloc(sizeof(*m));

	ck_assert_ptr_nonnull(m);
	idmap_init(m);
	return m;
}

static struct item *new_items(size_t n, uint64_t base)
{
	struct item *v = calloc(n, sizeof(*v));

	ck_assert_ptr_nonnull(v);
	for (size_t i = 0; i < n; i++)
		v[i].node.id = ut_id(base + i);
	return v;
}

START_TEST(test_idmap_empty)
{
	struct idmap *m = new_map();
	struct blockid id = ut_id(1);

	ck_assert_ptr_null(idmap_find(m, &id));
	ck_assert_uint_eq(m->count, 0);
	idmap_destroy(m);
	free(m);
}
END_TEST

START_TEST(test_idmap_many)
{
	enum { N = 100000 };
	struct idmap *m = new_map();
	struct item *v = new_items(N, 0), *absent = new_items(1000, N);

	for (size_t i = 0; i < N; i++) {
		UT_CHECK(idmap_insert(m, &v[i].node) == 0, "insert %zu failed", (size_t)i);
		UT_CHECK(m->count == i + 1, "count %zu after %zu inserts", m->count, (size_t)i + 1);
	}
	for (size_t i = 0; i < N; i++) {
		struct blockid copy = v[i].node.id; /* found by value, not by address */

		UT_CHECK(idmap_find(m, &copy) == &v[i].node, "id %zu not found", (size_t)i);
	}
	for (size_t i = 0; i < 1000; i++)
		UT_CHECK(!idmap_find(m, &absent[i].node.id), "absent id %zu found", (size_t)i);
	/* remove every other one */
	for (size_t i = 0; i < N; i += 2)
		idmap_remove(m, &v[i].node);
	ck_assert_uint_eq(m->count, N / 2);
	for (size_t i = 0; i < N; i++) {
		struct idnode *n = idmap_find(m, &v[i].node.id);

		if (i % 2)
			UT_CHECK(n == &v[i].node, "id %zu not found", (size_t)i);
		else
			UT_CHECK(!n, "removed id %zu found", (size_t)i);
	}
	/* insert them again */
	for (size_t i = 0; i < N; i += 2)
		UT_CHECK(idmap_insert(m, &v[i].node) == 0, "insert %zu failed", (size_t)i);
	ck_assert_uint_eq(m->count, N);
	for (size_t i = 0; i < N; i++)
		UT_CHECK(idmap_find(m, &v[i].node.id) == &v[i].node, "id %zu not found", (size_t)i);
	/* the per-shard counts add up */
	{
		size_t total = 0;

		for (unsigned s = 0; s < BLOCKID_SHARDS; s++)
			total += m->shard[s].count;
		ck_assert_uint_eq(total, N);
	}
	for (size_t i = 0; i < N; i++)
		idmap_remove(m, &v[i].node);
	ck_assert_uint_eq(m->count, 0);
	for (size_t i = 0; i < N; i++)
		UT_CHECK(!idmap_find(m, &v[i].node.id), "removed id %zu found", (size_t)i);
	idmap_destroy(m);
	free(m);
	free(v);
	free(absent);
}
END_TEST

START_TEST(test_idmap_one_crowded_shard)
{
	/* every id in one shard: that shard's table must grow on its own */
	enum { N = 30000 };
	struct idmap *m = new_map();
	struct item *v = calloc(N, sizeof(*v));

	ck_assert_ptr_nonnull(v);
	for (size_t i = 0; i < N; i++) {
		v[i].node.id = ut_id_in_shard(0x123, i);
		UT_CHECK(idmap_insert(m, &v[i].node) == 0, "insert %zu failed", (size_t)i);
	}
	ck_assert_uint_eq(m->shard[0x123].count, N);
	for (unsigned s = 0; s < BLOCKID_SHARDS; s++)
		if (s != 0x123)
			ck_assert_uint_eq(m->shard[s].count, 0);
	/* the table grew: chains stay short on average */
	ck_assert_uint_ge(m->shard[0x123].mask + 1, N / 4);
	for (size_t i = 0; i < N; i++)
		UT_CHECK(idmap_find(m, &v[i].node.id) == &v[i].node, "id %zu not found", (size_t)i);
	for (size_t i = 0; i < N; i++)
		idmap_remove(m, &v[i].node);
	ck_assert_uint_eq(m->count, 0);
	idmap_destroy(m);
	free(m);
	free(v);
}
END_TEST

static void visit(struct idnode *n, void *arg)
{
	unsigned *shard = arg;

	UT_CHECK(blockid_shard(&n->id) == *shard, "shard %u listed an id of shard %u", *shard,
		 blockid_shard(&n->id));
	ITEM(n)->visits++;
}

START_TEST(test_idmap_shard_iteration)
{
	enum { N = 50000 };
	struct idmap *m = new_map();
	struct item *v = new_items(N, 1000000);
	size_t per_shard[BLOCKID_SHARDS] = { 0 };

	/* a few shards get many ids, most get a few, some none */
	for (size_t i = 0; i < N; i++) {
		if (i % 4 == 0)
			v[i].node.id = ut_id_in_shard((unsigned)(i % 8), i);
		UT_CHECK(idmap_insert(m, &v[i].node) == 0, "insert %zu failed", (size_t)i);
		v[i].inserted = true;
		per_shard[blockid_shard(&v[i].node.id)]++;
	}
	/* remove some, so iteration must not see removed nodes */
	for (size_t i = 0; i < N; i += 3) {
		idmap_remove(m, &v[i].node);
		v[i].inserted = false;
		per_shard[blockid_shard(&v[i].node.id)]--;
	}
	for (unsigned s = 0; s < BLOCKID_SHARDS; s++) {
		unsigned shard = s;

		idmap_shard_foreach(m, s, visit, &shard);
		ck_assert_uint_eq(m->shard[s].count, per_shard[s]);
	}
	/* every inserted id was visited exactly once, no removed one at all */
	for (size_t i = 0; i < N; i++)
		ck_assert_msg(v[i].visits == (v[i].inserted ? 1 : 0), "id %zu visited %d times",
			      i, v[i].visits);
	idmap_destroy(m);
	free(m);
	free(v);
}
END_TEST

struct drain {
	struct idmap *m;
	size_t calls;
};

static void remove_it(struct idnode *n, void *arg)
{
	struct drain *d = arg;

	UT_CHECK(ITEM(n)->visits == 0, "a node visited twice");
	ITEM(n)->visits++;
	idmap_remove(d->m, n);
	d->calls++;
}

START_TEST(test_idmap_foreach_safe_remove_all)
{
	enum { N = 100000 };
	struct idmap *m = new_map();
	struct item *v = new_items(N, 7);
	struct drain d = { .m = m };

	for (size_t i = 0; i < N; i++)
		UT_CHECK(idmap_insert(m, &v[i].node) == 0, "insert %zu failed", (size_t)i);
	idmap_foreach_safe(m, remove_it, &d);
	ck_assert_uint_eq(d.calls, N);
	ck_assert_uint_eq(m->count, 0);
	for (unsigned s = 0; s < BLOCKID_SHARDS; s++)
		ck_assert_uint_eq(m->shard[s].count, 0);
	for (size_t i = 0; i < N; i++) {
		UT_CHECK(v[i].visits == 1, "id %zu visited %d times", (size_t)i, v[i].visits);
		UT_CHECK(!idmap_find(m, &v[i].node.id), "removed id %zu found", (size_t)i);
	}
	/* the map is usable again */
	ck_assert_int_eq(idmap_insert(m, &v[5].node), 0);
	ck_assert_ptr_eq(idmap_find(m, &v[5].node.id), &v[5].node);
	ck_assert_uint_eq(m->count, 1);
	idmap_destroy(m);
	free(m);
	free(v);
}
END_TEST

static void remove_odd(struct idnode *n, void *arg)
{
	struct drain *d = arg;

	ITEM(n)->visits++;
	if (n->id.b[15] & 1)
		idmap_remove(d->m, n);
}

START_TEST(test_idmap_foreach_safe_remove_some)
{
	enum { N = 20000 };
	struct idmap *m = new_map();
	struct item *v = new_items(N, 99);
	struct drain d = { .m = m };
	size_t odd = 0;

	for (size_t i = 0; i < N; i++) {
		UT_CHECK(idmap_insert(m, &v[i].node) == 0, "insert %zu failed", (size_t)i);
		odd += v[i].node.id.b[15] & 1;
	}
	idmap_foreach_safe(m, remove_odd, &d);
	ck_assert_uint_eq(m->count, N - odd);
	for (size_t i = 0; i < N; i++) {
		UT_CHECK(v[i].visits == 1, "id %zu visited %d times", (size_t)i, v[i].visits);
		if (v[i].node.id.b[15] & 1)
			UT_CHECK(!idmap_find(m, &v[i].node.id), "removed id %zu found", (size_t)i);
		else
			UT_CHECK(idmap_find(m, &v[i].node.id) == &v[i].node, "id %zu not found",
				 (size_t)i);
	}
	idmap_destroy(m);
	free(m);
	free(v);
}
END_TEST

Suite *idmap_suite(void)
{
	Suite *s = suite_create("idmap");
	TCase *core = ut_tcase("core", UT_TIMEOUT);

	tcase_add_test(core, test_idmap_empty);
	tcase_add_test(core, test_idmap_many);
	tcase_add_test(core, test_idmap_one_crowded_shard);
	tcase_add_test(core, test_idmap_shard_iteration);
	tcase_add_test(core, test_idmap_foreach_safe_remove_all);
	tcase_add_test(core, test_idmap_foreach_safe_remove_some);
	suite_add_tcase(s, core);
	return s;
}
