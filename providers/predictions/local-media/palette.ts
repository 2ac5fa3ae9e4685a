/**
 * The colours of a picture. The prompt picks them: its first colour word (red, golden, teal…) sets the hue
 * and mood words (sunset, night…) the lighting; a prompt with neither gets a hue from its hash. The seed
 * only jitters the hue, so one prompt keeps its look across seeds.
 */
import { between, hashText } from './random.js';

export type Rgb = [number, number, number];

/** h in degrees, s and l in [0, 1]. */
function hsl(h: number, s: number, l: number): Rgb {
  const hue = (((h % 360) + 360) % 360) / 360;
  const q = l < 0.5 ? l * (1 + s) : l + s - l * s;
  const p = 2 * l - q;
  const channel = (offset: number) => {
    let t = hue + offset;
    if (t < 0) t += 1;
    if (t > 1) t -= 1;
    if (t < 1 / 6) return p + (q - p) * 6 * t;
    if (t < 1 / 2) return q;
    if (t < 2 / 3) return p + (q - p) * (2 / 3 - t) * 6;
    return p;
  };
  return [channel(1 / 3) * 255, channel(0) * 255, channel(-1 / 3) * 255];
}

export function mix(a: Rgb, b: Rgb, t: number): Rgb {
  return [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t];
}

/** Colour words a prompt may use, by hue; the first one found sets the picture's hue. */
const HUE_WORDS: Record<string, number> = {
  red: 0,
  crimson: 350,
  orange: 28,
  amber: 40,
  gold: 48,
  golden: 48,
  yellow: 55,
  lime: 90,
  green: 120,
  forest: 130,
  emerald: 145,
  teal: 175,
  turquoise: 178,
  cyan: 185,
  ocean: 200,
  sea: 200,
  blue: 220,
  navy: 230,
  indigo: 250,
  violet: 270,
  purple: 275,
  lavender: 265,
  magenta: 300,
  pink: 330,
  rose: 340,
};
const NIGHT_WORDS = new Set(['night', 'midnight', 'moon', 'moonlight', 'space', 'stars', 'starry', 'dark']);
const DUSK_WORDS = new Set(['sunset', 'sunrise', 'dusk', 'dawn', 'twilight', 'evening']);

export type Mood = 'day' | 'dusk' | 'night';

export interface Palette {
  mood: Mood;
  skyTop: Rgb;
  skyBottom: Rgb;
  sun: Rgb;
  /** The nearest hill; farther ones fade towards skyBottom. */
  ground: Rgb;
}

export function paletteFor(prompt: string, random: () => number): Palette {
  const words = prompt.toLowerCase().match(/[a-z]+/g) ?? [];
  let hue: number | undefined;
  let mood: Mood = 'day';
  for (const word of words) {
    if (hue === undefined && word in HUE_WORDS) hue = HUE_WORDS[word];
    if (NIGHT_WORDS.has(word)) mood = 'night';
    else if (mood === 'day' && DUSK_WORDS.has(word)) mood = 'dusk';
  }
  const base = (hue ?? hashText(prompt) % 360) + between(random, -12, 12);
  switch (mood) {
    case 'night':
      return {
        mood,
        skyTop: hsl(base + 220, 0.5, 0.05),
        skyBottom: hsl(base + 200, 0.45, 0.22),
        sun: hsl(base, 0.25, 0.9),
        ground: hsl(base + 160, 0.3, 0.08),
      };
    case 'dusk':
      return {
        mood,
        // A dusk sky is warm whatever the prompt's colour; that colour tints the hills instead.
        skyTop: hsl(265, 0.5, 0.22),
        skyBottom: hsl(20 + between(random, -10, 10), 0.85, 0.62),
        sun: hsl(40, 1, 0.72),
        ground: hsl(base, 0.35, 0.14),
      };
    default:
      return {
        mood,
        skyTop: hsl(base, 0.65, 0.42),
        skyBottom: hsl(base + 30, 0.7, 0.8),
        sun: hsl(50, 1, 0.75),
        ground: hsl(base + 120, 0.45, 0.25),
      };
  }
}
