import { randomFillSync } from 'node:crypto';

let lastMs = -1;
let sequence = 0;

// Random bytes drawn 4 KiB at a time: one syscall per 512 ids instead of one or two per id.
const POOL_SIZE = 4096;
const RANDOM_BYTES = 8;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let poolOffset = POOL_SIZE;

const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

/**
 * A UUIDv7 (RFC 9562): 48-bit Unix milliseconds then randomness, so ids sort by creation time and
 * are unique across instances without coordination. Within one millisecond a 12-bit counter keeps ids
 * from one process in order. Built as a string straight from the random pool (no Buffer per id).
 */
export function newUsageId(now: number = Date.now()): string {
  if (poolOffset + RANDOM_BYTES > POOL_SIZE) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const r = poolOffset;
  poolOffset += RANDOM_BYTES;
  if (now === lastMs) {
    sequence = (sequence + 1) & 0xfff;
  } else {
    lastMs = now;
    // Starts low enough in the 12 bits that a busy millisecond rarely wraps.
    sequence = ((pool[r + 6] as number) * 256 + (pool[r + 7] as number)) & 0x7ff;
  }
  const time = now.toString(16).padStart(12, '0');
  const b = pool;
  return (
    `${time.slice(0, 8)}-${time.slice(8, 12)}-${(0x7000 | sequence).toString(16)}-` +
    `${HEX[0x80 | ((b[r] as number) & 0x3f)]}${HEX[b[r + 1] as number]}-` +
    `${HEX[b[r + 2] as number]}${HEX[b[r + 3] as number]}${HEX[b[r + 4] as number]}` +
    `${HEX[b[r + 5] as number]}${HEX[b[r + 6] as number]}${HEX[b[r + 7] as number]}`
  );
}
