// trainer/estimate.h: `train_t5 estimate` (estimate.c).
#pragma once

int estimate_main(int argc, char **argv, int start);
