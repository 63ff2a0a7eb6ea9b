/* test_restart.c - -e's save and load (memcached/restart.c): items come
 * back with value, flags, cas, marks and expiry in LRU order, the cas
 * counter goes on, expired and flushed items stay away, a pending
 * flush_all still comes, the meta stays until consumed, and a changed,
 * truncated or foreign file, or one whose cas values pass the counter, is
 * refused without linking anything; a key saved twice is linked once. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "crc32c.h"
#include "dirsync.h"
#include "hash.h"
#include "items.h"
#include "restart.h"

#define STARTED ((time_t)1700000000)

struct fixture {
    struct mc_clock clock;
    struct item_store s;
};

static char dir[64];
static char path[128];
static char meta[160];

static void setup_paths(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_restart.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/mem", dir);
    snprintf(meta, sizeof(meta), "%s.meta", path);
}

static void remove_paths(void)
{
    unlink(meta);
    unlink(path);
    rmdir(dir);
}

static void open_store(struct fixture *f, time_t now, size_t mem_limit)
{
    struct engine_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.mem_limit = mem_limit;
    cfg.item_size_max = 1 << 20;
    cfg.evict = true;
    cfg.cas_enabled = true;
    cfg.hashpower = 8;
    cfg.started = now;
    clock_init(&f->clock, now);
    ck_assert_int_eq(item_store_init(&f->s, &cfg, &f->clock), 0);
}

static void put(struct fixture *f, const char *key, const char *value, uint32_t flags,
                rel_time_t exptime)
{
    eng_status st;
    size_t nkey = strlen(key), n = strlen(value);
    struct item *it = item_alloc(&f->s, key, nkey, flags, exptime, n, &st);
    ck_assert_ptr_nonnull(it);
    memcpy(item_value(it), value, n);
    uint64_t hv = hash_key(key, nkey);
    enum item_miss why;
    struct item *old = item_lookup(&f->s, key, nkey, hv, &why);
    if (old != NULL)
        item_replace(&f->s, old, it, hv);
    else
        item_link(&f->s, it, hv);
}

static struct item *find(struct fixture *f, const char *key)
{
    enum item_miss why;
    return item_lookup(&f->s, key, strlen(key), hash_key(key, strlen(key)), &why);
}

/* Saves three items (one with a TTL of 10 s, one with a TTL of 100 s, one
 * marked), returns their cas values in order a, b, c. */
static void save_three(uint64_t cas[3], uint64_t *counter)
{
    struct fixture f;
    uint64_t n = 0;
    char err[256];

    open_store(&f, STARTED, 1 << 20);
    put(&f, "a", "alpha", 5, 0);
    put(&f, "b", "beta", 0, clock_exptime(&f.clock, 10));
    put(&f, "c", "gamma", 9, clock_exptime(&f.clock, 100));
    find(&f, "c")->iflags |= ITEM_BINKEY | ITEM_FETCHED;
    item_bump(&f.s, find(&f, "a"));             /* LRU: a, c, b */
    cas[0] = find(&f, "a")->cas;
    cas[1] = find(&f, "b")->cas;
    cas[2] = find(&f, "c")->cas;
    *counter = f.s.cas_counter;
    ck_assert_int_eq(restart_save(&f.s, path, &n, err, sizeof(err)), 0);
    ck_assert_uint_eq(n, 3);
    item_store_destroy(&f.s);
    ck_assert_int_eq(access(meta, F_OK), 0);
}

START_TEST(test_items_come_back)
{
    uint64_t cas[3], counter, n = 9;
    char err[256];
    struct fixture f;

    setup_paths();
    save_three(cas, &counter);
    /* 20 s later: b (10 s) is gone, c has 80 s left. */
    open_store(&f, STARTED + 20, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_LOADED);
    ck_assert_uint_eq(n, 2);
    struct item *a = find(&f, "a"), *c = find(&f, "c");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_null(find(&f, "b"));
    ck_assert_int_eq(memcmp(item_value(a), "alpha", 5), 0);
    ck_assert_uint_eq(a->flags, 5);
    ck_assert_uint_eq(a->cas, cas[0]);
    ck_assert_uint_eq(c->cas, cas[2]);
    ck_assert_uint_eq(c->flags, 9);
    ck_assert_int_eq(c->iflags & (ITEM_BINKEY | ITEM_FETCHED), ITEM_BINKEY | ITEM_FETCHED);
    ck_assert_uint_eq(c->exptime - f.clock.now, 80);
    ck_assert_uint_eq(a->exptime, 0);
    /* The same LRU order, and the next cas above every saved one. */
    ck_assert_ptr_eq(f.s.lru_head, a);
    ck_assert_ptr_eq(f.s.lru_tail, c);
    ck_assert_uint_ge(f.s.cas_counter, counter);
    ck_assert_uint_gt(item_next_cas(&f.s), counter);
    /* Kept until the server started, then consumed: a second start finds
     * nothing. */
    ck_assert_int_eq(access(meta, F_OK), 0);
    restart_consume(path);
    ck_assert_int_ne(access(meta, F_OK), 0);
    item_store_destroy(&f.s);
    open_store(&f, STARTED + 21, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_NONE);
    ck_assert_uint_eq(f.s.curr_items, 0);
    item_store_destroy(&f.s);
    remove_paths();
}
END_TEST

