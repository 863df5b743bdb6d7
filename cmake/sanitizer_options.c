/* Default options for every executable of a sanitizer build (RLX_SANITIZE, RLX_FUZZ); the
 * runtime reads them before ASAN_OPTIONS, which still overrides any of them.
 *
 * intercept_tls_get_addr=0: up to GCC 13 and LLVM 16, the runtime's __tls_get_addr hook takes
 * a dynamic TLS block that starts at page offset 16 for a glibc-2.19 block with a header in
 * front, and reads that "header" (in fact the allocator's chunk header) as the block's start
 * and size. LeakSanitizer's tracer then scans that bogus range at exit and segfaults: "Tracer
 * caught signal 11 ... LeakSanitizer has encountered a fatal error". Whether a block lands at
 * that offset depends on the allocation sequence, so it looks like a flake yet repeats
 * exactly on a given machine (it failed CI twice on the same golden test; oneDNN, libgomp and
 * OpenBLAS, all dlopen'ed, have dynamic TLS). Without the hook nothing is lost: glibc's DTV and
 * its blocks are ordinary heap chunks reachable from the thread's static TLS, so pointers held
 * in dynamic TLS still count as references. tests/sanitizer/ reproduces the crash and checks
 * that a real leak is still reported. */
const char* __asan_default_options(void) { return "intercept_tls_get_addr=0"; }
