/*
 * Metrics: lock-free counters and latency histograms on the hot paths, and a builder of the
 * Prometheus text exposition format that groups samples by family (one # HELP and # TYPE
 * each), for /.ucm/stats.
 */
#ifndef UCM_METRICS_H
#define UCM_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef atomic_uint_fast64_t counter_t;

static inline void counter_add(counter_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline uint64_t counter_get(const counter_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Upper bounds of the latency buckets: 10 us .. 10 s, then +Inf. */
#define HIST_BUCKETS 17

struct histogram {
	counter_t bucket[HIST_BUCKETS]; /* not cumulative: bucket[i] counts bound[i-1] < v <= bound[i] */
	counter_t count;
	counter_t sum_ns;
};

void histogram_observe(struct histogram *h, int64_t ns);
/* The value below which a fraction q of the observations fall (bucket upper bound), in ns. */
int64_t histogram_quantile_ns(const struct histogram *h, double q);

struct metrics;

/* 0 or -ENOMEM. */
int metrics_create(struct metrics **out);
void metrics_free(struct metrics *m);

/* Add one sample. labels is "" or e.g. `tier="mem"` (without braces). Memory exhaustion is
 * recorded and reported by metrics_render(). */
void metrics_counter(struct metrics *m, const char *name, const char *help, const char *labels,
		     uint64_t v);
void metrics_gauge(struct metrics *m, const char *name, const char *help, const char *labels,
		   double v);
void metrics_histogram(struct metrics *m, const char *name, const char *help, const char *labels,
		       const struct histogram *h);

/* Labels (e.g. `branch="1"`) put first in every sample added from now on, until the next
 * call (NULL or "": none). Returns the previous scope, to restore after a nested one. */
const char *metrics_scope(struct metrics *m, const char *labels);

/* The exposition text (caller frees *text). 0 or -ENOMEM. */
int metrics_render(struct metrics *m, char **text, size_t *len);

#endif
