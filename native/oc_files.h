/*
 * Temporary files and the disk space they hold (files.c), and the read and write loops every
 * file of the extension uses.
 */
#ifndef OC_FILES_H
#define OC_FILES_H

#include "oc_core.h"

/* files.c: temporary files and the disk space counted against max_spill_bytes */
int oc_set_spill_dir(const char *path);
extern atomic_int_fast64_t oc_spill_limit; /* < 0: unlimited */
extern atomic_int_fast64_t oc_spill_used;
int oc_open_reserved_file(size_t bytes); /* fd counted against max_spill_bytes, or -errno */
int oc_disk_reserve(size_t bytes);       /* against max_spill_bytes: 0 or ENOSPC */
void oc_disk_unreserve(size_t bytes);
int oc_open_unnamed_file(void);                              /* fd or -errno, no space reserved */
int oc_open_file(size_t bytes);                              /* fd or -errno, space reserved */
int oc_reserve_zeros(int fd, uint64_t offset, size_t bytes); /* 0 or errno (ENOSPC) */
int oc_pwrite_all(int fd, const char *data, size_t bytes, uint64_t offset); /* 0 or errno */
int oc_pread_all(int fd, char *dst, size_t n, int64_t offset, size_t *got); /* 0, -1, 1: ends */
int oc_write_all(int fd, const char *p, size_t n);                          /* 0 or errno */
/* Direct I/O's alignment of buffers, offsets and lengths: a page, which every device's logical
 * block divides. */
#define OC_DIRECT_ALIGN 4096
int oc_write_direct(int fd, const char *p, size_t n); /* 0 or errno; see files.c */
int oc_make_private(char *data, size_t bytes, int fd, uint64_t offset); /* copy-on-write file map */
void oc_files_atfork(int phase);

#endif
