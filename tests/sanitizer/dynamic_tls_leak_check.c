/* Regression test for the sanitizer setup (cmake/sanitizer_options.c): places a dlopen'ed
 * library's dynamic TLS block at page offset 16, the offset at which the runtime's
 * __tls_get_addr hook misreads the block and LeakSanitizer's tracer then crashes at exit.
 *
 *   dynamic_tls_leak_check MODULE [leak]
 *
 * Prints where the block landed and exits 0; LeakSanitizer then checks for leaks at exit.
 * With "leak", it also drops a 33-byte block: the check must still report it. A block held
 * only in the module's dynamic TLS is not a leak and must not be reported.
 * Exits 3 when the block could not be placed at offset 16 (the runtime's allocator lays out
 * chunks differently): the test then fails rather than passing without checking anything. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* keep[4096];
static void* volatile sink;

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODULE [leak]\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  void* (*touch)(void*) = (void* (*)(void*))dlsym(h, "tls_touch");
  if (!touch) return 2;
  /* The allocator hands out a size class's chunks in address order: allocate same-class blocks
   * until the next one would start at page offset 16. */
  size_t n = 0;
  while (n < sizeof keep / sizeof keep[0]) {
    keep[n] = malloc(24);
    if (((uintptr_t)keep[n++] + 48) % 4096 == 16) break;
  }
  void* held_in_tls = malloc(100);
  uintptr_t block = (uintptr_t)touch(held_in_tls); /* glibc allocates the TLS block here */
  if (block % 4096 != 16) {
    fprintf(stderr, "dynamic TLS block at page offset %u, not 16: cannot reproduce\n", (unsigned)(block % 4096));
    return 3;
  }
  printf("dynamic TLS block at page offset 16 after %zu blocks\n", n);
  if (argc > 2 && strcmp(argv[2], "leak") == 0) sink = malloc(33);
  sink = NULL;
  return 0;
}
