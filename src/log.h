/* Logging: to stderr in the foreground (with the journal's priority prefix when stderr is
 * journald's stream, as under systemd); in the background to syslog, from the start (warnings
 * and errors to stderr too until the daemon detaches). Levels: log_level=. */
#ifndef UCM_LOG_H
#define UCM_LOG_H

enum { LOG_LVL_ERR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_level(int level);
/* Log to syslog (facility daemon) from now on; lines at least as urgent as also_stderr
 * (LOG_LVL_*, -1 for none) go to stderr too: a daemon about to go to the background still
 * shows the user why it fails to start. */
void log_use_syslog(int also_stderr);
void ucm_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) ucm_log(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...) ucm_log(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) ucm_log(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) ucm_log(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
