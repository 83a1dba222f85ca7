// The machine's floor for issue 6's fan-out, with no gateway at all: one thread sends a 100-byte message to each of
// 5,000 connected Unix stream sockets (socketpairs), one thread reads them with epoll (edge-triggered, one recv per
// readiness, as sbbench's FanoutReader does), and each delivery's latency is taken from the start of the send loop.
// 20 rounds; prints the send loop's duration and the delivery percentiles.
//
//   cc -O2 -pthread Tools/bench/fanout-floor.c -o /tmp/fanout-floor && (ulimit -n 20000; /tmp/fanout-floor)
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SUBSCRIBERS 5000
#define ROUNDS 20

static int sender_side[SUBSCRIBERS], reader_side[SUBSCRIBERS];
static int epoll_fd;
static volatile unsigned long long round_start_ns;
static volatile int received;
static unsigned long long latency_ns[SUBSCRIBERS];

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static void *reader(void *unused) {
    (void)unused;
    struct epoll_event events[1024];
    char buffer[65536];
    for (;;) {
        int ready = epoll_wait(epoll_fd, events, 1024, 10);
        for (int i = 0; i < ready; i++) {
            int subscriber = (int)events[i].data.u32;
            if (recv(reader_side[subscriber], buffer, sizeof buffer, 0) > 0) {
                latency_ns[subscriber] = now_ns() - round_start_ns;
                __sync_fetch_and_add(&received, 1);
            }
        }
    }
    return NULL;
}

static int compare(const void *a, const void *b) {
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    static unsigned long long all[SUBSCRIBERS * ROUNDS];
    epoll_fd = epoll_create1(0);
    for (int i = 0; i < SUBSCRIBERS; i++) {
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) { perror("socketpair (raise ulimit -n)"); return 1; }
        sender_side[i] = pair[0];
        reader_side[i] = pair[1];
        fcntl(reader_side[i], F_SETFL, O_NONBLOCK);
        struct epoll_event event = {.events = EPOLLIN | EPOLLET, .data.u32 = (unsigned)i};
        epoll_ctl(epoll_fd, EPOLL_CTL_ADD, reader_side[i], &event);
    }
    pthread_t thread;
    pthread_create(&thread, NULL, reader, NULL);
    char message[100];
    memset(message, 'x', sizeof message);
    double send_ms = 0;
    int count = 0;
    for (int round = 0; round < ROUNDS; round++) {
        usleep(20000);
        received = 0;
        round_start_ns = now_ns();
        for (int i = 0; i < SUBSCRIBERS; i++) send(sender_side[i], message, sizeof message, MSG_NOSIGNAL);
        send_ms += (double)(now_ns() - round_start_ns) / 1e6;
        while (received < SUBSCRIBERS) usleep(200);
        for (int i = 0; i < SUBSCRIBERS; i++) all[count++] = latency_ns[i];
    }
    qsort(all, (size_t)count, sizeof all[0], compare);
    printf("send loop %.1f ms per round; delivery p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", send_ms / ROUNDS,
           (double)all[count / 2] / 1e6, (double)all[count * 99 / 100] / 1e6, (double)all[count - 1] / 1e6);
    return 0;
}
