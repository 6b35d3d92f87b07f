/*
 * ucmctl internals shared by tools/ucmctl*.c:
 *   ucmctl.c         main, usage, number formatting, progress bar, id arguments
 *   ucmctl_stats.c   `stat` and `top`: /.ucm/stats (Prometheus text) read and summarized
 *   ucmctl_blocks.c  `ls`, `lookup`, `prefetch` (through tools/client/ucmfs.h)
 *   ucmctl_verify.c  `verify`: every block file of an unmounted STORE checked
 *
 * Exit status of every command: 0 success, 1 failure (or damage found, a missing id), 2 bad
 * usage or a store that cannot be checked.
 */
#ifndef UCM_UCMCTL_H
#define UCM_UCMCTL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/client/ucmfs.h"

#define EXIT_USAGE 2

/* Set by SIGINT/SIGTERM once ucmctl_catch_signals() ran. */
extern volatile sig_atomic_t ucmctl_stop;
void ucmctl_catch_signals(void);

/* Print "ucmctl: <message>" on stderr. */
void ucmctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "1.5 GiB", "512 B": binary units, 3 significant figures. Returns buf. */
const char *fmt_bytes(double bytes, char *buf, size_t len);
/* "1.02 GB/s": decimal units per second. Returns buf. */
const char *fmt_rate(double bytes_per_s, char *buf, size_t len);
/* "850 us", "2.5 ms", "1.20 s"; "-" for a negative value. Returns buf. */
const char *fmt_seconds(double s, char *buf, size_t len);
/* "none", "850ms", "59.9s", "12m03s", "2h05m", "3d04h". Returns buf. */
const char *fmt_ttl(int64_t ms, char *buf, size_t len);

/* Progress bar on stderr, drawn only if stderr is a terminal and `enabled`. */
struct progress {
	bool on;
	double t0, last;
};
void progress_init(struct progress *p, bool enabled);
/* Redraw (at most 10 times a second unless force): bar for done/total, then text. */
void progress_draw(struct progress *p, double done, double total, const char *text, bool force);
/* Erase the bar. */
void progress_end(struct progress *p);

/* Monotonic seconds. */
double now_s(void);

/*
 * The ids of a command: args[0..n) or, if n == 0, whitespace-separated words on stdin.
 * Prints each invalid one. 0 (caller frees *ids), or EXIT_USAGE / 1 as an exit status.
 */
int read_ids(char **args, int n, ucmfs_id **ids, size_t *count);

/* Open MNT, with a message on failure. 0 or exit status 1. */
int open_mount(const char *mnt, struct ucmfs **u);

int cmd_stat(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_lookup(int argc, char **argv);
int cmd_prefetch(int argc, char **argv);
int cmd_verify(int argc, char **argv);

#endif
