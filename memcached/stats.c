/* stats.c - the "stats" command's content: the server's own counters and
 * settings, followed by whatever the engine reports for the same group.
 * Names follow memcached's so monitoring tools keep working. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include <event2/event.h>

#include "server.h"

static void general_stats(struct server *s, eng_stat_fn emit, void *ctx)
{
    const struct server_stats *st = &s->stats;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    time_t now = time(NULL);
    emit(ctx, "pid", "%ld", (long)getpid());
    emit(ctx, "uptime", "%ld", (long)(now - s->started));
    emit(ctx, "time", "%ld", (long)now);
    emit(ctx, "version", "%s", MC_VERSION_STRING);
    emit(ctx, "libevent", "%s", event_get_version());
    emit(ctx, "pointer_size", "%d", (int)(8 * sizeof(void *)));
    emit(ctx, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    emit(ctx, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    emit(ctx, "max_connections", "%d", s->settings.max_conns);
    emit(ctx, "curr_connections", "%llu", (unsigned long long)st->curr_conns);
    emit(ctx, "total_connections", "%llu", (unsigned long long)st->total_conns);
    emit(ctx, "rejected_connections", "%llu", (unsigned long long)st->rejected_conns);
    emit(ctx, "idle_kicks", "%llu", (unsigned long long)st->idle_kicks);
    emit(ctx, "listen_disabled_num", "%llu", (unsigned long long)st->listen_disabled);
    emit(ctx, "connection_structures", "%llu", (unsigned long long)st->curr_conns);
    emit(ctx, "cmd_get", "%llu", (unsigned long long)st->cmd_get);
    emit(ctx, "cmd_set", "%llu", (unsigned long long)st->cmd_set);
    emit(ctx, "cmd_flush", "%llu", (unsigned long long)st->cmd_flush);
    emit(ctx, "cmd_touch", "%llu", (unsigned long long)st->cmd_touch);
    emit(ctx, "get_hits", "%llu", (unsigned long long)st->get_hits);
    emit(ctx, "get_misses", "%llu", (unsigned long long)st->get_misses);
    emit(ctx, "delete_misses", "%llu", (unsigned long long)st->delete_misses);
    emit(ctx, "delete_hits", "%llu", (unsigned long long)st->delete_hits);
    emit(ctx, "incr_misses", "%llu", (unsigned long long)st->incr_misses);
    emit(ctx, "incr_hits", "%llu", (unsigned long long)st->incr_hits);
    emit(ctx, "decr_misses", "%llu", (unsigned long long)st->decr_misses);
    emit(ctx, "decr_hits", "%llu", (unsigned long long)st->decr_hits);
    emit(ctx, "cas_misses", "%llu", (unsigned long long)st->cas_misses);
    emit(ctx, "cas_hits", "%llu", (unsigned long long)st->cas_hits);
    emit(ctx, "cas_badval", "%llu", (unsigned long long)st->cas_badval);
    emit(ctx, "touch_hits", "%llu", (unsigned long long)st->touch_hits);
    emit(ctx, "touch_misses", "%llu", (unsigned long long)st->touch_misses);
    emit(ctx, "auth_cmds", "%llu", (unsigned long long)st->auth_cmds);
    emit(ctx, "auth_errors", "%llu", (unsigned long long)st->auth_errors);
    emit(ctx, "bytes_read", "%llu", (unsigned long long)st->bytes_read);
    emit(ctx, "bytes_written", "%llu", (unsigned long long)st->bytes_written);
    emit(ctx, "accepting_conns", "%d", s->accepting ? 1 : 0);
    emit(ctx, "threads", "%d", 1);
    emit(ctx, "role", "%s", s->settings.role);
    emit(ctx, "migrate_moves", "%llu", (unsigned long long)st->migrate_moves);
    emit(ctx, "migrate_keys_sent", "%llu", (unsigned long long)st->migrate_keys_sent);
    emit(ctx, "migrate_forwards", "%llu", (unsigned long long)st->migrate_forwards);
    emit(ctx, "import_keys", "%llu", (unsigned long long)st->import_keys);
}

static void settings_stats(struct server *s, eng_stat_fn emit, void *ctx)
{
    const struct settings *st = &s->settings;
    emit(ctx, "maxbytes", "%zu", st->mem_limit);
    emit(ctx, "maxconns", "%d", st->max_conns);
    emit(ctx, "tcpport", "%d", s->bound_port);
    emit(ctx, "udpport", "%d", st->udp_port);
    emit(ctx, "inter", "%s", st->listen_addr ? st->listen_addr : "NULL");
    emit(ctx, "verbosity", "%d", st->verbose);
    emit(ctx, "evictions", "%s", st->evict ? "on" : "off");
    emit(ctx, "cas_enabled", "%s", st->cas_enabled ? "yes" : "no");
    emit(ctx, "tcp_backlog", "%d", st->backlog);
    emit(ctx, "binding_protocol", "%s", "auto-negotiate");
    emit(ctx, "item_size_max", "%zu", st->item_size_max);
    emit(ctx, "num_threads", "%d", 1);
    emit(ctx, "hashpower_init", "%u", st->hashpower);
    emit(ctx, "idle_timeout", "%d", st->idle_timeout);
    emit(ctx, "shutdown_command", "%s", st->shutdown_enabled ? "yes" : "no");
    emit(ctx, "role", "%s", st->role);
}

void engine_vreply(eng_write_fn write, void *ctx, const char *fmt, va_list ap)
{
    char line[512];
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    if (n > 0)
        write(ctx, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void engine_reply(eng_write_fn write, void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    engine_vreply(write, ctx, fmt, ap);
    va_end(ap);
}

uint64_t engine_process_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

bool server_stats(struct server *s, const char *group, eng_stat_fn emit, void *ctx)
{
    struct engine *e = s->engine;
    if (group[0] == '\0') {
        general_stats(s, emit, ctx);
        e->ops->stats(e, "", emit, ctx);
        return true;
    }
    if (strcmp(group, "settings") == 0) {
        settings_stats(s, emit, ctx);
        e->ops->stats(e, "settings", emit, ctx);
        return true;
    }
    return e->ops->stats(e, group, emit, ctx);
}

void server_stats_reset(struct server *s)
{
    struct server_stats *st = &s->stats;
    /* Connection gauges are current state, not counters. */
    uint64_t curr = st->curr_conns;
    memset(st, 0, sizeof(*st));
    st->curr_conns = curr;
    s->engine->ops->stats_reset(s->engine);
}
