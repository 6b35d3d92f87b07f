/*
 * Extended attributes of block files (DESIGN.md section 4):
 *
 *   user.ucm.ttl     get: remaining ms or "none"; set: ms from now ("0"/"none" clear)
 *   user.ucm.tier    get: mem, disk or mem,disk
 *   user.ucm.stored  get: bytes stored on disk (0 if none)
 *   user.ucm.codec   get: raw, zstd, zstd+shuffle2, zstd+shuffle4
 *   user.ucm.pins    get: open readers
 *
 * Only user.ucm.ttl can be set (the others: EPERM); ucmfs keeps no other attributes
 * (get: ENODATA, set: ENOTSUP).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_int.h"
#include "src/clock.h"
#include "src/units.h"

#define X_TTL "user.ucm.ttl"

static const char *const readonly_names[] = { "user.ucm.tier", "user.ucm.stored",
					      "user.ucm.codec", "user.ucm.pins" };

static bool is_readonly(const char *name)
{
	for (size_t i = 0; i < sizeof(readonly_names) / sizeof(readonly_names[0]); i++)
		if (!strcmp(name, readonly_names[i]))
			return true;
	return false;
}

static const char *codec_name(uint32_t codec)
{
	switch (codec) {
	case CODEC_ZSTD_PLAIN: return "zstd";
	case CODEC_ZSTD_SHUF2: return "zstd+shuffle2";
	case CODEC_ZSTD_SHUF4: return "zstd+shuffle4";
	default: return "raw";
	}
}

/* The value of a block attribute into buf. Length, or -ENODATA/-ENOENT. */
static int block_value(struct ucmfs *fs, struct inode *ino, const char *name, char *buf,
		       size_t len)
{
	struct block_attr a;

	if (strcmp(name, X_TTL) && !is_readonly(name))
		return -ENODATA;
	if (fs->pipe->ops->lookup(fs->pipe, &ino->node.id, &a))
		return -ENOENT;
	if (!strcmp(name, X_TTL)) {
		int64_t left = a.deadline ? (a.deadline - mono_ns()) / 1000000 : -1;

		if (!a.deadline)
			return snprintf(buf, len, "none");
		return snprintf(buf, len, "%lld", (long long)(left > 0 ? left : 0));
	}
	if (!strcmp(name, "user.ucm.tier"))
		return snprintf(buf, len, "%s",
				a.where == (TIER_MEM | TIER_DISK) ? "mem,disk"
				: a.where == TIER_DISK		  ? "disk"
								  : "mem");
	if (!strcmp(name, "user.ucm.stored"))
		return snprintf(buf, len, "%llu", (unsigned long long)a.stored);
	if (!strcmp(name, "user.ucm.codec"))
		return snprintf(buf, len, "%s", codec_name(a.codec));
	return snprintf(buf, len, "%u", a.pins);
}

static void reply_value(fuse_req_t req, const char *value, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, value, len);
}

void xattr_get(fuse_req_t req, fuse_ino_t nid, const char *name, size_t size)
{
	char value[64], *q;
	int n;

	if (is_query(nid)) {
		n = query_getxattr(fs_of(req), nid, name, &q);
		if (n < 0) {
			fuse_reply_err(req, -n);
			return;
		}
		reply_value(req, q, (size_t)n, size);
		free(q);
		return;
	}
	if (!is_block(nid)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	n = block_value(fs_of(req), inode_of(nid), name, value, sizeof(value));
	if (n < 0)
		fuse_reply_err(req, -n);
	else
		reply_value(req, value, (size_t)n, size);
}

/* Parse a TTL value: ms digits, a duration ("30s"), "none"; trailing whitespace allowed. */
static int parse_ttl_value(const char *value, size_t size, int64_t *ms)
{
	char buf[64];

	while (size && (value[size - 1] == '\n' || value[size - 1] == ' ' ||
			value[size - 1] == '\0'))
		size--;
	if (size == 0 || size >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, value, size);
	buf[size] = '\0';
	return parse_duration_ms(buf, ms) ? -EINVAL : 0;
}

void xattr_set(fuse_req_t req, fuse_ino_t nid, const char *name, const char *value,
	       size_t size, int flags)
{
	struct ucmfs *fs = fs_of(req);
	int64_t ms;
	int rc;

	(void)flags;
	if (is_query(nid)) {
		fuse_reply_err(req, -query_setxattr(fs, nid, name, value, size));
		return;
	}
	if (!is_block(nid) || (strcmp(name, X_TTL) && !is_readonly(name))) {
		fuse_reply_err(req, ENOTSUP);
		return;
	}
	if (is_readonly(name)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	rc = parse_ttl_value(value, size, &ms);
	if (rc == 0)
		rc = fs->pipe->ops->set_ttl(fs->pipe, &inode_of(nid)->node.id,
					    ms == 0 ? TTL_NONE : ms);
	fuse_reply_err(req, -rc);
}

void xattr_list(fuse_req_t req, fuse_ino_t nid, size_t size)
{
	char list[256];
	size_t len = 0;

	if (is_query(nid))
		len = query_listxattr(list, sizeof(list));
	if (is_block(nid)) {
		len += (size_t)snprintf(list, sizeof(list), "%s", X_TTL) + 1;
		for (size_t i = 0; i < sizeof(readonly_names) / sizeof(readonly_names[0]); i++)
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s",
						readonly_names[i]) + 1;
	}
	reply_value(req, list, len, size);
}

void xattr_remove(fuse_req_t req, fuse_ino_t nid, const char *name)
{
	struct ucmfs *fs = fs_of(req);

	if (!is_block(nid) || (strcmp(name, X_TTL) && !is_readonly(name)))
		fuse_reply_err(req, ENODATA);
	else if (is_readonly(name))
		fuse_reply_err(req, EPERM);
	else
		fuse_reply_err(req, -fs->pipe->ops->set_ttl(fs->pipe, &inode_of(nid)->node.id,
							   TTL_NONE));
}
