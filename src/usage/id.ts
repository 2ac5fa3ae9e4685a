import { randomFillSync } from 'node:crypto';

// Random bytes drawn 4 KiB at a time (one syscall per 512 ids), kept as hex too, so an id's random part
// is two slices of one string rather than eight byte-to-hex lookups.
const POOL_SIZE = 4096;
const RANDOM_BYTES = 8;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let poolHex = '';
let poolOffset = POOL_SIZE;

let lastMs = -1;
let sequence = 0;
/** The first 15 characters of every id made in `lastMs`: its time, and the version digit 7. */
let timePrefix = '';

const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

/**
 * A UUIDv7 (RFC 9562): 48-bit Unix milliseconds then randomness, so ids sort by creation time and
 * are unique across instances without coordination. Within one millisecond a 12-bit counter keeps ids
 * from one process in order.
 */
export function newUsageId(now: number = Date.now()): string {
  if (poolOffset + RANDOM_BYTES > POOL_SIZE) {
    randomFillSync(pool);
    poolHex = pool.toString('hex');
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
    const time = now.toString(16).padStart(12, '0');
    timePrefix = `${time.slice(0, 8)}-${time.slice(8, 12)}-7`;
  }
  const h = 2 * r;
  // The variant bits (10) go into the first random byte; bytes 6 and 7 seeded the sequence above.
  return (
    `${timePrefix}${sequence.toString(16).padStart(3, '0')}-` +
    `${HEX[0x80 | ((pool[r] as number) & 0x3f)]}${poolHex.slice(h + 2, h + 4)}-${poolHex.slice(h + 4, h + 16)}`
  );
}

let isoMs = -1;
let isoText = '';
let isoSecond = -1;
/** `YYYY-MM-DDTHH:MM:SS.` of `isoSecond`. */
let isoPrefix = '';
const MILLIS = Array.from({ length: 1000 }, (_, ms) => String(ms).padStart(3, '0'));

/**
 * `now` as an ISO 8601 timestamp (a usage record's time), as Date.prototype.toISOString() writes it: the
 * date and time formatted once per second, the milliseconds appended.
 */
export function usageTime(now: number = Date.now()): string {
  if (now !== isoMs) {
    isoMs = now;
    const second = Math.floor(now / 1000);
    if (second !== isoSecond) {
      isoSecond = second;
      isoPrefix = new Date(second * 1000).toISOString().slice(0, 20);
    }
    isoText = `${isoPrefix}${MILLIS[now - second * 1000]}Z`;
  }
  return isoText;
}
