/* heartbeat.h: a sign of life from the first step on, until train.log_every's progress lines take over: a run
 * under load printed nothing for its first log_every steps (80-170 s). A line after the first step collected and
 * then whenever progress.h's interval (VX_PROGRESS_S, default 10 s) has passed without a line; on a terminal one
 * line rewritten in place. Rank 0's. */
#pragma once
#include <stdint.h>

typedef struct {
    double last;  /* when the last heartbeat or progress line was printed (0: none yet) */
    int off;      /* a progress line has been printed: log_every has taken over */
    int64_t first; /* the first step this process collected */
} Heartbeat;

/* Step `step` of `steps` collected (loss, its step time) and it printed no progress line: a heartbeat when due. */
void heartbeat_step(Heartbeat *h, int64_t step, int steps, int log_every, double loss, double step_ms);
/* A progress line was printed: no more heartbeats. */
void heartbeat_stop(Heartbeat *h);
