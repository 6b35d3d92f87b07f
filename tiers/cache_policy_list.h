/* A circular doubly linked list of policy entries, shared by the list-based policies. */
#ifndef UCM_CACHE_POLICY_LIST_H
#define UCM_CACHE_POLICY_LIST_H

#include "tiers/cache_policy.h"

static inline void plist_init(struct policy_entry *head)
{
	head->next = head->prev = head;
}

static inline int plist_empty(const struct policy_entry *head)
{
	return head->next == head;
}

static inline void plist_del(struct policy_entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = e->prev = NULL;
}

/* Insert e just before pos (at the tail when pos is the head). */
static inline void plist_insert_before(struct policy_entry *pos, struct policy_entry *e)
{
	e->next = pos;
	e->prev = pos->prev;
	pos->prev->next = e;
	pos->prev = e;
}

#endif
