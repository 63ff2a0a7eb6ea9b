/* sendq.h - batched socket writes: the messages one pass of an event loop
 * has for many sockets, handed to the kernel together.
 *
 * A loop that has replies for twenty clients makes twenty sendmsg() calls,
 * and on a machine whose kernel entry and exit are expensive (a VM, with
 * speculative-execution mitigations) that fixed cost is a large part of
 * what a small write costs.  A sendq collects the messages (socket, iovec,
 * flags) and sends them with one io_uring submission; the kernel runs the
 * same TCP send for each, without the twenty round trips.  Where io_uring
 * cannot be had (built without liburing, an old kernel, a seccomp filter,
 * kernel.io_uring_disabled, or turned off by the caller) sendq_submit
 * makes one sendmsg() per message instead: same results, same order.
 *
 * Rules for the caller: the bytes an iovec points at must stay unchanged
 * until sendq_submit returns (the iovec array itself is copied by
 * sendq_add); at most one message per socket in a batch, so bytes of one
 * socket never race each other; pass MSG_DONTWAIT, since a message that
 * cannot be sent at once must come back as -EAGAIN, not wait.  Results are
 * read by slot after sendq_submit, until the next sendq_reset. */
#ifndef MC_SENDQ_H
#define MC_SENDQ_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SENDQ_MAX_MSGS 256      /* messages in one batch */
#define SENDQ_MAX_IOV 4096      /* iovec entries in one batch, all messages together */

struct sendq;

/* A queue; with use_uring it sets up io_uring at once, bound to the calling
 * thread, which must be the one that submits.  NULL only when out of
 * memory.  why_not, if given, receives a short reason when io_uring is not
 * used (NULL when it is). */
struct sendq *sendq_new(bool use_uring, const char **why_not);
void sendq_free(struct sendq *q);
bool sendq_batched(const struct sendq *q);

/* Queue one message; returns its slot, or -1 when the batch is full (submit,
 * read the results, reset, then add again). */
int sendq_add(struct sendq *q, int fd, const struct iovec *iov, int iovcnt, int flags);
size_t sendq_count(const struct sendq *q);

/* Send everything queued.  Afterwards sendq_result(slot) is the byte
 * count sent, or -errno. */
void sendq_submit(struct sendq *q);
ssize_t sendq_result(const struct sendq *q, int slot);

/* Forget the batch (slots and results). */
void sendq_reset(struct sendq *q);

/* Counters since sendq_new: messages sent, and system calls it took. */
unsigned long long sendq_msgs(const struct sendq *q);
unsigned long long sendq_calls(const struct sendq *q);

#endif
