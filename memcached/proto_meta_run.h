/* proto_meta_run.h - running parsed meta commands (proto_meta.h) on a
 * connection of the text protocol. */
#ifndef MC_PROTO_META_RUN_H
#define MC_PROTO_META_RUN_H

#include <stddef.h>

#include "conn.h"
#include "proto_meta.h"

/* Runs req (MP_OK from meta_parse) on c: engine calls and reply slots. */
void meta_run(struct conn *c, const struct meta_req *req);

/* A store refused as too large: memcached also drops the key's current
 * value.  Deletes key silently and answers the error line. */
void meta_run_too_large(struct conn *c, const char *key, size_t nkey);
/* The silent delete alone (a text set with noreply answers nothing). */
void meta_run_drop_key(struct conn *c, const char *key, size_t nkey);

#endif
