#include "src/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

static int log_level = LOG_LVL_INFO;
static int to_syslog;
static int stderr_level = LOG_LVL_DEBUG; /* with syslog: the least urgent also on stderr */
static int journal = -1; /* stderr is a journald stream: -1 not known yet, 0 no, 1 yes */

void log_set_level(int level)
{
	log_level = level;
}

void log_use_syslog(int also_stderr)
{
	if (!to_syslog)
		openlog("ucmfs", LOG_PID, LOG_DAEMON);
	to_syslog = 1;
	stderr_level = also_stderr;
}

/* systemd names the stream it connected to stderr in JOURNAL_STREAM ("DEV:INODE"); the
 * journal then reads a "<N>" prefix as the line's priority. */
static int stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st))
		return 0;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void ucm_log(int level, const char *fmt, ...)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	if (to_syslog) {
		va_list again;

		va_copy(again, ap);
		vsyslog(prio[level], fmt, again);
		va_end(again);
	}
	if (!to_syslog || level <= stderr_level) {
		char line[1024];

		if (journal < 0)
			journal = stderr_is_journal();
		vsnprintf(line, sizeof(line), fmt, ap);
		if (journal)
			fprintf(stderr, "<%d>%s\n", prio[level], line);
		else
			fprintf(stderr, "ucmfs: %s\n", line);
	}
	va_end(ap);
}
