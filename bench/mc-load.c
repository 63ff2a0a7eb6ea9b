/* mc-load.c - bulk loader for memcached-compatible servers (bench helper).
 *
 * Sets N keys "key:%08d" (padded with '.' to a fixed key length) holding
 * values of a fixed size, as fast as libmemcached allows (binary protocol,
 * quiet sets written through libmemcached's request buffer), then reads a
 * sample back with multi-get and checks every byte.  Quiet sets carry no
 * per-set status, so the read-back is what proves the load; pass -v n to
 * check every key.  Used by bench/vs-memcached.sh to fill two servers with
 * the same data before comparing their memory use.
 *
 * (With libmemcached 1.1.4, buffered binary sets *with* replies had the
 * connection reset every few hundred sets by memcached 1.6.18; hence quiet
 * sets for the fast path.)
 *
 * Build: cc -O2 -o mc-load mc-load.c $(pkg-config --cflags --libs libmemcached)
 * Usage: mc-load [-s host] -p port [-n keys] [-z value_size] [-k key_len]
 *                [-v sample] [-a] [-u] [-q]
 *   -a  ASCII protocol instead of binary (noreply sets when buffered)
 *   -u  unbuffered: one round trip per set, each status checked (slow)
 *   -v  how many keys to read back (0: none; >= n: all)   -q  quiet
 * Exit status: 0 when every set was accepted and every sampled key read back
 * intact, 1 otherwise, 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <libmemcached/memcached.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_KEY 250
#define MGET_BATCH 100
#define MAX_SET_ERRORS 20
#define MAX_COMPLAINTS 10       /* verification problems printed, at most */

static long complaints;

/* True while verification problems may still be printed. */
static bool may_complain(bool quiet)
{
    return !quiet && complaints++ < MAX_COMPLAINTS;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Key i: "key:%08d" then '.' up to key_len characters. */
static size_t make_key(char *buf, long i, size_t key_len)
{
    int n = snprintf(buf, MAX_KEY + 1, "key:%08ld", i);
    size_t len = (size_t)n;
    while (len < key_len)
        buf[len++] = '.';
    buf[len] = '\0';
    return len;
}

/* Value of key i: a printable pattern that differs from key to key. */
static void make_value(char *buf, long i, size_t size)
{
    for (size_t j = 0; j < size; j++)
        buf[j] = (char)('a' + (unsigned long)(i * 7 + (long)j) % 26);
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [-s host] -p port [-n keys] [-z value_size] [-k key_len]\n"
            "          [-v sample] [-a] [-u] [-q]\n", prog);
}

