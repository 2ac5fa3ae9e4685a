/**
 * The cost of one request or prediction, from a model's `pricing` object (spec 2.1) and the quantities it
 * used. Pure and synchronous: compile the pricing once at config load (`compilePricing`, or
 * `validatePricing` to reject a bad config), then `priceUsage` per request costs a few object reads.
 *
 * Semantics (the spec is loose here; these are Gantry's choices):
 *
 * - **Units** (`pricing.unit`, and a criterion's `unit`), matched case-insensitively with spaces and
 *   hyphens read as `_`:
 *   - `million_token` (also `million_tokens`): `amount` per 1,000,000 tokens; `token`: per token.
 *     Without token_type criterias the rate applies to input + output tokens.
 *   - `image`: per image (`usage.images`, default 0: a prediction that made nothing costs nothing).
 *   - `image_megapixel` (also `megapixel`): per output megapixel (`usage.megapixels.output`), unrounded.
 *   - `second` (also `seconds`, `video_second`, `audio_second`): per second, unrounded; `minute`: per
 *     60 s. Video is billed at least 5 s (spec 2.1): the minimum applies when `options.modelType` is
 *     `video` or the unit is `video_second`, so 3 s bill as 5 and 7 s as 7.
 *   - `5_second_chunk` (also `5_seconds`, `5 seconds`, `5-second chunk`): per started 5 s chunk,
 *     ceil(seconds / 5), after the video minimum (a 3 s video is one chunk, 11 s three).
 *   - `prediction` (also `request`): flat, times `usage.predictions` (default 1).
 *   - `gpu_second` / `computing_second` (also `gpu`, `GPU-second`, `computing-second`): per second of
 *     `usage.gpuSeconds` (the prediction's predict_time), unrounded, no minimum.
 *   Seconds come from `usage.seconds`, else the request's `params.seconds` or `params.duration`
 *   (spec 2.3: a video's duration comes from input.seconds or input.duration).
 * - **Subsets** (DESIGN.md): `cachedInputTokens` (cache reads) and `cacheWriteInputTokens` (cache writes)
 *   are disjoint parts of `inputTokens`, and `reasoningTokens` part of `outputTokens`. Input minus both is
 *   priced at the input rate, the cached part at the cached rate and the written part at the cache-write
 *   rate (each the input rate when none is given); reasoning is priced as output unless a `reasoning` rate is given, in
 *   which case output minus reasoning is priced at the output rate. Subsets are clamped to their total (cache
 *   writes to what the cache reads leave of it).
 * - **Criterias** come in two kinds, by `field`:
 *   - `token_type` criterias split the token price by type (`input`, `cached_input`, `cache_write`,
 *     `output`, `reasoning`); the first criterion matching a type sets its rate, per its own unit
 *     (million_token when left out). Types without one fall back: cached and cache_write → input rate,
 *     reasoning → output rate, input
 *     and output → the base amount. They only apply while the base unit is token-based.
 *   - Any other field is a request parameter (`usage.params[field]`; for usage-derived fields such as
 *     `input_tokens`, `seconds` or `duration`, the usage quantity when params lack it). The **first**
 *     matching criterion, in config order, **replaces** the base `amount` and `unit` (its `unit` when
 *     given, else `pricing.unit`); none matching leaves the base. Prices never add up: list the most
 *     specific criterion first. A criterion on a field the request does not carry (undefined or null)
 *     never matches, whatever its operator, so pass params with the input schema's defaults applied.
 *   - Operators: `==`, `!=`, `>`, `>=`, `<`, `<=`, `in`, `not_in` (aliases `equals`, `not_equals`,
 *     `eq`, `ne`, `gt`, `gte`, `lt`, `lte`, `not in`). Values compare loosely, as JSON configs and
 *     request inputs spell them differently: numbers and numeric strings as numbers, booleans and
 *     `'true'`/`'false'` as booleans, other strings trimmed and case-insensitively (`'1080P' == '1080p'`).
 *     Ordering operators match only when both sides are numbers; `in`/`not_in` take an array.
 * - **Formula** (`type: linear`): when present it is the whole price; `amount` and criterias are then
 *   display-only. cost = Σ quantity(term) × variables[term.rate_key] / per. A term names its quantity
 *   with `quantity_key` (or `megapixels_key` / `tokens_key`): input_tokens, cached_input_tokens,
 *   cache_write_tokens, output_tokens, reasoning_tokens, input_megapixels, output_megapixels, images, seconds, predictions,
 *   gpu_seconds. `per` is 1 except for token quantities, whose rates follow the model's unit like
 *   `amount` does: per million when `pricing.unit` is million_token (or anything else), per token when it
 *   is `token`; a term may set `per` (a positive number) to say it outright. The subset rule holds: when a
 *   formula has a cached_input_tokens or cache_write_tokens (reasoning_tokens) term, its input_tokens
 *   (output_tokens) term counts only the rest. The term's type key (`token_type`, `megapixel_type`) is a label.
 * - Non-billable models (`options.billable === false`) and models without pricing cost 0, no lines.
 * - Costs are rounded to COST_DECIMALS (10) places, far below any currency's minor unit, to drop float
 *   noise (0.1 + 0.2); credits to CREDIT_DECIMALS (6), half up.
 */

