import { randomFillSync } from 'node:crypto';

let lastMs = -1;
let sequence = 0;

// Random bytes drawn 4 KiB at a time: one syscall per 256 ids instead of one or two per id.
const POOL_SIZE = 4096;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let poolOffset = POOL_SIZE;

function random16(): Buffer {
  if (poolOffset + 16 > POOL_SIZE) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const bytes = Buffer.from(pool.subarray(poolOffset, poolOffset + 16));
  poolOffset += 16;
  return bytes;
}

/**
 * A UUIDv7 (RFC 9562): 48-bit Unix milliseconds then randomness, so ids sort by creation time and
 * are unique across instances without coordination. Within one millisecond a 12-bit counter keeps ids
 * from one process in order.
 */
export function newUsageId(now: number = Date.now()): string {
  const bytes = random16();
  if (now === lastMs) {
    sequence = (sequence + 1) & 0xfff;
  } else {
    lastMs = now;
    sequence = bytes.readUInt16BE(14) & 0x7ff;
  }
  bytes.writeUIntBE(now, 0, 6);
  bytes[6] = 0x70 | (sequence >> 8);
  bytes[7] = sequence & 0xff;
  bytes[8] = 0x80 | ((bytes[8] ?? 0) & 0x3f);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
