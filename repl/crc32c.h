/* crc32c.h - CRC-32C (Castagnoli), as used by iSCSI and ext4, to detect
 * corrupted frames between processes. */
#ifndef REPL_CRC32C_H
#define REPL_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC of buf, continuing from crc (start with 0).  Uses the SSE4.2 crc32
 * instruction when the CPU has it, else the table-driven software path. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The two paths separately (tests, benchmarks).  crc32c_hw falls back to the
 * software path when the CPU lacks SSE4.2. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len);
bool crc32c_hw_available(void);

#endif
