// trainer/plot_cmd.h: `train_t5 plot OUTPUT_DIR [OUTPUT_DIR2 ...] [--out FILE.png]` (plot_cmd.c).
#pragma once

int plot_main(int argc, char **argv, int start);
