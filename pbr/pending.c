/* pending.c - a primary's records in flight (see pending.h): a FIFO in xid
 * order and a chained hash index over the keyed entries, doubled when it
 * holds more entries than buckets. */
#include "pending.h"

#include <stdlib.h>
#include <string.h>

#define PENDING_FIRST_BUCKETS 1024

int pending_init(struct pending_list *l)
{
    memset(l, 0, sizeof(*l));
    l->buckets = calloc(PENDING_FIRST_BUCKETS, sizeof(*l->buckets));
    if (l->buckets == NULL)
        return -1;
    l->nbuckets = PENDING_FIRST_BUCKETS;
    return 0;
}

void pending_destroy(struct pending_list *l, struct item_store *s)
{
    struct pending *p = l->head;
    while (p != NULL) {
        struct pending *next = p->next;
        if (p->it != NULL)
            item_discard(s, p->it);
        free(p);
        p = next;
    }
    free(l->buckets);
    memset(l, 0, sizeof(*l));
}

static struct pending **bucket_of(const struct pending_list *l, uint64_t hv)
{
    return &l->buckets[hv & (l->nbuckets - 1)];
}

/* Doubles the index; keeps the old one when out of memory (chains grow). */
static void grow_index(struct pending_list *l)
{
    size_t n = l->nbuckets * 2;
    struct pending **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < l->nbuckets; i++) {
        struct pending *p = l->buckets[i];
        while (p != NULL) {
            struct pending *next = p->h_next;
            struct pending **home = &b[p->hv & (n - 1)];
            p->h_next = *home;
            *home = p;
            p = next;
        }
    }
    free(l->buckets);
    l->buckets = b;
    l->nbuckets = n;
}

static void index_insert(struct pending_list *l, struct pending *p)
{
    if (l->count > l->nbuckets)
        grow_index(l);
    struct pending **home = bucket_of(l, p->hv);
    p->h_next = *home;
    *home = p;
}

static void index_remove(struct pending_list *l, struct pending *p)
{
    for (struct pending **pp = bucket_of(l, p->hv); *pp != NULL; pp = &(*pp)->h_next) {
        if (*pp == p) {
            *pp = p->h_next;
            return;
        }
    }
}

struct pending *pending_push(struct pending_list *l, uint64_t xid, enum pending_kind kind,
                             const char *key, size_t nkey, uint64_t hv)
{
    if (nkey > ITEM_KEY_MAX)
        return NULL;
    struct pending *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->xid = xid;
    p->kind = kind;
    p->hv = hv;
    p->nkey = (uint8_t)nkey;
    if (nkey > 0) {
        memcpy(p->key, key, nkey);
        index_insert(l, p);
    }
    if (l->tail != NULL)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->count++;
    return p;
}

struct pending *pending_find(const struct pending_list *l, const char *key, size_t nkey,
                             uint64_t hv)
{
    for (struct pending *p = *bucket_of(l, hv); p != NULL; p = p->h_next) {
        if (p->hv == hv && p->nkey == nkey && memcmp(p->key, key, nkey) == 0)
            return p;
    }
    return NULL;
}

struct pending *pending_pop(struct pending_list *l)
{
    struct pending *p = l->head;
    if (p == NULL)
        return NULL;
    l->head = p->next;
    if (l->head == NULL)
        l->tail = NULL;
    if (p->nkey > 0)
        index_remove(l, p);
    p->next = NULL;
    p->h_next = NULL;
    l->count--;
    return p;
}

size_t pending_bytes(const struct pending_list *l)
{
    return l->nbuckets * sizeof(*l->buckets) + l->count * sizeof(struct pending);
}
