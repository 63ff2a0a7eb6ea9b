/* msg-cost.c - what one small message between two processes costs in CPU,
 * over loopback TCP and over a Unix stream socket.
 *
 * Why: a coding group's write is mostly messages between its processes
 * (records out, acknowledgements back), and docs/evaluation/cpu-per-op.md
 * found most of their cost in the kernel.  This isolates one message: two
 * processes play ping-pong, each waiting in epoll_wait as the servers do,
 * and the CPU time both spend (getrusage) is divided by the messages.  The
 * wall time per round trip is printed too.  Pinning both to one CPU
 * (taskset -c 0) shows how much of the cost is the wakeup of the other CPU.
 *
 * usage: msg-cost [tcp|unix|both] [bytes] [round trips]
 *   defaults: both 1100 50000; rounds alternate tcp and unix three times. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_BYTES 65536

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

/* A connected pair: loopback TCP (TCP_NODELAY, as links set it) or Unix. */
static void make_pair(int unix_socket, int fds[2])
{
    if (unix_socket) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) < 0)
            die("socketpair");
        return;
    }
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof(sa);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) < 0)
        die("listen");
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)) < 0)
        die("connect");
    fds[1] = accept(lfd, NULL, NULL);
    if (fds[1] < 0)
        die("accept");
    close(lfd);
    setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Wait for one whole message of n bytes. */
static void receive(int ep, int fd, char *buf, size_t n)
{
    struct epoll_event ev;
    size_t got = 0;
    while (got < n) {
        if (epoll_wait(ep, &ev, 1, -1) < 0)
            die("epoll_wait");
        ssize_t r = recv(fd, buf + got, n - got, MSG_DONTWAIT);
        if (r == 0)
            die("peer closed");
        if (r > 0)
            got += (size_t)r;
    }
}

/* One side: the first sends, then both answer what they receive. */
static double play(int fd, int first, size_t n, long trips)
{
    static char buf[MAX_BYTES];
    memset(buf, 'x', n);
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN };
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll");
    double c0 = cpu_s();
    for (long i = 0; i < trips; i++) {
        if (first && send(fd, buf, n, 0) != (ssize_t)n)
            die("send");
        receive(ep, fd, buf, n);
        if (!first && send(fd, buf, n, 0) != (ssize_t)n)
            die("send");
    }
    close(ep);
    return cpu_s() - c0;
}

static void one_run(int unix_socket, size_t n, long trips)
{
    int fds[2], pipefd[2];
    make_pair(unix_socket, fds);
    if (pipe(pipefd) < 0)
        die("pipe");
    double t0 = wall_s();
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        double c = play(fds[1], 0, n, trips);
        if (write(pipefd[1], &c, sizeof(c)) != sizeof(c))
            _exit(1);
        _exit(0);
    }
    double mine = play(fds[0], 1, n, trips), theirs = 0;
    if (read(pipefd[0], &theirs, sizeof(theirs)) != sizeof(theirs))
        die("read");
    waitpid(pid, NULL, 0);
    double wall = wall_s() - t0;
    printf("%-4s %5zu B: %6.2f us wall per round trip, %6.2f CPU-us per message (both ends)\n",
           unix_socket ? "unix" : "tcp", n, wall / (double)trips * 1e6,
           (mine + theirs) / (double)(2 * trips) * 1e6);
    fflush(stdout);
    close(fds[0]);
    close(fds[1]);
    close(pipefd[0]);
    close(pipefd[1]);
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "both";
    size_t n = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 1100;
    long trips = argc > 3 ? strtol(argv[3], NULL, 10) : 50000;
    if (n == 0 || n > MAX_BYTES || trips <= 0 ||
        (strcmp(which, "tcp") != 0 && strcmp(which, "unix") != 0 && strcmp(which, "both") != 0)) {
        fprintf(stderr, "usage: msg-cost [tcp|unix|both] [bytes 1-%d] [round trips]\n",
                MAX_BYTES);
        return 2;
    }
    for (int round = 0; round < 3; round++) {
        if (strcmp(which, "unix") != 0)
            one_run(0, n, trips);
        if (strcmp(which, "tcp") != 0)
            one_run(1, n, trips);
    }
    return 0;
}
