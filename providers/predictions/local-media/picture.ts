/**
 * A deterministic synthetic landscape, painted straight into an RGB24 buffer: a sky gradient, stars at
 * night, a sun or moon with a glow, and three ridges of hills that darken towards the viewer. All the
 * random choices are made first (composeScene), then rows are painted in bands with a turn of the event
 * loop between bands, so a 2048x2048 picture never holds the gateway's other requests up for long.
 * Painting in JS instead of rendering SVG keeps a 512x512 picture at a few milliseconds.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { mix, type Palette, paletteFor, type Rgb } from './palette.js';
import { between, randomFor } from './random.js';

interface Star {
  x: number;
  y: number;
  alpha: number;
}

interface Sun {
  cx: number;
  cy: number;
  radius: number;
  /** The glow reaches this far from the centre. */
  glow: number;
  glowStrength: number;
  color: Rgb;
}

interface Ridge {
  color: Rgb;
  /** The ridge's height (y, from the top) at each column. */
  top: Float64Array;
}

interface Scene {
  width: number;
  height: number;
  palette: Palette;
  /** How much the sky gradient leans left or right. */
  tilt: number;
  /** By row, so a band finds its stars without scanning them all. */
  starsByRow: Map<number, Star[]>;
  sun: Sun;
  ridges: Ridge[];
}

/** About a quarter of a megapixel per band: ~1-2 ms of painting between two turns of the event loop. */
const BAND_PIXELS = 1 << 18;

function composeStars(width: number, height: number, random: () => number): Map<number, Star[]> {
  const byRow = new Map<number, Star[]>();
  const count = Math.round((width * height) / 2500);
  for (let i = 0; i < count; i++) {
    const star = {
      x: Math.floor(random() * width),
      y: Math.floor(random() * height * 0.7),
      alpha: between(random, 0.3, 1),
    };
    const row = byRow.get(star.y);
    if (row) row.push(star);
    else byRow.set(star.y, [star]);
  }
  return byRow;
}

function composeSun(width: number, height: number, palette: Palette, random: () => number): Sun {
  const radius = Math.min(width, height) * between(random, 0.05, 0.11);
  return {
    radius,
    cx: width * between(random, 0.15, 0.85),
    cy: height * between(random, 0.12, 0.4),
    glow: radius * 3,
    glowStrength: palette.mood === 'night' ? 0.2 : 0.45,
    color: palette.sun,
  };
}

/** Ridge `layer` (0 is the farthest): a sum of three random sines around a baseline. */
function composeRidge(
  width: number,
  height: number,
  layer: number,
  layers: number,
  palette: Palette,
  random: () => number,
): Ridge {
  const baseline = height * (0.55 + 0.12 * layer + between(random, -0.03, 0.03));
  const amplitude = height * between(random, 0.04, 0.1);
  const waves = Array.from({ length: 3 }, () => ({
    cycles: between(random, 0.5, 4),
    phase: between(random, 0, Math.PI * 2),
    weight: between(random, 0.3, 1),
  }));
  const totalWeight = waves.reduce((sum, wave) => sum + wave.weight, 0);
  const top = new Float64Array(width);
  for (let x = 0; x < width; x++) {
    let sum = 0;
    for (const wave of waves)
      sum += wave.weight * Math.sin((wave.cycles * 2 * Math.PI * x) / width + wave.phase);
    top[x] = baseline - (amplitude * sum) / totalWeight;
  }
  // Far ridges fade into the sky's horizon colour: aerial perspective on the cheap.
  return { color: mix(palette.skyBottom, palette.ground, (layer + 1) / layers), top };
}

function composeScene(prompt: string, seed: number, width: number, height: number): Scene {
  const random = randomFor(prompt, seed);
  const palette = paletteFor(prompt, random);
  const tilt = between(random, -0.3, 0.3);
  const starsByRow =
    palette.mood === 'night' ? composeStars(width, height, random) : new Map<number, Star[]>();
  const sun = composeSun(width, height, palette, random);
  const ridges = [0, 1, 2].map((layer) => composeRidge(width, height, layer, 3, palette, random));
  return { width, height, palette, tilt, starsByRow, sun, ridges };
}

