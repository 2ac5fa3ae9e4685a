/** The bucket keys Gantry uses; the configuration decides their ceilings. */
import type { BucketLimits, BucketSpec } from './types.js';

/** The account-wide bucket, shared by all the account's keys and models. */
export function accountBucket(limits: BucketLimits): BucketSpec {
  return { key: 'account', limits };
}

/** The account×model bucket: a burst on one model does not spend another's budget (spec 8, rule 1). */
export function modelBucket(model: string, limits: BucketLimits): BucketSpec {
  return { key: `model:${model}`, limits };
}
