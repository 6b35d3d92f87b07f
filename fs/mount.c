/*
 * Mounting, and auto_unmount with the system's fusermount3.
 *
 * libfuse mounts by itself when the daemon runs as root. With auto_unmount, libfuse 3.17 then
 * starts `fusermount3 --auto-unmount` to unmount after the daemon dies; the fusermount3 of
 * Debian 12 (3.14) knows no such option, and the mount would be left dead after a crash.
 * Every fusermount3 knows the older way, which this file uses whenever auto_unmount is asked:
 * fusermount3 mounts with -o auto_unmount, hands the /dev/fuse descriptor back over a socket
 * (_FUSE_COMMFD), and stays in the background until that socket closes (the daemon exited or
 * was killed), then unmounts. libfuse is given the descriptor as /dev/fd/N.
 */
#include "fs/fs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

bool fs_wants_helper(const char *opts)
{
	const char *p = opts;
	size_t n = strlen("auto_unmount");

	while ((p = strstr(p, "auto_unmount"))) {
		if ((p == opts || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
			return true;
		p += n;
	}
	return false;
}

/* The descriptor fusermount3 sends over sock, or -errno. */
static int receive_fd(int sock)
{
	char data = 0, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = &data, .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			      .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;
	ssize_t n;
	int fd;

	do {
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	c = CMSG_FIRSTHDR(&msg);
	if (n == 0 || !c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EIO; /* fusermount3 failed; it said why on stderr */
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

int fs_mount_by_helper(const char *mountpoint, const char *opts, int *keep, char *why,
		       size_t len)
{
	char *argv[] = { "fusermount3", "-o", (char *)opts, "--", (char *)mountpoint, NULL };
	char env[32];
	int sv[2], fd, rc;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		rc = -errno;
		snprintf(why, len, "socketpair: %s", strerror(errno));
		return rc;
	}
	/* the helper's end stays open in it (no close-on-exec there), ours in the daemon */
	fcntl(sv[0], F_SETFD, 0);
	snprintf(env, sizeof(env), "%d", sv[0]);
	setenv("_FUSE_COMMFD", env, 1);
	rc = posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ);
	unsetenv("_FUSE_COMMFD");
	close(sv[0]);
	if (rc) {
		snprintf(why, len, "cannot run fusermount3: %s", strerror(rc));
		close(sv[1]);
		return -rc;
	}
	fd = receive_fd(sv[1]);
	if (fd < 0) {
		snprintf(why, len, "fusermount3 -o %s did not mount it", opts);
		close(sv[1]);
		waitpid(pid, NULL, 0);
		return fd;
	}
	/* fusermount3 watches sv[1] until the daemon ends; it is never waited for */
	*keep = sv[1];
	return fd;
}

void fs_unmount_by_helper(const char *mountpoint, int keep)
{
	/* at once, rather than when the helper sees the daemon gone */
	if (mountpoint && umount2(mountpoint, MNT_DETACH) && errno == EPERM) {
		char *argv[] = { "fusermount3", "-u", "-z", "-q", "--", (char *)mountpoint, NULL };
		pid_t pid;

		if (posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) == 0)
			waitpid(pid, NULL, 0);
	}
	if (keep >= 0)
		close(keep);
}