// The painters below run once per pixel: plain arithmetic on the buffer, no allocation.

function blendPixel(pixels: Uint8Array, o: number, r: number, g: number, b: number, alpha: number): void {
  pixels[o] = pixels[o]! + (r - pixels[o]!) * alpha;
  pixels[o + 1] = pixels[o + 1]! + (g - pixels[o + 1]!) * alpha;
  pixels[o + 2] = pixels[o + 2]! + (b - pixels[o + 2]!) * alpha;
}

function paintSkyRow(scene: Scene, pixels: Uint8Array, y: number): void {
  const { width, height, tilt } = scene;
  const [r0, g0, b0] = scene.palette.skyTop;
  const [r1, g1, b1] = scene.palette.skyBottom;
  const rowT = (y / height) * 1.4 - tilt * 0.5;
  const stepT = tilt / width;
  for (let x = 0, o = y * width * 3; x < width; x++, o += 3) {
    const t = Math.min(1, Math.max(0, rowT + stepT * x));
    pixels[o] = r0 + (r1 - r0) * t;
    pixels[o + 1] = g0 + (g1 - g0) * t;
    pixels[o + 2] = b0 + (b1 - b0) * t;
  }
}

/** The sun's disc has an anti-aliased edge; its glow falls off with the square of the distance. */
function paintSunRow(scene: Scene, pixels: Uint8Array, y: number): void {
  const { cx, cy, radius, glow, glowStrength, color } = scene.sun;
  const dy = y + 0.5 - cy;
  if (Math.abs(dy) >= glow) return;
  const [r, g, b] = color;
  const x0 = Math.max(0, Math.floor(cx - glow));
  const x1 = Math.min(scene.width - 1, Math.ceil(cx + glow));
  for (let x = x0; x <= x1; x++) {
    const dx = x + 0.5 - cx;
    const d = Math.sqrt(dx * dx + dy * dy);
    if (d >= glow) continue;
    const disc = Math.min(1, Math.max(0, radius - d + 0.5));
    const falloff = 1 - d / glow;
    blendPixel(pixels, (y * scene.width + x) * 3, r, g, b, Math.max(disc, glowStrength * falloff * falloff));
  }
}

/** The ridge's own row is partly covered (anti-aliasing); below it the hill darkens towards the viewer. */
function paintRidgeRow(scene: Scene, ridge: Ridge, pixels: Uint8Array, y: number): void {
  const { width, height } = scene;
  const [r, g, b] = ridge.color;
  for (let x = 0, o = y * width * 3; x < width; x++, o += 3) {
    const top = ridge.top[x]!;
    const below = y - top;
    if (below <= -1) continue;
    if (below < 0) {
      blendPixel(pixels, o, r, g, b, below + 1);
      continue;
    }
    const darken = 1 - (0.35 * below) / Math.max(1, height - top);
    pixels[o] = r * darken;
    pixels[o + 1] = g * darken;
    pixels[o + 2] = b * darken;
  }
}

function paintRow(scene: Scene, pixels: Uint8Array, y: number): void {
  paintSkyRow(scene, pixels, y);
  for (const star of scene.starsByRow.get(y) ?? []) {
    blendPixel(pixels, (y * scene.width + star.x) * 3, 255, 255, 240, star.alpha);
  }
  paintSunRow(scene, pixels, y);
  for (const ridge of scene.ridges) paintRidgeRow(scene, ridge, pixels, y);
}

/** The raw RGB24 pixels (width * height * 3 bytes) of the picture for `prompt` and `seed`. */
export async function renderPicture(
  prompt: string,
  seed: number,
  width: number,
  height: number,
): Promise<Uint8Array> {
  const scene = composeScene(prompt, seed, width, height);
  const pixels = new Uint8Array(width * height * 3);
  const bandRows = Math.max(1, Math.floor(BAND_PIXELS / width));
  for (let y = 0; y < height; y++) {
    if (y > 0 && y % bandRows === 0) await nextTurn();
    paintRow(scene, pixels, y);
  }
  return pixels;
}
