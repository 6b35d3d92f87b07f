#include "src/bdi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* mountinfo escapes space, tab, newline and backslash as \ooo (octal); undo it in place. */
static void unescape(char *s)
{
	char *out = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*out++ = *s;
		}
	}
	*out = '\0';
}

int bdi_mount_device(const char *mountinfo, const char *mountpoint, char *dev, size_t devlen)
{
	FILE *f = fopen(mountinfo, "re");
	char *line = NULL;
	size_t cap = 0;
	int rc = -ENOENT;

	if (!f)
		return -errno;
	/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT ...": the last match is the mount on top */
	while (getline(&line, &cap, f) > 0) {
		char *save = NULL, *field[5];
		int n = 0;

		for (char *t = strtok_r(line, " \n", &save); t && n < 5;
		     t = strtok_r(NULL, " \n", &save))
			field[n++] = t;
		if (n < 5)
			continue;
		unescape(field[4]);
		if (strcmp(field[4], mountpoint) || strlen(field[2]) >= devlen)
			continue;
		strcpy(dev, field[2]);
		rc = 0;
	}
	free(line);
	fclose(f);
	return rc;
}

int bdi_set_readahead(const char *mountpoint, uint64_t bytes, char *err, size_t errlen)
{
	char dev[32], path[96], val[32];
	int fd, rc;
	ssize_t n;

	rc = bdi_mount_device("/proc/self/mountinfo", mountpoint, dev, sizeof(dev));
	if (rc) {
		snprintf(err, errlen, "%s is not in /proc/self/mountinfo: %s", mountpoint,
			 strerror(-rc));
		return rc;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	snprintf(val, sizeof(val), "%llu\n", (unsigned long long)(bytes >> 10));
	n = write(fd, val, strlen(val));
	rc = n == (ssize_t)strlen(val) ? 0 : (n < 0 ? -errno : -EIO);
	if (rc)
		snprintf(err, errlen, "%s: %s", path, strerror(-rc));
	close(fd);
	return rc;
}
