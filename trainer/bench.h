// trainer/bench.h: `train_t5 bench`, training throughput on synthetic batches (bench.c).
#pragma once

int bench_main(int argc, char **argv, int start);