START_TEST(test_flushed_items_are_not_saved)
{
    struct fixture f;
    uint64_t n = 0;
    char err[256];

    setup_paths();
    open_store(&f, STARTED, 1 << 20);
    put(&f, "old", "x", 0, 0);
    item_flush_at(&f.s, f.clock.now, true);
    clock_set(&f.clock, STARTED + 1);
    put(&f, "new", "y", 0, 0);
    ck_assert_int_eq(restart_save(&f.s, path, &n, err, sizeof(err)), 0);
    ck_assert_uint_eq(n, 1);
    item_store_destroy(&f.s);
    open_store(&f, STARTED + 2, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_LOADED);
    ck_assert_uint_eq(n, 1);
    ck_assert_ptr_nonnull(find(&f, "new"));
    ck_assert_ptr_null(find(&f, "old"));
    item_store_destroy(&f.s);
    remove_paths();
}
END_TEST

/* Overwrites one byte of the file at off (or truncates it with -1). */
static void damage(long off)
{
    FILE *fp = fopen(path, "r+");
    ck_assert_ptr_nonnull(fp);
    if (off < 0) {
        ck_assert_int_eq(ftruncate(fileno(fp), 40), 0);
    } else {
        fseek(fp, off, SEEK_SET);
        int ch = fgetc(fp);
        fseek(fp, off, SEEK_SET);
        fputc(ch ^ 0x20, fp);
    }
    fclose(fp);
}

static void refused_after(long off, const char *why)
{
    uint64_t cas[3], counter, n = 9;
    char err[256] = "";
    struct fixture f;

    setup_paths();
    save_three(cas, &counter);
    damage(off);
    open_store(&f, STARTED + 1, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_REFUSED);
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(f.s.curr_items, 0);
    ck_assert_ptr_nonnull(strstr(err, why));
    item_store_destroy(&f.s);
    remove_paths();
}

START_TEST(test_changed_file_refused)
{
    refused_after(60, "does not match its meta");    /* inside a record */
    refused_after(3, "does not match its meta");     /* the header line */
}
END_TEST

START_TEST(test_truncated_file_refused)
{
    refused_after(-1, "not the size its meta says");
}
END_TEST

START_TEST(test_foreign_meta_refused)
{
    uint64_t n = 0;
    char err[256] = "";
    struct fixture f;

    setup_paths();
    FILE *fp = fopen(meta, "w");
    ck_assert_ptr_nonnull(fp);
    fputs("something else\n", fp);
    fclose(fp);
    open_store(&f, STARTED, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_REFUSED);
    ck_assert_ptr_nonnull(strstr(err, "is not a save of this server's"));
    item_store_destroy(&f.s);
    remove_paths();
}
END_TEST

/* Rewrites the meta with one line changed (name value). */
static void set_meta(const char *name, const char *value)
{
    char lines[8][128];
    int n = 0;
    FILE *fp = fopen(meta, "r");
    ck_assert_ptr_nonnull(fp);
    while (n < 8 && fgets(lines[n], sizeof(lines[n]), fp) != NULL)
        n++;
    fclose(fp);
    fp = fopen(meta, "w");
    for (int i = 0; i < n; i++) {
        if (strncmp(lines[i], name, strlen(name)) == 0 && lines[i][strlen(name)] == ' ')
            fprintf(fp, "%s %s\n", name, value);
        else
            fputs(lines[i], fp);
    }
    fclose(fp);
}

START_TEST(test_cas_past_counter_refused)
{
    uint64_t cas[3], counter, n = 9;
    char err[256] = "";
    struct fixture f;

    setup_paths();
    save_three(cas, &counter);
    set_meta("cas_counter", "1");
    open_store(&f, STARTED + 1, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_REFUSED);
    ck_assert_uint_eq(f.s.curr_items, 0);
    item_store_destroy(&f.s);
    remove_paths();
}
END_TEST

/* A file holding one key twice (made by hand: a save never does), with a
 * meta that vouches for it: the first, most recent, copy is linked. */
