// trainer/tfrecord.h: TFRecord framing, the container of TensorBoard event files. Each record:
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//   the data, uint32 masked CRC-32C of the data
// (tensorflow/core/lib/io/record_writer.cc). A record is written whole with one fwrite, so a
// run killed between two records leaves a file every reader accepts.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// The framed record in out (cap >= n + 16 bytes); returns its size.
size_t tfrecord_frame(const void *data, size_t n, unsigned char *out);
// Frame and write one record to f (path: for the error); fails loudly on a short write.
void tfrecord_write(FILE *f, const char *path, const void *data, size_t n);
