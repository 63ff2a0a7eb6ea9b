/* fuzz_control.c - libFuzzer target for the parsers of the control messages
 * between server processes and the coordinator (the text payload of an
 * FT_CONTROL frame; docs/wire-format.md sections 5 and 6).  Each input is
 * one message; control_checks.h says which parsers see it and what must
 * hold besides "no crash, no sanitizer report".
 *
 * With FUZZ_SEED_DIR set in the environment, the target first writes one
 * valid message of every kind there (from the real encoders where there
 * are some), one per file: scripts/fuzz points it at the corpus.
 * Build and run with scripts/fuzz. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_control"
#include "control_checks.h"

struct seed_dir {
    const char *dir;
    int count;
};

static void write_seed(void *ctx, const char *text, size_t len)
{
    struct seed_dir *sd = ctx;
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed_%03d", sd->dir, sd->count++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, FUZZ_NAME ": cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct seed_dir sd = { getenv("FUZZ_SEED_DIR"), 0 };
    if (sd.dir && *sd.dir) {
        seed_control_messages(write_seed, &sd);
        fprintf(stderr, FUZZ_NAME ": %d seed messages written to %s\n", sd.count, sd.dir);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    check_control(data, len);
    return 0;
}
