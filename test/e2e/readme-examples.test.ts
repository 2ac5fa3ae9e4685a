/**
 * The README's examples, taken from README.md itself (the fenced blocks under their headings), run as a
 * user would run them: the smallest config for a real upstream through `gantry config check`, then served
 * against a fake OpenAI (only its base_url rewritten); the quick start's curl call and the SDK's `.mjs`
 * example against a compiled Gantry serving the built-in local models. Only the address (127.0.0.1:8080
 * becomes the test's random port) is rewritten; the key comes from GANTRY_KEY, as the examples say.
 * Uses dist/ (`npm run build` first).
 */
import { execFile, spawnSync } from 'node:child_process';
import { readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeOpenAI } from '../helpers/fake-openai.js';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';

const run = promisify(execFile);
const ROOT = new URL('../..', import.meta.url).pathname;
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const BIN = join(ROOT, 'bin/gantry.js');
/** The address the README's examples use. */
const README_ORIGIN = 'http://127.0.0.1:8080';
const KEY = 'gty_readme-examples-0123456789abcdef0123456789';

interface Block {
  lang: string;
  body: string;
}

/**
 * The fenced blocks of the README section under `heading` (its exact text, e.g. `## Quick start`), up to
 * the next heading of the same or a higher level. Lines inside fences never count as headings (the Python
 * example has a `# Python` comment).
 */