/* Multi-get keys idx[0..cnt) and compare; returns how many came back intact. */
static long verify_batch(memcached_st *mc, const long *idx, int cnt, size_t key_len,
                         size_t value_size, char *expect, bool quiet)
{
    char keybuf[MGET_BATCH][MAX_KEY + 1];
    const char *keys[MGET_BATCH];
    size_t lens[MGET_BATCH];
    bool seen[MGET_BATCH];

    for (int b = 0; b < cnt; b++) {
        lens[b] = make_key(keybuf[b], idx[b], key_len);
        keys[b] = keybuf[b];
        seen[b] = false;
    }
    memcached_return_t rc = memcached_mget(mc, keys, lens, (size_t)cnt);
    if (rc != MEMCACHED_SUCCESS) {
        fprintf(stderr, "mc-load: mget failed: %s\n", memcached_strerror(mc, rc));
        return 0;
    }
    long good = 0;
    memcached_result_st *res;
    while ((res = memcached_fetch_result(mc, NULL, &rc)) != NULL) {
        const char *k = memcached_result_key_value(res);
        size_t kl = memcached_result_key_length(res);
        int b;
        for (b = 0; b < cnt; b++)
            if (!seen[b] && kl == lens[b] && memcmp(k, keys[b], kl) == 0)
                break;
        if (b == cnt) {
            if (may_complain(quiet))
                fprintf(stderr, "mc-load: unexpected key %.*s\n", (int)kl, k);
        } else {
            seen[b] = true;
            make_value(expect, idx[b], value_size);
            if (memcached_result_length(res) == value_size &&
                memcmp(memcached_result_value(res), expect, value_size) == 0)
                good++;
            else if (may_complain(quiet))
                fprintf(stderr, "mc-load: bad value for %s (%zu bytes)\n",
                        keys[b], memcached_result_length(res));
        }
        memcached_result_free(res);
    }
    for (int b = 0; b < cnt; b++)
        if (!seen[b] && may_complain(quiet))
            fprintf(stderr, "mc-load: missing %s\n", keys[b]);
    return good;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 0;
    long n = 100000, sample = 1000;
    long value_size = 1024, key_len = 12;
    bool binary = true, buffered = true, quiet = false;
    int opt;

    while ((opt = getopt(argc, argv, "s:p:n:z:k:v:auqh")) != -1) {
        switch (opt) {
        case 's': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'n': n = atol(optarg); break;
        case 'z': value_size = atol(optarg); break;
        case 'k': key_len = atol(optarg); break;
        case 'v': sample = atol(optarg); break;
        case 'a': binary = false; break;
        case 'u': buffered = false; break;
        case 'q': quiet = true; break;
        default: usage(argv[0]); return 2;
        }
    }
    if (port <= 0 || port > 65535 || n < 1 || n > 99999999 || value_size < 1 ||
        value_size > 1024 * 1024 || key_len < 12 || key_len > MAX_KEY || sample < 0) {
        usage(argv[0]);
        return 2;
    }

    memcached_st *mc = memcached_create(NULL);
    if (mc == NULL || memcached_server_add(mc, host, (in_port_t)port) != MEMCACHED_SUCCESS) {
        fprintf(stderr, "mc-load: cannot set up client for %s:%d\n", host, port);
        return 1;
    }
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, binary);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS, buffered);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_NOREPLY, buffered);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 2000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 5000);

    char *value = malloc((size_t)value_size);
    char *expect = malloc((size_t)value_size);
    if (value == NULL || expect == NULL) {
        fprintf(stderr, "mc-load: out of memory\n");
        return 1;
    }

    /* Load. */
    char key[MAX_KEY + 1];
    long errors = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        size_t klen = make_key(key, i, (size_t)key_len);
        make_value(value, i, (size_t)value_size);
        memcached_return_t rc = memcached_set(mc, key, klen, value, (size_t)value_size, 0, 0);
        if (rc != MEMCACHED_SUCCESS && rc != MEMCACHED_BUFFERED) {
            fprintf(stderr, "mc-load: set %s: %s\n", key, memcached_strerror(mc, rc));
            if (++errors >= MAX_SET_ERRORS) {
                fprintf(stderr, "mc-load: too many errors, giving up\n");
                return 1;
            }
        }
    }
    memcached_return_t frc = memcached_flush_buffers(mc);
    if (frc != MEMCACHED_SUCCESS) {
        fprintf(stderr, "mc-load: flush: %s\n", memcached_strerror(mc, frc));
        errors++;
    }
    double t_load = now_s() - t0;

    /* Verify: an even spread over the keyspace, always including the last key
     * (the first multi-get also drains any replies still owed to the sets). */
    long checked = 0, good = 0;
    if (sample > 0) {
        long count = sample < n ? sample : n;
        long idx[MGET_BATCH];
        int cnt = 0;
        for (long s = 0; s < count; s++) {
            idx[cnt++] = (s == count - 1) ? n - 1 : (long)((double)s * (double)n / (double)count);
            if (cnt == MGET_BATCH || s == count - 1) {
                good += verify_batch(mc, idx, cnt, (size_t)key_len, (size_t)value_size,
                                     expect, quiet);
                checked += cnt;
                cnt = 0;
            }
        }
    }
    double t_all = now_s() - t0;

    printf("mc-load: set %ld keys (key %ld B, value %ld B, %s%s) in %.2f s = %.0f sets/s, "
           "%ld set errors; verified %ld/%ld in %.2f s\n",
           n, key_len, value_size, binary ? "binary" : "ascii",
           buffered ? ", quiet+buffered" : ", one by one", t_load, (double)n / t_load, errors,
           good, checked, t_all - t_load);

    memcached_free(mc);
    free(value);
    free(expect);
    return (errors == 0 && good == checked) ? 0 : 1;
}
