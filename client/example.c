/* example.c - a libcocytus example: connect to a cluster, store and read a
 * few keys, count with incr, read them all back with one multi-get.
 *
 *   cc example.c $(pkg-config --cflags --libs libcocytus) -o example
 *   ./example 127.0.0.1:11211 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <libcocytus.h>

static void print_item(void *ctx, const char *key, size_t nkey, const cocytus_item_t *it)
{
    (void)ctx;
    printf("  %.*s = %.*s\n", (int)nkey, key, (int)it->nvalue, it->value);
}

static int fail(cocytus_t *c, const char *what, cocytus_rc rc)
{
    fprintf(stderr, "%s: %s (%s)\n", what, cocytus_strerror(rc), cocytus_last_error(c));
    cocytus_close(c);
    return 1;
}

int main(int argc, char **argv)
{
    const char *seeds = argc > 1 ? argv[1] : "127.0.0.1:11211";
    const char *keys[] = { "fruit:1", "fruit:2", "fruit:3" };
    const char *values[] = { "apple", "banana", "cherry" };
    size_t nkeys[3];
    char err[256];
    cocytus_item_t item;
    uint64_t visits = 0;
    cocytus_rc rc;

    cocytus_t *c = cocytus_connect(seeds, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "connect %s: %s\n", seeds, err);
        return 1;
    }
    printf("map epoch %" PRIu64 ", %zu endpoint(s)\n", cocytus_epoch(c),
           cocytus_endpoint_count(c));

    for (int i = 0; i < 3; i++) {
        nkeys[i] = strlen(keys[i]);
        rc = cocytus_set(c, keys[i], nkeys[i], values[i], strlen(values[i]), 0, 0);
        if (rc != COCYTUS_OK)
            return fail(c, "set", rc);
        printf("%s -> slot %u\n", keys[i], cocytus_key_slot(keys[i], nkeys[i]));
    }

    rc = cocytus_get(c, keys[0], nkeys[0], &item);
    if (rc != COCYTUS_OK)
        return fail(c, "get", rc);
    printf("get %s: %s (cas %" PRIu64 ")\n", keys[0], item.value, item.cas);
    cocytus_item_free(&item);

    rc = cocytus_arith_init(c, 0, "visits", 6, 1, 1, 0, &visits);
    if (rc != COCYTUS_OK)
        return fail(c, "incr", rc);
    printf("visits: %" PRIu64 "\n", visits);

    printf("multi-get:\n");
    rc = cocytus_mget(c, keys, nkeys, 3, print_item, NULL);
    if (rc != COCYTUS_OK)
        return fail(c, "mget", rc);

    cocytus_close(c);
    return 0;
}
