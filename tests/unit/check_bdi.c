/* src/bdi.c: finding a mount's device in mountinfo (the read-ahead window is set on it). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "src/bdi.h"
#include "tests/unit/unit.h"

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(test_bdi_mount_device)
{
	char dir[4096], path[4200], dev[32];

	ut_mkdtemp(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/mountinfo", dir);
	write_text(path,
		   "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
		   "40 22 0:40 / /mnt/ucm rw,nosuid,nodev shared:5 - fuse.ucmfs ucmfs rw\n"
		   "41 22 0:41 / /mnt/with\\040space rw - fuse ucmfs rw\n"
		   "42 40 0:52 / /mnt/ucm rw,nosuid,nodev shared:7 - fuse.ucmfs ucmfs rw\n"
		   "garbage\n");
	/* a mount over another one: the last line is the one on top */
	ck_assert_int_eq(bdi_mount_device(path, "/mnt/ucm", dev, sizeof(dev)), 0);
	ck_assert_str_eq(dev, "0:52");
	/* mountinfo escapes a space as \040 */
	ck_assert_int_eq(bdi_mount_device(path, "/mnt/with space", dev, sizeof(dev)), 0);
	ck_assert_str_eq(dev, "0:41");
	ck_assert_int_eq(bdi_mount_device(path, "/", dev, sizeof(dev)), 0);
	ck_assert_str_eq(dev, "8:1");
	/* a prefix of a mount point is not that mount point */
	ck_assert_int_eq(bdi_mount_device(path, "/mnt", dev, sizeof(dev)), -ENOENT);
	ck_assert_int_eq(bdi_mount_device(path, "/mnt/ucm/", dev, sizeof(dev)), -ENOENT);
	/* no room for the device name: not found rather than cut */
	ck_assert_int_eq(bdi_mount_device(path, "/mnt/ucm", dev, 4), -ENOENT);
	snprintf(path, sizeof(path), "%s/missing", dir);
	ck_assert_int_eq(bdi_mount_device(path, "/mnt/ucm", dev, sizeof(dev)), -ENOENT);
	ut_rmtree(dir);
}
END_TEST

START_TEST(test_bdi_set_readahead_not_mounted)
{
	char err[256] = "";

	/* a directory that is no mount point: a one-line reason, nothing written */
	ck_assert_int_eq(bdi_set_readahead("/no/such/mount", 1 << 20, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/no/such/mount"));
}
END_TEST

Suite *bdi_suite(void)
{
	Suite *s = suite_create("bdi");
	TCase *c = ut_tcase("core", UT_TIMEOUT);

	tcase_add_test(c, test_bdi_mount_device);
	tcase_add_test(c, test_bdi_set_readahead_not_mounted);
	suite_add_tcase(s, c);
	return s;
}
