/**
 * Small deterministic randomness for the local media generators: the same prompt and seed must give the
 * same bytes on every machine, so nothing here may depend on Math.random or the clock.
 */

/** FNV-1a over the UTF-8 bytes of `text`: a stable 32-bit fingerprint of a prompt. */
export function hashText(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** mulberry32: a tiny, fast PRNG with a 32-bit state; returns floats in [0, 1). */
export function createRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One generator per (prompt, seed): both change the picture, neither alone fixes it. */
export function randomFor(prompt: string, seed: number): () => number {
  return createRandom(hashText(prompt) ^ Math.imul(seed >>> 0, 0x9e3779b1));
}

/** A float in [min, max). */
export function between(random: () => number, min: number, max: number): number {
  return min + random() * (max - min);
}