START_TEST(test_key_twice_linked_once)
{
    struct fixture f;
    uint64_t n = 0;
    char err[256], head[128], body[256], num[64];

    setup_paths();
    open_store(&f, STARTED, 1 << 20);
    put(&f, "k", "one", 0, 0);
    ck_assert_int_eq(restart_save(&f.s, path, &n, err, sizeof(err)), 0);
    item_store_destroy(&f.s);
    FILE *fp = fopen(path, "r");
    ck_assert_ptr_nonnull(fgets(head, sizeof(head), fp));
    size_t nbody = fread(body, 1, sizeof(body), fp);
    fclose(fp);
    fp = fopen(path, "a");
    fwrite(body, 1, nbody, fp);
    fclose(fp);
    uint32_t crc = crc32c(0, head, strlen(head));
    crc = crc32c(crc, body, nbody);
    crc = crc32c(crc, body, nbody);
    set_meta("items", "2");
    snprintf(num, sizeof(num), "%zu", strlen(head) + 2 * nbody);
    set_meta("size", num);
    snprintf(num, sizeof(num), "%08x", crc);
    set_meta("crc32c", num);
    open_store(&f, STARTED + 1, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_LOADED);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(f.s.curr_items, 1);
    item_store_destroy(&f.s);
    remove_paths();
}
END_TEST

/* flush_all 3 before the stop still empties the cache 3 s after it. */
START_TEST(test_pending_flush_restored)
{
    struct fixture f;
    uint64_t n = 0;
    char err[256];

    setup_paths();
    open_store(&f, STARTED, 1 << 20);
    put(&f, "k", "v", 0, 0);
    item_flush_at(&f.s, clock_exptime(&f.clock, 3), true);
    ck_assert_int_eq(restart_save(&f.s, path, &n, err, sizeof(err)), 0);
    item_store_destroy(&f.s);
    open_store(&f, STARTED + 1, 1 << 20);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_LOADED);
    ck_assert_ptr_nonnull(find(&f, "k"));
    clock_set(&f.clock, STARTED + 4);
    ck_assert_ptr_null(find(&f, "k"));
    put(&f, "after", "v", 0, 0);
    ck_assert_ptr_nonnull(find(&f, "after"));
    item_store_destroy(&f.s);
    remove_paths();
}
END_TEST

/* A smaller memory limit keeps the most recently used, as eviction would. */
START_TEST(test_smaller_memory_keeps_recent)
{
    struct fixture f;
    uint64_t n = 0;
    char err[256], key[16], value[2000];

    setup_paths();
    memset(value, 'v', sizeof(value) - 1);
    value[sizeof(value) - 1] = '\0';
    open_store(&f, STARTED, 1 << 20);
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        put(&f, key, value, 0, 0);
    }
    ck_assert_int_eq(restart_save(&f.s, path, &n, err, sizeof(err)), 0);
    item_store_destroy(&f.s);
    open_store(&f, STARTED + 1, 100 * 1024);
    ck_assert_int_eq(restart_load(&f.s, path, &n, err, sizeof(err)), RESTART_LOADED);
    ck_assert_ptr_nonnull(find(&f, "k199"));
    ck_assert_ptr_null(find(&f, "k0"));
    ck_assert_uint_lt(f.s.curr_items, 200);
    ck_assert_uint_gt(f.s.curr_items, 10);
    item_store_destroy(&f.s);
    remove_paths();
}
END_TEST

/* The save's commit (the meta's rename) is made durable by an fsync of the
 * directory, found from the path as the start-up check finds it. */
START_TEST(test_parent_directory)
{
    char dir[8];
    ck_assert_int_eq(dirsync_parent("cache", dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, ".");
    ck_assert_int_eq(dirsync_parent("/cache", dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, "/");
    ck_assert_int_eq(dirsync_parent("/tmp/x/cache", dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, "/tmp/x");
    ck_assert_int_eq(dirsync_parent("/tmp/xyzw/cache", dir, sizeof(dir)), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
    ck_assert_int_eq(dirsync_parent_sync("cache-that-need-not-exist"), 0);   /* "." */
    ck_assert_int_eq(dirsync_parent_sync("/no-such-dir-here/cache"), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("restart");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_items_come_back);
    tcase_add_test(tc, test_flushed_items_are_not_saved);
    tcase_add_test(tc, test_changed_file_refused);
    tcase_add_test(tc, test_truncated_file_refused);
    tcase_add_test(tc, test_foreign_meta_refused);
    tcase_add_test(tc, test_smaller_memory_keeps_recent);
    tcase_add_test(tc, test_cas_past_counter_refused);
    tcase_add_test(tc, test_key_twice_linked_once);
    tcase_add_test(tc, test_pending_flush_restored);
    tcase_add_test(tc, test_parent_directory);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