function blocksUnder(heading: string): Block[] {
  const level = heading.indexOf(' ');
  const lines = README.split('\n');
  const blocks: Block[] = [];
  let inside = false;
  let fence: Block | undefined;
  for (const line of lines) {
    if (fence) {
      if (line.startsWith('```')) {
        blocks.push(fence);
        fence = undefined;
      } else fence.body += `${line}\n`;
      continue;
    }
    const h = /^(#+) /.exec(line);
    if (h?.[1]) {
      if (line === heading) inside = true;
      else if (inside && h[1].length <= level) break;
      continue;
    }
    if (inside && line.startsWith('```')) fence = { lang: line.slice(3).trim(), body: '' };
  }
  if (!inside) throw new Error(`README has no heading "${heading}"`);
  return blocks;
}

function blockUnder(heading: string, lang: string, startsWith: string): string {
  const block = blocksUnder(heading).find(
    (b) => b.lang === lang && b.body.trimStart().startsWith(startsWith),
  );
  if (!block) throw new Error(`README: no ${lang} block starting with "${startsWith}" under "${heading}"`);
  return block.body;
}

/**
 * The words of a POSIX shell command as sh would split them: backslash-newline continuations, single
 * quotes (literal), double quotes and bare words with `$NAME` expanded from `env`. Enough for a curl
 * line; anything else (command substitution, globs) is not in the README's curl examples.
 */
function shellWords(command: string, env: Record<string, string>): string[] {
  const text = command.replace(/\\\n/g, ' ');
  const words: string[] = [];
  let word: string | undefined;
  const expand = (s: string) => s.replace(/\$(\w+)|\$\{(\w+)\}/g, (_m, a, b) => env[a ?? b] ?? '');
  for (let i = 0; i < text.length; ) {
    const c = text[i] as string;
    if (/\s/.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
      i++;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      word = (word ?? '') + text.slice(i + 1, end);
      i = end + 1;
    } else if (c === '"') {
      const end = text.indexOf('"', i + 1);
      word = (word ?? '') + expand(text.slice(i + 1, end));
      i = end + 1;
    } else {
      const bare = /^[^\s'"]+/.exec(text.slice(i))?.[0] ?? c;
      word = (word ?? '') + expand(bare);
      i += bare.length;
    }
  }
  if (word !== undefined) words.push(word);
  return words;
}

/** The request a `curl URL -H ... -d ...` command sends. */
function curlRequest(words: string[]): { method: string; url: string; headers: Headers; body?: string } {
  expect(words[0]).toBe('curl');
  const headers = new Headers();
  let url = '';
  let body: string | undefined;
  let method: string | undefined;
  for (let i = 1; i < words.length; i++) {
    const word = words[i] as string;
    if (word === '-H' || word === '--header') {
      const header = words[++i] as string;
      const colon = header.indexOf(':');
      headers.append(header.slice(0, colon).trim(), header.slice(colon + 1).trim());
    } else if (word === '-d' || word === '--data' || word === '--data-raw') body = words[++i];
    else if (word === '-X' || word === '--request') method = words[++i];
    else if (word.startsWith('-')) throw new Error(`curl option not handled by this test: ${word}`);
    else url = word;
  }
  // curl -d posts the data as application/x-www-form-urlencoded unless a Content-Type is given.
  if (body !== undefined && !headers.has('content-type')) {
    headers.set('content-type', 'application/x-www-form-urlencoded');
  }
  return { method: method ?? (body === undefined ? 'GET' : 'POST'), url, headers, ...(body ? { body } : {}) };
}

function hasCurl(): boolean {
  return spawnSync('sh', ['-c', 'command -v curl'], { encoding: 'utf8' }).status === 0;
}

let gantry: GantryProcess;

beforeAll(async () => {
  const dataDir = tempDir('gantry-readme-');
  gantry = await spawnGantry({
    config: join(ROOT, 'config/gantry.yaml'),
    dataDir,
    env: { GANTRY_BOOTSTRAP_KEY: KEY },
    built: true,
    name: 'readme',
    startTimeoutMs: 60_000,
  });
}, 90_000);

afterAll(async () => {
  await stopAllGantry();
  removeTempDirs();
});

/** The README's text with its address pointed at the test's Gantry. */
function rewritten(text: string): string {
  expect(text).toContain(README_ORIGIN);
  return text.replaceAll(README_ORIGIN, gantry.origin);
}

function expectHelloCompletion(completion: {
  object?: string;
  choices?: Array<{ message?: { content?: string } }>;
}) {
  assertOpenAISchema('CreateChatCompletionResponse', completion);
  expect(completion.object).toBe('chat.completion');
  expect(completion.choices?.[0]?.message?.content).toMatch(/^You said: Hello!\n/);
}

describe('the README examples', { timeout: 90_000 }, () => {
  it('the smallest config for a real upstream passes gantry config check', async () => {
    const yaml = blockUnder('### Your own models', 'yaml', 'providers:');
    expect(yaml.trimEnd().split('\n')).toHaveLength(4);
    const dir = tempDir('gantry-readme-config-');
    writeFileSync(join(dir, 'gantry.yaml'), yaml);
    // The command to start it, from the same section, names the variable the config reads the key from.
    const start = blockUnder('### Your own models', 'sh', 'OPENAI_API_KEY=');
    expect(start).toContain('--config gantry.yaml');
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      OPENAI_API_KEY: 'sk-readme-example',
      GANTRY_DATA_DIR: join(dir, 'data'),
    };
    delete env.GANTRY_CONFIG;
    delete env.GANTRY_BOOTSTRAP_KEY;
    delete env.REDIS_URL;
    const { stdout } = await run(process.execPath, [BIN, 'config', 'check', '--config', 'gantry.yaml'], {
      cwd: dir,
      env,
    });
    expect(stdout).toMatch(/gantry\.yaml: ok \(1 providers, 1 models, /);
  });

  it('the smallest config serves its one model from the upstream, and only it', async () => {
    const upstreamKey = 'sk-readme-example';
    const upstream = await startFakeOpenAI({ apiKey: upstreamKey, models: ['gpt-4o-mini'] });
    const readmeUpstream = 'https://api.openai.com/v1';
    const yaml = blockUnder('### Your own models', 'yaml', 'providers:');
    expect(yaml).toContain(readmeUpstream);
    const dir = tempDir('gantry-readme-own-');
    writeFileSync(join(dir, 'gantry.yaml'), yaml.replace(readmeUpstream, upstream.url));
    let own: GantryProcess | undefined;
    try {
      own = await spawnGantry({
        config: join(dir, 'gantry.yaml'),
        dataDir: dir,
        env: { OPENAI_API_KEY: upstreamKey, GANTRY_BOOTSTRAP_KEY: KEY },
        built: true,
        name: 'own-models',
        startTimeoutMs: 60_000,
      });
      const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
      const models = (await (await fetch(`${own.baseURL}/models`, { headers })).json()) as {
        data: Array<{ id: string }>;
      };
      // The configuration replaces the built-in default: no gantry/local-* models.
      expect(models.data.map((m) => m.id)).toEqual(['gpt-4o-mini']);
      const res = await fetch(`${own.baseURL}/chat/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello!' }] }),
      });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      assertOpenAISchema('CreateChatCompletionResponse', JSON.parse(text));
      const [sent] = await upstream.waitForRequests(1);
      expect(sent?.path).toBe('/v1/chat/completions');
      expect(sent?.body?.model).toBe('gpt-4o-mini');
    } finally {
      await own?.stop();
      await upstream.close();
    }
  });

  it("the quick start's curl call answers a chat completion", async () => {
    const command = rewritten(blockUnder('## Quick start', 'sh', 'curl '));
    // Replayed from the parsed command (method, headers, body) on any machine...
    const request = curlRequest(shellWords(command, { GANTRY_KEY: KEY }));
    expect(request.headers.get('authorization')).toBe(`Bearer ${KEY}`);
    const res = await fetch(request.url, {
      method: request.method,
      headers: request.headers,
      ...(request.body === undefined ? {} : { body: request.body }),
    });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    expectHelloCompletion(JSON.parse(text));
    // ...and pasted into sh as a user would, where curl is installed (CI has it).
    if (hasCurl()) {
      const { stdout } = await run('sh', ['-c', command], {
        env: { ...process.env, GANTRY_KEY: KEY },
        timeout: 30_000,
      });
      expectHelloCompletion(JSON.parse(stdout));
    }
  });

  it('the JavaScript SDK example runs as example.mjs', async () => {
    const example = rewritten(
      blockUnder('## Using it from the OpenAI SDK', 'js', "import OpenAI from 'openai'"),
    );
    const dir = tempDir('gantry-readme-sdk-');
    // As after `npm install openai` in that folder: the repo's openai package.
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
    writeFileSync(join(dir, 'example.mjs'), example);
    const { stdout } = await run(process.execPath, ['example.mjs'], {
      cwd: dir,
      env: { ...process.env, GANTRY_KEY: KEY },
      timeout: 30_000,
    });
    // The answer, the stream, the Responses follow-up (after its '\n' argument) and the embeddings line.
    expect(stdout).toMatch(
      /^You said: Hello!\n[^\n]+\nYou said: Stream this\n[^\n]+\n You said: And again\n[^\n]+\n2 vectors of 64\n$/,
    );
  });
});