export const COST_DECIMALS = 10;
export const CREDIT_DECIMALS = 6;

/** Minimum billed video duration (spec 2.1). */
export const VIDEO_MINIMUM_SECONDS = 5;
const CHUNK_SECONDS = 5;
const MILLION = 1_000_000;

/** What one request or prediction used. Absent quantities are 0 (predictions: 1). */
export interface Usage {
  inputTokens?: number;
  /** Part of inputTokens, not in addition to it. */
  cachedInputTokens?: number;
  /** Tokens written to the prompt cache: part of inputTokens, apart from cachedInputTokens. */
  cacheWriteInputTokens?: number;
  outputTokens?: number;
  /** Part of outputTokens, not in addition to it. */
  reasoningTokens?: number;
  images?: number;
  megapixels?: { input?: number; output?: number };
  /** Media duration (video/audio length). */
  seconds?: number;
  predictions?: number;
  /** Compute time (predict_time) for gpu_second / computing_second units. */
  gpuSeconds?: number;
  /** The request's input, for criterias such as resolution, aspect_ratio, duration, generate_audio. */
  params?: Record<string, unknown>;
}

export interface PriceOptions {
  /** The model's `billable` flag; false costs 0. */
  billable?: boolean;
  /** The model's `type`; `video` applies the 5 s minimum to per-second and chunk units. */
  modelType?: string;
}

/** One charge: quantity × rate / per = cost. */
export interface CostLine {
  /** What was counted: input_tokens, cached_input_tokens, cache_write_tokens, output_tokens,
   * reasoning_tokens, images, output_megapixels, seconds, minutes, chunks, predictions, gpu_seconds, or a
   * formula quantity key. */
  item: string;
  quantity: number;
  /** Price per `per` items, in the model's currency. */
  rate: number;
  per: number;
  cost: number;
  /** Which part of the pricing set the rate: `amount`, `criterias[i]`, `formula.terms[i]`. */
  source: string;
}

export interface Cost {
  /** In the model's currency. */
  cost: number;
  currency: string;
  lines: CostLine[];
}

export type Operator = '==' | '!=' | '>' | '>=' | '<' | '<=' | 'in' | 'not_in';

type UnitKind = 'tokens' | 'images' | 'megapixels' | 'seconds' | 'minutes' | 'chunks' | 'predictions' | 'gpu';

interface Unit {
  kind: UnitKind;
  /** Items per priced unit: 1,000,000 for million_token, else 1. */
  per: number;
  /** The unit itself says video (video_second). */
  video: boolean;
}

type TokenType = 'input' | 'cached_input' | 'cache_write' | 'output' | 'reasoning';

interface Criterion {
  field: string;
  operator: Operator;
  value: unknown;
  price: number;
  unit: Unit;
  source: string;
}

