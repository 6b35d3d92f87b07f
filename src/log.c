#include "src/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>

static int log_level = LOG_LVL_INFO;
static int to_syslog;

void log_set_level(int level)
{
	log_level = level;
}

void log_use_syslog(void)
{
	openlog("ucmfs", LOG_PID, LOG_DAEMON);
	to_syslog = 1;
}

void ucm_log(int level, const char *fmt, ...)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	if (to_syslog) {
		vsyslog(prio[level], fmt, ap);
	} else {
		char line[1024];

		vsnprintf(line, sizeof(line), fmt, ap);
		fprintf(stderr, "ucmfs: %s\n", line);
	}
	va_end(ap);
}
