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
/* iovec entries in one message: the kernel refuses a sendmsg() with more
 * (UIO_MAXIOV, glibc's IOV_MAX), through io_uring as well. */
#define SENDQ_MSG_MAX_IOV 1024

struct sendq;

/* A queue, NULL only when out of memory.  It batches nothing until
 * sendq_start; with use_uring false, never. */
struct sendq *sendq_new(bool use_uring);
/* Sets io_uring up, bound to the calling thread, which must be the one
 * that submits (a process that forks starts it after the fork).  True
 * when messages will be batched; otherwise why_not, if given, receives a
 * short reason.  COCYTUS_NO_IO_URING=1 in the environment has the effect
 * of use_uring false. */
bool sendq_start(struct sendq *q, const char **why_not);
void sendq_free(struct sendq *q);
/* Started, and batching: until then a caller sends for itself. */
bool sendq_batched(const struct sendq *q);

/* Queue one message; returns its slot, or -1 when the batch is full (submit,
 * read the results, reset, then add again). */
int sendq_add(struct sendq *q, int fd, const struct iovec *iov, int iovcnt, int flags);
size_t sendq_count(const struct sendq *q);

/* Send everything queued.  Afterwards sendq_result(slot) is the byte
 * count sent, or -errno. */
void sendq_submit(struct sendq *q);
ssize_t sendq_result(const struct sendq *q, int slot);
/* The byte count a slot's message asked to send. */
size_t sendq_msg_bytes(const struct sendq *q, int slot);

/* Forget the batch (slots and results). */
void sendq_reset(struct sendq *q);

/* ---- writers ----
 * An object with bytes for one socket (a client connection, a replication
 * link) asks to be written at the end of the loop pass with sendq_want.
 * sendq_flush then, in three steps:
 *   1. asks every listed writer for its message (prepare: the socket and
 *      an iovec of at most max entries; 0 for nothing), and sends them all
 *      in one submission;
 *   2. tells every writer whose bytes went how many (sent: n > 0), before
 *      any of them runs anything else: sent only advances the writer's own
 *      output and must not call out, so that when step 3 runs code that
 *      reaches other writers (a completion that flushes another
 *      connection), every buffer already says what left it;
 *   3. hands each its outcome in turn (complete: had false when it had no
 *      message or the batch was full, else the byte count or -errno; -EIO
 *      means the bytes may or may not have gone, so the connection must be
 *      dropped, not written again), whereupon it goes on as after its own
 *      send and writes whatever is left itself.
 * Building the message only at flush time means a writer closed or
 * refilled meanwhile is asked about what it has then.  A listed writer
 * must stay alive until its complete has run; it stays listed (so, for its
 * owner, alive) while earlier writers' completes run. */
struct sendq_writer;
typedef int (*sendq_prepare_fn)(struct sendq_writer *wr, int *fd, struct iovec *iov, int max);
typedef void (*sendq_sent_fn)(struct sendq_writer *wr, size_t n);
typedef void (*sendq_complete_fn)(struct sendq_writer *wr, bool had, ssize_t res);

struct sendq_writer {
    sendq_prepare_fn prepare;
    sendq_sent_fn sent;
    sendq_complete_fn complete;
    struct sendq_writer *next;
    bool listed;
    int slot;
};

void sendq_writer_init(struct sendq_writer *wr, sendq_prepare_fn prepare, sendq_sent_fn sent,
                       sendq_complete_fn complete);
/* Lists wr for the next sendq_flush; false (nothing listed) when the queue
 * is not batching: the caller writes now.  Listing twice is one listing. */
bool sendq_want(struct sendq *q, struct sendq_writer *wr);
/* Writes every listed writer (see above); writers listed again from their
 * complete wait for the next flush. */
void sendq_flush(struct sendq *q);

/* Counters since sendq_new: messages sent, and system calls it took. */
unsigned long long sendq_msgs(const struct sendq *q);
unsigned long long sendq_calls(const struct sendq *q);

#endif
