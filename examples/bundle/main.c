/* Runs a Glow bundle (glow bundle MODEL -o DIR): no Python, no LLVM, only libc (and libm, pthreads).
 *
 *   ./NAME_run [-w WEIGHTS] [-i INPUT_DIR] [-o OUTPUT_DIR] [-n TIMED_RUNS]
 *
 * Reads the weights (NAME.weights.bin, unless embedded in the object) and every input from
 * INPUT_DIR/<c_name>.bin (raw little-endian bytes, exactly NAME_SIZE_<c_name> of them; missing
 * files leave the input zero), runs once and writes every output to OUTPUT_DIR/<c_name>.bin.
 * With -n N it then times N more runs and prints the median and minimum latency.
 *
 * Build: make BUNDLE=NAME BUNDLE_DIR=DIR (BUNDLE_NAME and BUNDLE_HEADER name the bundle).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include BUNDLE_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define CONFIG CAT(BUNDLE_NAME, _config)

static uint8_t *area(uint64_t size) {
  void *p = NULL;
  size_t n = (size_t)(size ? size : 1);
  if (posix_memalign(&p, (size_t)CONFIG.mem_align, n) != 0) {
    fprintf(stderr, "out of memory (%llu bytes)\n", (unsigned long long)size);
    exit(1);
  }
  memset(p, 0, n);
  return (uint8_t *)p;
}

static int read_file(const char *path, uint8_t *dst, uint64_t size, int required) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (required) fprintf(stderr, "cannot open %s\n", path);
    return required ? -1 : 0;
  }
  size_t got = fread(dst, 1, (size_t)size, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != size || extra) {
    fprintf(stderr, "%s: expected exactly %llu bytes\n", path, (unsigned long long)size);
    return -1;
  }
  return 1;
}

static int write_file(const char *path, const uint8_t *src, uint64_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(src, 1, (size_t)size, f) != size || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    return -1;
  }
  return 0;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  char default_weights[512];
  snprintf(default_weights, sizeof default_weights, "%s.weights.bin", CONFIG.name);
  const char *weights = default_weights, *in_dir = ".", *out_dir = ".";
  int runs = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-w")) weights = argv[i + 1];
    else if (!strcmp(argv[i], "-i")) in_dir = argv[i + 1];
    else if (!strcmp(argv[i], "-o")) out_dir = argv[i + 1];
    else if (!strcmp(argv[i], "-n")) runs = atoi(argv[i + 1]);
    else { fprintf(stderr, "usage: %s [-w WEIGHTS] [-i INPUT_DIR] [-o OUTPUT_DIR] [-n RUNS]\n", argv[0]); return 2; }
  }
  uint8_t *constant = area(CONFIG.constant_mem_size);
  uint8_t *mutable_area = area(CONFIG.mutable_mem_size);
  uint8_t *activations = area(CONFIG.activations_mem_size);
  if (!CONFIG.weights_embedded && read_file(weights, constant, CONFIG.constant_mem_size, 1) < 0) return 1;
  char path[1024];
  for (int k = 0; k < CONFIG.num_io; k++) {
    const glow_bundle_io *io = &CONFIG.io[k];
    if (!io->is_input) continue;
    snprintf(path, sizeof path, "%s/%s.bin", in_dir, io->c_name);
    if (read_file(path, mutable_area + io->offset, io->size, 0) < 0) return 1;
  }
  int rc = CONFIG.entry(constant, mutable_area, activations);
  if (rc != GLOW_BUNDLE_OK) {
    fprintf(stderr, "%s returned %d\n", CONFIG.name, rc);
    return 1;
  }
  for (int k = 0; k < CONFIG.num_io; k++) {
    const glow_bundle_io *io = &CONFIG.io[k];
    if (io->is_input) continue;
    snprintf(path, sizeof path, "%s/%s.bin", out_dir, io->c_name);
    if (write_file(path, mutable_area + io->offset, io->size) < 0) return 1;
    printf("output %s: %s, %llu bytes -> %s\n", io->name, io->dtype, (unsigned long long)io->size, path);
  }
  if (runs > 0) {
    double *ms = malloc(sizeof(double) * (size_t)runs);
    if (!ms) return 1;
    for (int r = 0; r < runs; r++) {
      double t0 = now_ms();
      CONFIG.entry(constant, mutable_area, activations);
      ms[r] = now_ms() - t0;
    }
    qsort(ms, (size_t)runs, sizeof(double), by_value);
    printf("latency: median %.3f ms, min %.3f ms over %d runs (%d thread(s))\n", ms[runs / 2], ms[0], runs,
           CONFIG.threads);
    free(ms);
  }
  free(constant);
  free(mutable_area);
  free(activations);
  return 0;
}
