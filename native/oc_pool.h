/* The native pool (pool.c): threads that run one task beside the caller. */
#ifndef OC_POOL_H
#define OC_POOL_H

/* Run fn(arg) on up to `threads` threads at once, the caller one of them; returns when every
 * call has returned.  fn takes its work from a shared counter: the calls may be fewer. */
void oc_pool_run(void (*fn)(void *), void *arg, int threads);

/* The pool's threads started in this process (for tests). */
int oc_pool_workers(void);

#endif
