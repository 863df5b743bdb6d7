/* A library with dynamic TLS (global-dynamic model: it is dlopen'ed), 24 bytes of it, so that
 * glibc allocates its block for a thread with malloc(24) on the first access. */
__thread char tls_bytes[16];
__thread void* tls_ptr;

void* tls_touch(void* p) {
  tls_ptr = p;
  return tls_bytes;
}