type QuantityKey =
  | 'input_tokens'
  | 'cached_input_tokens'
  | 'cache_write_tokens'
  | 'output_tokens'
  | 'reasoning_tokens'
  | 'input_megapixels'
  | 'output_megapixels'
  | 'images'
  | 'seconds'
  | 'predictions'
  | 'gpu_seconds';

interface Term {
  quantity: QuantityKey;
  rate: number;
  per: number;
  source: string;
}

/** A validated pricing object, ready to price usage without re-reading the config. */
export interface CompiledPricing {
  readonly amount: number;
  readonly currency: string;
  readonly unit: Unit;
  readonly tokenCriteria: readonly Criterion[];
  readonly paramCriteria: readonly Criterion[];
  readonly terms: readonly Term[] | undefined;
}

const UNITS: Record<string, Unit> = {};
function defineUnit(names: string[], kind: UnitKind, per = 1, video = false): void {
  for (const name of names) UNITS[name] = { kind, per, video };
}
defineUnit(['million_token', 'million_tokens'], 'tokens', MILLION);
defineUnit(['token', 'tokens'], 'tokens');
defineUnit(['image', 'images'], 'images');
defineUnit(['image_megapixel', 'image_megapixels', 'megapixel', 'megapixels'], 'megapixels');
defineUnit(['second', 'seconds', 'audio_second', 'audio_seconds'], 'seconds');
defineUnit(['video_second', 'video_seconds'], 'seconds', 1, true);
defineUnit(['minute', 'minutes'], 'minutes');
defineUnit(
  ['5_second_chunk', '5_second_chunks', '5_seconds', '5_second', 'five_second_chunk', 'five_seconds'],
  'chunks',
);
defineUnit(['prediction', 'predictions', 'request', 'requests'], 'predictions');
defineUnit(
  ['gpu_second', 'gpu_seconds', 'gpu', 'computing_second', 'computing_seconds', 'compute_second'],
  'gpu',
);

const OPERATORS: Record<string, Operator> = {
  '==': '==',
  '=': '==',
  equals: '==',
  eq: '==',
  '!=': '!=',
  not_equals: '!=',
  ne: '!=',
  '>': '>',
  gt: '>',
  '>=': '>=',
  gte: '>=',
  '<': '<',
  lt: '<',
  '<=': '<=',
  lte: '<=',
  in: 'in',
  not_in: 'not_in',
  nin: 'not_in',
};

const TOKEN_TYPES = new Set<string>(['input', 'cached_input', 'cache_write', 'output', 'reasoning']);

const QUANTITY_KEYS = new Set<string>([
  'input_tokens',
  'cached_input_tokens',
  'cache_write_tokens',
  'output_tokens',
  'reasoning_tokens',
  'input_megapixels',
  'output_megapixels',
  'images',
  'seconds',
  'predictions',
  'gpu_seconds',
]);

// ---------------------------------------------------------------------------------------------------
// Compilation and validation

