// Rate limits on requests and tokens per minute (SPEC §9): the store (in-process or Redis) behind one interface.
export { MemoryLimitStore } from './memory.js';
export { RedisLimitStore, type RedisLimitOptions } from './redis.js';
export type { Admission, BucketSpec, BucketState, LimitStore } from './buckets.js';
export { AuthFailureLimiter, type AuthFailureOptions } from './auth-failures.js';
