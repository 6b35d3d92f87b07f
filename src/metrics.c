#include "src/metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double bounds_s[HIST_BUCKETS - 1] = { 1e-5,   5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
						   2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 1e-1,
						   2.5e-1, 5e-1, 1.0,  10.0 };

void histogram_observe(struct histogram *h, int64_t ns)
{
	int i = 0;

	if (ns < 0)
		ns = 0;
	while (i < HIST_BUCKETS - 1 && (double)ns > bounds_s[i] * 1e9)
		i++;
	counter_add(&h->bucket[i], 1);
	counter_add(&h->count, 1);
	counter_add(&h->sum_ns, (uint64_t)ns);
}

int64_t histogram_quantile_ns(const struct histogram *h, double q)
{
	uint64_t n = counter_get(&h->count), seen = 0;

	if (n == 0)
		return 0;
	for (int i = 0; i < HIST_BUCKETS - 1; i++) {
		seen += counter_get(&h->bucket[i]);
		if ((double)seen >= q * (double)n)
			return (int64_t)(bounds_s[i] * 1e9);
	}
	return (int64_t)(bounds_s[HIST_BUCKETS - 2] * 1e9);
}

struct family {
	char name[96];
	const char *type;
	char help[160];
	char *text;      /* sample lines */
	size_t len, cap;
};

struct metrics {
	struct family *fam;
	size_t n, cap;
	int err;
	const char *scope;      /* labels of every sample added now (metrics_scope) */
};

int metrics_create(struct metrics **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		free(m->fam[i].text);
	free(m->fam);
	free(m);
}

static struct family *family(struct metrics *m, const char *name, const char *type,
			     const char *help)
{
	for (size_t i = 0; i < m->n; i++)
		if (!strcmp(m->fam[i].name, name))
			return &m->fam[i];
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 32;
		struct family *v = realloc(m->fam, cap * sizeof(*v));

		if (!v) {
			m->err = -ENOMEM;
			return NULL;
		}
		m->fam = v;
		m->cap = cap;
	}
	struct family *f = &m->fam[m->n++];

	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	snprintf(f->help, sizeof(f->help), "%s", help);
	f->type = type;
	return f;
}

static void append(struct metrics *m, struct family *f, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!f)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(f->text ? f->text + f->len : NULL, f->cap - f->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < f->cap - f->len) {
			f->len += (size_t)n;
			return;
		}
		size_t cap = (f->cap + (size_t)n + 1) * 2;
		char *t = realloc(f->text, cap);

		if (!t) {
			m->err = -ENOMEM;
			return;
		}
		f->text = t;
		f->cap = cap;
	}
}

const char *metrics_scope(struct metrics *m, const char *labels)
{
	const char *old = m->scope;

	m->scope = labels && *labels ? labels : NULL;
	return old;
}

/* name{scope,labels,extra}: the parts that are set, comma-separated */
static void sample_name(const struct metrics *m, char *out, size_t len, const char *name,
			const char *suffix, const char *labels, const char *extra)
{
	const char *part[3] = { m->scope, labels, extra };
	size_t n = (size_t)snprintf(out, len, "%s%s", name, suffix);
	bool open = false;

	for (int i = 0; i < 3 && n < len; i++) {
		if (!part[i] || !*part[i])
			continue;
		n += (size_t)snprintf(out + n, len - n, "%s%s", open ? "," : "{", part[i]);
		open = true;
	}
	if (open && n < len)
		snprintf(out + n, len - n, "}");
}

void metrics_counter(struct metrics *m, const char *name, const char *help, const char *labels,
		     uint64_t v)
{
	char s[256];

	sample_name(m, s, sizeof(s), name, "", labels, NULL);
	append(m, family(m, name, "counter", help), "%s %llu\n", s, (unsigned long long)v);
}

void metrics_gauge(struct metrics *m, const char *name, const char *help, const char *labels,
		   double v)
{
	char s[256];

	sample_name(m, s, sizeof(s), name, "", labels, NULL);
	append(m, family(m, name, "gauge", help), "%s %.17g\n", s, v);
}

void metrics_histogram(struct metrics *m, const char *name, const char *help, const char *labels,
		       const struct histogram *h)
{
	struct family *f = family(m, name, "histogram", help);
	uint64_t cum = 0;
	char s[256], le[32];

	for (int i = 0; i < HIST_BUCKETS; i++) {
		cum += counter_get(&h->bucket[i]);
		if (i < HIST_BUCKETS - 1)
			snprintf(le, sizeof(le), "le=\"%g\"", bounds_s[i]);
		else
			snprintf(le, sizeof(le), "le=\"+Inf\"");
		sample_name(m, s, sizeof(s), name, "_bucket", labels, le);
		append(m, f, "%s %llu\n", s, (unsigned long long)cum);
	}
	sample_name(m, s, sizeof(s), name, "_sum", labels, NULL);
	append(m, f, "%s %.9f\n", s, (double)counter_get(&h->sum_ns) / 1e9);
	sample_name(m, s, sizeof(s), name, "_count", labels, NULL);
	append(m, f, "%s %llu\n", s, (unsigned long long)cum);
}

int metrics_render(struct metrics *m, char **text, size_t *len)
{
	size_t total = 1, off = 0;
	char *t;

	if (m->err)
		return m->err;
	for (size_t i = 0; i < m->n; i++)
		total += m->fam[i].len + strlen(m->fam[i].name) * 2 + strlen(m->fam[i].help) + 40;
	t = malloc(total);
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < m->n; i++) {
		struct family *f = &m->fam[i];

		off += (size_t)snprintf(t + off, total - off, "# HELP %s %s\n# TYPE %s %s\n",
					f->name, f->help, f->name, f->type);
		if (f->len) {
			memcpy(t + off, f->text, f->len);
			off += f->len;
		}
	}
	t[off] = '\0';
	*text = t;
	*len = off;
	return 0;
}