class PricingError extends Error {}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function isPrice(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

function normalName(name: string): string {
  return name
    .trim()
    .toLowerCase()
    .replace(/[\s-]+/g, '_');
}

function unitAt(value: unknown, where: string): Unit {
  const unit = typeof value === 'string' ? UNITS[normalName(value)] : undefined;
  if (!unit) {
    throw new PricingError(
      `${where} must be a known unit (million_token, token, image, image_megapixel, second, minute, ` +
        `5_second_chunk, prediction, gpu_second, computing_second), got ${JSON.stringify(value)}`,
    );
  }
  return unit;
}

function operatorAt(value: unknown, where: string): Operator {
  const op = typeof value === 'string' ? OPERATORS[normalName(value)] : undefined;
  if (!op) {
    throw new PricingError(
      `${where} must be one of ==, !=, >, >=, <, <=, in, not_in, got ${JSON.stringify(value)}`,
    );
  }
  return op;
}

function checkValue(op: Operator, value: unknown, where: string): void {
  if (op === 'in' || op === 'not_in') {
    if (!Array.isArray(value) || value.length === 0 || value.some((v) => comparable(v) === undefined)) {
      throw new PricingError(`${where} must be a non-empty array of strings, numbers or booleans for ${op}`);
    }
  } else if (op !== '==' && op !== '!=') {
    if (typeof comparable(value) !== 'number') {
      throw new PricingError(`${where} must be a number for operator ${op}`);
    }
  } else if (comparable(value) === undefined) {
    throw new PricingError(`${where} must be a string, number or boolean`);
  }
}

/** token_type criterias may only name the five token types, or no type could ever match them. */
function checkTokenTypes(value: unknown, where: string): void {
  const values = Array.isArray(value) ? value : [value];
  for (const v of values) {
    if (typeof v !== 'string' || !TOKEN_TYPES.has(v.trim().toLowerCase())) {
      throw new PricingError(
        `${where} must name a token type (input, cached_input, cache_write, output, reasoning), got ${JSON.stringify(v)}`,
      );
    }
  }
}

function criterionAt(raw: unknown, i: number, baseUnit: Unit): Criterion {
  const where = `pricing.criterias[${i}]`;
  if (!isRecord(raw)) throw new PricingError(`${where} must be an object`);
  if (typeof raw.field !== 'string' || raw.field.trim() === '') {
    throw new PricingError(`${where}.field must be a non-empty string`);
  }
  if (raw.description !== undefined && typeof raw.description !== 'string') {
    throw new PricingError(`${where}.description must be a string`);
  }
  const operator = operatorAt(raw.operator, `${where}.operator`);
  checkValue(operator, raw.value, `${where}.value`);
  if (!isPrice(raw.billable_price)) {
    throw new PricingError(`${where}.billable_price must be a non-negative number`);
  }
  const field = raw.field.trim();
  const isTokenType = normalName(field) === 'token_type';
  let unit = raw.unit === undefined ? baseUnit : unitAt(raw.unit, `${where}.unit`);
  if (isTokenType) {
    checkTokenTypes(raw.value, `${where}.value`);
    if (raw.unit === undefined && unit.kind !== 'tokens') unit = UNITS.million_token!;
    if (unit.kind !== 'tokens') throw new PricingError(`${where}.unit must be million_token or token`);
  }
  return {
    field: isTokenType ? 'token_type' : field,
    operator,
    value: raw.value,
    price: raw.billable_price,
    unit,
    source: `criterias[${i}]`,
  };
}

function termAt(raw: unknown, i: number, variables: Record<string, unknown>, tokenPer: number): Term {
  const where = `pricing.formula.terms[${i}]`;
  if (!isRecord(raw)) throw new PricingError(`${where} must be an object`);
  const key = raw.quantity_key ?? raw.megapixels_key ?? raw.tokens_key;
  if (typeof key !== 'string' || !QUANTITY_KEYS.has(key)) {
    throw new PricingError(
      `${where}.quantity_key must be one of ${[...QUANTITY_KEYS].join(', ')}, got ${JSON.stringify(key)}`,
    );
  }
  if (typeof raw.rate_key !== 'string' || !Object.hasOwn(variables, raw.rate_key)) {
    throw new PricingError(`${where}.rate_key must name one of pricing.formula.variables`);
  }
  if (raw.per !== undefined && !(isPrice(raw.per) && raw.per > 0)) {
    throw new PricingError(`${where}.per must be a positive number`);
  }
  const quantity = key as QuantityKey;
  const per = typeof raw.per === 'number' ? raw.per : quantity.endsWith('_tokens') ? tokenPer : 1;
  return { quantity, rate: variables[raw.rate_key] as number, per, source: `formula.terms[${i}]` };
}

function termsAt(raw: unknown, baseUnit: Unit): Term[] {
  if (!isRecord(raw)) throw new PricingError('pricing.formula must be an object');
  if (raw.type !== 'linear') {
    throw new PricingError(`pricing.formula.type must be linear, got ${JSON.stringify(raw.type)}`);
  }
  if (raw.description !== undefined && typeof raw.description !== 'string') {
    throw new PricingError('pricing.formula.description must be a string');
  }
  if (raw.result_key !== undefined && typeof raw.result_key !== 'string') {
    throw new PricingError('pricing.formula.result_key must be a string');
  }
  const variables = raw.variables;
  if (!isRecord(variables)) throw new PricingError('pricing.formula.variables must be an object of rates');
  for (const [name, rate] of Object.entries(variables)) {
    if (!isPrice(rate))
      throw new PricingError(`pricing.formula.variables.${name} must be a non-negative number`);
  }
  if (!Array.isArray(raw.terms) || raw.terms.length === 0) {
    throw new PricingError('pricing.formula.terms must be a non-empty array');
  }
  const tokenPer = baseUnit.kind === 'tokens' && baseUnit.per === 1 ? 1 : MILLION;
  return raw.terms.map((term: unknown, i) => termAt(term, i, variables, tokenPer));
}

/** Validates and prepares a pricing object; throws an Error naming the bad field. */
export function compilePricing(pricing: unknown): CompiledPricing {
  if (!isRecord(pricing)) throw new PricingError('pricing must be an object');
  if (!isPrice(pricing.amount)) throw new PricingError('pricing.amount must be a non-negative number');
  if (typeof pricing.currency !== 'string' || pricing.currency.trim() === '') {
    throw new PricingError('pricing.currency must be a non-empty string');
  }
  const unit = unitAt(pricing.unit, 'pricing.unit');
  const rawCriteria = pricing.criterias ?? [];
  if (!Array.isArray(rawCriteria)) throw new PricingError('pricing.criterias must be an array');
  const criteria = rawCriteria.map((c: unknown, i) => criterionAt(c, i, unit));
  return {
    amount: pricing.amount,
    currency: pricing.currency.trim().toUpperCase(),
    unit,
    tokenCriteria: criteria.filter((c) => c.field === 'token_type'),
    paramCriteria: criteria.filter((c) => c.field !== 'token_type'),
    terms: pricing.formula === undefined ? undefined : termsAt(pricing.formula, unit),
  };
}

/** For config load: undefined when the pricing object is usable, else a message naming the field. */
export function validatePricing(pricing: unknown): string | undefined {
  try {
    compilePricing(pricing);
    return undefined;
  } catch (err) {
    if (err instanceof PricingError) return err.message;
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------------
// Criteria matching

type Comparable = number | boolean | string;

function comparable(value: unknown): Comparable | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value === 'boolean') return value;
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  const lower = text.toLowerCase();
  if (lower === 'true' || lower === 'false') return lower === 'true';
  if (text !== '' && Number.isFinite(Number(text))) return Number(text);
  return lower;
}

function numeric(value: unknown): number | undefined {
  const c = comparable(value);
  return typeof c === 'number' ? c : undefined;
}

function looselyEqual(a: unknown, b: unknown): boolean {
  const x = comparable(a);
  return x !== undefined && x === comparable(b);
}

function matches(op: Operator, actual: unknown, expected: unknown): boolean {
  if (actual === undefined || actual === null) return false;
  switch (op) {
    case '==':
      return looselyEqual(actual, expected);
    case '!=':
      return comparable(actual) !== undefined && !looselyEqual(actual, expected);
    case 'in':
      return Array.isArray(expected) && expected.some((v) => looselyEqual(actual, v));
    case 'not_in':
      return (
        Array.isArray(expected) &&
        comparable(actual) !== undefined &&
        !expected.some((v) => looselyEqual(actual, v))
      );
    default:
      return ordered(op, comparable(actual), comparable(expected));
  }
}

function ordered(op: Operator, a: Comparable | undefined, b: Comparable | undefined): boolean {
  if (typeof a !== 'number' || typeof b !== 'number') return false;
  if (op === '>') return a > b;
  if (op === '>=') return a >= b;
  if (op === '<') return a < b;
  return a <= b;
}

// ---------------------------------------------------------------------------------------------------
// Quantities

interface Quantities {
  input: number;
  cached: number;
  /** Cache writes: apart from `cached`, so the two never add up past `input`. */
  cacheWrite: number;
  output: number;
  reasoning: number;
  images: number;
  inputMegapixels: number;
  outputMegapixels: number;
  /** Media seconds before any minimum. */
  seconds: number;
  predictions: number;
  gpuSeconds: number;
}

function count(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0;
}

function quantitiesOf(usage: Usage): Quantities {
  const input = count(usage.inputTokens);
  const output = count(usage.outputTokens);
  const params = usage.params ?? {};
  const seconds = usage.seconds ?? numeric(params.seconds) ?? numeric(params.duration);
  const cached = Math.min(count(usage.cachedInputTokens), input);
  return {
    input,
    cached,
    cacheWrite: Math.min(count(usage.cacheWriteInputTokens), input - cached),
    output,
    reasoning: Math.min(count(usage.reasoningTokens), output),
    images: count(usage.images),
    inputMegapixels: count(usage.megapixels?.input),
    outputMegapixels: count(usage.megapixels?.output),
    seconds: count(seconds),
    predictions: usage.predictions === undefined ? 1 : count(usage.predictions),
    gpuSeconds: count(usage.gpuSeconds),
  };
}

/** What a criterion on a field the params lack compares against: the matching usage quantity. */
function usageField(field: string, q: Quantities): number | undefined {
  switch (field) {
    case 'input_tokens':
      return q.input;
    case 'cached_input_tokens':
      return q.cached;
    case 'cache_write_tokens':
      return q.cacheWrite;
    case 'output_tokens':
      return q.output;
    case 'reasoning_tokens':
      return q.reasoning;
    case 'total_tokens':
      return q.input + q.output;
    case 'images':
      return q.images;
    case 'seconds':
    case 'duration':
      return q.seconds;
    case 'input_megapixels':
      return q.inputMegapixels;
    case 'output_megapixels':
      return q.outputMegapixels;
    case 'gpu_seconds':
      return q.gpuSeconds;
    default:
      return undefined;
  }
}

function billedSeconds(seconds: number, video: boolean): number {
  return video ? Math.max(seconds, VIDEO_MINIMUM_SECONDS) : seconds;
}

/** Rounded first so that 10.000000000001 s of float noise does not start a third chunk. */
function chunks(seconds: number): number {
  return Math.ceil(roundTo(seconds / CHUNK_SECONDS, 9));
}

// ---------------------------------------------------------------------------------------------------
// Pricing

function line(item: string, quantity: number, rate: number, per: number, source: string): CostLine {
  return { item, quantity, rate, per, cost: (quantity * rate) / per, source };
}

interface Rate {
  rate: number;
  per: number;
  source: string;
}

function tokenRate(criteria: readonly Criterion[], type: TokenType): Rate | undefined {
  const c = criteria.find((c) => matches(c.operator, type, c.value));
  return c && { rate: c.price, per: c.unit.per, source: c.source };
}

function tokenLines(p: CompiledPricing, base: Rate, q: Quantities): CostLine[] {
  const input = tokenRate(p.tokenCriteria, 'input') ?? base;
  const cached = tokenRate(p.tokenCriteria, 'cached_input') ?? input;
  const cacheWrite = tokenRate(p.tokenCriteria, 'cache_write') ?? input;
  const output = tokenRate(p.tokenCriteria, 'output') ?? base;
  const reasoning = tokenRate(p.tokenCriteria, 'reasoning');
  const lines = [
    line('input_tokens', q.input - q.cached - q.cacheWrite, input.rate, input.per, input.source),
    line('cached_input_tokens', q.cached, cached.rate, cached.per, cached.source),
    line('cache_write_tokens', q.cacheWrite, cacheWrite.rate, cacheWrite.per, cacheWrite.source),
  ];
  if (reasoning) {
    lines.push(line('output_tokens', q.output - q.reasoning, output.rate, output.per, output.source));
    lines.push(line('reasoning_tokens', q.reasoning, reasoning.rate, reasoning.per, reasoning.source));
  } else {
    lines.push(line('output_tokens', q.output, output.rate, output.per, output.source));
  }
  return lines.filter((l) => l.quantity > 0);
}

function unitLine(unit: Unit, rate: number, source: string, q: Quantities, video: boolean): CostLine {
  switch (unit.kind) {
    case 'images':
      return line('images', q.images, rate, 1, source);
    case 'megapixels':
      return line('output_megapixels', q.outputMegapixels, rate, 1, source);
    case 'seconds':
      return line('seconds', billedSeconds(q.seconds, video || unit.video), rate, 1, source);
    case 'minutes':
      return line('minutes', billedSeconds(q.seconds, video) / 60, rate, 1, source);
    case 'chunks':
      return line('chunks', chunks(billedSeconds(q.seconds, video)), rate, 1, source);
    case 'predictions':
      return line('predictions', q.predictions, rate, 1, source);
    default:
      return line('gpu_seconds', q.gpuSeconds, rate, 1, source);
  }
}

function formulaQuantity(key: QuantityKey, terms: readonly Term[], q: Quantities, video: boolean): number {
  const has = (k: QuantityKey) => terms.some((t) => t.quantity === k);
  switch (key) {
    case 'input_tokens': {
      const read = has('cached_input_tokens') ? q.cached : 0;
      const written = has('cache_write_tokens') ? q.cacheWrite : 0;
      return q.input - read - written;
    }
    case 'cached_input_tokens':
      return q.cached;
    case 'cache_write_tokens':
      return q.cacheWrite;
    case 'output_tokens':
      return has('reasoning_tokens') ? q.output - q.reasoning : q.output;
    case 'reasoning_tokens':
      return q.reasoning;
    case 'input_megapixels':
      return q.inputMegapixels;
    case 'output_megapixels':
      return q.outputMegapixels;
    case 'images':
      return q.images;
    case 'seconds':
      return billedSeconds(q.seconds, video);
    case 'predictions':
      return q.predictions;
    default:
      return q.gpuSeconds;
  }
}

function formulaLines(terms: readonly Term[], q: Quantities, video: boolean): CostLine[] {
  return terms.map((t) =>
    line(t.quantity, formulaQuantity(t.quantity, terms, q, video), t.rate, t.per, t.source),
  );
}

function paramMatch(p: CompiledPricing, usage: Usage, q: Quantities): Criterion | undefined {
  const params = usage.params ?? {};
  return p.paramCriteria.find((c) => {
    const actual = params[c.field] ?? usageField(c.field, q);
    return matches(c.operator, actual, c.value);
  });
}

function pricedLines(p: CompiledPricing, usage: Usage, video: boolean): CostLine[] {
  const q = quantitiesOf(usage);
  if (p.terms) return formulaLines(p.terms, q, video || p.unit.video);
  const selected = paramMatch(p, usage, q);
  const unit = selected?.unit ?? p.unit;
  const base: Rate = selected
    ? { rate: selected.price, per: unit.per, source: selected.source }
    : { rate: p.amount, per: unit.per, source: 'amount' };
  if (unit.kind === 'tokens') return tokenLines(p, base, q);
  return [unitLine(unit, base.rate, base.source, q, video)];
}

/** The cost of one request or prediction under a compiled pricing. */
export function priceUsage(pricing: CompiledPricing, usage: Usage, options: PriceOptions = {}): Cost {
  if (options.billable === false) return { cost: 0, currency: pricing.currency, lines: [] };
  const lines = pricedLines(pricing, usage, options.modelType?.toLowerCase() === 'video');
  let total = 0;
  for (const l of lines) total += l.cost;
  for (const l of lines) l.cost = roundTo(l.cost, COST_DECIMALS);
  return { cost: roundTo(total, COST_DECIMALS), currency: pricing.currency, lines };
}

const compiled = new WeakMap<object, CompiledPricing>();

/**
 * `priceUsage` straight from the config's pricing object, compiled once per object (a WeakMap, so config
 * reloads drop old entries). No pricing: free, in USD. Throws on an invalid pricing object, which
 * `validatePricing` at config load rules out.
 */
export function computeCost(
  pricing: Record<string, unknown> | undefined,
  usage: Usage,
  options: PriceOptions = {},
): Cost {
  if (pricing === undefined) return { cost: 0, currency: 'USD', lines: [] };
  let p = compiled.get(pricing);
  if (!p) {
    p = compilePricing(pricing);
    compiled.set(pricing, p);
  }
  return priceUsage(p, usage, options);
}

// ---------------------------------------------------------------------------------------------------
// Credits and rounding

/**
 * Rounds half up to `digits` decimals, exactly for decimal inputs: shifting through the exponent of the
 * decimal string (not `x * 10 ** digits`, where 1.0000005 * 1e6 is 1000000.4999999999) keeps halves halves.
 */
export function roundTo(value: number, digits: number): number {
  if (!Number.isFinite(value) || value === 0) return value;
  // The string route costs about a microsecond, and every request prices a few figures: the product is
  // used when it is far from a half, where the 15-digit decimal reading (within 6e-15 of it, relative)
  // cannot round the other way. Dividing an exact integer by an exact power of ten rounds the same as
  // parsing `<integer>e-<digits>`.
  const factor = POWERS_OF_TEN[digits];
  if (factor !== undefined) {
    const shifted = value * factor;
    const rounded = Math.round(shifted);
    const fromHalf = Math.abs(Math.abs(shifted - Math.trunc(shifted)) - 0.5);
    // (A tiny negative rounds to -0, which the decimal route writes as 0.)
    if (Number.isSafeInteger(rounded) && fromHalf > Math.abs(shifted) * 1e-13 + 1e-9) {
      return rounded === 0 ? 0 : rounded / factor;
    }
  }
  return roundThroughDecimal(value, digits);
}

/** 10^0 … 10^22, every one exact in a double. */
const POWERS_OF_TEN: readonly number[] = Array.from({ length: 23 }, (_, i) => 10 ** i);

/** roundTo by way of the decimal string: exact, and slow. */
export function roundThroughDecimal(value: number, digits: number): number {
  if (!Number.isFinite(value) || value === 0) return value;
  const [mantissa, exponent] = value.toExponential(14).split('e');
  const shifted = Number(`${mantissa}e${Number(exponent) + digits}`);
  if (!Number.isSafeInteger(Math.round(shifted))) return value;
  return Number(`${Math.round(shifted)}e-${digits}`);
}

/**
 * Credits for a cost: `creditsPerUnit` is the config's rate, either one number (credits per unit of the
 * cost's currency) or a table by currency code (e.g. `{ USD: 1000 }`). Rounded to CREDIT_DECIMALS.
 * Throws when the table has no rate for the currency or a rate is not positive: a config error, to catch
 * at start by pricing each model's currency once.
 */
export function toCredits(
  cost: number,
  currency: string,
  creditsPerUnit: number | Readonly<Record<string, number>>,
): number {
  const rate = typeof creditsPerUnit === 'number' ? creditsPerUnit : rateFor(creditsPerUnit, currency);
  if (rate === undefined) throw new Error(`no credit rate for currency ${currency}`);
  if (!(Number.isFinite(rate) && rate > 0))
    throw new RangeError(`credit rate for ${currency} must be positive`);
  if (!(Number.isFinite(cost) && cost >= 0)) throw new RangeError('cost must be a non-negative number');
  return roundTo(cost * rate, CREDIT_DECIMALS);
}

function rateFor(table: Readonly<Record<string, number>>, currency: string): number | undefined {
  const code = currency.trim().toUpperCase();
  for (const [name, rate] of Object.entries(table)) {
    if (name.trim().toUpperCase() === code) return rate;
  }
  return undefined;
}
